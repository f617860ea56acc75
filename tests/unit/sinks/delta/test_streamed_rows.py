"""A batch's streamed records turned into Arrow as they arrive, group by group and shape by shape, give
the rows :func:`record_rows` gives all of them at once in the commit's plan: on random batches of
inserts, updates, key moves and deletes, across a column added and a column widened mid-batch, with
FLOAT values written to a DOUBLE column and DOUBLE values to a FLOAT one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.core.records import Record
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.delta import streamed_rows
from gtidsnap.sinks.delta.change_rows import record_rows
from gtidsnap.sinks.delta.columns import ColumnPlan, PlannedColumn, plan_columns
from gtidsnap.sinks.delta.streamed_rows import StreamedRows, source_plan

T_ID = TableId("shop", "orders")
ID_INT = Column("id", "int", "int", False)
ID_BIG = Column("id", "bigint", "bigint", False)
NAME = Column("name", "varchar", "varchar(9)")
PRICE = Column("price", "decimal", "decimal(8,2)")
RATIO = Column("ratio", "float", "float")
AT = Column("at", "datetime", "datetime")
NOTE = Column("note", "text", "text")  # added mid-batch

BEFORE = TableSchema(T_ID, (ID_INT, NAME, PRICE, RATIO, AT), ("id",))
AFTER = TableSchema(T_ID, (ID_BIG, NAME, PRICE, RATIO, AT, NOTE), ("id",))  # id widened, note added


def image(draw: st.DrawFn, key: int, with_note: bool) -> dict[str, object]:
    row: dict[str, object] = {
        "id": key,
        "name": draw(st.none() | st.text("abc\u00e9\u4e2d", max_size=4)),
        "price": draw(st.none() | st.sampled_from(["0.00", "12.50", "-3.07", "999999.99"])),
        "ratio": draw(st.none() | st.sampled_from([0.1, 1.5, -2.25, 3.4028234e38, 1e-7])),
        "at": draw(st.none() | st.sampled_from(["2024-02-29 23:59:59", "1970-01-01 00:00:00"])),
    }
    if with_note:
        row["note"] = draw(st.none() | st.text(max_size=3))
    return row


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[tuple[list[Record], TableSchema]], int]:
    """Writes of records (each with the shape it was decoded with), the shape changing once."""
    switch = draw(st.integers(0, 40))
    writes: list[tuple[list[Record], TableSchema]] = []
    seq = 0
    for w in range(draw(st.integers(1, 40))):
        schema = BEFORE if w < switch else AFTER
        records = []
        for _ in range(draw(st.integers(1, 5))):
            op = draw(st.sampled_from("cuud"))
            key = draw(st.integers(-3, 3)) * 100_000_007  # fits an INT
            new_key = draw(st.sampled_from([key, key, key + 1])) if op == "u" else key
            noted = schema is AFTER
            before = image(draw, key, noted) if op in "ud" else None
            after = image(draw, new_key, noted) if op in "cu" else None
            gtid, at = f"0-1-{seq}", 1_700_000_000 + seq
            records.append(Record(op, T_ID, (key,), before, after, gtid, seq, False, at))  # type: ignore[arg-type]
            seq += 1
        writes.append((records, schema))
    return writes, draw(st.sampled_from([1, 3, 1024]))


def commit_plan(existing_ratio: T.DataType) -> ColumnPlan:
    """The plan at commit: the Delta table's ratio column as given, the source's id widened."""
    existing = T.StructType(
        [
            T.StructField("id", T.IntegerType()),
            T.StructField("name", T.StringType()),
            T.StructField("price", T.DecimalType(8, 2)),
            T.StructField("ratio", existing_ratio),
            T.StructField("at", T.TimestampNTZType()),
        ]
    )
    return plan_columns(T_ID, "t", existing, AFTER, {c.name: c for c in (*BEFORE.columns, *AFTER.columns)})


@settings(max_examples=150, deadline=None)
@given(batches(), st.sampled_from([T.FloatType(), T.DoubleType()]))
def test_streamed_rows_are_the_batchs_record_rows(batch: tuple, ratio: T.DataType) -> None:  # type: ignore[type-arg]
    writes, group = batch
    plan = commit_plan(ratio)
    assert {c.name: c.data_type for c in plan.columns}["id"] == T.LongType()  # widened at commit
    streamed = StreamedRows()
    original = streamed_rows.GROUP
    streamed_rows.GROUP = group
    try:
        for records, schema in writes:
            streamed.add(records, schema)
    finally:
        streamed_rows.GROUP = original
    every = [r for records, _ in writes for r in records]
    assert len(streamed) == len(every)
    got = streamed.rows(plan)
    assert got is not None
    assert got.equals(record_rows(T_ID, AFTER, plan, every, changelog=True))


def test_float_columns_are_planned_as_double_before_the_commit_casts_them() -> None:
    plan = source_plan(BEFORE)
    assert {c.name: c.data_type for c in plan.columns} == {
        "id": T.IntegerType(),
        "name": T.StringType(),
        "price": T.DecimalType(8, 2),
        "ratio": T.DoubleType(),
        "at": T.TimestampNTZType(),
    }


def test_no_record_no_rows_and_a_bad_value_is_named_when_written(monkeypatch: pytest.MonkeyPatch) -> None:
    assert StreamedRows().rows(source_plan(BEFORE)) is None
    bad = Record("c", T_ID, (1,), None, {"id": 1, "price": "twelve"}, "0-1-1", 1, False, 0)
    monkeypatch.setattr(streamed_rows, "GROUP", 1)
    with pytest.raises(SinkError, match=r"column price of shop\.orders: 'twelve'"):
        StreamedRows().add([bad], BEFORE)


def test_a_shape_change_starts_a_new_group() -> None:
    streamed = StreamedRows()
    first = Record("c", T_ID, (1,), None, {"id": 1}, "0-1-1", 1, False, 0)
    second = Record("c", T_ID, (2,), None, {"id": 2, "note": "n"}, "0-1-2", 2, False, 0)
    streamed.add([first], BEFORE)
    streamed.add([second], AFTER)
    columns = (PlannedColumn("id", T.LongType(), ID_BIG), PlannedColumn("note", T.StringType(), NOTE))
    plan = ColumnPlan(columns, {})
    rows = streamed.rows(plan)
    assert rows is not None
    assert rows.column("id").to_pylist() == [1, 2]
    assert rows.column("note").to_pylist() == [None, "n"]
