"""The binlog adapter: python-mysql-replication's events in, gtidsnap's event types out.

What the rest of gtidsnap sees
------------------------------
Every transaction arrives as ``TxBegin(gtid)``, its captured ``RowChange``s (one per row, keys and
rows normalised by the table's :class:`TableSchema`, exactly as a snapshot chunk is) and
``TxCommit(gtid)``. A DDL is its own transaction: ``TxBegin``, ``SchemaChange``, ``TxCommit``. A
transaction that touches no captured table still yields its ``TxBegin``/``TxCommit`` so a window
can move past it. ``Heartbeat`` says the server had nothing more to send. Once a ``TxCommit`` has
been returned its GTID is in :attr:`BinlogStream.processed`.

Reconnects: exactly once, never by the library
----------------------------------------------
``BinLogStreamReader.fetchone`` (1.0.17) catches a lost connection (pymysql errors 2013, 2006),
closes the socket and silently dials again with the ``auto_position`` it was built with, so the
server replays every transaction since the start; on an EOF packet it closes and returns None, and
the next ``fetchone`` would dial from that same old position. We therefore never let it reconnect:
the dump connection is opened through a ``pymysql_wrapper`` that refuses a second dump connection
(``LibraryReconnect``), which makes ``fetchone`` raise instead. On that, on any network error, and
on EOF, we drop the reader and build a new one from :attr:`processed` (the start set plus every
returned commit) after a backoff. A transaction that was returned in part when the connection
dropped is replayed by the server from its start: its ``TxBegin`` and exactly as many events as
were already returned are swallowed, so the consumer sees each row once. Any whole transaction
already in :attr:`processed` is skipped too (belt and braces). The same replay follows an
exception from ``schema_of`` or from normalising a row: the call raises, nothing of that row event
was returned, and the next call reads it again.

Errors (codes read by :mod:`gtidsnap.server_errors`): a refused login raises ConfigError, as on the
replica's own connection; grants, TLS that cannot be had, a start the binlog no longer holds and events
that cannot be read raise :class:`FatalSourceError` (``retryable`` False) at once; anything else is
retried with backoff (0.1 s doubling to 5 s) for ``retry_for_s`` (60 s), while ``next`` keeps
returning None every ``heartbeat_s``, then raises :class:`SourceError`. Messages name the account
with ``ConnectionSettings.describe()``; a ``SchemaChange`` of an account statement has its
passwords redacted (MariaDB logs ``IDENTIFIED BY '...'`` in clear).

Why not ``only_tables``/``only_schemas``: they match table names without their schema, are fixed
at construction while the captured tables change at run time, and save nothing that matters; we
filter with the ``schema_of`` callback and never decode the rows of an uncaptured table (the
library decodes rows lazily, on first access to ``event.rows``). ``only_events`` does limit
decoding to the event classes below (table maps, rotates and format descriptions are always
decoded by the library, it needs them).

Fails loudly rather than losing rows: events the library cannot decode but that carry rows or a
transaction boundary (MySQL compressed transaction payloads, 8.4 tagged GTIDs, MariaDB compressed
events), row events outside a transaction, statement-logged DML on a captured table, column names
missing because ``binlog_row_metadata`` is not FULL, and partial JSON updates.
"""

from __future__ import annotations

import logging
import random
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from gtidsnap.binlog_library import (
    ONLY_EVENTS,
    UNSUPPORTED_EVENT_TYPES,
    EmptyMysqlPosition,
    GuardedConnect,
    LibraryReconnect,
)
from gtidsnap.binlog_values import row_values
from gtidsnap.connection import ConnectionSettings
from gtidsnap.errors import ConfigError, FatalSourceError, SourceError
from gtidsnap.gtid import Gtid, GtidSet, MariadbGtid, MariadbGtidSet, MysqlGtid
from gtidsnap.model import (
    BinlogEvent,
    Heartbeat,
    RowChange,
    SchemaChange,
    TableId,
    TxBegin,
    TxCommit,
)
from gtidsnap.schema import TableSchema
from gtidsnap.server_errors import FATAL_TO_THE_STREAM, Meaning, code_of, meaning
from gtidsnap.statements import classify_statement, ddl_tables, dml_tables, redact_statement

log = logging.getLogger(__name__)

Flavor = Literal["mysql", "mariadb"]
SchemaOf = Callable[[TableId], TableSchema | None]

_MARIADB_FL_STANDALONE = 0x01  # the GTID event's transaction has no BEGIN and no COMMIT/XID


@dataclass
class _Tx:
    """The transaction being read: what to drop of it and whether it ends on its own."""

    gtid: Gtid
    skip: bool = False  # already in processed: drop everything up to its end
    explicit: bool = False  # a BEGIN (or a non-standalone MariaDB GTID): ends with XID/COMMIT
    produced: int = 0  # events after TxBegin generated in this read of it (returned or swallowed)
    swallow: int = 0  # the first ``swallow`` of them were returned before a reconnect


