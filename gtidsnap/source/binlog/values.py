"""Workarounds for python-mysql-replication 1.0.17's value decoding, so binlog values can equal the
snapshot's (:mod:`gtidsnap.core.column_values` makes both canonical; this module only gets the facts right).

What the library gets wrong, measured on MySQL 8.0 and MariaDB 10.11, and what replaces it:

* TIME(n) < 0 with a fraction: it reads the fraction as a separate positive number, but the server
  stores the whole packed value negated (``-00:59:59.999500`` came back as ``-00:59:59.000500``).
  :func:`decode_time2` reads the packed value whole. The old (pre-5.6) TIME reads as unsigned, so a
  negative one came back huge: :func:`decode_time` reads it signed.
* DATE / DATETIME / DATETIME(n) that are zero or invalid (``0000-00-00``, ``2024-00-10``,
  ``2024-02-30`` under ALLOW_INVALID_DATES): it returns None, as for NULL, or raises from inside
  ``datetime.date`` for a DATE. The server stores and prints them, and PyMySQL hands a chunk their
  text: :func:`decode_date` and :func:`decode_datetime2` return the text of the stored fields (as
  :func:`gtidsnap.core.column_values.datetime_text` writes it), and a ``date``/``datetime`` for a valid value.
* MySQL binary JSON opaque values (``json_binary.parse_opaque``): DATE and DATETIME became
  ``datetime``, TIME a ``datetime.time`` without its sign that cannot hold 24 hours or more (decoding
  raised), TIMESTAMP and binary strings garbled text. :func:`parse_json_opaque` returns what the
  server's JSON text shows: ``"2024-01-02"``, ``"-630:59:59.000000"``, ``"2024-01-02 03:04:05.500000"``,
  ``"base64:type15:AP8="``; a DECIMAL stays a ``Decimal`` (a JSON number in the text).
* An empty SET comes back as None (like NULL) and is told apart only in ``none_sources``:
  :func:`row_values` puts back an empty set.

The library reads these through private methods of ``RowsEvent`` (``__read_time2``, ...) and the
module function ``json_binary.parse_opaque``; :func:`install` replaces them with thin shims around the
pure decoders below, when a stream starts (:func:`gtidsnap.source.binlog.library.install`), never at
import.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from pymysqlreplication import json_binary
from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.row_event import RowsEvent
from pymysqlreplication.util.bytes import decode_decimal, decode_variable_length

from gtidsnap.core.column_values import date_text, datetime_text

_TIME_INT_OFFSET = 0x800000  # TIME2 stores its 24-bit integer part biased by this
DATETIME_INT_OFFSET = 0x8000000000  # DATETIME2's 40-bit integer part
_FRACTION_BYTES = (0, 1, 1, 2, 2, 3, 3)  # bytes of the fraction by fsp (digits)
FRACTION_SCALE = (0, 10_000, 100, 1)  # microseconds per unit of a fraction of 0-3 bytes


# --------------------------------------------------------------------------- pure decoders


def fraction_bytes(fsp: int) -> int:
    """How many bytes the fraction of a TIME(fsp)/DATETIME(fsp)/TIMESTAMP(fsp) takes."""
    return _FRACTION_BYTES[fsp] if 0 <= fsp <= 6 else 0


def _packed_time(packed: int) -> dt.timedelta:
    """A TIME packed as ``(hour << 12 | minute << 6 | second) << 24 | microseconds``, negated whole."""
    magnitude = abs(packed)
    hms, micros = magnitude >> 24, magnitude & 0xFFFFFF
    delta = dt.timedelta(
        hours=(hms >> 12) & 0x3FF, minutes=(hms >> 6) & 0x3F, seconds=hms & 0x3F, microseconds=micros
    )
    return -delta if packed < 0 else delta


def decode_time2(data: bytes, fsp: int) -> dt.timedelta:
    """TIME(fsp) in the 5.6 binary form: 3 bytes big-endian biased integer part, then the fraction.

    Negative values keep their fraction in the complement for binary sort order: with 1-4 fraction
    digits the integer part is one less and the fraction counts back from the next second."""
    width = fraction_bytes(fsp)
    if width == 3:  # the 48-bit packed value, biased as a whole
        return _packed_time(int.from_bytes(data[:6], "big") - (_TIME_INT_OFFSET << 24))
    int_part = int.from_bytes(data[:3], "big") - _TIME_INT_OFFSET
    fraction = int.from_bytes(data[3 : 3 + width], "big")
    if int_part < 0 and fraction:
        int_part += 1
        fraction -= 1 << (8 * width)
    return _packed_time((int_part << 24) + fraction * FRACTION_SCALE[width])


def decode_time(data: bytes) -> dt.timedelta:
    """The old TIME: a signed 3-byte little-endian number ``[-]HHMMSS``."""
    number = int.from_bytes(data[:3], "little", signed=True)
    magnitude = abs(number)
    delta = dt.timedelta(hours=magnitude // 10000, minutes=magnitude // 100 % 100, seconds=magnitude % 100)
    return -delta if number < 0 else delta


def _date(year: int, month: int, day: int) -> dt.date | str:
    """A valid date as a ``date``; a zero or invalid one as the text of its fields."""
    try:
        return dt.date(year, month, day)
    except ValueError:
        return date_text(year, month, day)


def _datetime(
    year: int, month: int, day: int, hour: int, minute: int, second: int, micros: int
) -> dt.datetime | str:
    """A valid date and time as a ``datetime``; a zero or invalid one as the text of its fields."""
    try:
        return dt.datetime(year, month, day, hour, minute, second, micros)
    except ValueError:
        return datetime_text(year, month, day, hour, minute, second, micros)


def decode_date(data: bytes) -> dt.date | str:
    """DATE: 3 bytes little-endian, ``year << 9 | month << 5 | day``."""
    number = int.from_bytes(data[:3], "little")
    return _date(number >> 9, (number >> 5) & 0xF, number & 0x1F)


def decode_datetime2(data: bytes, fsp: int) -> dt.datetime | str:
    """DATETIME(fsp) in the 5.6 binary form: 5 bytes big-endian biased, then the fraction.

    The 40 bits: sign, 17 bits ``year * 13 + month``, 5 day, 5 hour, 6 minute, 6 second."""
    packed = int.from_bytes(data[:5], "big") - DATETIME_INT_OFFSET
    year_month, day, hms = (packed >> 22) & 0x1FFFF, (packed >> 17) & 0x1F, packed & 0x1FFFF
    width = fraction_bytes(fsp)
    micros = int.from_bytes(data[5 : 5 + width], "big") * FRACTION_SCALE[width]
    return _datetime(year_month // 13, year_month % 13, day, hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F, micros)


def decode_datetime(data: bytes) -> dt.datetime | str:
    """The old DATETIME: 8 bytes little-endian, the decimal number ``YYYYMMDDhhmmss``."""
    ymd, hms = divmod(int.from_bytes(data[:8], "little"), 1_000_000)
    return _datetime(ymd // 10000, ymd // 100 % 100, ymd % 100, hms // 10000, hms // 100 % 100, hms % 100, 0)


def _json_time(packed: int) -> str:
    """A TIME inside MySQL JSON, as the server's JSON text prints it: ``[-]HH:MM:SS.ffffff``."""
    magnitude = abs(packed)
    hms, micros = magnitude >> 24, magnitude & 0xFFFFFF
    sign = "-" if packed < 0 else ""
    return f"{sign}{(hms >> 12) & 0x3FF:02d}:{(hms >> 6) & 0x3F:02d}:{hms & 0x3F:02d}.{micros:06d}"


