"""The replica as gtidsnap reads it: executed GTID set, table schemas, keyset chunks, preflight facts.

A thin PyMySQL shell around the pure pieces (:mod:`gtidsnap.source.chunk_sql`,
:mod:`gtidsnap.source.preflight`,
:mod:`gtidsnap.core.schema`); table shapes are read by :mod:`gtidsnap.source.catalog` through its queries. It
only ever reads: autocommit is on, so every statement is its own transaction and no snapshot, row lock
or metadata lock outlives it (a held metadata lock would stall the replica's SQL thread on the next
DDL). The session time zone is UTC so TIMESTAMP values (and keys) are unambiguous across DST changes.

Every statement is bounded by the server: the session's ``max_statement_time`` (MariaDB) or
``max_execution_time`` (MySQL, SELECTs) is ``source.statement_timeout_s``, so a slow filter or a huge scan
cannot hold the engine (and with it the binlog) for longer; the client's read timeout sits 30 s above it
as a backstop.

Reads survive one lost connection (errors 2006/2013/2055): the connection is opened again and the
statement, a plain SELECT, is repeated. Anything else becomes one of our errors, naming the replica by
:meth:`ConnectionSettings.describe` (never the password): an error the server gives for one statement
(it refused it, or stopped it at the time limit) is a :class:`QueryError`, which fails one table's
snapshot and nothing else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import Any, Self, TypeVar

import pymysql
import pymysql.cursors
from pymysql.connections import MySQLResult
from pymysql.protocol import MysqlPacket

from gtidsnap.core.errors import PrerequisiteError, QueryError, SchemaError, SourceError
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.model import Flavor, TableId
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.arrow_chunks import CompiledChunks
from gtidsnap.source.binlog.library import library_gate
from gtidsnap.source.catalog import Catalog, as_text
from gtidsnap.source.chunk_sql import (
    chunk_ends_query,
    chunk_query,
    keys_query,
    max_key_query,
    range_hash_query,
)
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.preflight import (
    RELEVANT_VARIABLES,
    Problem,
    ReplicaFacts,
    find_problems,
    strip_password,
)
from gtidsnap.source.result_rows import (
    ChunkResult,
    FieldConverter,
    ParseRow,
    build_row_parser,
    read_result_rows,
)
from gtidsnap.source.server_errors import Meaning, code_of, is_server_code, meaning
from gtidsnap.source.session import open_session

T = TypeVar("T")

ROW_PARSERS_KEPT = 256  # result shapes whose row parsers a session keeps (then it starts afresh)


def _names_and_rows(cur: pymysql.cursors.Cursor) -> tuple[list[str], list[tuple[Any, ...]]]:
    return [d[0] for d in cur.description or ()], list(cur.fetchall())


class Replica:
    """A read-only session on the replica; use as a context manager or call :meth:`close`.

    One statement at a time: a lock serialises the session, which threads share (loop, pump, committer)."""

    flavor: Flavor
    version: tuple[int, int, int]

    def __init__(self, settings: ConnectionSettings, read_timeout: float | None = None) -> None:
        """``read_timeout`` (seconds) defaults to the statement time limit plus a margin."""
        self.settings = settings
        self._read_timeout = read_timeout if read_timeout is not None else settings.read_timeout
        self._catalog = Catalog(self._dicts, settings.describe())
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._lock = threading.RLock()
        self._row_parsers: dict[tuple[Any, ...], ParseRow] = {}
        self._compiled = CompiledChunks(settings)
        self._conn = self._connect()

    def twin(self) -> Replica:
        """Another session, for a thread that must not wait on this one's lock (the planning queries)."""
        return Replica(self.settings, self._read_timeout)

    def _connect(self) -> pymysql.connections.Connection[Any]:
        known = (self.flavor, self.version) if hasattr(self, "flavor") else None
        conn, self.flavor, self.version = open_session(self.settings, self._read_timeout, known)
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                with suppress(pymysql.err.Error):  # already gone
                    self._conn.close()
                self._conn = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _cursor(self, unbuffered: bool = False) -> Iterator[pymysql.cursors.Cursor]:
        """A cursor; ``unbuffered``: rows read as fetched (the chunk readers hook into its result)."""
        if self._conn is None:
            self._conn = self._connect()
        with self._conn.cursor(pymysql.cursors.SSCursor if unbuffered else None) as cur:
            yield cur

    def _query(self, sql: str, params: Sequence[Any], what: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Run one read; repeat it once on a fresh connection if the connection was lost."""
        with self._lock:
            return self._run_locked(sql, params, what, _names_and_rows)

    def _run_locked(
        self,
        sql: str,
        params: Sequence[Any],
        what: str,
        read: Callable[[pymysql.cursors.Cursor], T],
        unbuffered: bool = False,
    ) -> T:
        for attempt in (1, 2):
            try:
                with self._cursor(unbuffered) as cur:
                    cur.execute(sql, list(params))
                    return read(cur)
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError) as exc:
                lost = isinstance(exc, pymysql.err.InterfaceError) or (
                    meaning(code_of(exc)) is Meaning.LOST_CONNECTION
                )
                if lost and attempt == 1:
                    self.close()
                    continue
                raise self._error(exc, what) from exc
            except pymysql.err.MySQLError as exc:
                raise self._error(exc, what) from exc
        raise AssertionError("unreachable")

    def _error(self, exc: pymysql.err.MySQLError, what: str) -> Exception:
        code = code_of(exc)
        text = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        where = self.settings.describe()
        kind = meaning(code)
        if kind is Meaning.SCHEMA_CHANGED:
            return SchemaError(f"{what} failed on the replica {where}: {text}")
        if kind is Meaning.PRIVILEGE_MISSING:
            return PrerequisiteError([f"{what} was denied on the replica {where}: {text}"])
        if kind is Meaning.STATEMENT_TIMEOUT:
            return QueryError(
                f"{what} took longer than source.statement_timeout_s "
                f"({self.settings.statement_timeout:g} s) on the replica {where}: {text}"
            )
        if is_server_code(code):  # the server answered this statement with an error
            return QueryError(f"{what} failed on the replica {where}: error {code}: {text}")
        return SourceError(f"{what} failed on the replica {where}: {text}")

    def _fetch_one(self, sql: str, params: Sequence[Any], what: str = "a query") -> tuple[Any, ...] | None:
        _, rows = self._query(sql, params, what)
        return rows[0] if rows else None

    def _dicts(self, sql: str, params: Sequence[Any], what: str) -> list[dict[str, Any]]:
        names, rows = self._query(sql, params, what)
        return [dict(zip(names, row, strict=True)) for row in rows]

    # ------------------------------------------------------------------ reads

    def describe(self) -> str:
        """The replica for messages: flavour and account, never the password."""
        return f"the {self.flavor} replica {self.settings.describe()}"

    def connection_id(self) -> int:
        """The server's id of this session (as SHOW PROCESSLIST shows it), for diagnostics."""
        row = self._fetch_one("SELECT CONNECTION_ID()", [], "reading the connection id")
        return int(row[0]) if row else 0

    def executed(self) -> GtidSet:
        """Every transaction the replica has executed and written to its binlog: a watermark."""
        if self.flavor == "mariadb":
            row = self._fetch_one("SELECT @@global.gtid_binlog_pos", [], "reading gtid_binlog_pos")
            return parse_gtid_set("mariadb", str(row[0] if row and row[0] is not None else ""))
        statement = "SHOW BINARY LOG STATUS" if self.version >= (8, 2, 0) else "SHOW MASTER STATUS"
        rows = self._dicts(statement, [], f"reading the executed GTID set ({statement})")
        if not rows:
            raise PrerequisiteError(
                [f"the replica {self.settings.describe()} has no binary log status: start it with log_bin"]
            )
        return parse_gtid_set("mysql", str(rows[0].get("Executed_Gtid_Set") or ""))

    def executed_and_visible(self) -> tuple[GtidSet, GtidSet]:
        """The executed set and the transactions a new read is sure to see, in one round trip. MySQL adds
        a GTID to its executed set after the engine commit: the same set. MariaDB's ``gtid_binlog_pos``
        grows before the engine commit; ``gtid_current_pos`` follows the applier's commits on a replica."""
        if self.flavor == "mysql":
            executed = self.executed()
            return executed, executed
        row = self._fetch_one(  # the visible set first: the executed set, read after, is the fresher lw
            "SELECT @@global.gtid_current_pos, @@global.gtid_binlog_pos", [], "reading gtid_binlog_pos"
        )
        current, binlog = (str(v) if v is not None else "" for v in (row or (None, None)))
        return parse_gtid_set("mariadb", binlog), parse_gtid_set("mariadb", current)

    def applied(self) -> GtidSet:
        """Every transaction the replica has applied, logged in its binlog or not: MySQL's executed set;
        on MariaDB, per domain the newer of ``gtid_binlog_pos`` and ``gtid_slave_pos`` (a replica
        provisioned from a backup has applied domains its binlog never logged)."""
        if self.flavor == "mysql":
            return self.executed()
        row = self._fetch_one(
            "SELECT @@global.gtid_binlog_pos, @@global.gtid_slave_pos", [], "reading gtid_slave_pos"
        )
        binlog, slave = (str(v) if v is not None else "" for v in (row or (None, None)))
        return parse_gtid_set("mariadb", binlog) | parse_gtid_set("mariadb", slave)

    def purged(self) -> GtidSet:
        """Transactions the replica's binlog no longer holds: MySQL's ``gtid_purged``; on MariaDB the
        GTID position where its oldest binlog file starts (everything up to it is gone)."""
        if self.flavor == "mysql":
            row = self._fetch_one("SELECT @@global.gtid_purged", [], "reading gtid_purged")
            return parse_gtid_set("mysql", str(row[0] if row and row[0] is not None else ""))
        _, logs = self._query("SHOW BINARY LOGS", [], "listing the binary logs")
        if not logs:
            return parse_gtid_set("mariadb", "")
        row = self._fetch_one(
            "SELECT BINLOG_GTID_POS(%s, 4)", [as_text(logs[0][0])], "reading where the oldest binlog starts"
        )
        return parse_gtid_set("mariadb", as_text(row[0]) if row and row[0] is not None else "")

    def identity(self) -> str:
        """Who writes this server's own transactions: its server UUID (MySQL) or server id (MariaDB)."""
        variable = "server_uuid" if self.flavor == "mysql" else "server_id"
        row = self._fetch_one(f"SELECT @@global.{variable}", [], f"reading {variable}")
        return as_text(row[0]) if row and row[0] is not None else ""

    def binlog_names(self) -> list[str]:
        """The replica's binlog files, oldest first (``SHOW BINARY LOGS``)."""
        _, logs = self._query("SHOW BINARY LOGS", [], "listing the binary logs")
        return [as_text(row[0]) for row in logs]

    def binlog_head(self, name: str) -> list[tuple[str, str]]:
        """(event type, info) of the first events of binlog ``name`` (its header: the GTID set before it)."""
        _, rows = self._query("SHOW BINLOG EVENTS IN %s LIMIT 3", [name], f"reading the start of {name}")
        return [(as_text(r[2]), as_text(r[5])) for r in rows]

    def binlog_expire_s(self) -> float:
        """Seconds after which the replica purges a binlog file (0: never): ``binlog_expire_logs_seconds``,
        else ``expire_logs_days``."""
        names = ("binlog_expire_logs_seconds", "expire_logs_days")
        _, rows = self._query(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN (%s, %s)", names, "reading the binlog expiry"
        )
        values = {as_text(r[0]).lower(): float(as_text(r[1]) or 0) for r in rows}
        seconds = values.get("binlog_expire_logs_seconds", 0.0)
        return seconds if seconds > 0 else values.get("expire_logs_days", 0.0) * 86_400

    def tables(self) -> list[TableId]:
        """Every base table outside the system schemas, sorted (for resolving table patterns)."""
        return self._catalog.tables()

    def schema(self, table: TableId, surrogate_key: tuple[str, ...] | None = None) -> TableSchema:
        """Columns in ordinal order and the key to chunk by: the primary key, or ``surrogate_key``."""
        return self._catalog.schema(table, surrogate_key)

    def avg_row_length(self, table: TableId) -> int | None:
        """The server's estimate of a row's bytes in ``table`` (:meth:`Catalog.avg_row_length`)."""
        return self._catalog.avg_row_length(table)

    def estimated_rows(self, table: TableId) -> int | None:
        """The server's estimate of the rows in ``table`` (:meth:`Catalog.estimated_rows`)."""
        return self._catalog.estimated_rows(table)

    def max_key(self, schema: TableSchema, condition: str | None = None) -> tuple[Any, ...] | None:
        """The greatest key as the server returns it (not normalised); None for an empty table."""
        sql, params = max_key_query(schema, condition)
        row = self._fetch_one(sql, params, f"reading the greatest key of {schema.table}")
        return tuple(row) if row is not None else None

    def select_chunk(
        self,
        schema: TableSchema,
        after: Sequence[Any] | None,
        upto: Sequence[Any],
        limit: int | None,
        condition: str | None = None,
    ) -> ChunkResult:
        """Rows with ``after < key <= upto`` in key order, at most ``limit`` (None: all), normalised."""
        sql, params = chunk_query(schema, after, upto, limit, condition)
        return self._rows(schema, sql, params, f"selecting a chunk of {schema.table}")

    def select_chunk_columns(
        self,
        schema: TableSchema,
        after: Sequence[Any] | None,
        upto: Sequence[Any],
        condition: str | None = None,
    ) -> Any | None:
        """The rows with ``after < key <= upto`` as a ``pyarrow.Table`` read by the compiled client
        (:mod:`gtidsnap.source.arrow_chunks`); None where it does not serve: :meth:`select_chunk` then."""
        if not self._compiled.serves(schema):
            return None
        sql, params = chunk_query(schema, after, upto, None, condition)
        with self._lock, self._cursor() as cur:  # escaped as this session would (no round trip)
            text = cur.mogrify(sql, list(params))
        return self._compiled.read(schema, text)

    def range_hash(
        self, schema: TableSchema, after: Sequence[Any] | None, upto: Sequence[Any]
    ) -> tuple[int, int]:
        """The row count and hash of ``after < key <= upto`` (:mod:`gtidsnap.core.row_hash`)."""
        sql, params = range_hash_query(schema, after, upto)
        row = self._fetch_one(sql, params, f"hashing a key range of {schema.table}")
        return (int(row[0]), int(row[1])) if row is not None else (0, 0)

    def select_keys(self, schema: TableSchema, keys: Sequence[Sequence[Any]]) -> ChunkResult:
        """The rows with one of ``keys`` (those that exist), in key order, normalised."""
        sql, params = keys_query(schema, keys)
        return self._rows(schema, sql, params, f"selecting {len(keys)} rows of {schema.table} by key")

    def _rows(self, schema: TableSchema, sql: str, params: Sequence[Any], what: str) -> ChunkResult:
        with self._lock:
            return self._run_locked(sql, params, what, lambda c: self._read_chunk(c, schema), unbuffered=True)

    def _read_chunk(self, cur: pymysql.cursors.Cursor, schema: TableSchema) -> ChunkResult:
        """The rows of an unbuffered SELECT, read off the socket by
        :func:`gtidsnap.source.result_rows.read_result_rows` with the parser of the result's shape; by PyMySQL
        on a version the gate does not allow that on (:mod:`gtidsnap.source.binlog.library`), or if its
        objects are not what that expects."""
        names = [d[0] for d in cur.description or ()]
        result = getattr(cur, "_result", None)
        fields = getattr(result, "converters", None)
        conn = cur.connection
        if (
            result is None
            or fields is None
            or not getattr(result, "unbuffered_active", False)
            or not library_gate().on("chunk_rows")
            or not hasattr(conn, "_rfile")
            or not hasattr(conn, "_next_seq_id")
        ):
            return ChunkResult(schema, names, list(cur.fetchall()))
        rows, last_payload = read_result_rows(conn, result, self._row_parser(schema, names, fields))
        last_raw_row = None
        if last_payload is not None:
            last_raw_row = MySQLResult._read_row_from_packet(result, MysqlPacket(last_payload, conn.encoding))
        return ChunkResult.normalised(schema, names, rows, last_raw_row)

    def _row_parser(
        self, schema: TableSchema, names: Sequence[str], fields: Sequence[FieldConverter]
    ) -> ParseRow:
        shape = (schema, tuple(names), tuple(fields))
        found = self._row_parsers.get(shape)
        if found is None:
            if len(self._row_parsers) >= ROW_PARSERS_KEPT:
                self._row_parsers.clear()
            found = self._row_parsers[shape] = build_row_parser(names, fields, schema)
        return found

    def chunk_ends(
        self,
        schema: TableSchema,
        after: Sequence[Any] | None,
        upto: Sequence[Any],
        size: int,
        count: int,
        condition: str | None = None,
    ) -> list[tuple[Any, ...]]:
        """The raw keys where the next ``count`` chunks of ``size`` rows after ``after`` end, in key order;
        fewer when fewer rows remain up to ``upto`` (:func:`gtidsnap.source.chunk_sql.chunk_ends_query`)."""
        sql, params = chunk_ends_query(schema, after, upto, size, count, condition)
        _, rows = self._query(sql, params, f"finding where the next chunks of {schema.table} end")
        return [tuple(row) for row in rows]

    # ------------------------------------------------------------------ preflight

    def facts(self, tables: Sequence[TableId]) -> ReplicaFacts:
        """What :func:`gtidsnap.source.preflight.find_problems` judges, read in a handful of queries."""
        _, rows = self._query(
            f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({', '.join(['%s'] * len(RELEVANT_VARIABLES))})",
            RELEVANT_VARIABLES,
            "reading server variables",
        )
        variables = {as_text(r[0]).lower(): as_text(r[1]) for r in rows}
        _, grant_rows = self._query("SHOW GRANTS", [], "reading the grants of the current user")
        grants = tuple(strip_password(as_text(r[0])) for r in grant_rows)
        user_row = self._fetch_one("SELECT CURRENT_USER()", [], "reading the current user")
        table_facts = self._catalog.table_facts(tables)
        return ReplicaFacts(
            flavor=self.flavor,
            version=self.version,
            variables=variables,
            grants=grants,
            user=as_text(user_row[0]) if user_row else self.settings.user,
            is_replica=self._is_replica(),
            tables=table_facts,
        )

    def _is_replica(self) -> bool | None:
        """True when the server replicates from a primary; None when the reader may not ask."""
        new_syntax = self.version >= ((10, 5, 1) if self.flavor == "mariadb" else (8, 0, 22))
        statement = "SHOW REPLICA STATUS" if new_syntax else "SHOW SLAVE STATUS"
        try:
            with self._cursor() as cur:
                cur.execute(statement)
                return bool(cur.fetchall())
        except pymysql.err.MySQLError as exc:
            if meaning(code_of(exc)) is Meaning.PRIVILEGE_MISSING:
                return None  # MariaDB wants SLAVE MONITOR for this; the reader has BINLOG MONITOR
            raise self._error(exc, statement) from exc

    def preflight(
        self, tables: Sequence[TableId], surrogate_keys: Mapping[TableId, tuple[str, ...]] | None = None
    ) -> list[Problem]:
        """Every problem that stops a read-only capture of ``tables``; empty when ready."""
        return find_problems(self.facts(tables), tables, surrogate_keys or {})
