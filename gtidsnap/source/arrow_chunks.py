"""A chunk's rows read into Arrow by a compiled client: connectorx's boundary, and the only module that
imports it.

PyMySQL and our result-row parser cost a reader 4-6 µs a row; connectorx (Rust) reads the same keyset
chunks into Arrow at 0.6-0.8 µs a row with chunks of 10k-100k rows (``docs/design.md``, "Reading chunks at
the speed of the wire"). It is used only where it reads every value exactly as the Python path
normalises it (:data:`EXACT_TYPES`; measured type by type on both servers): a table with any other column
type, a key that is not integers, a connection with TLS, or another connectorx version than the tested
one keeps the Python path, with one INFO line naming why. A chunk connectorx refuses (a zero date, which
it cannot represent, panics it) is read by the Python path too; nothing is ever read half one way.

The reader's own PyMySQL session keeps the window's rules: it waits until ``lw`` is visible before the
SELECT and reads ``hw`` after it, and it renders the SELECT's text
(:func:`gtidsnap.source.chunk_sql.chunk_query` with its own escaping), so a filter reaches connectorx only
as checked SQL. connectorx opens a connection of the same account per query (it has no kept
connection); that costs ~1 ms, which chunks of 10k rows and more make small.
"""

from __future__ import annotations

import logging
import re
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from urllib.parse import quote

from gtidsnap.core.column_values import INTEGER_TYPES
from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.source.connection import ConnectionSettings, TlsMode

log = logging.getLogger(__name__)

TESTED_VERSION = "0.4.6"
# Column types connectorx reads to exactly the value the Python path's normal form makes (as Delta
# columns): not FLOAT (the normal form is the server's 6-digit text, connectorx has every bit), TIME
# (it panics past 24 h), TIMESTAMP (read in the server's zone, not the session's UTC), BIT, SET, JSON,
# MariaDB's UUID/INET (other forms than the normal one), spatial types.
EXACT_TYPES = INTEGER_TYPES | frozenset(
    {
        "double",
        "real",
        "decimal",
        "numeric",
        "year",
        "date",
        "datetime",
        "char",
        "varchar",
        "tinytext",
        "text",
        "mediumtext",
        "longtext",
        "enum",
        "binary",
        "varbinary",
        "tinyblob",
        "blob",
        "mediumblob",
        "longblob",
    }
)
# connectorx reads DECIMAL as decimal128(38, 10) through a 96-bit decimal: digits past the 10th decimal
# are dropped without a word, and more than 28 digits panic it.
MAX_DECIMAL_SCALE = 10
MAX_DECIMAL_DIGITS = 28


def _decimal_bounds(column: Column) -> tuple[int, int]:
    found = re.search(r"\((\d+)\s*(?:,\s*(\d+))?\)", column.column_type)
    if not found:
        return 10, 0
    return int(found.group(1)), int(found.group(2) or 0)


def column_refusal(column: Column) -> str | None:
    """Why connectorx cannot read ``column`` exactly (None: it can)."""
    kind = column.data_type.lower()
    if kind not in EXACT_TYPES:
        return f"column {column.name} is {column.column_type}"
    if kind in ("decimal", "numeric"):
        digits, scale = _decimal_bounds(column)
        if scale > MAX_DECIMAL_SCALE or digits > MAX_DECIMAL_DIGITS:
            return f"column {column.name} is {column.column_type} (at most 28 digits, 10 decimals)"
    return None


def table_refusal(schema: TableSchema) -> str | None:
    """Why the compiled read cannot serve ``schema``'s chunks (None: it can)."""
    for column in schema.key_columns:
        if column.data_type.lower() not in INTEGER_TYPES:
            return f"key column {column.name} is {column.column_type} (integer keys only)"
    for column in schema.columns:
        found = column_refusal(column)
        if found is not None:
            return found
    return None


@cache
def installed_version() -> str | None:
    try:
        return version("connectorx")
    except PackageNotFoundError:
        return None


def connection_refusal(settings: ConnectionSettings) -> str | None:
    """Why the compiled read cannot serve chunks over ``settings`` (None: it can)."""
    found = installed_version()
    if found is None:
        return "connectorx is not installed"
    if found != TESTED_VERSION:
        return f"connectorx {found} is installed, {TESTED_VERSION} is the version tested"
    if settings.tls is not TlsMode.DISABLED:
        return f"TLS is {settings.tls.value} (the compiled read speaks plain TCP only)"
    return None


def connection_uri(settings: ConnectionSettings, database: str) -> str:
    """connectorx's address for ``settings``: every part quoted, the password included (never logged)."""
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    user, password = quote(settings.user, safe=""), quote(settings.password.reveal(), safe="")
    return f"mysql://{user}:{password}@{host}:{settings.port}/{quote(database, safe='')}"


class CompiledChunks:
    """One reader's compiled chunk reads on one replica. :meth:`read` gives a chunk's columns, or None
    where the Python path must read it; each reason is logged once per table."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        self._refusal = connection_refusal(settings)
        self._said: set[TableId] = set()

    def serves(self, schema: TableSchema) -> bool:
        """Does the compiled read serve ``schema``'s chunks? (Says why not once per table.)"""
        why = self._refusal or table_refusal(schema)
        if why is not None:
            self._say(schema.table, f"{schema.table} is read by the Python path: {why}")
        return why is None

    def read(self, schema: TableSchema, sql: str) -> Any | None:
        """The rows of ``sql`` (a chunk SELECT of every column of ``schema``, in order) as a
        ``pyarrow.Table``; None when connectorx refuses them."""
        import connectorx

        try:
            table = connectorx.read_sql(
                connection_uri(self.settings, schema.table.schema), sql, return_type="arrow"
            )
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # a Rust panic is a BaseException (PanicException)
            text = str(exc).replace(self.settings.password.reveal() or "\0", "***")
            self._say(schema.table, f"a chunk of {schema.table} is read by the Python path: {text[:300]}")
            return None
        if table.num_columns != len(schema.columns):
            self._say(schema.table, f"{schema.table}: connectorx returned {table.num_columns} columns")
            return None
        return table

    def _say(self, table: TableId, line: str) -> None:
        if table not in self._said:
            self._said.add(table)
            log.info("%s", line)
