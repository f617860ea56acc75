"""The MySQL/MariaDB -> Spark type mapping, canonical value -> Arrow conversion, type-change rules, and the
pure parts of the Delta sink (column plans, per-key reduction, path names). No SparkSession here."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import types as T

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.core.records import Record
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.delta import changelog_path, decode_name, encode_name, mirror_path, plan_columns
from gtidsnap.sinks.delta.change_rows import newest_per_key, record_rows
from gtidsnap.sinks.delta.types import arrow_array, arrow_type, invalid_column_names, spark_type
from gtidsnap.sinks.delta.widening import can_widen, evolve_type, holds

BYTE, SHORT, INT, LONG = T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType()
FLOAT, DOUBLE, STRING, BINARY = T.FloatType(), T.DoubleType(), T.StringType(), T.BinaryType()
DATE, NTZ, TS = T.DateType(), T.TimestampNTZType(), T.TimestampType()


def D(p: int, s: int = 0) -> T.DecimalType:  # reads like the SQL type
    return T.DecimalType(p, s)


# ----------------------------------------------------------------------------- the mapping

MAPPING = [
    ("tinyint", "tinyint(4)", BYTE),
    ("tinyint", "tinyint(1)", BYTE),  # BOOL
    ("tinyint", "tinyint(3) unsigned", SHORT),
    ("smallint", "smallint(6)", SHORT),
    ("smallint", "smallint unsigned", INT),
    ("mediumint", "mediumint(9)", INT),
    ("mediumint", "mediumint(8) unsigned", INT),
    ("int", "int(11)", INT),
    ("int", "int unsigned", LONG),
    ("bigint", "bigint(20)", LONG),
    ("bigint", "bigint(20) unsigned", D(20)),
    ("decimal", "decimal(12,2)", D(12, 2)),
    ("decimal", "decimal(38,10)", D(38, 10)),
    ("decimal", "decimal(65,30)", STRING),
    ("decimal", "decimal(10,2) unsigned", D(10, 2)),
    ("float", "float", FLOAT),
    ("double", "double", DOUBLE),
    ("bit", "bit(1)", LONG),
    ("bit", "bit(63)", LONG),
    ("bit", "bit(64)", D(20)),
    ("year", "year(4)", SHORT),
    ("date", "date", DATE),
    ("datetime", "datetime(6)", NTZ),
    ("timestamp", "timestamp", TS),
    ("time", "time(3)", STRING),
    ("json", "json", STRING),
    ("enum", "enum('a','b')", STRING),
    ("set", "set('a','b')", T.ArrayType(STRING, True)),
    ("varchar", "varchar(20)", STRING),
    ("char", "char(3)", STRING),
    ("longtext", "longtext", STRING),
    ("blob", "blob", BINARY),
    ("varbinary", "varbinary(10)", BINARY),
    ("binary", "binary(4)", BINARY),
    ("geometry", "geometry", BINARY),
    ("point", "point", BINARY),
    ("linestring", "linestring", BINARY),
    ("geometrycollection", "geometrycollection", BINARY),  # MariaDB's name
    ("geomcollection", "geomcollection", BINARY),  # MySQL's
    ("uuid", "uuid", STRING),
    ("inet4", "inet4", STRING),
    ("inet6", "inet6", STRING),
    ("vector", "vector(3)", BINARY),  # canonical: base64 of the stored float32s
    ("somenewtype", "somenewtype", STRING),  # unknown: text
]


@pytest.mark.parametrize(("data_type", "column_type", "expected"), MAPPING)
def test_spark_type(data_type: str, column_type: str, expected: T.DataType) -> None:
    assert spark_type(Column("c", data_type, column_type)) == expected


@pytest.mark.parametrize("expected", sorted({repr(m[2]) for m in MAPPING}))
def test_every_mapped_type_has_an_arrow_type(expected: str) -> None:
    data_type = next(m[2] for m in MAPPING if repr(m[2]) == expected)
    assert isinstance(arrow_type(data_type), pa.DataType)


# ----------------------------------------------------------------------------- values

UTC = dt.UTC
VALUES: list[tuple[str, str, list[Any], list[Any]]] = [
    ("tinyint", "tinyint", [-128, 127, None], [-128, 127, None]),
    ("tinyint", "tinyint unsigned", [255], [255]),
    ("int", "int unsigned", [4294967295], [4294967295]),
    ("bigint", "bigint", [-(2**63), 2**63 - 1], [-(2**63), 2**63 - 1]),
    ("bigint", "bigint unsigned", [2**64 - 1, 0], [Decimal(2**64 - 1), Decimal(0)]),
    (
        "decimal",
        "decimal(12,2)",
        ["1.50", "-9999999999.99", "0.00"],
        [Decimal("1.50"), Decimal("-9999999999.99"), Decimal("0.00")],
    ),
    ("decimal", "decimal(65,30)", ["1.500000000000000000000000000000"], ["1.500000000000000000000000000000"]),
    ("float", "float", [1.1, 123457000.0], [pytest.approx(1.1, rel=1e-7), 123457000.0]),
    ("double", "double", [1.1, -0.0], [1.1, -0.0]),
    ("bit", "bit(10)", [1023, 0], [1023, 0]),
    ("bit", "bit(64)", [2**64 - 1], [Decimal(2**64 - 1)]),
    ("year", "year", [2155, 0], [2155, 0]),
    ("date", "date", ["1000-01-01", "9999-12-31"], [dt.date(1000, 1, 1), dt.date(9999, 12, 31)]),
    (
        "datetime",
        "datetime(6)",
        ["2024-02-29 23:59:59.999999", "1000-01-01 00:00:00"],
        [dt.datetime(2024, 2, 29, 23, 59, 59, 999999), dt.datetime(1000, 1, 1)],
    ),
    (
        "timestamp",
        "timestamp(3)",
        ["2038-01-19 03:14:07.123000", "1970-01-01 00:00:01"],
        [
            dt.datetime(2038, 1, 19, 3, 14, 7, 123000, tzinfo=UTC),
            dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        ],
    ),
    ("time", "time(6)", ["838:59:59", "-01:00:00.500000"], ["838:59:59", "-01:00:00.500000"]),
    (
        "json",
        "json",
        [{"b": [1, 2.5, None], "a": "é"}, "text", 3, None],
        ['{"b":[1,2.5,null],"a":"é"}', '"text"', "3", None],
    ),
    ("enum", "enum('x','y')", ["y"], ["y"]),
    ("set", "set('a','b','c')", [["a", "c"], []], [["a", "c"], []]),
    ("varchar", "varchar(10)", ["héllo", ""], ["héllo", ""]),
    ("blob", "blob", ["base64:AP8=", "base64:"], [b"\x00\xff", b""]),
    ("binary", "binary(4)", ["base64:YQAAAA=="], [b"a\x00\x00\x00"]),
    ("uuid", "uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567-e89b-12d3-a456-426614174000"]),
    ("inet4", "inet4", ["0.0.0.0", "255.255.255.255"], ["0.0.0.0", "255.255.255.255"]),
    ("inet6", "inet6", ["::ffff:1.2.3.4", "2001:db8::"], ["::ffff:1.2.3.4", "2001:db8::"]),
    ("vector", "vector(2)", ["base64:AACAPwAAAEA="], [b"\x00\x00\x80?\x00\x00\x00@"]),
    ("point", "point", ["base64:AAAAAAEBAAAA"], [b"\x00\x00\x00\x00\x01\x01\x00\x00\x00"]),
    # zero and invalid dates: gtidsnap writes the server's text, Delta has no value for them
    ("date", "date", ["0000-00-00", "2024-00-10", "2024-02-30"], [None, None, None]),
    (
        "datetime",
        "datetime(6)",
        ["0000-00-00 00:00:00", "2024-00-10 12:00:00.500000", "2024-01-02 03:04:05"],
        [None, None, dt.datetime(2024, 1, 2, 3, 4, 5)],
    ),
    ("timestamp", "timestamp(6)", ["0000-00-00 00:00:00"], [None]),
]


@pytest.mark.parametrize(("data_type", "column_type", "canonical", "expected"), VALUES)
def test_canonical_values_to_arrow(
    data_type: str, column_type: str, canonical: list[Any], expected: list[Any]
) -> None:
    column = Column("c", data_type, column_type)
    array = arrow_array(column, spark_type(column), canonical)
    assert array.type == arrow_type(spark_type(column))
    assert array.to_pylist() == expected


def test_float_is_the_float32_of_what_the_server_prints() -> None:
    array = arrow_array(Column("f", "float", "float"), FLOAT, [1.1])
    assert array.to_pylist() == [pa.array([1.1], pa.float32()).to_pylist()[0]] != [1.1]


@pytest.mark.parametrize(
    ("column_type", "value"),
    [
        ("tinyint", 128),
        ("decimal(4,2)", "123.45"),
        ("decimal(4,2)", "1.234"),
        ("date", "not a date"),
        ("datetime", "2024-01-02 25:00"),
        ("timestamp", "0000-00-00 x"),
    ],
)
def test_values_that_do_not_fit_are_refused(column_type: str, value: Any) -> None:
    column = Column("c", column_type.split("(")[0], column_type)
    with pytest.raises(ValueError):
        arrow_array(column, spark_type(column), [value])


def test_values_into_a_wider_delta_type() -> None:
    """After a narrowing at the source the Delta column keeps its type; values of the new type fit it."""
    assert arrow_array(Column("c", "int", "int"), D(12, 2), [7]).to_pylist() == [Decimal("7.00")]
    assert arrow_array(Column("c", "date", "date"), NTZ, ["2020-01-02"]).to_pylist() == [
        dt.datetime(2020, 1, 2)
    ]
    assert arrow_array(Column("c", "decimal", "decimal(5,0)"), LONG, ["12345"]).to_pylist() == [12345]
    assert arrow_array(None, STRING, [None, "kept"]).to_pylist() == [None, "kept"]  # a dropped column


def test_column_names_delta_refuses() -> None:
    assert invalid_column_names(["ok_name", "with space", "a,b", "x=y", "fine$"]) == [
        "with space",
        "a,b",
        "x=y",
    ]


# ----------------------------------------------------------------------------- type changes

EVOLVE = [
    (INT, INT, INT),
    (LONG, INT, LONG),  # BIGINT -> INT at the source: the Delta column still holds it
    (INT, LONG, LONG),  # widened
    (BYTE, SHORT, SHORT),
    (SHORT, D(20), D(20)),
    (FLOAT, DOUBLE, DOUBLE),
    (DOUBLE, FLOAT, DOUBLE),
    (INT, DOUBLE, DOUBLE),
    (LONG, DOUBLE, None),  # not exact
    (D(10, 2), D(12, 4), D(12, 4)),
    (D(12, 4), D(10, 2), D(12, 4)),
    (D(10, 2), D(10, 4), D(12, 4)),  # common supertype Delta can widen to
    (INT, D(8, 2), D(12, 2)),
    (LONG, D(20), D(20)),
    (D(20), LONG, D(20)),
    (INT, FLOAT, DOUBLE),
    (DATE, NTZ, NTZ),
    (NTZ, DATE, NTZ),
    (NTZ, TS, None),  # DATETIME -> TIMESTAMP changes what the values mean
    (INT, STRING, None),
    (STRING, INT, None),
    (STRING, STRING, STRING),
    (BINARY, STRING, None),
    (D(38, 0), D(38, 10), None),
]


@pytest.mark.parametrize(("existing", "new", "expected"), EVOLVE)
def test_evolve_type(existing: T.DataType, new: T.DataType, expected: T.DataType | None) -> None:
    result = evolve_type(existing, new)
    assert result == expected
    if result is not None:
        assert holds(result, new), "the evolved type must hold the new values"
        assert holds(result, existing), "and the old ones"
        assert can_widen(existing, result), "and Delta must be able to get there"


def test_delta_widening_rules() -> None:
    assert can_widen(INT, D(10, 0)) and not can_widen(INT, D(9, 0))
    assert can_widen(LONG, D(20, 0)) and not can_widen(LONG, D(19, 0))
    assert not can_widen(LONG, DOUBLE) and not can_widen(DOUBLE, FLOAT)
    assert can_widen(D(10, 2), D(11, 3)) and not can_widen(D(10, 2), D(11, 4))


# ----------------------------------------------------------------------------- sink plans

TABLE = TableId("shop", "orders")
ID = Column("id", "bigint", "bigint")
NAME = Column("name", "varchar", "varchar(20)")
QTY = Column("qty", "int", "int")
SCHEMA = TableSchema(TABLE, (ID, NAME, QTY), ("id",))


def delta_schema(*fields: tuple[str, T.DataType]) -> T.StructType:
    meta = [("_op", STRING), ("_seq", LONG), ("_gtid", STRING), ("_source_ts", TS)]
    return T.StructType([T.StructField(n, t, True) for n, t in [*fields, *meta]])


def test_plan_for_a_new_table_follows_the_source() -> None:
    plan = plan_columns(TABLE, "p", None, SCHEMA, {})
    assert [(c.name, c.data_type) for c in plan.columns] == [("id", LONG), ("name", STRING), ("qty", INT)]
    assert not plan.widen


def test_plan_keeps_dropped_columns_adds_new_ones_and_widens() -> None:
    existing = delta_schema(("id", LONG), ("gone", STRING), ("qty", SHORT))
    plan = plan_columns(TABLE, "p", existing, SCHEMA, {})
    assert [(c.name, c.data_type, c.source) for c in plan.columns] == [
        ("id", LONG, ID),
        ("gone", STRING, None),
        ("qty", INT, QTY),
        ("name", STRING, NAME),
    ]
    assert plan.widen == {"qty": INT}


def test_plan_keeps_a_column_added_and_dropped_within_the_batch() -> None:
    transient = Column("tmp", "decimal", "decimal(5,1)")
    plan = plan_columns(TABLE, "p", delta_schema(("id", LONG)), SCHEMA, {"tmp": transient})
    assert ("tmp", D(5, 1)) in [(c.name, c.data_type) for c in plan.columns]


def test_plan_refuses_what_delta_cannot_hold() -> None:
    changed = TableSchema(TABLE, (ID, Column("qty", "varchar", "varchar(5)")), ("id",))
    with pytest.raises(SinkError, match=r"column qty of shop\.orders changed to varchar\(5\).*p"):
        plan_columns(TABLE, "p", delta_schema(("id", LONG), ("qty", INT)), changed, {})


@pytest.mark.parametrize("name", ["_seq", "bad name"])
def test_plan_refuses_names_it_cannot_write(name: str) -> None:
    schema = TableSchema(TABLE, (ID, Column(name, "int", "int")), ("id",))
    with pytest.raises(SinkError, match=name):
        plan_columns(TABLE, "p", None, schema, {})


def rec(op: str, seq: int, before: dict[str, Any] | None, after: dict[str, Any] | None) -> Record:
    row = after if after is not None else before
    assert row is not None
    return Record(op, TABLE, (row["id"],), before, after, f"0-1-{seq}", seq, False, 0)  # type: ignore[arg-type]


def test_changes_split_primary_key_updates_and_keep_the_last_per_key() -> None:
    records = [
        rec("c", 1, None, {"id": 1, "name": "a"}),
        rec("u", 2, {"id": 1, "name": "a"}, {"id": 1, "name": "b"}),
        rec("u", 3, {"id": 1, "name": "b"}, {"id": 2, "name": "b"}),  # key 1 -> 2
        rec("d", 4, {"id": 3, "name": "x"}, None),
        rec("c", 5, None, {"id": 3, "name": "y"}),
    ]
    plan = plan_columns(TABLE, "the mirror", None, SCHEMA, {})
    rows = record_rows(TABLE, SCHEMA, plan, records, changelog=False)
    assert list(zip(*(rows.column(c).to_pylist() for c in ("_op", "id", "_seq")), strict=True)) == [
        ("c", 1, 1),
        ("u", 1, 2),
        ("d", 1, 3),
        ("c", 2, 3),
        ("d", 3, 4),
        ("c", 3, 5),
    ]
    last = newest_per_key(rows, ["id"])
    assert list(zip(*(last.column(c).to_pylist() for c in ("_op", "id", "_seq")), strict=True)) == [
        ("d", 1, 3),
        ("c", 2, 3),
        ("c", 3, 5),
    ]


# ----------------------------------------------------------------------------- layout


@given(st.text(min_size=1, max_size=30))
def test_names_round_trip_and_need_no_quoting(name: str) -> None:
    encoded = encode_name(name)
    assert decode_name(encoded) == name
    assert all(ch.isascii() and (ch.isalnum() or ch in "_$-~") for ch in encoded)


def test_layout() -> None:
    assert mirror_path("/out", TableId("shop", "orders")) == "/out/shop/orders"
    assert changelog_path("/out", TableId("shop", "order.items")) == "/out/shop/order~2eitems.changelog"
