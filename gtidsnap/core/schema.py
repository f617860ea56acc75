"""A captured table's shape: its columns, its key, and keys folded as the server compares them.

:meth:`TableSchema.normalize_row` makes a row canonical, one value at a time
(:mod:`gtidsnap.core.column_values`: the same stored value from PyMySQL and from the binlog becomes one
value), and :meth:`TableSchema.key_of` derives the primary key from it, folded the way the column's
collation compares (so ``'ABC'`` and ``'abc'`` are one key under ``*_ci``).

A key is the same canonical value, text folded as the collation compares it: case-folded under
``*_ci``, trailing spaces dropped only where the collation pads (not under NO PAD: MySQL 8.0's
``*_0900_*`` default, MariaDB's ``*_nopad_*``). ENUM, SET and FLOAT keys are refused
(:mod:`gtidsnap.source.chunk_sql`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import Any, cast

from gtidsnap.core.column_values import plain_value, value_converter
from gtidsnap.core.model import Key, Row, TableId


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

    @property
    def pads(self) -> bool:
        """Does the collation compare with trailing spaces ignored (PAD SPACE)? MySQL's ``*_0900_*``
        and MariaDB's ``*_nopad_*`` collations do not: ``'a'`` and ``'a '`` are two keys there."""
        name = (self.collation or "").lower()
        return bool(name) and "_0900_" not in name and "nopad" not in name


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
        converters = self.converters
        return {
            name: converters.get(name, plain_value)(value) for name, value in zip(names, values, strict=True)
        }

    @cached_property
    def converters(self) -> dict[str, Callable[[Any], Any]]:
        """One converter per column, chosen once: most values then need no per-value type dispatch
        (a name not in it, a column the shape does not know yet, takes ``plain_value``)."""
        return {c.name: value_converter(c) for c in self.columns}

    def key_of(self, row: Row) -> Key:
        """The key of a normalised row, folded by collation so equal keys compare equal."""
        return self._key_reader(row)

    @cached_property
    def _key_reader(self) -> Callable[[Row], Key]:
        """:meth:`key_of`, chosen once: a key without case-insensitive columns folds nothing, and is
        read with one ``itemgetter`` (it runs for every image the stream reads)."""
        columns = self.key_columns
        if any(c.case_insensitive for c in columns):
            return lambda row: tuple(fold_key_value(c, row[c.name]) for c in columns)
        if len(columns) == 1:
            name = columns[0].name
            return lambda row: (row[name],)
        return cast(Callable[[Row], Key], itemgetter(*(c.name for c in columns)))


def fold_key_value(column: Column, value: Any) -> Any:
    """Keys compare the way the server compares them: case-insensitively under ``*_ci``, and without
    trailing spaces where the collation pads (never under NO PAD: ``'a'`` and ``'a '`` differ there)."""
    if isinstance(value, str) and column.case_insensitive:
        return (value.rstrip(" ") if column.pads else value).casefold()
    return value
