"""Rows as Arrow columns without Spark: the one-call paths give exactly what the value by value path
gives (or both refuse), the Arrow types are Spark's reading of the Delta types, and a chunk rendered
by a reader keeps its rows by position."""

from __future__ import annotations

import pickle
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks import arrow_columns
from gtidsnap.sinks.arrow_columns import (
    ArrowRenderer,
    ArrowRows,
    arrow_array,
    arrow_type_of,
    values_one_by_one,
)
from gtidsnap.sinks.delta import types as delta_types

T = TableId("shop", "orders")


def digits(n: int) -> st.SearchStrategy[str]:
    return st.text("0123456789", min_size=n, max_size=n)


@st.composite
def decimal_texts(draw: st.DrawFn, precision: int, scale: int) -> str:
    """Canonical DECIMAL text: the column's scale, sometimes too many digits for its precision."""
    whole = draw(st.integers(0, precision - scale + draw(st.sampled_from([0, 0, 0, 1]))))
    text = draw(digits(whole)).lstrip("0") or "0"
    if scale:
        text += "." + draw(digits(scale))
    return ("-" if draw(st.booleans()) else "") + text


@st.composite
def moment_texts(draw: st.DrawFn, with_time: bool) -> str:
    """Canonical DATE / DATETIME text, zero and invalid dates among them."""
    kind = draw(st.sampled_from(["good", "good", "good", "zero", "invalid", "edge"]))
    if kind == "zero":
        day = "0000-00-00"
    elif kind == "invalid":
        day = draw(st.sampled_from(["2024-02-30", "2023-02-29", "2024-13-01", "2024-04-31", "2024-00-10"]))
    elif kind == "edge":
        day = draw(st.sampled_from(["0001-01-01", "0999-12-31", "1000-01-01", "9999-12-31", "1970-01-01"]))
    else:
        y, m = draw(st.integers(1, 9999)), draw(st.integers(1, 12))
        day = f"{y:04d}-{m:02d}-{draw(st.integers(1, 28)):02d}"
    if not with_time:
        return day
    hh, mm, ss = draw(st.integers(0, 23)), draw(st.integers(0, 59)), draw(st.integers(0, 59))
    text = f"{day} {hh:02d}:{mm:02d}:{ss:02d}"
    fraction = draw(st.integers(0, 6))
    return text + ("." + draw(digits(fraction)) if fraction else "")


def same(column: Column, arrow: pa.DataType, values: list[Any]) -> None:
    """Both paths give equal arrays, or both refuse with ValueError."""
    try:
        slow: pa.Array | None = values_one_by_one(column, arrow, values)
    except ValueError:
        slow = None
    if slow is None:
        with pytest.raises(ValueError):
            arrow_array(column, arrow, values)
        return
    fast = arrow_array(column, arrow, values)
    assert fast.type == slow.type and fast.equals(slow), (values, fast, slow)


@settings(max_examples=300)
@given(st.data(), st.integers(1, 38), st.integers(0, 10))
def test_decimal_text_cast_in_one_call_equals_value_by_value(data: st.DataObject, p: int, s: int) -> None:
    scale = min(s, p)
    column = Column("d", "decimal", f"decimal({p},{scale})")
    texts = data.draw(st.lists(st.one_of(st.none(), decimal_texts(p, scale)), max_size=20))
    same(column, arrow_type_of(column), texts)


@settings(max_examples=300)
@given(st.data(), st.sampled_from(["date", "datetime", "timestamp"]))
def test_date_and_time_text_cast_in_one_call_equals_value_by_value(data: st.DataObject, kind: str) -> None:
    column = Column("t", kind, kind)
    texts = data.draw(st.lists(st.one_of(st.none(), moment_texts(kind != "date")), max_size=20))
    same(column, arrow_type_of(column), texts)


def test_a_zero_date_is_null_and_a_bad_value_is_named() -> None:
    column = Column("t", "datetime", "datetime(6)")
    array = arrow_array(column, arrow_type_of(column), ["2024-01-02 03:04:05.5", "0000-00-00 00:00:00"])
    assert array.to_pylist()[1] is None and array.null_count == 1
    with pytest.raises(ValueError, match="'tomorrow'"):
        arrow_array(column, arrow_type_of(column), ["tomorrow"])
    number = Column("d", "decimal", "decimal(4,2)")
    with pytest.raises(ValueError, match="do not fit"):
        arrow_array(number, arrow_type_of(number), ["123.45"])
    assert arrow_array(number, arrow_type_of(number), ["12.34", None]).to_pylist() == [Decimal("12.34"), None]
    widest = Column("d", "decimal", "decimal(38,6)")  # Arrow's own cast wrapped this around, silently
    with pytest.raises(ValueError, match="do not fit"):
        arrow_array(widest, arrow_type_of(widest), ["300000000000000000000000000000000.000000"])


