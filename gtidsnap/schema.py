"""A captured table's shape, and the one place where values from the two adapters become equal.

A chunk row comes from PyMySQL, a binlog row from python-mysql-replication; the same stored value
reaches us as different Python objects (JSON as text or as a dict, SET as text or a set, BIT as
bytes or a bit string, ...). :meth:`TableSchema.normalize_row` turns both into one canonical,
JSON-serialisable form, and :meth:`TableSchema.key_of` derives the primary key from it, folded the
way the column's collation compares (so ``'ABC'`` and ``'abc'`` are one key under ``*_ci``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property, partial
from typing import Any

from gtidsnap.model import Key, Row, TableId


@dataclass(frozen=True)
class Column:
    """One column as information_schema describes it."""

    name: str
    data_type: str  # lower case: int, bigint, varchar, datetime, json, enum, set, bit, ...
    column_type: str  # full type: "bigint(20) unsigned", "enum('a','b')", "decimal(12,2)"
    nullable: bool = True
    collation: str | None = None

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type.lower()

    @property
    def case_insensitive(self) -> bool:
        return bool(self.collation) and "_ci" in (self.collation or "").lower()


@dataclass(frozen=True)
class TableSchema:
    """Columns in ordinal order and the primary-key (or configured surrogate) columns."""

    table: TableId
    columns: tuple[Column, ...]
    key: tuple[str, ...]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"{self.table} has no column {name!r}")

    @cached_property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(self.column(n) for n in self.key)

    def normalize_row(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Canonical values for every known column; unknown names (a DDL in flight) pass as they are."""
        return self.normalize_values(raw.keys(), raw.values())

    def normalize_values(self, names: Iterable[str], values: Iterable[Any]) -> dict[str, Any]:
        """:meth:`normalize_row` of a row given as names and values (a result set's tuple)."""
        converters = self._converters
        return {name: converters.get(name, _plain)(value) for name, value in zip(names, values, strict=True)}

    @cached_property
    def _converters(self) -> dict[str, Callable[[Any], Any]]:
        """One converter per column, chosen once: most values then need no per-value type dispatch."""
        return {c.name: value_converter(c) for c in self.columns}

    def key_of(self, row: Row) -> Key:
        """The key of a normalised row, folded by collation so equal keys compare equal."""
        return tuple(fold_key_value(c, row[c.name]) for c in self.key_columns)


def fold_key_value(column: Column, value: Any) -> Any:
    """Keys compare the way the server compares them: case- and trailing-space-insensitively for *_ci."""
    if isinstance(value, str) and column.case_insensitive:
        return value.rstrip(" ").casefold()
    return value


_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint"})
_TEXT_TYPES = frozenset({"char", "varchar", "text", "tinytext", "mediumtext", "longtext", "enum"})


def value_converter(column: Column) -> Callable[[Any], Any]:
    """:func:`normalize_value` for one column, with a fast path for the value class it usually gets.

    Each fast path returns exactly what :func:`normalize_value` would for that class (the unit tests
    compare them); anything else takes the general route."""
    general = partial(normalize_value, column)
    t = column.data_type
    if t in _INTEGER_TYPES:
        return lambda v: v if v.__class__ is int else general(v)
    if t in _TEXT_TYPES:
        return lambda v: v if v.__class__ is str else general(v)
    if t in ("datetime", "timestamp"):
        return lambda v: v.isoformat(sep=" ") if v.__class__ is dt.datetime else general(v)
    if t == "date":
        return lambda v: v.isoformat() if v.__class__ is dt.date else general(v)
    if t in ("decimal", "numeric"):
        return lambda v: str(v) if v.__class__ is Decimal else general(v)
    return general


_BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})


def normalize_value(column: Column, value: Any) -> Any:
    """One canonical, JSON-serialisable form per MySQL/MariaDB type (documented in the README).

    PyMySQL (chunks) and python-mysql-replication 1.0.17 (binlog) disagree on these, measured on
    MySQL 8.0 and MariaDB 10.11; each rule makes both sides equal:

    * JSON: text is parsed; the binlog's decoded MySQL binary JSON has ``bytes`` keys and strings
      (decoded as UTF-8) and ``Decimal`` numbers (read back as the text would be: ``1.50`` -> 1.5).
    * SET: a sorted list of members (text ``'x,z'`` or a Python set).
    * BIT: an int (bytes big-endian from PyMySQL, a ``'0101'`` string from the binlog).
    * Binary strings: base64 text (an empty one comes from the binlog as ``''``); BINARY(n) padded
      with zero bytes to n first (the binlog drops trailing zeros).
    * FLOAT: six significant digits, as both servers print it (the binlog gives the stored float32
      widened to a double, ``1.100000023841858``, ``123456792.0``; PyMySQL ``1.1``, ``123457000.0``).
    * YEAR: 0 for ``0000`` (the binlog library reads it as 1900, which YEAR cannot hold).
    * DATE/DATETIME/TIMESTAMP: None for zero or invalid dates (PyMySQL returns them as text, the
      binlog library as None). TIMESTAMPs are compared in UTC: snapshot sessions use ``+00:00``.
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
        return str(Decimal(value)) if not isinstance(value, Decimal) else str(value)
    if t in _BINARY_TYPES:
        if isinstance(value, str):  # the binlog library hands an empty binary value over as ''
            value = value.encode("utf-8", errors="surrogateescape")
        width = _declared_length(column.column_type) if t == "binary" else None
        if width is not None and len(value) < width:
            value = bytes(value) + b"\0" * (width - len(value))
        return _plain(value)
    if t == "float" and isinstance(value, float | int):
        return _float_as_server_prints(float(value))
    if t in ("char", "varchar", "text", "tinytext", "mediumtext", "longtext", "enum") and isinstance(
        value, bytes | bytearray
    ):
        return value.decode("utf-8", errors="surrogateescape")
    if t in ("year",):
        year = int(value)
        return 0 if year == 1900 else year
    if t in ("date", "datetime", "timestamp") and isinstance(value, str | bytes | bytearray):
        return None
    return _plain(value)


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
    return _plain(value)


def _declared_length(column_type: str) -> int | None:
    """``n`` of ``binary(n)``; None when the type has no length."""
    open_at, close_at = column_type.find("("), column_type.find(")")
    if open_at < 0 or close_at < open_at:
        return None
    try:
        return int(column_type[open_at + 1 : close_at])
    except ValueError:
        return None


def _float_as_server_prints(value: float) -> float:
    """FLOAT as both servers print it (six significant digits, FLT_DIG), without a negative zero."""
    if math.isnan(value) or math.isinf(value):
        return value
    return float(f"{value:.6g}") + 0.0


def _plain(value: Any) -> Any:
    """Python values that JSON has no type for, as text a consumer can parse back."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _format_time(value)
    if isinstance(value, dt.time):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return "base64:" + base64.b64encode(bytes(value)).decode()
    if isinstance(value, set | frozenset):
        return sorted(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _format_time(delta: dt.timedelta) -> str:
    """MySQL TIME (may be negative or above 24 h) as ``[-]HH:MM:SS[.ffffff]``."""
    sign = "-" if delta < dt.timedelta(0) else ""
    delta = abs(delta)
    seconds = delta.days * 86400 + delta.seconds
    text = f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{text}.{delta.microseconds:06d}" if delta.microseconds else text
