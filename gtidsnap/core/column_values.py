"""One value as the server prints it: the canonical form that makes a chunk's value and the binlog's equal.

A chunk row comes from PyMySQL, a binlog row from python-mysql-replication; the same stored value
reaches us as different Python objects (JSON as text or as a dict, SET as text or a set, BIT as
bytes or a bit string, UUID as text or 16 bytes, ...). :func:`normalize_value` turns both into one
canonical, JSON-serialisable form; the table's shape and its keys are :mod:`gtidsnap.core.schema`'s.

The canonical form per type (value and key alike), measured on MySQL 8.0 and MariaDB 10.11:

==========================================  =====================================================
TINYINT ... BIGINT (UNSIGNED), YEAR, BIT    a JSON integer (BIT: the bits as an unsigned number;
                                            YEAR 0000 is 0)
DECIMAL(p,s)                                fixed-point text as the server prints it, ``"0.00"``,
                                            never an exponent (``0E-30``)
FLOAT / DOUBLE                              a JSON number (FLOAT as the server prints it: 6 digits,
                                            or d decimals for FLOAT(m,d))
DATE                                        ``"YYYY-MM-DD"``
DATETIME, TIMESTAMP                         ``"YYYY-MM-DD HH:MM:SS[.ffffff]"`` (TIMESTAMP in UTC)
zero or invalid dates                       the same text of the stored fields: ``"0000-00-00"``,
                                            ``"2024-00-10 00:00:00"`` (a zero TIMESTAMP is
                                            ``"0000-00-00 00:00:00"``)
TIME                                        ``"[-]HH:MM:SS[.ffffff]"``, hours may exceed 24
CHAR, VARCHAR, *TEXT, ENUM                  the text (MariaDB's JSON is LONGTEXT: its text)
SET                                         a sorted list of members
BINARY(n), VARBINARY, *BLOB, spatial,       ``"base64:..."`` of the bytes (BINARY zero-padded to
VECTOR                                      n; spatial: the server's SRID + WKB)
JSON (MySQL)                                the parsed document; inside it DATE/TIME/DATETIME/
                                            TIMESTAMP and binary values are the strings the
                                            server's JSON text shows, numbers as JSON parses them
UUID (MariaDB)                              ``"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"``, lower case
INET4 (MariaDB)                             ``"a.b.c.d"``
INET6 (MariaDB)                             the server's text: lower-case hex groups, the first
                                            longest run of zero groups (even one) as ``::``,
                                            ``::ffff:a.b.c.d`` (IPv4-mapped) and ``::a.b.c.d``
                                            (IPv4-compatible, unless the address fits 16 bits)
==========================================  =====================================================

JSON ``null`` and SQL NULL are both ``None``.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gtidsnap.core.schema import Column

INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
TEXT_TYPES = frozenset({"char", "varchar", "text", "tinytext", "mediumtext", "longtext", "enum"})
_EPOCH = dt.datetime(1970, 1, 1)  # a TIMESTAMP of 0 seconds: the zero TIMESTAMP, never a valid one
ZERO_DATETIME = "0000-00-00 00:00:00"


def value_converter(column: Column) -> Callable[[Any], Any]:
    """:func:`normalize_value` for one column, with a fast path for the value class it usually gets.

    Each fast path returns exactly what :func:`normalize_value` would for that class (the unit tests
    compare them); anything else takes the general route."""
    general = partial(normalize_value, column)
    t = column.data_type
    if t in INTEGER_TYPES:
        return lambda v: v if v.__class__ is int else general(v)
    if t in TEXT_TYPES:
        return lambda v: v if v.__class__ is str else general(v)
    if t == "datetime":
        return _kind("datetime", lambda v: v.isoformat(sep=" ") if v.__class__ is dt.datetime else general(v))
    if t == "timestamp":
        return lambda v: v.isoformat(sep=" ") if v.__class__ is dt.datetime and v != _EPOCH else general(v)
    if t == "date":
        return lambda v: v.isoformat() if v.__class__ is dt.date else general(v)
    if t in ("decimal", "numeric"):
        return _kind("decimal", lambda v: decimal_text(v) if v.__class__ is Decimal else general(v))
    return general


def _kind(kind: str, convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``convert`` tagged as the standard converter of a type whose normal form is text: the binlog's
    readers may write that text straight from the bytes (:mod:`gtidsnap.source.binlog.normal_readers`)."""
    convert.__dict__["gtidsnap_kind"] = kind
    return convert


def converter_kind(convert: Callable[[Any], Any]) -> str | None:
    """``datetime`` or ``decimal`` for the standard converter of those types (:func:`value_converter`);
    None for any other."""
    kind = getattr(convert, "gtidsnap_kind", None)
    return kind if isinstance(kind, str) else None


_BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "vector"})
SPATIAL_TYPES = frozenset(
    {
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
        "geomcollection",
    }
)


