"""The binlog adapter: python-mysql-replication's events in, gtidsnap's event types out.

This module is the connection: it builds and drops the library's ``BinLogStreamReader``, reconnects
with backoff, classifies failures, and hands out, one per :meth:`BinlogStream.next`, what
:class:`gtidsnap.source.binlog.translator.EventTranslator` made of each raw event (which events a
transaction yields, what of a replay is swallowed and what stops the stream are described there).
Kept apart so the translation can be tested on plain data, without a server.

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

Errors (codes read by :mod:`gtidsnap.source.server_errors`): a refused login raises ConfigError, as on the
replica's own connection; grants, TLS that cannot be had, a start the binlog no longer holds and events
that cannot be read raise :class:`FatalSourceError` (``retryable`` False) at once; anything else is
retried with backoff (0.1 s doubling to 5 s) for ``retry_for_s`` (60 s), while ``next`` keeps
returning None every ``heartbeat_s``, then raises :class:`SourceError`. Messages name the account
with ``ConnectionSettings.describe()``; a ``SchemaChange`` of an account statement has its
passwords redacted (MariaDB logs ``IDENTIFIED BY '...'`` in clear).

Why not ``only_tables``/``only_schemas``: they match table names without their schema, are fixed
at construction while the captured tables change at run time, and save nothing that matters; the
translator filters with the ``schema_of`` callback and never decodes the rows of an uncaptured table
(the translator reads the rows with :mod:`gtidsnap.source.binlog.row_images`, several times faster than the
library's own lazy per-value decode of ``event.rows``, which stays for what that module leaves).
``only_events`` does limit decoding to the event classes the translator reads (table maps, rotates
and format descriptions are always decoded by the library, it needs them; a table map is parsed once per
table version: :mod:`gtidsnap.source.binlog.table_maps`; a transaction's GTID and BEGIN events are read
in one step: :mod:`gtidsnap.source.binlog.transaction_events`, a rows event's header too:
:mod:`gtidsnap.source.binlog.rows_events`). The packets that frame a transaction (GTID, BEGIN, XID, a
table map seen before) are read without any library event object: :mod:`gtidsnap.source.binlog.frame_packets`.
These fast paths read the libraries' internals: the stream installs them through the libraries' gate
(:func:`gtidsnap.source.binlog.library.install`), which takes them on the tested versions only.
"""

from __future__ import annotations

import logging
import random
import ssl
import time
from collections import deque
from types import TracebackType
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader

from gtidsnap.core.errors import ConfigError, FatalSourceError, SourceError
from gtidsnap.core.gtid import GtidSet, MariadbGtidSet
from gtidsnap.core.model import BinlogEvent, Flavor
from gtidsnap.source.binlog import library
from gtidsnap.source.binlog.frame_packets import FramePackets
from gtidsnap.source.binlog.library import (
    DumpConnection,
    EmptyMysqlPosition,
    GuardedConnect,
    LibraryReconnect,
)
from gtidsnap.source.binlog.row_decoders import DecoderHung, DecoderLost, PendingRows, RowDecoders
from gtidsnap.source.binlog.translator import EVENTS_READ, EventTranslator, SchemaOf
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.server_errors import FATAL_TO_THE_STREAM, Meaning, code_of, meaning

log = logging.getLogger(__name__)

