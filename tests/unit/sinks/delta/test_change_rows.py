"""A batch's rows as Arrow tables: records (a key move as a delete and an insert, one _seq), snapshot
chunks (cast to the plan's types, NULL for a column they lack, numbered from their first _seq), the
newest row of each key and rows matched by key, against plain Python on random rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from gtidsnap.core.model import TableId
from gtidsnap.core.records import Record, SnapshotColumns
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.arrow_columns import ArrowRenderer, ArrowRows
from gtidsnap.sinks.delta.change_rows import (
    conformed,
    matching,
    newer_than,
    newest_per_key,
    plan_schema,
    record_rows,
    snapshot_rows,
    top_seqs,
)
from gtidsnap.sinks.delta.columns import ColumnPlan, PlannedColumn

T_ID = TableId("shop", "orders")
ID, NAME, TAGS = (
    Column("id", "int", "int", False),
    Column("name", "varchar", "varchar(9)"),
    Column("tags", "set", "set('a','b')"),
)
SCHEMA = TableSchema(T_ID, (ID, NAME, TAGS), ("id",))
PLAN = ColumnPlan(
    (
        PlannedColumn("id", T.LongType(), ID),  # widened from INT
        PlannedColumn("name", T.StringType(), NAME),
        PlannedColumn("tags", T.ArrayType(T.StringType(), True), TAGS),
        PlannedColumn("gone", T.StringType(), None),  # dropped at the source: NULL from now on
    ),
    {},
)


def record(op: str, seq: int, before: dict | None, after: dict | None) -> Record:  # type: ignore[type-arg]
    image = after or before
    assert image is not None
    return Record(op, T_ID, (image["id"],), before, after, f"0-1-{seq}", seq, False, 1_700_000_000 + seq)  # type: ignore[arg-type]


def test_records_as_rows_a_key_move_is_a_delete_and_an_insert() -> None:
    rows = record_rows(
        T_ID,
        SCHEMA,
        PLAN,
        [
            record("c", 1, None, {"id": 1, "name": "a", "tags": ["b", "a"]}),
            record("u", 2, {"id": 1, "name": "a", "tags": []}, {"id": 2, "name": "b", "tags": []}),
            record("u", 3, {"id": 2, "name": "b", "tags": []}, {"id": 2, "name": "c", "tags": None}),
            record("d", 4, {"id": 2, "name": "c", "tags": []}, None),
        ],
        changelog=True,
    )
    assert rows.column_names == [
        "id",
        "name",
        "tags",
        "gone",
        "_op",
        "_seq",
        "_gtid",
        "_source_ts",
        "_snapshot",
    ]
    assert rows.schema.field("id").type == pa.int64()
    got = rows.select(["id", "name", "tags", "gone", "_op", "_seq"]).to_pylist()
    assert [tuple(r.values()) for r in got] == [
        (1, "a", ["a", "b"], None, "c", 1),
        (1, "a", [], None, "d", 2),
        (2, "b", [], None, "c", 2),
        (2, "c", None, None, "u", 3),
        (2, "c", [], None, "d", 4),
    ]
    assert rows.column("_source_ts")[0].as_py() == dt.datetime(2023, 11, 14, 22, 13, 21, tzinfo=dt.UTC)
    assert not any(rows.column("_snapshot").to_pylist())


def test_snapshot_chunks_as_rows_cast_numbered_and_nulled() -> None:
    _, one = ArrowRenderer()(
        [((1,), {"id": 1, "name": "x", "tags": ["a"]}), ((2,), {"id": 2, "name": "y", "tags": []})], SCHEMA
    )
    _, two = ArrowRenderer()([((7,), {"id": 7, "name": "z", "tags": None})], SCHEMA)
    chunks = [
        SnapshotColumns(T_ID, one, 10, 1_700_000_000, True),
        SnapshotColumns(T_ID, two, 20, 1_700_000_005, True),
    ]
    rows = snapshot_rows(PLAN, chunks, changelog=False)
    assert rows.column_names == ["id", "name", "tags", "gone", "_op", "_seq", "_gtid", "_source_ts"]
    assert rows.select(["id", "name", "gone", "_op", "_seq", "_gtid"]).to_pylist() == [
        {"id": 1, "name": "x", "gone": None, "_op": "r", "_seq": 10, "_gtid": None},
        {"id": 2, "name": "y", "gone": None, "_op": "r", "_seq": 11, "_gtid": None},
        {"id": 7, "name": "z", "gone": None, "_op": "r", "_seq": 20, "_gtid": None},
    ]
    assert rows.column("_source_ts").to_pylist()[2] == dt.datetime(2023, 11, 14, 22, 13, 25, tzinfo=dt.UTC)
    with pytest.raises(Exception, match="not Arrow columns"):
        snapshot_rows(PLAN, [SnapshotColumns(T_ID, "rows", 1, 0, True)], changelog=False)  # type: ignore[arg-type]


@st.composite
def keyed_rows(draw: st.DrawFn) -> list[tuple[int, str, int, list[str] | None]]:
    n = draw(st.integers(0, 40))
    seqs = draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n, unique=True))
    return [
        (
            draw(st.integers(0, 6)),
            draw(st.sampled_from(["a", "b"])),
            s,
            draw(st.sampled_from([None, ["x"], []])),
        )
        for s in seqs
    ]


def table_of(rows: list[tuple[int, str, int, list[str] | None]]) -> pa.Table:
    return pa.table(
        {
            "k1": pa.array([r[0] for r in rows], pa.int32()),
            "k2": pa.array([r[1] for r in rows], pa.string()),
            "_seq": pa.array([r[2] for r in rows], pa.int64()),
            "tags": pa.array([r[3] for r in rows], pa.list_(pa.string())),
        }
    )


@settings(max_examples=300)
@given(keyed_rows(), st.sets(st.tuples(st.integers(0, 6), st.sampled_from(["a", "b"]))))
def test_newest_per_key_and_matching_agree_with_plain_python(rows: list, keys: set) -> None:  # type: ignore[type-arg]
    table = table_of(rows)
    newest: dict[tuple[int, str], tuple] = {}  # type: ignore[type-arg]
    for r in rows:
        if (r[0], r[1]) not in newest or r[2] > newest[(r[0], r[1])][2]:
            newest[(r[0], r[1])] = r
    got = newest_per_key(table, ["k1", "k2"]).to_pylist()
    assert sorted((g["k1"], g["k2"], g["_seq"], g["tags"]) for g in got) == sorted(newest.values())
    wanted = pa.table(
        {"k1": pa.array([k[0] for k in keys], pa.int32()), "k2": pa.array([k[1] for k in keys], pa.string())}
    )
    kept = matching(table, wanted, ["k1", "k2"], keep=True).to_pylist()
    left = matching(table, wanted, ["k1", "k2"], keep=False).to_pylist()
    assert [(g["k1"], g["k2"], g["_seq"]) for g in kept] == [r[:3] for r in rows if (r[0], r[1]) in keys]
    assert [(g["k1"], g["k2"], g["_seq"]) for g in left] == [r[:3] for r in rows if (r[0], r[1]) not in keys]


@settings(max_examples=300)
@given(keyed_rows(), keyed_rows())
def test_the_fold_by_key_anti_join_is_the_fold_row_by_row(staged: list, changes: list) -> None:  # type: ignore[type-arg]
    """The mirror's fold in Spark (staged rows of a key with a change newer than all of them dropped by
    an anti-join on the keys, that change added) ends where folding each staged row with its key's
    newest change, then keeping the newest row of each key, ends (mirror_update's rule)."""
    key = ["k1", "k2"]
    changes = [c for c in changes if c[2] not in {r[2] for r in staged}]  # a _seq is one record's
    latest: dict[tuple[int, str], tuple] = {}  # type: ignore[type-arg]
    for c in changes:
        if (c[0], c[1]) not in latest or c[2] >= latest[(c[0], c[1])][2]:
            latest[(c[0], c[1])] = c
    by_row: dict[tuple[int, str], tuple] = {}  # type: ignore[type-arg]
    for row in staged:
        change = latest.get((row[0], row[1]))
        row = change if change is not None and change[2] > row[2] else row
        if (row[0], row[1]) not in by_row or row[2] > by_row[(row[0], row[1])][2]:
            by_row[(row[0], row[1])] = row
    rows = table_of(staged)
    newer = newer_than(
        newest_per_key(table_of(changes), key), top_seqs(rows.select([*key, "_seq"]), key), key
    )
    kept = matching(rows, newer, key, keep=False)
    folded = pa.concat_tables([kept, newer]).to_pylist()
    by_key: dict[tuple[int, str], tuple] = {}  # type: ignore[type-arg]
    for g in folded:
        r = (g["k1"], g["k2"], g["_seq"], g["tags"])
        if (r[0], r[1]) not in by_key or r[2] > by_key[(r[0], r[1])][2]:
            by_key[(r[0], r[1])] = r
    assert by_key == by_row
    assert all(
        n["_seq"] > max(r[2] for r in staged if (r[0], r[1]) == (n["k1"], n["k2"])) for n in newer.to_pylist()
    )


def test_changes_of_an_earlier_plan_conform_to_the_current_one() -> None:
    """Changes wait for a mirror across batches; a column added (or widened) in between is NULL (or
    cast) in the earlier ones, in the current plan's order."""
    earlier = ColumnPlan(
        (PlannedColumn("id", T.IntegerType(), ID), PlannedColumn("name", T.StringType(), NAME)), {}
    )
    rows = record_rows(T_ID, SCHEMA, earlier, [record("c", 7, None, {"id": 1, "name": "x"})], changelog=False)
    got = conformed(rows, PLAN, changelog=False)
    assert got.schema.equals(plan_schema(PLAN, changelog=False))
    assert got.to_pylist()[0] | {"_source_ts": None} == {
        "id": 1,
        "name": "x",
        "tags": None,
        "gone": None,
        "_op": "c",
        "_seq": 7,
        "_gtid": "0-1-7",
        "_source_ts": None,
    }
    assert conformed(got, PLAN, changelog=False) is got


def test_arrow_rows_taken_by_position() -> None:
    rows = ArrowRows(
        pa.record_batch(
            {"id": [1, 2, 3], "d": pa.array([Decimal("1.1"), None, Decimal("2.0")], pa.decimal128(3, 1))}
        )
    )
    assert rows.taken([2, 0]).batch.column("id").to_pylist() == [3, 1]
    assert len(rows.taken([])) == 0
