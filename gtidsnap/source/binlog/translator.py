"""python-mysql-replication's raw events in, gtidsnap's event types out; no sockets, so tests feed it.

Kept apart from the connection (:mod:`gtidsnap.source.binlog.stream`, which reads raw events, reconnects
and hands
out what this appends): what a transaction looks like, what of a replayed one to drop and what must
stop the stream are decided here on plain data, and can be checked without a server.

What the rest of gtidsnap sees
------------------------------
Every transaction arrives as ``TxBegin(gtid)``, its captured ``RowChange``s (one per row, keys and
rows normalised by the table's :class:`TableSchema`, exactly as a snapshot chunk is) and
``TxCommit(gtid)``. A DDL is its own transaction: ``TxBegin``, ``SchemaChange``, ``TxCommit``. A
transaction that touches no captured table still yields its ``TxBegin``/``TxCommit`` so a window
can move past it. ``Heartbeat`` says the server had nothing more to send; it never comes inside a
transaction. Once a ``TxCommit`` has been handed out its GTID is in :attr:`EventTranslator.processed`.

What the consumer has is what counts
------------------------------------
The translator owns the facts about the event sequence: ``processed`` (the start set plus every
commit handed out), the transaction the consumer is inside and how many of its events it got
(``open``), the last commit handed out (for heartbeats) and the transaction being read (``_tx``).
The stream tells it what it handed out (:meth:`EventTranslator.handed_out`) and that the transaction
being read will be read again from its start (:meth:`EventTranslator.interrupted`: a reconnect, or an
exception while translating). A replayed transaction the consumer is inside has its ``TxBegin`` and
exactly as many events as were already handed out swallowed, so the consumer sees each row once. Any
whole transaction already in ``processed`` is skipped too (belt and braces).

Rows are filtered with the ``schema_of`` callback: the rows of an uncaptured table are never
decoded (the library decodes rows lazily, on first access to ``event.rows``). All rows of an event
are normalised before any is appended, so an exception from ``schema_of`` or from normalising a row
leaves nothing of that event behind.

Fails loudly rather than losing rows: events the library cannot decode but that carry rows or a
transaction boundary (MySQL compressed transaction payloads, 8.4 tagged GTIDs, MariaDB compressed
events), row events outside a transaction, statement-logged DML on a captured table, column names
missing because ``binlog_row_metadata`` is not FULL, and partial JSON updates.
"""

from __future__ import annotations

from collections.abc import Callable, MutableSequence
from typing import Any

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

from gtidsnap.core.column_values import plain_value
from gtidsnap.core.errors import FatalSourceError
from gtidsnap.core.gtid import Gtid, GtidSet, MariadbGtid
from gtidsnap.core.model import (
    BinlogEvent,
    Heartbeat,
    Op,
    RowChange,
    RowChanges,
    SchemaChange,
    TableId,
    TxBegin,
    TxCommit,
)
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.binlog import row_images
from gtidsnap.source.binlog.frame_packets import (
    BEGIN_READ,
    MARIADB_FL_STANDALONE,
    XID_READ,
    FrameRead,
    GtidRead,
    mysql_gtid,
)
from gtidsnap.source.binlog.library import UNSUPPORTED_EVENT_TYPES
from gtidsnap.source.binlog.row_decoders import PendingRows, RowDecoders
from gtidsnap.source.binlog.statements import classify_statement, ddl_tables, dml_tables, redact_statement
from gtidsnap.source.binlog.values import row_values

# The library's event classes this reads, all it asks the library to decode (``only_events``).
EVENTS_READ = [
    GtidEvent,
    MariadbGtidEvent,
    QueryEvent,
    XidEvent,
    XAPrepareEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    PartialUpdateRowsEvent,
    DeleteRowsEvent,
    HeartbeatLogEvent,
    NotImplementedEvent,  # only to fail on UNSUPPORTED_EVENT_TYPES instead of skipping them
]