class BinlogStream:
    """Normalised binlog events of a replica, from right after ``start``; see the module doc."""

    def __init__(
        self,
        settings: ConnectionSettings,
        flavor: Flavor,
        start: GtidSet,
        schema_of: SchemaOf,
        heartbeat_s: float = 1.0,
        server_id: int | None = None,
        *,
        retry_for_s: float = 60.0,
    ) -> None:
        """``retry_for_s`` bounds how long transient failures are retried before ``SourceError``."""
        if flavor not in ("mysql", "mariadb"):
            raise ValueError(f"unknown server flavour {flavor!r}; expected 'mysql' or 'mariadb'")
        if flavor == "mariadb" and not isinstance(start, MariadbGtidSet):
            raise TypeError(f"a MariaDB stream starts from a MariadbGtidSet, not {type(start).__name__}")
        self._settings = settings
        self._flavor: Flavor = flavor
        self._schema_of = schema_of
        self._heartbeat_s = heartbeat_s
        self._server_id = server_id if server_id is not None else random.randint(100_000, 2**31 - 1)
        self._retry_for_s = retry_for_s
        self._processed = start
        self._last_commit: Gtid | None = None
        self._reader: BinLogStreamReader | None = None
        self._guard: GuardedConnect | None = None
        self._pending: deque[BinlogEvent] = deque()
        self._tx: _Tx | None = None
        # The transaction the consumer is inside: its GTID and how many events after its TxBegin it got.
        self._open: tuple[Gtid, int] | None = None
        self._failing_since: float | None = None
        self._last_error = ""
        self._backoff_s = 0.0
        self._retry_at = 0.0
        self._closed = False
        self.reconnects = 0  # how many times the reader was rebuilt after a failure (for tests, metrics)

    # ------------------------------------------------------------------ public

    @property
    def processed(self) -> GtidSet:
        """Every transaction whose ``TxCommit`` was returned, plus the start set."""
        return self._processed

    @property
    def server_id(self) -> int:
        """The replica server id this stream registers with (random unless given)."""
        return self._server_id

    @property
    def dump_connection_id(self) -> int | None:
        """The server's id of the open dump connection (as SHOW PROCESSLIST shows it), if any."""
        dump = self._guard.dump if self._guard is not None and self._reader is not None else None
        return int(dump.thread_id()) if dump is not None and dump.open else None

    def next(self) -> BinlogEvent | None:
        """The next event; None when nothing came within about ``heartbeat_s`` (idle heartbeats come
        every ``heartbeat_s``, so None means the source is unreachable or busy with skipped events)."""
        if self._closed:
            raise FatalSourceError(f"the binlog stream of {self._settings.describe()} is closed")
        deadline = time.monotonic() + self._heartbeat_s
        while True:
            if self._pending:
                return self._hand_out(self._pending.popleft())
            now = time.monotonic()
            if now >= deadline:
                return None
            if now < self._retry_at:
                time.sleep(min(self._retry_at, deadline) - now)
                continue
            if self._reader is None:
                self._reader = self._build_reader()
            try:
                raw = self._reader.fetchone()
            except Exception as exc:  # classified below: fatal, transient, or a bug in decoding
                self._on_failure(exc)
                continue
            if raw is None:  # EOF packet: the server ended the dump; the library closed itself
                self._on_failure(None)
                continue
            self._failing_since = None
            self._backoff_s = 0.0
            try:
                self._handle(raw)
            except BaseException:
                # Nothing of this event was returned: read it again on the next call, from the
                # last returned commit, rather than continue past it and lose its rows.
                self._pending.clear()
                self._tx = None
                self._drop_reader()
                raise

    def restart(self, processed: GtidSet) -> None:
        """Drop the connection and anything read ahead; continue right after ``processed``."""
        self._drop_reader()
        self._processed = processed
        self._pending.clear()
        self._tx = None
        self._open = None
        self._last_commit = None
        self._failing_since = None
        self._backoff_s = 0.0
        self._retry_at = 0.0
        self._closed = False

    def close(self) -> None:
        """Close the connections; ``next`` raises afterwards until :meth:`restart`."""
        self._drop_reader()
        self._pending.clear()
        self._closed = True

    def __enter__(self) -> BinlogStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ connection

    def _build_reader(self) -> BinLogStreamReader:
        """A reader positioned right after ``processed``; it connects on its first ``fetchone``."""
        settings = self._settings.pymysql_kwargs()
        # A dead peer that sends nothing is noticed after a few missed heartbeats.
        timeout = max(10.0, 4 * self._heartbeat_s)
        settings.update(charset="utf8mb4", read_timeout=timeout, write_timeout=timeout)
        position: Any
        if self._flavor == "mariadb":
            assert isinstance(self._processed, MariadbGtidSet)
            position = self._processed.as_position() or None  # None: from the first binlog
        else:
            position = str(self._processed) or EmptyMysqlPosition()
        self._guard = GuardedConnect()
        return BinLogStreamReader(
            connection_settings=settings,
            server_id=self._server_id,
            auto_position=position,
            is_mariadb=self._flavor == "mariadb",
            blocking=True,  # MariaDB drops the end of a large binlog with blocking=False
            slave_heartbeat=self._heartbeat_s,
            only_events=ONLY_EVENTS,
            filter_non_implemented_events=False,
            enable_logging=False,  # it logs every parameter at INFO; also faster
            pymysql_wrapper=self._guard,
        )

    def _drop_reader(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception as exc:  # a socket that is already gone; nothing to save
                log.debug("closing the binlog reader of %s: %s", self._settings.describe(), exc)
            self._reader = None

    def _on_failure(self, exc: Exception | None) -> None:
        """Fatal errors raise; anything else drops the reader and schedules a rebuild with backoff."""
        where = self._settings.describe()
        if exc is not None and _is_fatal(exc):
            self._drop_reader()
            if meaning(code_of(exc)) is Meaning.LOGIN_REFUSED:
                raise ConfigError(
                    f"the replica {where} refused the login of the binlog stream: {_error_text(exc)}"
                ) from exc
            raise FatalSourceError(f"the binlog stream of {where} was refused: {_error_text(exc)}") from exc
        if exc is not None and not isinstance(exc, pymysql.err.MySQLError | OSError | LibraryReconnect):
            self._drop_reader()
            raise FatalSourceError(f"cannot decode the binlog of {where}: {_error_text(exc)}") from exc
        self._drop_reader()
        self._tx = None  # replayed from its start; ``_open`` says what of it to swallow
        now = time.monotonic()
        self._last_error = _error_text(exc) if exc is not None else "the server ended the binlog dump"
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since > self._retry_for_s:
            raise SourceError(
                f"the binlog stream of {where} failed for {now - self._failing_since:.0f}s; "
                f"last error: {self._last_error}"
            ) from exc
        self._backoff_s = min(5.0, max(0.1, self._backoff_s * 2))
        self._retry_at = now + self._backoff_s
        self.reconnects += 1
        log.warning(
            "binlog stream of %s lost (%s); resuming after %s in %.1fs",
            where,
            self._last_error,
            self._processed,
            self._backoff_s,
        )

    # ------------------------------------------------------------------ events

    def _hand_out(self, event: BinlogEvent) -> BinlogEvent:
        """What the consumer has is what counts: a commit is processed only once returned."""
        if isinstance(event, TxBegin):
            self._open = (event.gtid, 0)
        elif isinstance(event, RowChange | SchemaChange) and self._open is not None:
            self._open = (self._open[0], self._open[1] + 1)
        elif isinstance(event, TxCommit):
            self._open = None
            self._processed = self._processed.add(event.gtid)
            self._last_commit = event.gtid
        return event

    def _handle(self, raw: Any) -> None:
        if isinstance(raw, GtidEvent):
            self._begin(MysqlGtid.parse(raw.gtid), standalone=True)
        elif isinstance(raw, MariadbGtidEvent):
            gtid = MariadbGtid(raw.domain_id, raw.server_id, raw.gtid_seq_no)
            self._begin(gtid, standalone=bool(raw.flags & _MARIADB_FL_STANDALONE))
        elif isinstance(raw, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            self._rows(raw)
        elif isinstance(raw, XidEvent | XAPrepareEvent):
            self._commit()
        elif isinstance(raw, QueryEvent):
            self._query(raw)
        elif isinstance(raw, HeartbeatLogEvent):
            if self._tx is None and self._open is None:  # never inside a transaction
                self._pending.append(Heartbeat(self._last_commit))
        elif isinstance(raw, NotImplementedEvent) and raw.event_type in UNSUPPORTED_EVENT_TYPES:
            raise FatalSourceError(
                f"the binlog of {self._settings.describe()} holds "
                f"{UNSUPPORTED_EVENT_TYPES[raw.event_type]}; its rows cannot be read"
            )

    def _begin(self, gtid: Gtid, standalone: bool) -> None:
        """``standalone``: MySQL's GTID says nothing; a BEGIN query makes it explicit."""
        if self._tx is not None:
            raise FatalSourceError(
                f"transaction {self._tx.gtid} has no commit before {gtid} in the binlog of "
                f"{self._settings.describe()} (an event type python-mysql-replication cannot read?)"
            )
        tx = _Tx(gtid, explicit=not standalone)
        self._tx = tx
        if gtid in self._processed:
            tx.skip = True
            return
        if self._open is not None:  # replayed after a reconnect: the consumer is inside it already
            open_gtid, returned = self._open
            if open_gtid != gtid:
                raise FatalSourceError(
                    f"after a reconnect to {self._settings.describe()} the stream resumed at {gtid}, "
                    f"not at the interrupted transaction {open_gtid}"
                )
            tx.swallow = returned  # and its TxBegin was returned already
            return
        self._pending.append(TxBegin(gtid))

    def _produce(self, tx: _Tx, event: BinlogEvent) -> None:
        index = tx.produced
        tx.produced += 1
        if index >= tx.swallow:
            self._pending.append(event)

    def _open_tx(self, what: str) -> _Tx:
        if self._tx is None:
            raise FatalSourceError(
                f"{what} outside a transaction in the binlog of {self._settings.describe()} "
                "(gtid_mode must be ON; or a GTID event type that cannot be read)"
            )
        return self._tx

    def _commit(self) -> None:
        tx = self._open_tx("a commit")
        self._tx = None
        if not tx.skip:
            self._pending.append(TxCommit(tx.gtid))

    def _rows(self, raw: WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent) -> None:
        tx = self._open_tx(f"a row event of {raw.schema}.{raw.table}")
        if tx.skip:
            return
        table = TableId(raw.schema, raw.table)
        schema = self._schema_of(table)
        if schema is None:
            return  # not captured: its rows are never decoded
        rows = raw.rows
        if rows:
            sample = rows[0].get("values") or rows[0].get("after_values") or {}
            if any(str(name).startswith("UNKNOWN_COL") for name in sample):
                raise FatalSourceError(
                    f"the binlog of {self._settings.describe()} has no column names for {table}: "
                    "set binlog_row_metadata=FULL"
                )
        if isinstance(raw, PartialUpdateRowsEvent) and getattr(raw, "is_partial_json_update", False):
            raise FatalSourceError(
                f"partial JSON update of {table} in the binlog of {self._settings.describe()}: "
                "set binlog_row_value_options='' (no PARTIAL_JSON)"
            )
        ts = int(raw.timestamp)
        changes: list[RowChange] = []  # all rows first: a row that fails to normalise stops the event whole
        for row in rows:
            if isinstance(raw, UpdateRowsEvent):
                before = schema.normalize_row(row_values(row, "before_"))
                after = schema.normalize_row(row_values(row, "after_"))
                key, old = schema.key_of(after), schema.key_of(before)
                old_key = old if old != key else None
                changes.append(RowChange(tx.gtid, table, "u", key, before, after, old_key, ts))
            elif isinstance(raw, WriteRowsEvent):
                after = schema.normalize_row(row_values(row, ""))
                changes.append(RowChange(tx.gtid, table, "c", schema.key_of(after), None, after, None, ts))
            else:
                before = schema.normalize_row(row_values(row, ""))
                changes.append(RowChange(tx.gtid, table, "d", schema.key_of(before), before, None, None, ts))
        for change in changes:
            self._produce(tx, change)

    def _query(self, raw: QueryEvent) -> None:
        statement = str(raw.query)
        kind, words = classify_statement(statement)
        if kind == "ignore":
            return
        tx = self._open_tx(f"the statement {redact_statement(statement)[:80]!r}")
        if kind == "begin":
            tx.explicit = True
        elif kind == "end":
            self._commit()
        elif kind == "dml":
            if tx.skip:
                return
            default = _decode(raw.schema)
            targets = dml_tables(words, default)
            if targets is None or any(self._schema_of(t) is not None for t in targets):
                raise FatalSourceError(
                    f"statement-logged DML in the binlog of {self._settings.describe()} "
                    f"({redact_statement(statement)[:120]!r}): its rows cannot be captured; "
                    "binlog_format must be ROW"
                )
        else:
            if not tx.skip:
                tables = ddl_tables(words, _decode(raw.schema))
                self._produce(tx, SchemaChange(tx.gtid, tables, redact_statement(statement)))
            if not tx.explicit:
                self._commit()


def _decode(value: Any) -> str:
    return (
        value.decode("utf-8", errors="replace") if isinstance(value, bytes | bytearray) else str(value or "")
    )


def _is_fatal(exc: Exception) -> bool:
    """Refusals a retry cannot fix; PyMySQL reports a bad certificate as "can't connect" (2003)."""
    if isinstance(exc, pymysql.err.MySQLError) and meaning(code_of(exc)) in FATAL_TO_THE_STREAM:
        return True
    return isinstance(getattr(exc, "original_exception", None), ssl.SSLCertVerificationError)


def _error_text(exc: BaseException) -> str:
    """Server and client error messages never hold the password; keep them short."""
    return f"{type(exc).__name__}: {exc}"[:500]