def normalize_value(column: Column, value: Any) -> Any:
    """One canonical, JSON-serialisable form per MySQL/MariaDB type (the table in the module doc).

    PyMySQL (chunks) and python-mysql-replication 1.0.17 (binlog, with the fixes of
    :mod:`gtidsnap.source.binlog.values`) disagree on these, measured on MySQL 8.0 and MariaDB 10.11; each
    rule makes both sides equal:

    * JSON: text is parsed; the binlog's decoded MySQL binary JSON has ``bytes`` keys and strings
      (decoded as UTF-8) and ``Decimal`` numbers (read back as the text would be: ``1.50`` -> 1.5).
    * SET: a sorted list of members (text ``'x,z'`` or a Python set).
    * BIT: an int (bytes big-endian from PyMySQL, a ``'0101'`` string from the binlog).
    * DECIMAL: fixed-point text (``str(Decimal)`` would print ``0E-30`` for DECIMAL(65,30) zero).
    * Binary strings: base64 text (an empty one comes from the binlog as ``''``); BINARY(n) padded
      with zero bytes to n first (the binlog drops trailing zeros).
    * UUID, INET4, INET6 (MariaDB): PyMySQL has the server's text; the binlog has the bytes in text
      order, trailing zero bytes dropped and an all-zero value as ``''``, formatted here as the server
      prints them. (MariaDB documents that it stores v1-v5 UUIDs with their groups swapped; 10.11's
      binlog carried text order for every version and variant tried: v0, v1, v4-v7, variants 0-3.)
    * FLOAT: six significant digits, as both servers print it (the binlog gives the stored float32
      widened to a double, ``1.100000023841858``, ``123456792.0``; PyMySQL ``1.1``, ``123457000.0``);
      FLOAT(m,d) with its d decimals, as the servers print it.
    * YEAR: 0 for ``0000`` (the binlog library reads it as 1900, which YEAR cannot hold).
    * DATE/DATETIME/TIMESTAMP: PyMySQL returns zero or invalid dates as the server's text (with as
      many fraction digits as the column has), the binlog decoders as the text of the stored fields;
      both become :func:`datetime_text`. A zero TIMESTAMP comes from the binlog as 1970-01-01
      00:00:00 (0 seconds, below the type's range). TIMESTAMPs are UTC: snapshot sessions use
      ``+00:00``.
    """
    if value is None:
        return None
    t = column.data_type
    if t == "json":
        if isinstance(value, bytes | bytearray):
            value = value.decode()
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return value
        return _json_plain(value)
    if t == "set":
        items = value if isinstance(value, set | frozenset | list | tuple) else str(value).split(",")
        return sorted(str(i) for i in items if str(i) != "")
    if t == "bit":
        if isinstance(value, bytes | bytearray):
            return int.from_bytes(value, "big")
        if isinstance(value, str):
            return int(value, 2) if value else 0
        return int(value)
    if t in ("decimal", "numeric"):
        return decimal_text(value)
    if t in _BINARY_TYPES or t in SPATIAL_TYPES:
        if isinstance(value, str):  # the binlog library hands an empty binary value over as ''
            value = value.encode("utf-8", errors="surrogateescape")
        width = _declared_length(column.column_type) if t == "binary" else None
        if width is not None and len(value) < width:
            value = bytes(value) + b"\0" * (width - len(value))
        return plain_value(value)
    if t in _ADDRESS_TYPES:
        return address_text(t, value)
    if t == "float" and isinstance(value, float | int):
        return _float_as_server_prints(float(value), _declared_scale(column.column_type))
    if t in TEXT_TYPES and isinstance(value, bytes | bytearray):
        return value.decode("utf-8", errors="surrogateescape")
    if t == "year":
        year = int(value)
        return 0 if year == 1900 else year
    if t in ("date", "datetime", "timestamp"):
        return _temporal(t, value)
    return plain_value(value)


def decimal_text(value: Any) -> str:
    """A DECIMAL as the server prints it: fixed point with the column's scale, never an exponent.

    ``str`` is that already unless it chose an exponent (``0E-30``, ``1E+5``), and four times faster
    than ``format(..., "f")``, which gives the same text."""
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    text = str(number)
    return format(number, "f") if "E" in text else text


_DATE_TEXT = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?")


def date_text(year: int, month: int, day: int) -> str:
    """``YYYY-MM-DD`` of the stored fields, valid or not (``0000-00-00``)."""
    return f"{year:04d}-{month:02d}-{day:02d}"