SchemaOf = Callable[[TableId], TableSchema | None]
_MOST_TABLE_IDS = 4096  # table names remembered (a binlog's tables are few; never grow without bound)
Out = MutableSequence[BinlogEvent | PendingRows]


class _Tx:
    """The transaction being read: what to drop of it and whether it ends on its own (a plain class:
    one is made a transaction, positionally)."""

    __slots__ = ("explicit", "gtid", "produced", "server_id", "skip", "swallow", "timestamp")

    def __init__(self, gtid: Gtid, explicit: bool, server_id: int, timestamp: int) -> None:
        self.gtid = gtid
        self.server_id, self.timestamp = server_id, timestamp  # its GTID event's header
        self.skip = False  # already in processed: drop everything up to its end
        self.explicit = explicit  # a BEGIN (or a non-standalone MariaDB GTID): ends with XID/COMMIT
        self.produced = 0  # events after TxBegin generated in this read of it (handed out or swallowed)
        self.swallow = 0  # the first ``swallow`` of them were handed out before a reconnect


class EventTranslator:
    """Raw library events to gtidsnap events, right after ``processed``; see the module doc.

    ``describe`` names the source in error messages (``ConnectionSettings.describe()``)."""

    def __init__(
        self, schema_of: SchemaOf, describe: str, processed: GtidSet, decoders: RowDecoders | None = None
    ) -> None:
        """``decoders``: where plain rows events are decoded (a :class:`PendingRows` then holds each
        one's place), except those of a replayed transaction's part still swallowed."""
        self._schema_of = schema_of
        self._decoders = decoders
        self._describe = describe
        self._processed = processed
        self._last_commit: Gtid | None = None
        # The transaction the consumer is inside: its GTID and how many events after its TxBegin it got.
        self._open: tuple[Gtid, int] | None = None
        self._tx: _Tx | None = None
        # The next transaction is read again from its start (a reconnect): the consumer may be inside it.
        # Only then: a stream reading ahead translates a transaction while the consumer is in an earlier one.
        self._resumed = False
        self.schema_changes = 0  # SchemaChanges made (a stream reading ahead stops at one)
        self._tables: dict[tuple[str, str], TableId] = {}  # (schema, table) of a rows event -> its TableId

    @property
    def processed(self) -> GtidSet:
        """Every transaction whose ``TxCommit`` was handed out, plus the start set."""
        return self._processed

    def handed_out(self, event: BinlogEvent) -> None:
        """The consumer got ``event``: a commit is processed only once handed out."""
        if isinstance(event, RowChange) and self._open is not None:  # the most of a stream's events
            self._open = (self._open[0], self._open[1] + 1)
        elif isinstance(event, RowChanges) and self._open is not None:
            self._open = (self._open[0], self._open[1] + len(event))
        elif isinstance(event, TxBegin):
            self._open = (event.gtid, 0)
        elif isinstance(event, SchemaChange) and self._open is not None:
            self._open = (self._open[0], self._open[1] + 1)
        elif isinstance(event, TxCommit):
            self._open = None
            self._processed = self._processed.add(event.gtid)
            self._last_commit = event.gtid

    def interrupted(self) -> None:
        """The transaction being read will be read again from its start; ``open`` says what to swallow."""
        self._tx = None
        self._resumed = True

    def translate(self, raw: Any, out: Out) -> None:
        """Append to ``out`` what ``raw`` means: a library event (events of other types are ignored) or
        a framing packet read without one (:mod:`gtidsnap.source.binlog.frame_packets`)."""
        kind = type(raw)
        if kind is GtidRead:
            self._begin(raw.gtid, out, raw.standalone, raw.server_id, raw.timestamp)
        elif kind is FrameRead:
            if raw is XID_READ:
                self._commit(out)
            elif raw is BEGIN_READ:
                self._open_tx("the statement 'BEGIN'").explicit = True
        elif isinstance(raw, GtidEvent):
            untagged = mysql_gtid(raw.sid, raw.gno)  # never tagged: those stop
            self._begin(untagged, out, True, raw.packet.server_id, raw.timestamp)
        elif isinstance(raw, MariadbGtidEvent):
            gtid = MariadbGtid(raw.domain_id, raw.server_id, raw.gtid_seq_no)
            standalone = bool(raw.flags & MARIADB_FL_STANDALONE)
            self._begin(gtid, out, standalone, raw.server_id, raw.timestamp)
        elif isinstance(raw, WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent):
            self._rows(raw, out)
        elif isinstance(raw, XidEvent | XAPrepareEvent):
            self._commit(out)
        elif isinstance(raw, QueryEvent):
            self._query(raw, out)
        elif isinstance(raw, HeartbeatLogEvent):
            if self._tx is None and self._open is None:  # never inside a transaction
                out.append(Heartbeat(self._last_commit))
        elif isinstance(raw, NotImplementedEvent) and raw.event_type in UNSUPPORTED_EVENT_TYPES:
            raise FatalSourceError(
                f"the binlog of {self._describe} holds "
                f"{UNSUPPORTED_EVENT_TYPES[raw.event_type]}; its rows cannot be read"
            )

    # ------------------------------------------------------------------ transactions

    def _begin(self, gtid: Gtid, out: Out, standalone: bool, server_id: int, timestamp: int) -> None:
        """``standalone``: MySQL's GTID says nothing; a BEGIN query makes it explicit. ``server_id``,
        ``timestamp``: the GTID event's header (the commit carries them)."""
        if self._tx is not None:
            raise FatalSourceError(
                f"transaction {self._tx.gtid} has no commit before {gtid} in the binlog of "
                f"{self._describe} (an event type python-mysql-replication cannot read?)"
            )
        tx = _Tx(gtid, not standalone, server_id, timestamp)
        self._tx = tx
        if gtid in self._processed:
            tx.skip = True
            return
        resumed, self._resumed = self._resumed, False
        if resumed and self._open is not None:  # replayed after a reconnect: the consumer is inside it
            open_gtid, returned = self._open
            if open_gtid != gtid:
                raise FatalSourceError(
                    f"after a reconnect to {self._describe} the stream resumed at {gtid}, "
                    f"not at the interrupted transaction {open_gtid}"
                )
            tx.swallow = returned  # and its TxBegin was returned already
            return
        out.append(TxBegin(gtid))

    def _produce(self, tx: _Tx, event: BinlogEvent, out: Out) -> None:
        index = tx.produced
        tx.produced += 1
        if index >= tx.swallow:
            out.append(event)

    def _open_tx(self, what: str) -> _Tx:
        if self._tx is None:
            raise FatalSourceError(
                f"{what} outside a transaction in the binlog of {self._describe} "
                "(gtid_mode must be ON; or a GTID event type that cannot be read)"
            )
        return self._tx

    def _commit(self, out: Out) -> None:
        tx = self._open_tx("a commit")
        self._tx = None
        if not tx.skip:
            out.append(TxCommit(tx.gtid, tx.server_id, tx.timestamp))

    # ------------------------------------------------------------------ contents

    def _rows(self, raw: WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent, out: Out) -> None:
        tx = self._tx or self._open_tx(f"a row event of {raw.schema}.{raw.table}")
        if tx.skip:
            return
        names = (raw.schema, raw.table)
        table = self._tables.get(names)
        if table is None:  # one TableId a table, not one a rows event
            if len(self._tables) >= _MOST_TABLE_IDS:
                self._tables.clear()
            table = self._tables[names] = TableId(*names)
        schema = self._schema_of(table)
        if schema is None:
            return  # not captured: its rows are never decoded
        if self._decoders is not None and tx.produced >= tx.swallow:
            found = row_images.rows_bytes(raw, schema.converters, plain_value)
            if found is not None:
                op: Op = (
                    "u"
                    if isinstance(raw, UpdateRowsEvent)
                    else "c"
                    if isinstance(raw, WriteRowsEvent)
                    else "d"
                )
                errors, data = found
                ts = int(raw.timestamp)
                out.append(self._decoders.add(raw.columns, errors, schema, op, data, tx.gtid, table, ts))
                return
        read = row_images.normalized_images(raw, schema.converters, plain_value)
        images: list[dict[str, Any]] = self._library_images(raw, table, schema) if read is None else read
        ts, key_names = int(raw.timestamp), tuple(schema.key)
        changes: list[RowChange] = []  # all rows first: a row that fails to normalise stops the event whole
        if isinstance(raw, UpdateRowsEvent):
            for before, after in zip(images[::2], images[1::2], strict=True):
                key, old = schema.key_of(after), schema.key_of(before)
                old_key = old if old != key else None
                changes.append(RowChange(tx.gtid, table, "u", key, before, after, old_key, ts, key_names))
        elif isinstance(raw, WriteRowsEvent):
            for after in images:
                key = schema.key_of(after)
                changes.append(RowChange(tx.gtid, table, "c", key, None, after, None, ts, key_names))
        else:
            for before in images:
                key = schema.key_of(before)
                changes.append(RowChange(tx.gtid, table, "d", key, before, None, None, ts, key_names))
        if tx.produced >= tx.swallow:  # nothing of this read swallowed (as _produce would have it)
            tx.produced += len(changes)
            out.extend(changes)
        else:
            for change in changes:
                self._produce(tx, change, out)

    def _library_images(
        self, raw: WriteRowsEvent | UpdateRowsEvent | DeleteRowsEvent, table: TableId, schema: TableSchema
    ) -> list[dict[str, Any]]:
        """The event's row images (an update's before, then after) as the library decodes them, each
        normalised: the path of what :mod:`gtidsnap.source.binlog.row_images` leaves to the library."""
        rows = raw.rows
        if rows:
            sample = rows[0].get("values") or rows[0].get("after_values") or {}
            if any(str(name).startswith("UNKNOWN_COL") for name in sample):
                raise FatalSourceError(
                    f"the binlog of {self._describe} has no column names for {table}: "
                    "set binlog_row_metadata=FULL"
                )
        if isinstance(raw, PartialUpdateRowsEvent) and getattr(raw, "is_partial_json_update", False):
            raise FatalSourceError(
                f"partial JSON update of {table} in the binlog of {self._describe}: "
                "set binlog_row_value_options='' (no PARTIAL_JSON)"
            )
        if isinstance(raw, UpdateRowsEvent):
            images = (row_values(row, image) for row in rows for image in ("before_", "after_"))
        else:
            images = (row_values(row, "") for row in rows)
        return [schema.normalize_row(values) for values in images]

    def _query(self, raw: QueryEvent, out: Out) -> None:
        statement = str(raw.query)
        # MySQL opens every transaction with this very text: spared the general parse, once a transaction
        kind, words = ("begin", statement) if statement == "BEGIN" else classify_statement(statement)
        if kind == "ignore":
            return
        tx = self._tx or self._open_tx(f"the statement {redact_statement(statement)[:80]!r}")
        if kind == "begin":
            tx.explicit = True
        elif kind == "end":
            self._commit(out)
        elif kind == "dml":
            if tx.skip:
                return
            default = _decode(raw.schema)
            targets = dml_tables(words, default)
            if targets is None or any(self._schema_of(t) is not None for t in targets):
                raise FatalSourceError(
                    f"statement-logged DML in the binlog of {self._describe} "
                    f"({redact_statement(statement)[:120]!r}): its rows cannot be captured; "
                    "binlog_format must be ROW"
                )
        else:
            if not tx.skip:
                tables = ddl_tables(words, _decode(raw.schema))
                self.schema_changes += 1
                self._produce(tx, SchemaChange(tx.gtid, tables, redact_statement(statement)), out)
            if not tx.explicit:
                self._commit(out)


def _decode(value: Any) -> str:
    return (
        value.decode("utf-8", errors="replace") if isinstance(value, bytes | bytearray) else str(value or "")
    )