def _json_datetime(packed: int, with_time: bool) -> str:
    """A DATE/DATETIME/TIMESTAMP inside MySQL JSON as the server prints it (always 6 fraction digits)."""
    magnitude = abs(packed)
    ymdhms, micros = magnitude >> 24, magnitude & 0xFFFFFF
    ymd, hms = ymdhms >> 17, ymdhms & 0x1FFFF
    year_month = ymd >> 5
    text = f"{year_month // 13:04d}-{year_month % 13:02d}-{ymd & 0x1F:02d}"
    if not with_time:
        return text
    return f"{text} {hms >> 12:02d}:{(hms >> 6) & 0x3F:02d}:{hms & 0x3F:02d}.{micros:06d}"


_JSON_TIME_TYPES = frozenset({FIELD_TYPE.TIME, FIELD_TYPE.TIME2})
_JSON_DATE_TYPES = frozenset({FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE})
_JSON_DATETIME_TYPES = frozenset(
    {FIELD_TYPE.DATETIME, FIELD_TYPE.DATETIME2, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2}
)


def parse_json_opaque(data: bytes) -> Any:
    """An opaque value of MySQL binary JSON (field type, length, bytes) as the server's JSON text
    shows it: temporal values as their strings, DECIMAL as a ``Decimal`` (a number in the text),
    anything else (binary strings, BIT, ...) as ``"base64:type<field type>:<base64>"``."""
    if not data:
        return None
    field_type = data[0]
    length, used = decode_variable_length(data[1:])
    body = bytes(data[1 + used : 1 + used + length])
    if field_type in (FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DECIMAL):
        value: Decimal = decode_decimal(body)
        return value
    if field_type in _JSON_TIME_TYPES | _JSON_DATE_TYPES | _JSON_DATETIME_TYPES:
        packed = int.from_bytes(body[:8], "little", signed=True)
        if field_type in _JSON_TIME_TYPES:
            return _json_time(packed)
        return _json_datetime(packed, with_time=field_type in _JSON_DATETIME_TYPES)
    return f"base64:type{field_type}:{base64.b64encode(body).decode()}"


