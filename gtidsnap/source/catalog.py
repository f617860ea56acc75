"""Table shapes as the replica's catalog (``information_schema``) describes them.

Kept apart from the connection (:mod:`gtidsnap.source.replica`), which only lends its query function: here is
the catalog SQL, written once for both its readers, :meth:`Catalog.schema` (the :class:`TableSchema` a
table is snapshotted and decoded by, refused when it cannot be chunked) and :meth:`Catalog.table_facts`
(what :mod:`gtidsnap.source.preflight` judges of each requested table); and the server's estimate of
a table's row size, :meth:`Catalog.avg_row_length`, which bounds a snapshot's chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gtidsnap.core.errors import SchemaError
from gtidsnap.core.model import SYSTEM_SCHEMAS, TableId
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.source.chunk_sql import unsupported_key_columns
from gtidsnap.source.preflight import TableFacts

# Runs one read: SQL, parameters, what it is for (for error messages); rows as column name -> value.
Dicts = Callable[[str, Sequence[Any], str], list[dict[str, Any]]]


def as_text(value: Any) -> str:
    """information_schema may return bytes for some columns (MySQL 8 with binary collations)."""
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _matching(tables: Sequence[TableId]) -> tuple[str, list[str]]:
    """A condition matching exactly ``tables`` by TABLE_SCHEMA and TABLE_NAME, and its parameters."""
    match = " OR ".join(["(TABLE_SCHEMA = %s AND TABLE_NAME = %s)"] * len(tables))
    return match, [v for t in tables for v in (t.schema, t.name)]


class Catalog:
    """Reads table lists and shapes through ``dicts``; ``where`` names the replica in messages."""

    def __init__(self, dicts: Dicts, where: str) -> None:
        self._dicts = dicts
        self._where = where

    def tables(self) -> list[TableId]:
        """Every base table outside the system schemas, sorted (for resolving table patterns)."""
        rows = self._dicts(
            "SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t FROM information_schema.TABLES "
            "WHERE TABLE_TYPE IN ('BASE TABLE', 'SYSTEM VERSIONED') "
            f"AND TABLE_SCHEMA NOT IN ({', '.join(['%s'] * len(SYSTEM_SCHEMAS))})",
            sorted(SYSTEM_SCHEMAS),
            "listing tables",
        )
        return sorted(TableId(str(r["s"]), str(r["t"])) for r in rows)

    def _columns(self, tables: Sequence[TableId]) -> dict[TableId, list[Column]]:
        if not tables:
            return {}
        match, params = _matching(tables)
        rows = self._dicts(
            "SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t, COLUMN_NAME AS name, DATA_TYPE AS data_type, "
            "COLUMN_TYPE AS column_type, IS_NULLABLE AS nullable, COLLATION_NAME AS collation "
            f"FROM information_schema.COLUMNS WHERE {match} ORDER BY s, t, ORDINAL_POSITION",
            params,
            "reading column definitions",
        )
        out: dict[TableId, list[Column]] = {}
        for r in rows:
            out.setdefault(TableId(as_text(r["s"]), as_text(r["t"])), []).append(
                Column(
                    name=as_text(r["name"]),
                    data_type=as_text(r["data_type"]).lower(),
                    column_type=as_text(r["column_type"]),
                    nullable=as_text(r["nullable"]).upper() == "YES",
                    collation=as_text(r["collation"]) if r["collation"] is not None else None,
                )
            )
        return out

    def _kinds(self, tables: Sequence[TableId]) -> dict[TableId, str]:
        """TABLE_TYPE per existing table: BASE TABLE, VIEW, SYSTEM VERSIONED, SEQUENCE, ..."""
        if not tables:
            return {}
        match, params = _matching(tables)
        rows = self._dicts(
            f"SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t, TABLE_TYPE AS k FROM information_schema.TABLES "
            f"WHERE {match}",
            params,
            "reading table types",
        )
        return {TableId(as_text(r["s"]), as_text(r["t"])): as_text(r["k"]) for r in rows}

    def avg_row_length(self, table: TableId) -> int | None:
        """The server's estimate of a row's bytes in ``table``: ``information_schema.TABLES``'s
        ``AVG_ROW_LENGTH`` (InnoDB: the clustered index's pages over its estimated row count, both from
        sampled statistics; visible with SELECT on the table). None when there is none: 0 (an empty or
        new table, statistics not taken yet), NULL, or no such table."""
        return self._table_statistic(table, "AVG_ROW_LENGTH", "the average row length") or None

    def estimated_rows(self, table: TableId) -> int | None:
        """The server's estimate of ``table``'s rows (``TABLE_ROWS``: InnoDB's is sampled, often off by
        tens of percent), for a snapshot's progress and ETA; None when there is none."""
        return self._table_statistic(table, "TABLE_ROWS", "the estimated row count")

    def _table_statistic(self, table: TableId, column: str, what: str) -> int | None:
        """One number column of ``information_schema.TABLES`` for ``table`` (None: NULL or no such table)."""
        match, params = _matching([table])
        rows = self._dicts(
            f"SELECT {column} AS n FROM information_schema.TABLES WHERE {match}",
            params,
            f"reading {what} of {table}",
        )
        return int(as_text(rows[0]["n"])) if rows and rows[0]["n"] is not None else None

    def _primary_keys(self, tables: Sequence[TableId]) -> dict[TableId, tuple[str, ...]]:
        if not tables:
            return {}
        match, params = _matching(tables)
        rows = self._dicts(
            "SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t, COLUMN_NAME AS name "
            f"FROM information_schema.STATISTICS WHERE INDEX_NAME = 'PRIMARY' AND ({match}) "
            "ORDER BY s, t, SEQ_IN_INDEX",
            params,
            "reading primary keys",
        )
        out: dict[TableId, list[str]] = {}
        for r in rows:
            out.setdefault(TableId(as_text(r["s"]), as_text(r["t"])), []).append(as_text(r["name"]))
        return {t: tuple(cols) for t, cols in out.items()}

    def table_facts(self, tables: Sequence[TableId]) -> dict[TableId, TableFacts]:
        """Existence, columns, primary key and kind of each of ``tables``, in three queries."""
        columns = self._columns(tables)
        keys = self._primary_keys(tables)
        kinds = self._kinds(tables)
        return {
            t: TableFacts(
                t in columns, tuple(columns.get(t, ())), keys.get(t, ()), kinds.get(t, "BASE TABLE")
            )
            for t in tables
        }

    def schema(self, table: TableId, surrogate_key: tuple[str, ...] | None = None) -> TableSchema:
        """Columns in ordinal order and the key to chunk by: the primary key, or ``surrogate_key``."""
        where = self._where
        if table.schema.lower() in SYSTEM_SCHEMAS:
            raise SchemaError(
                f"{table} is in the system schema {table.schema}, which gtidsnap does not capture"
            )
        columns = self._columns([table]).get(table)
        if not columns:
            raise SchemaError(f"table {table} does not exist on the replica '{where}'")
        if self._kinds([table]).get(table) == "VIEW":
            raise SchemaError(
                f"{table} is a view on the replica '{where}': gtidsnap captures base tables (a view has no "
                "rows of its own in the binlog); capture the tables it reads"
            )
        names = {c.name for c in columns}
        if surrogate_key:
            missing = [c for c in surrogate_key if c not in names]
            if missing:
                raise SchemaError(
                    f"surrogate key column(s) {', '.join(missing)} of table {table} do not exist on the "
                    f"replica '{where}'; its columns are {', '.join(c.name for c in columns)}"
                )
            nullable = [c.name for c in columns if c.name in surrogate_key and c.nullable]
            if nullable:
                raise SchemaError(
                    f"surrogate key column(s) {', '.join(nullable)} of table {table} are nullable; rows "
                    "with a NULL key would never be selected: configure NOT NULL columns"
                )
            key = tuple(surrogate_key)
        else:
            key = self._primary_keys([table]).get(table, ())
            if not key:
                raise SchemaError(
                    f"table {table} has no primary key on the replica '{where}': add one, or configure "
                    "a surrogate key for it (a unique NOT NULL column set)"
                )
        result = TableSchema(table, tuple(columns), key)
        bad = unsupported_key_columns(result)
        if bad:
            raise SchemaError(
                f"table {table} is keyed by ENUM/SET/FLOAT column(s) {', '.join(bad)}, which do not sort "
                "and compare alike: configure a surrogate key of other columns"
            )
        return result
