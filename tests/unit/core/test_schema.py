"""Canonical values: the per-column fast converters give exactly what the general normalisation gives,
and each type's rule makes a PyMySQL value and a binlog value of the same stored value equal."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.core.column_values import (
    date_text,
    datetime_text,
    format_time,
    inet6_text,
    normalize_value,
    value_converter,
)
from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column, TableSchema, fold_key_value

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
    ("decimal", "decimal(65,30)"),
    ("timestamp", "timestamp(6)"),
    ("time", "time(6)"),
    ("float", "float(7,3)"),
    ("double", "double"),
    ("uuid", "uuid"),
    ("inet4", "inet4"),
    ("inet6", "inet6"),
    ("point", "point"),
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
    st.sampled_from(["0000-00-00", "0000-00-00 00:00:00", "a,b", '{"k": 1}', "0101", "1900", ""]),
    st.sampled_from(["2024-00-10 12:00:00.5", "::ffff:1.2.3.4", dt.datetime(1970, 1, 1), Decimal("0E-30")]),
    st.timedeltas(),
    st.floats(allow_nan=False),
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


# ----------------------------------------------------------------------------- canonical forms per type


def value(data_type: str, column_type: str, raw: Any, collation: str | None = None) -> Any:
    column = Column("c", data_type, column_type, collation=collation)
    got = normalize_value(column, raw)
    assert value_converter(column)(raw) == got, "the fast path must agree"
    return got


def test_decimal_is_fixed_point_text_never_an_exponent() -> None:
    assert value("decimal", "decimal(65,30)", Decimal("0E-30")) == "0." + "0" * 30
    assert value("decimal", "decimal(65,30)", Decimal("1E-30")) == "0." + "0" * 29 + "1"
    assert value("decimal", "decimal(12,2)", Decimal("-1234567890.12")) == "-1234567890.12"
    assert value("decimal", "decimal(10,0)", Decimal("1E+5")) == "100000"
    assert value("decimal", "decimal(12,2)", "1.50") == "1.50"  # text, as a JSON document may hold it


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("123e4567-e89b-12d3-a456-426655440000", "123e4567-e89b-12d3-a456-426655440000"),  # PyMySQL
        (bytes.fromhex("123e4567e89b12d3a45642665544"), "123e4567-e89b-12d3-a456-426655440000"),  # zeros cut
        (bytes.fromhex("01890a5dac96774bbcceb302099a8057"), "01890a5d-ac96-774b-bcce-b302099a8057"),
        ("", "00000000-0000-0000-0000-000000000000"),  # the binlog's all-zero value
        (b"\xff" * 16, "ffffffff-ffff-ffff-ffff-ffffffffffff"),
    ],
)
def test_uuid_from_text_or_stored_bytes(raw: Any, text: str) -> None:
    assert value("uuid", "uuid", raw) == text


@pytest.mark.parametrize(
    ("raw", "text"),
    [("1.2.3.4", "1.2.3.4"), (b"\x01\x02\x03", "1.2.3.0"), ("", "0.0.0.0"), (b"\xff" * 4, "255.255.255.255")],
)
def test_inet4_from_text_or_stored_bytes(raw: Any, text: str) -> None:
    assert value("inet4", "inet4", raw) == text


# Measured on MariaDB 10.11: SELECT CAST(x'<hex>' AS INET6) for each.
INET6_TEXT = [
    ("00000000000000000000000000000000", "::"),
    ("00000000000000000000000000000001", "::1"),
    ("00000000000000000000000000000100", "::100"),  # fits 16 bits: stays hex
    ("00000000000000000000000000010000", "::0.1.0.0"),  # IPv4-compatible
    ("00000000000000000000000001020304", "::1.2.3.4"),
    ("00000000000000000000ffff01020304", "::ffff:1.2.3.4"),  # IPv4-mapped
    ("00000000000000000000ffff00000000", "::ffff:0.0.0.0"),
    ("00000000000000000000fffe01020304", "::fffe:102:304"),
    ("00000000000000000000000101020304", "::1:102:304"),
    ("00010000000000000000000000000000", "1::"),
    ("20010db8000000000000000000000000", "2001:db8::"),
    ("20010db8000000000001000000000000", "2001:db8:0:0:1::"),  # the longest run wins
    ("20010000000100000000000100000001", "2001:0:1::1:0:1"),  # the first of equal runs
    ("ffff000000010001000000010001ffff", "ffff::1:1:0:1:1:ffff"),  # a single zero group too
    ("00002523ffffffffffff0001000046b4", "::2523:ffff:ffff:ffff:1:0:46b4"),
    ("ffffffffffffffffffffffffffffffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
]


@pytest.mark.parametrize(("hexed", "text"), INET6_TEXT)
def test_inet6_bytes_print_as_the_server_prints_them(hexed: str, text: str) -> None:
    raw = bytes.fromhex(hexed)
    assert inet6_text(raw) == text
    assert value("inet6", "inet6", raw.rstrip(b"\0") or "") == text  # as the binlog hands them over
    assert value("inet6", "inet6", text) == text  # as PyMySQL does


def test_address_bytes_of_the_wrong_width_are_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        value("uuid", "uuid", b"\x01" * 17)


@pytest.mark.parametrize(
    ("data_type", "raw", "text"),
    [
        ("date", "0000-00-00", "0000-00-00"),  # PyMySQL: the server's text of an invalid date
        ("date", "2024-02-30", "2024-02-30"),
        ("date", dt.date(2024, 2, 29), "2024-02-29"),
        ("datetime", "0000-00-00 00:00:00.000000", "0000-00-00 00:00:00"),
        ("datetime", "2024-00-10 12:00:00.5", "2024-00-10 12:00:00.500000"),
        ("datetime", "2024-00-10 12:00:00.500", "2024-00-10 12:00:00.500000"),  # DATETIME(3)
        ("datetime", dt.datetime(2024, 1, 2, 3, 4, 5, 6), "2024-01-02 03:04:05.000006"),
        ("timestamp", "0000-00-00 00:00:00.000", "0000-00-00 00:00:00"),
        ("timestamp", dt.datetime(1970, 1, 1), "0000-00-00 00:00:00"),  # the binlog's zero TIMESTAMP
        ("timestamp", dt.datetime(1970, 1, 1, 0, 0, 1), "1970-01-01 00:00:01"),
        ("datetime", b"0000-00-00 00:00:00", "0000-00-00 00:00:00"),
    ],
)
def test_dates_zero_and_invalid_included_have_one_text(data_type: str, raw: Any, text: str) -> None:
    assert value(data_type, data_type, raw) == text


@pytest.mark.parametrize(
    ("text", "parts"),
    [("0000-00-00", (0, 0, 0)), ("2024-00-10", (2024, 0, 10)), ("0999-12-31", (999, 12, 31))],
)
def test_date_text_is_what_isoformat_gives_a_valid_date(text: str, parts: tuple[int, int, int]) -> None:
    assert date_text(*parts) == text
    assert datetime_text(2024, 1, 2, 3, 4, 5, 0) == dt.datetime(2024, 1, 2, 3, 4, 5).isoformat(sep=" ")
    assert datetime_text(2024, 1, 2, 3, 4, 5, 7) == dt.datetime(2024, 1, 2, 3, 4, 5, 7).isoformat(sep=" ")


def test_time_may_be_negative_and_exceed_a_day() -> None:
    assert value("time", "time(6)", -dt.timedelta(minutes=59, seconds=59, microseconds=999500)) == (
        "-00:59:59.999500"
    )
    assert value("time", "time", dt.timedelta(hours=838, minutes=59, seconds=59)) == "838:59:59"
    assert format_time(-dt.timedelta(seconds=1)) == "-00:00:01"


def test_float_as_the_server_prints_it() -> None:
    assert value("float", "float", 1.100000023841858) == 1.1
    assert value("float", "float", 123456792.0) == 123457000.0
    assert value("float", "float(7,3)", 1234.5670166015625) == 1234.567  # d decimals, not 6 digits
    assert value("float", "float(7,3) unsigned", 1.5) == 1.5
    assert str(value("float", "float", -0.0)) == "0.0"


def test_binary_spatial_and_vector_values_are_base64() -> None:
    assert value("binary", "binary(4)", b"ab") == "base64:YWIAAA=="
    assert value("varbinary", "varbinary(4)", "") == "base64:"
    assert value("point", "point", b"\x00\x00\x00\x00\x01") == "base64:AAAAAAE="
    assert value("vector", "vector(2)", b"\x00\x00\x80?\x00\x00\x00@") == "base64:AACAPwAAAEA="


def test_json_from_text_and_from_decoded_binary_json_are_equal() -> None:
    text = '{"d": "2024-01-02", "t": "-630:59:59.000000", "n": 0.000000000000000000000000000000, "s": "é"}'
    binary = {b"d": "2024-01-02", b"t": "-630:59:59.000000", b"n": Decimal("0E-30"), b"s": "é".encode()}
    assert (
        value("json", "json", text)
        == value("json", "json", binary)
        == {
            "d": "2024-01-02",
            "t": "-630:59:59.000000",
            "n": 0.0,
            "s": "é",
        }
    )


@pytest.mark.parametrize(
    ("collation", "pads", "keys"),
    [
        ("utf8mb4_general_ci", True, {"a": "a", "a ": "a", "A  ": "a"}),
        ("utf8mb4_0900_ai_ci", False, {"a": "a", "a ": "a ", "A  ": "a  "}),  # MySQL 8's default: NO PAD
        ("utf8mb4_general_nopad_ci", False, {"a": "a", "a ": "a ", "A": "a"}),
        ("utf8mb4_bin", True, {"a": "a", "A": "A", "a ": "a "}),  # not folded: only *_ci keys are
        (None, False, {"a ": "a "}),
    ],
)
def test_key_fold_follows_case_and_pad_rules(collation: str | None, pads: bool, keys: dict[str, str]) -> None:
    column = Column("k", "varchar", "varchar(8)", collation=collation)
    assert column.pads is pads
    assert {raw: fold_key_value(column, raw) for raw in keys} == keys


def test_an_address_value_that_is_neither_text_nor_bytes_is_refused_not_allocated() -> None:
    """bytes(n) is n zero bytes: an int for an INET4 once asked for 25 GB (found by the property test)."""
    from gtidsnap.core.column_values import address_text

    with pytest.raises(TypeError, match="INET4 value is text or bytes, not int"):
        address_text("inet4", 25_278_194_304)
    assert address_text("inet4", b"\x01\x02\x03\x04") == "1.2.3.4"


_KEY_COLUMNS = st.sampled_from(
    [
        Column("a", "bigint", "bigint(20)"),
        Column("b", "varchar", "varchar(10)", collation="utf8mb4_general_ci"),
        Column("c", "varchar", "varchar(10)", collation="utf8mb4_bin"),
        Column("d", "varchar", "varchar(10)", collation="utf8mb4_0900_ai_ci"),
        Column("e", "int", "int(11)"),
    ]
)


@given(
    st.lists(_KEY_COLUMNS, min_size=1, max_size=4, unique_by=lambda c: c.name),
    st.lists(st.one_of(st.integers(), st.text(alphabet="aAbB ", max_size=4)), min_size=5, max_size=5),
)
def test_key_of_folds_as_fold_key_value(key: list[Column], values: list[Any]) -> None:
    """The key reader chosen once per shape gives what folding each key column gives."""
    others = [Column(n, "int", "int(11)") for n in "abcde" if n not in {c.name for c in key}]
    schema = TableSchema(TableId("d", "t"), (*key, *others), tuple(c.name for c in key))
    row = dict(zip("abcde", values, strict=True))
    assert schema.key_of(row) == tuple(fold_key_value(c, row[c.name]) for c in key)