COLUMN_TYPES = [
    ("tinyint", "tinyint(4)", False),
    ("tinyint", "tinyint(3) unsigned", True),
    ("smallint", "smallint", True),
    ("mediumint", "mediumint", False),
    ("int", "int(11)", False),
    ("int", "int unsigned", True),
    ("bigint", "bigint", False),
    ("bigint", "bigint unsigned", True),
    ("decimal", "decimal(12,2)", False),
    ("decimal", "decimal(65,4)", False),
    ("float", "float", False),
    ("double", "double", False),
    ("bit", "bit(10)", False),
    ("bit", "bit(64)", False),
    ("year", "year", False),
    ("date", "date", False),
    ("datetime", "datetime(6)", False),
    ("timestamp", "timestamp", False),
    ("time", "time", False),
    ("json", "json", False),
    ("enum", "enum('a')", False),
    ("set", "set('a','b')", False),
    ("varchar", "varchar(10)", False),
    ("blob", "blob", False),
    ("geometry", "geometry", False),
    ("uuid", "uuid", False),
]


@pytest.mark.parametrize(("data_type", "column_type", "unsigned"), COLUMN_TYPES)
def test_arrow_types_are_what_spark_reads_as_the_delta_types(
    data_type: str, column_type: str, unsigned: bool
) -> None:
    column = Column("c", data_type, column_type, True, unsigned)
    assert delta_types.arrow_type(delta_types.spark_type(column)) == arrow_type_of(column)


SCHEMA = TableSchema(
    T,
    (
        Column("id", "int", "int", False),
        Column("at", "datetime", "datetime(6)"),
        Column("d", "decimal", "decimal(6,2)"),
    ),
    ("id",),
)


def test_a_rendered_chunk_keeps_its_rows_by_position_and_pickles_as_arrow() -> None:
    rows = [((i,), {"id": i, "at": f"2024-01-0{i} 00:00:00", "d": f"{i}.50"}) for i in range(1, 6)]
    keys, rendered = ArrowRenderer()(rows, SCHEMA)
    assert keys == tuple((i,) for i in range(1, 6)) and len(rendered) == 5
    assert rendered.batch.schema.names == ["id", "at", "d"]
    assert rendered.batch.schema.field("d").type == pa.decimal128(6, 2)
    kept = pickle.loads(pickle.dumps(rendered)).taken([0, 3])
    assert isinstance(kept, ArrowRows) and kept.batch.column("id").to_pylist() == [1, 4]
    assert pickle.loads(pickle.dumps(ArrowRenderer())) == ArrowRenderer()


def test_a_value_that_does_not_fit_is_a_sink_error_naming_table_and_column() -> None:
    rows = [((1,), {"id": 1, "at": None, "d": "12345.00"})]
    with pytest.raises(arrow_columns.SinkError, match=r"column d of shop\.orders"):
        ArrowRenderer()(rows, SCHEMA)


@st.composite
def windows_over_a_split(draw: st.DrawFn) -> tuple[int, list[list[bool]]]:
    """A split's row count and, for each window that takes from it in turn, which rows it keeps."""
    rows = draw(st.integers(0, 60))
    steps, left = [], rows
    for _ in range(draw(st.integers(0, 3))):
        keep = draw(st.lists(st.booleans(), min_size=left, max_size=left))
        steps.append(keep)
        left = sum(keep)
    return rows, steps


@settings(max_examples=300, deadline=None)
@given(windows_over_a_split(), st.integers(1, 10**9))
def test_staged_rows_keep_what_windows_keep_numbered_by_position(
    world: tuple[int, list[list[bool]]], first: int
) -> None:
    """Windows taking rows of a staged split leave exactly the positions each kept, listed as the
    dropped ones; the split takes a ``_seq`` a row of its file (a dropped row's unused), so a kept
    row's is ``first`` + its position, in order and never past the chunk's last. A split from an
    older checkpoint (its kept positions listed, numbered in order) keeps the same rows."""
    from gtidsnap.sinks.arrow_columns import StagedRows, kept_numbers
    from gtidsnap.sinks.delta.staging import StagedFile, staged_split

    rows, steps = world
    staged, kept = StagedRows("s.parquet", rows), list(range(rows))
    for keep in steps:
        staged = staged.taken([i for i, k in enumerate(keep) if k])
        kept = [p for p, k in zip(kept, keep, strict=True) if k]
    assert len(staged) == len(kept) and staged.seq_span() == rows
    assert sorted([*staged.dropped, *kept]) == list(range(rows)), "each position dropped or kept, once"
    file = staged_split(TableId("d", "t"), staged, first, 7, fresh=True)
    assert (file.first_seq, file.last_seq, file.rows, file.by_position) == (
        first,
        first + rows - 1,
        len(kept),
        True,
    )
    assert StagedFile.from_json(file.to_json()) == file
    legacy = {**file.to_json(), "kept": kept, "last_seq": first + len(kept) - 1}
    del legacy["dropped"], legacy["positions"]
    old = StagedFile.from_json(legacy)
    assert [p for p in range(old.positions) if p not in old.dropped] == kept and not old.by_position
    assert kept_numbers(pa.array(kept, pa.int64()), old.dropped, first).to_pylist() == [
        first + i for i in range(len(kept))
    ]


def test_a_staged_file_of_the_committer_round_trips_as_it_was() -> None:
    """A batch's own staged file (not a split) comes back from the checkpoint equal to itself."""
    from gtidsnap.sinks.delta.staging import StagedFile

    plain = StagedFile(TableId("d", "t"), "/out/f.parquet", 5, 10, 14, True)
    assert StagedFile.from_json(plain.to_json()) == plain
