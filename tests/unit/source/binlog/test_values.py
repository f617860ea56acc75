"""gtidsnap's replacements for python-mysql-replication's value decoders: the binary forms the server
writes, decoded to what the server prints (and PyMySQL hands a snapshot).

The encoders here follow the servers' documented binary layouts; the JSON vectors are bytes read from a
MySQL 8.0 binlog, with the text the same server printed for them.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysqlreplication import json_binary
from pymysqlreplication.constants import NONE_SOURCE
from pymysqlreplication.row_event import RowsEvent

from gtidsnap.source.binlog.values import (
    decode_date,
    decode_datetime,
    decode_datetime2,
    decode_time,
    decode_time2,
    fraction_bytes,
    install,
    parse_json_opaque,
    row_values,
)

TIME_INT_OFFSET = 0x800000
SCALE = {1: 10_000, 2: 100, 3: 1}  # microseconds per stored unit, by fraction width


def truncate(delta: dt.timedelta, fsp: int) -> dt.timedelta:
    """``delta`` with only ``fsp`` fraction digits (towards zero, as a TIME(fsp) stores it)."""
    unit = 10 ** (6 - fsp)
    micros = abs(delta) // dt.timedelta(microseconds=1)
    kept = dt.timedelta(microseconds=micros - micros % unit)
    return -kept if delta < dt.timedelta(0) else kept


def encode_time2(delta: dt.timedelta, fsp: int) -> bytes:
    """TIME(fsp) as MySQL 5.6+ and MariaDB write it: the packed value ``hms << 24 | micros`` (negated
    whole when negative); its integer part (arithmetic shift) biased in 3 bytes, then the fraction
    (C-truncated remainder, in units of the width) as an unsigned byte/short; with 5-6 digits the whole
    48-bit value biased."""
    magnitude = abs(delta)
    seconds = magnitude.days * 86400 + magnitude.seconds
    hms = (seconds // 3600) << 12 | (seconds % 3600 // 60) << 6 | seconds % 60
    packed = (hms << 24) + magnitude.microseconds
    packed = -packed if delta < dt.timedelta(0) else packed
    width = fraction_bytes(fsp)
    if width == 3:
        return (packed + (TIME_INT_OFFSET << 24)).to_bytes(6, "big")
    head = (TIME_INT_OFFSET + (packed >> 24)).to_bytes(3, "big")
    if width == 0:
        return head
    remainder = int(math.fmod(packed, 1 << 24))
    unit = int(remainder / SCALE[width])  # C division: towards zero
    return head + (unit & ((1 << (8 * width)) - 1)).to_bytes(width, "big")


def encode_datetime2(year: int, month: int, day: int, h: int, m: int, s: int, micros: int, fsp: int) -> bytes:
    packed = ((year * 13 + month) << 22 | day << 17 | h << 12 | m << 6 | s) + 0x8000000000
    width = fraction_bytes(fsp)
    fraction = (micros // SCALE[width]).to_bytes(width, "big") if width else b""
    return packed.to_bytes(5, "big") + fraction


TIMES = st.timedeltas(
    min_value=-dt.timedelta(hours=838, minutes=59, seconds=59),
    max_value=dt.timedelta(hours=838, minutes=59, seconds=59),
)


@given(TIMES, st.integers(0, 6))
def test_time2_round_trips_negative_fractions_included(delta: dt.timedelta, fsp: int) -> None:
    stored = truncate(delta, fsp)
    assert decode_time2(encode_time2(stored, fsp), fsp) == stored


@pytest.mark.parametrize(
    ("text_seconds", "fsp"),
    [
        (-(3599.9995), 6),
        (-1.25, 2),
        (-43200.01, 2),
        (-1.001, 3),
        (-0.5, 6),
        (-0.000001, 6),
        (-3023998.000001, 6),
    ],
)
def test_time2_the_cases_the_library_got_wrong(text_seconds: float, fsp: int) -> None:
    delta = dt.timedelta(seconds=text_seconds)
    assert decode_time2(encode_time2(delta, fsp), fsp) == delta


def test_old_time_is_signed() -> None:
    assert decode_time((-8385959).to_bytes(3, "little", signed=True)) == -dt.timedelta(
        hours=838, minutes=59, seconds=59
    )
    assert decode_time((123456).to_bytes(3, "little", signed=True)) == dt.timedelta(
        hours=12, minutes=34, seconds=56
    )


def date_bytes(year: int, month: int, day: int) -> bytes:
    return (year << 9 | month << 5 | day).to_bytes(3, "little")


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ((2024, 2, 29), dt.date(2024, 2, 29)),
        ((0, 0, 0), "0000-00-00"),
        ((2024, 0, 10), "2024-00-10"),
        ((2024, 2, 30), "2024-02-30"),  # ALLOW_INVALID_DATES; the library raised here
        ((0, 1, 1), "0000-01-01"),
    ],
)
def test_date_valid_or_as_the_text_of_its_fields(fields: tuple[int, int, int], expected: Any) -> None:
    assert decode_date(date_bytes(*fields)) == expected


@pytest.mark.parametrize(
    ("fields", "fsp", "expected"),
    [
        ((2024, 2, 29, 23, 59, 59, 999999), 6, dt.datetime(2024, 2, 29, 23, 59, 59, 999999)),
        ((2024, 1, 2, 3, 4, 5, 500000), 1, dt.datetime(2024, 1, 2, 3, 4, 5, 500000)),
        ((2024, 1, 2, 3, 4, 5, 123000), 3, dt.datetime(2024, 1, 2, 3, 4, 5, 123000)),
        ((0, 0, 0, 0, 0, 0, 0), 6, "0000-00-00 00:00:00"),
        ((0, 0, 0, 0, 0, 0, 1), 6, "0000-00-00 00:00:00.000001"),
        ((2024, 0, 10, 12, 0, 0, 500000), 2, "2024-00-10 12:00:00.500000"),
        ((2024, 2, 30, 0, 0, 0, 0), 0, "2024-02-30 00:00:00"),
    ],
)
def test_datetime2_valid_or_as_the_text_of_its_fields(
    fields: tuple[int, int, int, int, int, int, int], fsp: int, expected: Any
) -> None:
    assert decode_datetime2(encode_datetime2(*fields, fsp), fsp) == expected


def test_old_datetime() -> None:
    assert decode_datetime((20240229235959).to_bytes(8, "little")) == dt.datetime(2024, 2, 29, 23, 59, 59)
    assert decode_datetime((0).to_bytes(8, "little")) == "0000-00-00 00:00:00"
    assert decode_datetime((20240010120000).to_bytes(8, "little")) == "2024-00-10 12:00:00"


def opaque(field_type: int, body_hex: str) -> bytes:
    body = bytes.fromhex(body_hex)
    return bytes([field_type, len(body)]) + body  # a length below 128 is one byte


# (field type, stored bytes) from a MySQL 8.0.31 binlog, and what SELECT printed for that JSON value.
JSON_OPAQUE = [
    (11, "0000000591d8ffff", "-630:59:59.000000"),  # JSON_OBJECT('tm', <TIME '-838:59:59'>): as stored
    (11, "702ffcfeffffffff", "-00:00:01.250000"),
    (11, "00000000c0040000", "76:00:00.000000"),
    (11, "0000000080feffff", "-24:00:00.000000"),
    (10, "000000000044b219", "2024-01-02"),
    (12, "20a107053144b219", "2024-01-02 03:04:05.500000"),
    (7, "20a107053144b219", "2024-01-02 03:04:05.500000"),  # TIMESTAMP
    (252, "00ff", "base64:type252:AP8="),  # BLOB
    (16, "0005", "base64:type16:AAU="),  # BIT
    (15, "", "base64:type15:"),  # VARBINARY, empty
]


@pytest.mark.parametrize(("field_type", "body", "text"), JSON_OPAQUE)
def test_json_opaque_values_read_as_the_server_prints_them(field_type: int, body: str, text: str) -> None:
    assert parse_json_opaque(opaque(field_type, body)) == text


def test_json_opaque_decimal_stays_a_decimal() -> None:
    one = parse_json_opaque(opaque(246, "271e800000010000000000000000000000000000"))  # DECIMAL(39,30) 1
    assert one == Decimal(1) and format(one, "f") == "1." + "0" * 30
    assert parse_json_opaque(opaque(246, "04047a6a")) == Decimal("-0.1429")


def test_row_values_put_back_an_empty_set() -> None:
    row: dict[str, Any] = {
        "values": {"s": None, "n": None},
        "none_sources": {"s": NONE_SOURCE.EMPTY_SET, "n": "null"},
    }
    assert row_values(row, "") == {"s": set(), "n": None}
    update: dict[str, Any] = {"before_values": {"s": {"a"}}, "after_values": {"s": None}}
    update["after_none_sources"] = {"s": NONE_SOURCE.EMPTY_SET}
    assert row_values(update, "after_") == {"s": set()} and row_values(update, "before_") == {"s": {"a"}}


def test_the_library_decodes_through_the_replacements() -> None:
    install()  # a stream does it when it starts (source/binlog/library.py); idempotent
    assert json_binary.parse_opaque is parse_json_opaque
    for name in ("read_time2", "read_time", "read_date", "read_datetime2", "read_datetime"):
        assert getattr(RowsEvent, f"_RowsEvent__{name}").__module__ == "gtidsnap.source.binlog.values"