MAX_AHEAD_BYTES = 256 * 1024
"""Most row bytes read ahead while decoders work: some thousands of rows, enough to keep them busy, few
enough to go out within milliseconds (reading ahead stops anyway when the socket has nothing)."""


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
        decoders: int = 0,
        decoder_json: bool = True,
        decoder_hung_after_s: float | None = None,
    ) -> None:
        """``retry_for_s`` bounds how long transient failures are retried before ``SourceError``;
        ``decoders``: decoder processes for the rows' JSON (:mod:`gtidsnap.source.binlog.row_decoders`;
        0: rows are decoded on the caller's thread, into ``RowChange`` s); ``decoder_json`` False: they
        send values back, made into ``RowChange`` s (an output that is not JSON lines);
        ``decoder_hung_after_s``: how long a decoder may hold a batch before it is replaced (None: the
        default, :data:`gtidsnap.source.binlog.row_decoders.HUNG_AFTER_S`)."""
        if flavor not in ("mysql", "mariadb"):
            raise ValueError(f"unknown server flavour {flavor!r}; expected 'mysql' or 'mariadb'")
        if flavor == "mariadb" and not isinstance(start, MariadbGtidSet):
            raise TypeError(f"a MariaDB stream starts from a MariadbGtidSet, not {type(start).__name__}")
        try:  # the value fixes, and the fast paths on the tested library versions (see that module)
            library.install()
        except RuntimeError as exc:
            raise FatalSourceError(f"cannot read the binlog of {settings.describe()}: {exc}") from exc
        self._settings = settings
        self._flavor: Flavor = flavor
        self._schema_of = schema_of
        self._heartbeat_s = heartbeat_s
        self._server_id = server_id if server_id is not None else random.randint(100_000, 2**31 - 1)
        self._retry_for_s = retry_for_s
        self._decoders = None
        if decoders > 0:
            self._decoders = RowDecoders(decoders, json=decoder_json, hung_after_s=decoder_hung_after_s)
        # What was read and handed out (processed, the open transaction): the translator's facts.
        self._translator = EventTranslator(schema_of, settings.describe(), start, self._decoders)
        self._reader: BinLogStreamReader | None = None
        self._frames: FramePackets | None = None  # the reader's fetchone, framing packets read first
        self._guard: GuardedConnect | None = None
        self._pending: deque[BinlogEvent | PendingRows] = deque()  # translated, not yet handed out
        self._ddl_ahead = False  # a DDL was read ahead: read no further until it is handed out
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
        return self._translator.processed

    @property
    def failing_since(self) -> float | None:
        """When (``time.monotonic``) the failure being retried began; None while the stream runs."""
        return self._failing_since

    @property
    def server_id(self) -> int:
        """The replica server id this stream registers with (random unless given)."""
        return self._server_id

    @property
    def decoders(self) -> RowDecoders | None:
        """The decoder processes, if rows are decoded in them (progress, tests)."""
        return self._decoders

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
        pending = self._pending
        if pending:  # most calls: a transaction's events were translated together
            event = pending.popleft()
            if not isinstance(event, PendingRows):
                self._translator.handed_out(event)  # what the consumer has is what counts
                return event
            pending.appendleft(event)
        deadline = time.monotonic() + self._heartbeat_s
        while True:
            if pending:
                event = pending.popleft()
                if isinstance(event, PendingRows):
                    pending.appendleft(event)
                    if not self._decoded(event):
                        continue  # a failure dropped what was read ahead: read it again
                    event = pending.popleft()
                assert not isinstance(event, PendingRows)
                self._translator.handed_out(event)
                return event
            self._ddl_ahead = False
            now = time.monotonic()
            if now >= deadline:
                return None
            if now < self._retry_at:
                time.sleep(min(self._retry_at, deadline) - now)
                continue
            if self._frames is None:
                self._reader = self._build_reader()
                assert self._guard is not None
                self._frames = FramePackets(self._reader, self._guard)
            try:
                raw = self._frames.fetchone()
            except Exception as exc:  # classified below: fatal, transient, or a bug in decoding
                self._on_failure(exc)
                continue
            if raw is None:  # EOF packet: the server ended the dump; the library closed itself
                self._on_failure(None)
                continue
            self._failing_since = None
            self._backoff_s = 0.0
            try:
                self._translate(raw)
            except DecoderLost as exc:  # sending a rows event to a decoder found it gone or hung
                self._lost_decoders(exc)

    def _translate(self, raw: Any) -> None:
        try:
            self._translator.translate(raw, self._pending)
        except BaseException:
            # Nothing of this event was returned: read it again on the next call, from the
            # last returned commit, rather than continue past it and lose its rows.
            self._forget_ahead()
            self._translator.interrupted()
            self._drop_reader()
            raise

    def _decoded(self, head: PendingRows) -> bool:
        """Put the changes of ``head`` (the first pending event, sent to a decoder) in its place, reading
        more of the binlog meanwhile while its bytes are here and the read-ahead bound allows (so the
        decoders have work while the engine's thread has its own). False: a failure dropped everything
        read ahead, ``head`` included."""
        decoders, pending = self._decoders, self._pending
        assert decoders is not None
        try:
            while (
                not self._ddl_ahead
                and decoders.ahead_bytes < MAX_AHEAD_BYTES
                and not decoders.done(head)
                and self._frames is not None
                and self._has_data()
            ):
                try:
                    raw = self._frames.fetchone()
                except Exception as exc:  # classified as in next: fatal, transient, or a bug
                    self._on_failure(exc)
                    return False
                if raw is None:
                    self._on_failure(None)
                    return False
                ddls = self._translator.schema_changes
                self._translate(raw)
                if self._translator.schema_changes != ddls:
                    self._ddl_ahead = True  # rows after it are decoded with the shape the engine reads anew
            changes = decoders.resolve(head)
        except DecoderLost as exc:
            self._lost_decoders(exc)
            return False
        except BaseException:
            self._forget_ahead()
            self._translator.interrupted()
            self._drop_reader()
            raise
        pending.popleft()
        pending.extendleft(reversed(changes))
        return True

    def _lost_decoders(self, exc: DecoderLost) -> None:
        """A decoder ended or hung: stop them all (new ones start with the next event sent) and read
        again from what was handed out."""
        assert self._decoders is not None
        self._decoders.close()
        self._on_failure(exc)

    def _has_data(self) -> bool:
        dump = self._guard.dump if self._guard is not None else None
        return isinstance(dump, DumpConnection) and dump.has_data()

    def _forget_ahead(self) -> None:
        """Drop what was read and not handed out (read again from what was)."""
        self._pending.clear()
        self._ddl_ahead = False
        if self._decoders is not None:
            self._decoders.discard()

    def restart(self, processed: GtidSet) -> None:
        """Drop the connection and anything read ahead; continue right after ``processed``."""
        self._drop_reader()
        self._translator = EventTranslator(
            self._schema_of, self._settings.describe(), processed, self._decoders
        )
        self._forget_ahead()
        self._failing_since = None
        self._backoff_s = 0.0
        self._retry_at = 0.0
        self._closed = False

    def close(self) -> None:
        """Close the connections and the decoder processes; ``next`` raises afterwards until
        :meth:`restart`."""
        self._drop_reader()
        self._forget_ahead()
        if self._decoders is not None:
            self._decoders.close()
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
            processed = self._translator.processed
            assert isinstance(processed, MariadbGtidSet)
            position = processed.as_position() or None  # None: from the first binlog
        else:
            position = str(self._translator.processed) or EmptyMysqlPosition()
        self._guard = GuardedConnect()
        return BinLogStreamReader(
            connection_settings=settings,
            server_id=self._server_id,
            auto_position=position,
            is_mariadb=self._flavor == "mariadb",
            blocking=True,  # MariaDB drops the end of a large binlog with blocking=False
            slave_heartbeat=self._heartbeat_s,
            only_events=EVENTS_READ,
            filter_non_implemented_events=False,
            enable_logging=False,  # it logs every parameter at INFO; also faster
            pymysql_wrapper=self._guard,
        )

    def _drop_reader(self) -> None:
        self._frames = None
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
        self._forget_ahead()  # read again from what was handed out
        if exc is not None and not isinstance(
            exc, pymysql.err.MySQLError | OSError | LibraryReconnect | DecoderLost
        ):
            self._drop_reader()
            raise FatalSourceError(f"cannot decode the binlog of {where}: {_error_text(exc)}") from exc
        self._drop_reader()
        self._translator.interrupted()  # replayed from its start; the translator swallows what was returned
        now = time.monotonic()
        self._last_error = _error_text(exc) if exc is not None else "the server ended the binlog dump"
        if self._failing_since is None:
            self._failing_since = now
        elif now - self._failing_since > self._retry_for_s:
            error = SourceError(
                f"the binlog stream of {where} failed for {now - self._failing_since:.0f}s; "
                f"last error: {self._last_error}"
            )
            error.retried_s = now - self._failing_since
            raise error from exc
        self._backoff_s = min(5.0, max(0.1, self._backoff_s * 2))
        self._retry_at = now + self._backoff_s
        self.reconnects += 1
        log.log(
            logging.INFO if isinstance(exc, DecoderHung) else logging.WARNING,  # its WARNING said it
            "binlog stream of %s lost (%s); resuming after %s in %.1fs",
            where,
            self._last_error,
            self._translator.processed,
            self._backoff_s,
        )


def _is_fatal(exc: Exception) -> bool:
    """Refusals a retry cannot fix; PyMySQL reports a bad certificate as "can't connect" (2003)."""
    if isinstance(exc, pymysql.err.MySQLError) and meaning(code_of(exc)) in FATAL_TO_THE_STREAM:
        return True
    return isinstance(getattr(exc, "original_exception", None), ssl.SSLCertVerificationError)


def _error_text(exc: BaseException) -> str:
    """Server and client error messages never hold the password; keep them short."""
    return f"{type(exc).__name__}: {exc}"[:500]
