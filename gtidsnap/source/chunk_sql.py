"""Keyset SQL for chunked snapshots: pure text builders, no I/O.

A chunk is ``lower < key <= upper`` in key order, at most ``limit`` rows. The comparisons are written
in SQL and done by the server, so a ``*_ci`` or PAD SPACE collation orders and bounds keys exactly as
the table's index does; the engine never compares raw key values itself.

Composite keys use row-value comparisons, ``(`a`,`b`) > (%s,%s)``, which are exact. Neither MySQL 8.0
nor MariaDB 10.11 turns a row-value comparison into an index range (measured: a 10-row chunk read the
index from its start), so a redundant bound on the leading column is added, ``AND `a` >= %s``; with it
the server seeks straight to the chunk.

The SQL returned is a PyMySQL format string: parameters are ``%s`` and any literal ``%`` (in a
condition such as ``name LIKE 'a%'`` or in an odd identifier) is doubled; always pass ``params`` to
``cursor.execute`` even when the list is empty.

A filter (``region = 'EU'``) goes in only as :func:`gtidsnap.filters.check.check_filter` renders it for the
table's columns: whatever reaches a chunk SELECT has passed that check here, wherever it came from.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gtidsnap.core.column_values import format_time
from gtidsnap.core.errors import SchemaError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.core.row_hash import NULL_TEXT, SEPARATOR, kind_of
from gtidsnap.core.schema import Column, TableSchema

Params = list[Any]

# Key column types the keyset walk cannot bound correctly: ORDER BY sorts ENUM/SET by their index but
# `col > 'x'` compares the text, and a FLOAT read back as a Python float is not equal to the stored
# single-precision value, so the last row of a chunk would be selected again forever.
UNSUPPORTED_KEY_TYPES = frozenset({"enum", "set", "float"})


def _ident(name: str) -> str:
    """A quoted identifier safe inside a PyMySQL format string."""
    return quote_ident(name).replace("%", "%%")


def _table(schema: TableSchema) -> str:
    return f"{_ident(schema.table.schema)}.{_ident(schema.table.name)}"


@functools.lru_cache(maxsize=256)
def _filter_sql(condition: str, table: TableId, columns: tuple[str, ...]) -> str:
    """The filter as it runs (checked, re-rendered, ``%`` doubled for PyMySQL); FilterError if refused.
    sqlglot is imported here, by the first filter: a chunk reader without one never loads its ~8 MB."""
    from gtidsnap.filters.check import check_filter

    return check_filter(condition, table, columns).replace("%", "%%")


def _where_filter(schema: TableSchema, condition: str) -> str:
    return f"({_filter_sql(condition, schema.table, tuple(c.name for c in schema.columns))})"


def unsupported_key_columns(schema: TableSchema) -> tuple[str, ...]:
    """Key columns whose type the keyset walk cannot bound (see ``UNSUPPORTED_KEY_TYPES``)."""
    return tuple(c.name for c in schema.key_columns if c.data_type in UNSUPPORTED_KEY_TYPES)


def _check_key(schema: TableSchema) -> None:
    if not schema.key:
        raise SchemaError(f"table {schema.table} has no key columns to chunk by")
    bad = [schema.column(n) for n in unsupported_key_columns(schema)]
    if bad:
        raise SchemaError(
            f"table {schema.table} cannot be chunked by key column(s) "
            f"{', '.join(f'{c.name} ({c.data_type.upper()})' for c in bad)} "
            f"(ENUM, SET and FLOAT keys do not order and compare alike); configure a surrogate key"
        )


def _bit_number(value: Any) -> Any:
    """BIT as a number: MariaDB compares a BIT column with a binary string by the string's numeric
    value (``_binary'\\x05'`` is 0), so the raw bytes PyMySQL returns must not go back as they are."""
    return int.from_bytes(value, "big") if isinstance(value, bytes | bytearray) else value


def _time_literal(value: Any) -> Any:
    """TIME as its text: PyMySQL 1.x escapes a negative ``timedelta`` wrongly (-1 s as ``-1:59:59``)."""
    return format_time(value) if isinstance(value, dt.timedelta) else value


def _exact_decimal(value: Any) -> Any:
    """DECIMAL as a ``Decimal``, which PyMySQL writes as an exact numeric literal; text or a float
    would be compared as a double and could not tell 1E-30 from 0."""
    if isinstance(value, Decimal) or value is None:
        return value
    return Decimal(str(value))


@dataclass(frozen=True)
class KeyBind:
    """How a bound value of one key column goes into the chunk SELECT: its SQL placeholder and the
    parameter a raw key value (as PyMySQL returned it, or as a checkpoint stored it) becomes."""

    placeholder: str
    param: Callable[[Any], Any]


_PARAMS: dict[str, Callable[[Any], Any]] = {
    "bit": _bit_number,
    "time": _time_literal,
    "decimal": _exact_decimal,
    "numeric": _exact_decimal,
}
_CASTS = {"date": "DATE", "datetime": "DATETIME", "timestamp": "DATETIME", "time": "TIME"}


def key_binder(column: Column) -> KeyBind:
    """How ``column``'s bounds are bound so the server compares them exactly as it compares the key.

    DATE/DATETIME/TIMESTAMP/TIME bounds are typed with a CAST to the column's type and precision:
    inside a row-value comparison MySQL 8.0 compared a TIME column with a text as text (measured:
    ``(a, t) > (1, '-838:59:59')`` kept the row with t = -838:59:59, so a composite key holding a TIME
    repeated its chunk for ever); every temporal bound is typed alike, zero and invalid dates included
    (the chunk SELECT's sql_mode accepts them, see ``BOUNDS_MODE``), and the range plans are the same
    as with text. BIT binds as a number, TIME as its text, DECIMAL as a
    ``Decimal`` (see the helpers above). Every other type binds as PyMySQL escapes it: integers and
    YEAR as numbers, DOUBLE as its shortest exact literal (``repr`` plus ``e0``), strings, UUID and INET
    (their text) as strings compared in the column's type and collation, binary and MariaDB spatial
    values as binary literals compared byte by byte."""
    param = _PARAMS.get(column.data_type, _as_is)
    cast = _CASTS.get(column.data_type)
    if cast is None:
        return KeyBind("%s", param)
    if cast != "DATE":
        cast += f"({_fraction_digits(column.column_type)})"
    return KeyBind(f"CAST(%s AS {cast})", param)


def _fraction_digits(column_type: str) -> int:
    """``n`` of ``datetime(n)``/``time(n)``; 0 when the type has no precision."""
    match = re.search(r"\((\d)\)", column_type)
    return int(match.group(1)) if match else 0


def _as_is(value: Any) -> Any:
    return value


# The chunk SELECT compares its bounds under an sql_mode that accepts every value a key column can
# hold. MySQL 8.0's default (strict, NO_ZERO_DATE, NO_ZERO_IN_DATE) rejects a bound of '0000-00-00' or
# '2024-00-10' with error 1525 although the table holds it (and CASTs it to NULL); ALLOW_INVALID_DATES
# alone accepts them (measured: every zero and invalid DATE/DATETIME/TIMESTAMP bound, alone or in a
# row-value comparison, selects exactly the rows after it).
# Only this statement's evaluation changes (MySQL's SET_VAR hint; the text was parsed in the session's
# mode). MariaDB takes the hint for a comment and accepts such bounds even in a strict session.
BOUNDS_MODE = "/*+ SET_VAR(sql_mode = 'ALLOW_INVALID_DATES') */ "


def _bound(schema: TableSchema, op: str, values: Sequence[Any]) -> tuple[str, Params]:
    """``key <op> values``, as a row-value comparison plus a leading-column range for composite keys;
    each value bound by :func:`key_binder` of its column."""
    if len(values) != len(schema.key):
        raise ValueError(
            f"bound {tuple(values)!r} has {len(values)} value(s); "
            f"the key of {schema.table} has {len(schema.key)}"
        )
    binds = [key_binder(c) for c in schema.key_columns]
    bound = [b.param(v) for b, v in zip(binds, values, strict=True)]
    marks = [b.placeholder for b in binds]
    cols = [_ident(n) for n in schema.key]
    if len(cols) == 1:
        return f"{cols[0]} {op} {marks[0]}", bound
    lead_op = op if "=" in op else op + "="
    row = f"({', '.join(cols)}) {op} ({', '.join(marks)})"
    return f"{cols[0]} {lead_op} {marks[0]} AND {row}", [bound[0], *bound]


def chunk_query(
    schema: TableSchema,
    after: Sequence[Any] | None,
    upto: Sequence[Any],
    limit: int | None,
    condition: str | None = None,
) -> tuple[str, Params]:
    """The next chunk: every column of rows with ``after < key <= upto`` (no lower bound when
    ``after`` is None) matching ``condition``, in key order, at most ``limit`` rows (None: the whole
    range, as a parallel reader reads a range whose end :func:`chunk_end_query` found)."""
    if limit is not None and limit < 1:
        raise ValueError(f"chunk size must be at least 1, not {limit}")
    where, params = _range_where(schema, after, upto, condition)
    columns = ", ".join(_ident(c.name) for c in schema.columns)
    order = ", ".join(_ident(n) for n in schema.key)
    sql = f"SELECT {BOUNDS_MODE}{columns} FROM {_table(schema)} WHERE {where} ORDER BY {order}"
    return (sql if limit is None else f"{sql} LIMIT {int(limit)}"), params


def keys_query(schema: TableSchema, keys: Sequence[Sequence[Any]]) -> tuple[str, Params]:
    """Every column of the rows with one of ``keys`` (each bound by :func:`key_binder`), in key order:
    the rows ``gtidsnap verify`` reads again."""
    if not keys:
        raise ValueError("keys_query needs at least one key")
    parts, params = [], []
    for key in keys:
        sql, p = _bound(schema, "=", key)
        parts.append(f"({sql})")
        params += p
    columns = ", ".join(_ident(c.name) for c in schema.columns)
    order = ", ".join(_ident(n) for n in schema.key)
    where = " OR ".join(parts)
    return f"SELECT {BOUNDS_MODE}{columns} FROM {_table(schema)} WHERE {where} ORDER BY {order}", params


_HASHED_SQL = {
    "number": "CAST({c} AS CHAR)",
    "text": "CONVERT({c} USING utf8mb4)",
    "set": "CONVERT({c} USING utf8mb4)",
    "bytes": "HEX({c})",
    "date": "DATE_FORMAT({c}, '%%Y-%%m-%%d')",
    "moment": "DATE_FORMAT({c}, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')",
}


def range_hash_query(
    schema: TableSchema, after: Sequence[Any] | None, upto: Sequence[Any]
) -> tuple[str, Params]:
    """The row count and the XOR of each row's CRC32 over ``after < key <= upto``, each row written as
    :mod:`gtidsnap.core.row_hash` says (the same text Spark writes over the mirror)."""
    parts = []
    for column in schema.columns:
        kind = kind_of(column)
        if kind is None:
            raise ValueError(f"column {column.name} ({column.column_type}) has no hashed text")
        parts.append(f"COALESCE({_HASHED_SQL[kind].format(c=_ident(column.name))}, %s)")
    where, params = _range_where(schema, after, upto, None)
    row = f"CRC32(CONCAT_WS(%s, {', '.join(parts)}))"
    sql = f"SELECT {BOUNDS_MODE}COUNT(*), COALESCE(BIT_XOR({row}), 0) FROM {_table(schema)} WHERE {where}"
    return sql, [SEPARATOR, *([NULL_TEXT] * len(parts)), *params]


def chunk_ends_query(
    schema: TableSchema,
    after: Sequence[Any] | None,
    upto: Sequence[Any],
    size: int,
    count: int,
    condition: str | None = None,
) -> tuple[str, Params]:
    """The keys of the ``size``-th, ``2 * size``-th, ... ``count * size``-th rows after ``after`` (up to
    ``upto``): where the next ``count`` chunks of ``size`` rows end, in key order, fewer when fewer rows
    remain. Only key columns cross the wire, ``count`` at most, so the engine plans ranges for parallel
    readers with one round trip for several chunks.

    The innermost SELECT is the keyset walk itself, bounded by its LIMIT (the server reads at most
    ``count * size`` index entries); the row numbers are taken over that result only (a window function
    beside the LIMIT would number the whole rest of the table first). MySQL 8.0 and MariaDB 10.2 and
    later have ``ROW_NUMBER``; the derived tables keep the key columns' types and collations, so the
    numbering follows the index's order."""
    if size < 1 or count < 1:
        raise ValueError(f"chunk size and count must be at least 1, not {size} and {count}")
    where, params = _range_where(schema, after, upto, condition)
    key = ", ".join(_ident(n) for n in schema.key)
    number = _ident(_free_name("gtidsnap_row", schema.key))
    keys = f"SELECT {key} FROM {_table(schema)} WHERE {where} ORDER BY {key} LIMIT {int(size) * int(count)}"
    numbered = f"SELECT {key}, ROW_NUMBER() OVER (ORDER BY {key}) AS {number} FROM ({keys}) AS gtidsnap_keys"
    sql = (
        f"SELECT {BOUNDS_MODE}{key} FROM ({numbered}) AS gtidsnap_ends "
        f"WHERE MOD({number}, {int(size)}) = 0 ORDER BY {number}"
    )
    return sql, params


def _free_name(name: str, taken: Sequence[str]) -> str:
    """``name``, with underscores added until no column of ``taken`` has it (case-insensitively)."""
    lowered = {t.lower() for t in taken}
    while name.lower() in lowered:
        name += "_"
    return name


def _range_where(
    schema: TableSchema, after: Sequence[Any] | None, upto: Sequence[Any], condition: str | None
) -> tuple[str, Params]:
    """``after < key <= upto AND condition``, with each bound bound by its column's binder."""
    _check_key(schema)
    where: list[str] = []
    params: Params = []
    if after is not None:
        sql, p = _bound(schema, ">", after)
        where.append(sql)
        params += p
    sql, p = _bound(schema, "<=", upto)
    where.append(sql)
    params += p
    if condition is not None:
        where.append(_where_filter(schema, condition))
    return " AND ".join(where), params


def max_key_query(schema: TableSchema, condition: str | None = None) -> tuple[str, Params]:
    """The greatest key (of rows matching ``condition``): the snapshot's upper bound, captured once."""
    _check_key(schema)
    key = ", ".join(_ident(n) for n in schema.key)
    order = ", ".join(f"{_ident(n)} DESC" for n in schema.key)
    where = f" WHERE {_where_filter(schema, condition)}" if condition is not None else ""
    return f"SELECT {key} FROM {_table(schema)}{where} ORDER BY {order} LIMIT 1", []