# --------------------------------------------------------------------------- row images


def row_values(row: Mapping[str, Any], image: str) -> dict[str, Any]:
    """One row image (``image`` is ``""``, ``"before_"`` or ``"after_"``) with an empty SET put back
    where the library says so only in ``none_sources``."""
    values: dict[str, Any] = row[f"{image}values"]  # built by the library for this row: fixed in place
    sources = row.get(f"{image}none_sources")
    if sources:
        for name, why in sources.items():
            if why == NONE_SOURCE.EMPTY_SET:
                values[name] = set()
    return values


# --------------------------------------------------------------------------- the patches

_PRIVATE = "_RowsEvent__"


def _read_time2(event: Any, column: Any) -> dt.timedelta:
    return decode_time2(event.packet.read(3 + fraction_bytes(column.fsp)), column.fsp)


def _read_time(event: Any) -> dt.timedelta:
    return decode_time(event.packet.read(3))


def _read_date(event: Any) -> dt.date | str:
    return decode_date(event.packet.read(3))


def _read_datetime2(event: Any, column: Any) -> dt.datetime | str:
    return decode_datetime2(event.packet.read(5 + fraction_bytes(column.fsp)), column.fsp)


def _read_datetime(event: Any) -> dt.datetime | str:
    return decode_datetime(event.packet.read(8))


_READERS: dict[str, Callable[..., Any]] = {
    "read_time2": _read_time2,
    "read_time": _read_time,
    "read_date": _read_date,
    "read_datetime2": _read_datetime2,
    "read_datetime": _read_datetime,
}


def install() -> None:
    """Replace the library's decoders with the ones above (idempotent; called by
    :func:`gtidsnap.source.binlog.library.install` when a stream starts). Raises RuntimeError, nothing
    replaced, if the library no longer has a method they replace."""
    missing = [_PRIVATE + n for n in _READERS if not callable(getattr(RowsEvent, _PRIVATE + n, None))]
    missing += [] if callable(getattr(json_binary, "parse_opaque", None)) else ["json_binary.parse_opaque"]
    if missing:
        raise RuntimeError(
            f"this python-mysql-replication has no {', '.join(missing)}, which gtidsnap replaces to decode "
            "TIME, DATE, DATETIME and JSON values exactly; install the tested version (scripts/setup)"
        )
    for name, reader in _READERS.items():
        setattr(RowsEvent, _PRIVATE + name, reader)
    json_binary.parse_opaque = parse_json_opaque