def datetime_text(year: int, month: int, day: int, hour: int, minute: int, second: int, micros: int) -> str:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]`` of the stored fields, valid or not: what ``isoformat(" ")``
    gives a valid value (the fraction only when it is not zero)."""
    text = f"{date_text(year, month, day)} {hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{micros:06d}" if micros else text


def _temporal(data_type: str, value: Any) -> Any:
    """DATE/DATETIME/TIMESTAMP in their one text form, zero and invalid dates included."""
    if isinstance(value, dt.datetime):
        if data_type == "timestamp" and value == _EPOCH:
            return ZERO_DATETIME
        return value.date().isoformat() if data_type == "date" else value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat() if data_type == "date" else value.isoformat() + " 00:00:00"
    text = value.decode() if isinstance(value, bytes | bytearray) else str(value)
    match = _DATE_TEXT.fullmatch(text.strip())
    if match is None:
        return text
    year, month, day, hour, minute, second = (int(g or 0) for g in match.groups()[:6])
    if data_type == "date":
        return date_text(year, month, day)
    micros = int((match.group(7) or "0").ljust(6, "0"))
    return datetime_text(year, month, day, hour, minute, second, micros)


_ADDRESS_TYPES = frozenset({"uuid", "inet4", "inet6"})
_ADDRESS_WIDTH = {"uuid": 16, "inet4": 4, "inet6": 16}


def address_text(data_type: str, value: Any) -> str:
    """A MariaDB UUID/INET4/INET6 as the server prints it, from its text (PyMySQL: kept) or its stored
    bytes (the binlog: trailing zero bytes dropped, an all-zero value as ``''``)."""
    if isinstance(value, str) and value:
        return value
    if not isinstance(value, str | bytes | bytearray | memoryview):  # bytes(n) would be n zero bytes
        raise TypeError(f"a {data_type.upper()} value is text or bytes, not {type(value).__name__}")
    raw = value.encode("latin-1") if isinstance(value, str) else bytes(value)
    width = _ADDRESS_WIDTH[data_type]
    raw = raw.ljust(width, b"\0")
    if len(raw) != width:
        raise ValueError(f"a {data_type.upper()} value has {width} bytes, not {len(raw)}: {raw.hex()}")
    if data_type == "uuid":
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if data_type == "inet4":
        return ".".join(str(b) for b in raw)
    return inet6_text(raw)


def inet6_text(raw: bytes) -> str:
    """16 bytes as MariaDB's INET6 prints them (checked against the server on thousands of values).

    ``::ffff:a.b.c.d`` when IPv4-mapped; ``::a.b.c.d`` when the first 96 bits are zero and the last
    32 do not fit in 16 bits (``::1`` and ``::100`` stay hex); otherwise lower-case hex groups
    without leading zeros, the first longest run of zero groups, even a single one, as ``::``."""
    if raw[:10] == bytes(10) and raw[10:12] == b"\xff\xff":
        return "::ffff:" + ".".join(str(b) for b in raw[12:])
    if raw[:12] == bytes(12) and raw[12:14] != b"\0\0":
        return "::" + ".".join(str(b) for b in raw[12:])
    groups = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, 16, 2)]
    start, length, i = -1, 0, 0
    while i < 8:
        end = i
        while end < 8 and groups[end] == 0:
            end += 1
        if end - i > length:
            start, length = i, end - i
        i = max(end, i + 1)
    hexes = [f"{g:x}" for g in groups]
    if start < 0:
        return ":".join(hexes)
    return ":".join(hexes[:start]) + "::" + ":".join(hexes[start + length :])


def _json_plain(value: Any) -> Any:
    """Parsed JSON text and decoded binary JSON in one form: str keys and strings, JSON numbers."""
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8", errors="surrogateescape")
    if isinstance(value, Decimal):
        return json.loads(format(value, "f"))  # what parsing the server's text of it gives
    if isinstance(value, Mapping):
        return {str(_json_plain(k)): _json_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_plain(v) for v in value]
    return plain_value(value)


def _declared_length(column_type: str) -> int | None:
    """``n`` of ``binary(n)``; None when the type has no length."""
    open_at, close_at = column_type.find("("), column_type.find(")")
    if open_at < 0 or close_at < open_at:
        return None
    try:
        return int(column_type[open_at + 1 : close_at])
    except ValueError:
        return None


def _declared_scale(column_type: str) -> int | None:
    """``d`` of ``float(m,d)``; None when the type declares no scale."""
    match = re.search(r"\(\s*\d+\s*,\s*(\d+)\s*\)", column_type)
    return int(match.group(1)) if match else None


def _float_as_server_prints(value: float, scale: int | None = None) -> float:
    """FLOAT as both servers print it, without a negative zero: six significant digits (FLT_DIG), or
    ``scale`` decimals for FLOAT(m,d) (``1234.567`` in a FLOAT(7,3), where six digits would cut it)."""
    if math.isnan(value) or math.isinf(value):
        return value
    text = f"{value:.6g}" if scale is None else f"{value:.{scale}f}"
    return float(text) + 0.0


def plain_value(value: Any) -> Any:
    """Python values that JSON has no type for, as text a consumer can parse back."""
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return format_time(value)
    if isinstance(value, dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return "base64:" + base64.b64encode(bytes(value)).decode()
    if isinstance(value, set | frozenset):
        return sorted(plain_value(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): plain_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_value(v) for v in value]
    return value


def format_time(delta: dt.timedelta) -> str:
    """MySQL TIME (may be negative or above 24 h) as ``[-]HH:MM:SS[.ffffff]``: its canonical form and
    the literal a keyset bound binds (PyMySQL 1.x escapes -1 s as ``'-1:59:59'``)."""
    sign = "-" if delta < dt.timedelta(0) else ""
    delta = abs(delta)
    seconds = delta.days * 86400 + delta.seconds
    text = f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{text}.{delta.microseconds:06d}" if delta.microseconds else text
