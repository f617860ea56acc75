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
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
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

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(self.column(n) for n in self.key)

    def normalize_row(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Canonical values for every known column; unknown names (a DDL in flight) pass as they are."""
        by_name = {c.name: c for c in self.columns}
        return {
            name: normalize_value(by_name[name], value) if name in by_name else _plain(value)
            for name, value in raw.items()
        }

    def key_of(self, row: Row) -> Key:
        """The key of a normalised row, folded by collation so equal keys compare equal."""
        return tuple(fold_key_value(c, row[c.name]) for c in self.key_columns)


def fold_key_value(column: Column, value: Any) -> Any:
    """Keys compare the way the server compares them: case- and trailing-space-insensitively for *_ci."""
    if isinstance(value, str) and column.case_insensitive:
        return value.rstrip(" ").casefold()
    return value


def normalize_value(column: Column, value: Any) -> Any:
    """One canonical, JSON-serialisable form per MySQL/MariaDB type (documented in the README)."""
    if value is None:
        return None
    t = column.data_type
    if t == "json":
        if isinstance(value, bytes | bytearray):
            value = value.decode()
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return _plain(value)
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
    if t in ("char", "varchar", "text", "tinytext", "mediumtext", "longtext", "enum") and isinstance(
        value, bytes | bytearray
    ):
        return value.decode("utf-8", errors="surrogateescape")
    if t in ("year",):
        return int(value)
    return _plain(value)


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
