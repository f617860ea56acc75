"""The per-column fast converters give exactly what the general normalisation gives."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.model import TableId
from gtidsnap.schema import Column, TableSchema, normalize_value, value_converter

TYPES = [
    ("tinyint", "tinyint(4)"),
    ("bigint", "bigint(20) unsigned"),
    ("int", "int(11)"),
    ("varchar", "varchar(64)"),
    ("text", "text"),
    ("enum", "enum('a','b')"),
    ("datetime", "datetime(6)"),
    ("timestamp", "timestamp"),
    ("date", "date"),
    ("decimal", "decimal(12,2)"),
    ("year", "year(4)"),
    ("bit", "bit(8)"),
    ("set", "set('a','b')"),
    ("json", "json"),
    ("binary", "binary(4)"),
]

# every class of value either adapter hands over for these types, and some they never should
VALUES = st.one_of(
    st.none(),
    st.integers(-(2**63), 2**64),
    st.text(max_size=8),
    st.binary(max_size=6),
    st.datetimes(),
    st.dates(),
    st.decimals(allow_nan=False, allow_infinity=False, places=2),
    st.sampled_from(["0000-00-00", "0000-00-00 00:00:00", "a,b", '{"k": 1}', "0101", "1900"]),
)


@given(st.sampled_from(TYPES), VALUES)
def test_fast_converter_equals_normalize_value(kind: tuple[str, str], value: Any) -> None:
    column = Column("c", *kind)
    try:
        want: Any = normalize_value(column, value)
    except (ValueError, TypeError, ArithmeticError) as exc:
        want = type(exc)
    try:
        got: Any = value_converter(column)(value)
    except (ValueError, TypeError, ArithmeticError) as exc:
        got = type(exc)
    assert got == want
    assert type(got) is type(want)


def test_normalize_values_matches_normalize_row_and_keeps_unknown_columns() -> None:
    schema = TableSchema(
        TableId("d", "t"),
        (
            Column("id", "bigint", "bigint(20)"),
            Column("at", "datetime", "datetime"),
            Column("n", "decimal", "d"),
        ),
        ("id",),
    )
    raw = {"id": 1, "at": dt.datetime(2026, 1, 2, 3, 4, 5), "n": Decimal("1.50"), "new": b"\x01"}
    row = schema.normalize_row(raw)
    assert row == {"id": 1, "at": "2026-01-02 03:04:05", "n": "1.50", "new": "base64:AQ=="}
    assert schema.normalize_values(raw.keys(), raw.values()) == row
    assert schema.key_of(row) == (1,)
