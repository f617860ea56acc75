"""A transaction's framing packets read off the dump connection without the library's event objects.

A transaction of a few rows arrives as a handful of packets that frame one rows event: its GTID event
(and MySQL's ``BEGIN`` query), MariaDB's annotate-rows event, a table map and the XID commit. For each,
python-mysql-replication builds a packet wrapper and an event object (a dozen keyword arguments, as
many attributes) and runs its per-packet bookkeeping: in a stream of 10-row transactions that was 60% of
what each transaction cost beyond its rows. :class:`FramePackets` reads the next packet itself
and keeps for itself what it can read in one step from the bytes (which the connection cuts out of
blocks of the socket's bytes, without a packet object: :meth:`DumpConnection.read_payload`):

- a GTID event (MariaDB's, MySQL's untagged one): :class:`GtidRead`, the GTID and whether the
  transaction stands alone;
- a query event whose text is exactly ``BEGIN``, and an XID event: :data:`BEGIN_READ`, :data:`XID_READ`;
- a table map whose body was parsed before (:mod:`gtidsnap.source.binlog.table_maps`): the reader's
  table-id map is brought up to date, as the library does, and the packet is not handed out;
- a packet of a type the reader would drop unparsed (not in its ``only_events``, such as MariaDB's
  annotate rows): dropped.

Any other packet (rows, DDL and other queries, rotates, format descriptions, heartbeats, an EOF or
anything laid out unexpectedly) is pushed back onto the connection (:class:`DumpConnection`) and read
by the library's ``fetchone``, so its bookkeeping (rotates, the server version, post-header lengths,
table ids) stays its own. Like the library, it moves ``log_pos`` on with every event it reads.

Used only where the library's gate allows it (:mod:`gtidsnap.source.binlog.library`), once the reader
is connected, and with no ``skip_to_timestamp`` or ``end_log_pos`` (gtidsnap sets neither); otherwise
every packet is the library's."""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from pymysql.connections import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.constants.BINLOG import (
    GTID_LOG_EVENT,
    MARIADB_GTID_EVENT,
    QUERY_EVENT,
    TABLE_MAP_EVENT,
    XID_EVENT,
)
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from gtidsnap.core.gtid import Gtid, MariadbGtid, MysqlGtid
from gtidsnap.source.binlog import rows_events, table_maps
from gtidsnap.source.binlog.library import DumpConnection, GuardedConnect, library_gate
from gtidsnap.source.binlog.transaction_events import begin_fields

# The OK byte, then the event header: timestamp, type, server id, event size, next position, flags.
EVENT_HEADER = struct.Struct("<BIBIIIH")
HEADER_SIZE = EVENT_HEADER.size  # 20: the body starts here
MARIADB_GTID_HEAD = struct.Struct("<QIB")  # sequence number, domain id, flags
MYSQL_GTID_HEAD = struct.Struct("<B16sQ")  # commit flag, server uuid, number
MARIADB_FL_STANDALONE = 0x01  # the GTID event's transaction has no BEGIN and no COMMIT/XID


@dataclass(frozen=True, slots=True)
class GtidRead:
    """A transaction's GTID event; ``standalone``: no BEGIN or XID follows (MySQL's always, as its
    BEGIN comes as a query); ``server_id`` and ``timestamp`` of its header."""

    gtid: Gtid
    standalone: bool
    server_id: int = 0
    timestamp: int = 0


@dataclass(frozen=True, slots=True)
class FrameRead:
    """A framing event with nothing in it the translator reads: a ``BEGIN`` query, an XID commit."""

    what: str


BEGIN_READ = FrameRead("BEGIN")
XID_READ = FrameRead("XID")

_SERVER_UUIDS: dict[bytes, str] = {}  # a GTID event's 16 bytes of server id -> the UUID as text


def mysql_gtid(sid: bytes, gno: int) -> MysqlGtid:
    """The untagged GTID of a server's 16 uuid bytes and a number, as ``MysqlGtid.parse`` gives it,
    without writing the UUID as text and parsing it back once a transaction."""
    text = _SERVER_UUIDS.get(sid)
    if text is None:
        if len(_SERVER_UUIDS) > 1024:  # a replica sees a handful of servers; never grow without bound
            _SERVER_UUIDS.clear()
        text = _SERVER_UUIDS[sid] = MysqlGtid.parse(f"{uuid.UUID(bytes=sid)}:1").uuid
    return MysqlGtid.of(text, "", gno)


class FramePackets:
    """``fetchone`` of a reader whose dump connection is a :class:`DumpConnection`; see the module doc."""

    def __init__(self, reader: BinLogStreamReader, guard: GuardedConnect) -> None:
        """``guard``: the reader's ``pymysql_wrapper``, which holds its dump connection once opened."""
        self._reader = reader
        self._guard = guard
        self._dump: DumpConnection | None = None  # once the reader is connected
        self._kw: dict[str, Any] | None = None  # see _event_kw
        allowed = getattr(reader, _PRIVATE + "allowed_events_in_packet", None)
        classes = getattr(BinLogPacketWrapper, "_BinLogPacketWrapper__event_map", None)
        self._on = (
            library_gate().on("frame_packets")
            and isinstance(guard.dump, DumpConnection | None)
            and isinstance(allowed, frozenset)
            and isinstance(classes, dict)
            and not reader.skip_to_timestamp
            and not reader.end_log_pos
        )
        self._dropped = frozenset(t for t, c in (classes or {}).items() if c not in (allowed or ()))
        self._dropped -= {GTID_LOG_EVENT, MARIADB_GTID_EVENT, QUERY_EVENT, TABLE_MAP_EVENT, XID_EVENT}

    def fetchone(self) -> Any:
        """The next event: one of this module's reads, or the library's event (None at an EOF)."""
        reader, dump = self._reader, self._dump
        if dump is None:
            if not self._on or not isinstance(self._guard.dump, DumpConnection) or not _connected(reader):
                return reader.fetchone()
            dump = self._dump = self._guard.dump
        while True:
            data = dump.read_payload()
            if len(data) < HEADER_SIZE or data[0] != 0:  # an EOF, or not an event: the library's
                dump.push_back(MysqlPacket(data, dump.encoding))
                return reader.fetchone()
            _, timestamp, event_type, server_id, event_size, log_pos, flags = EVENT_HEADER.unpack_from(data)
            rows_class = ROWS_CLASSES.get(event_type)
            packet = None
            if rows_class is not None:
                packet = MysqlPacket(data, dump.encoding)
                header = (timestamp, event_type, server_id, event_size, log_pos, flags)
                read = rows_events.framed_rows_event(rows_class, packet, header, reader, self._event_kw())
            else:
                read = self._read(event_type, server_id, data, event_size, timestamp)
            if read is None:
                dump.push_back(packet if packet is not None else MysqlPacket(data, dump.encoding))
                return reader.fetchone()
            if log_pos:
                reader.log_pos = log_pos
            if read is not _DROPPED:
                return read

    def _read(self, event_type: int, server_id: int, data: bytes, event_size: int, timestamp: int) -> Any:
        """What the packet holds, :data:`_DROPPED` for nothing to hand out, None for the library's."""
        if event_type == MARIADB_GTID_EVENT:
            if len(data) < HEADER_SIZE + MARIADB_GTID_HEAD.size:
                return None
            seq, domain, flags = MARIADB_GTID_HEAD.unpack_from(data, HEADER_SIZE)
            standalone = bool(flags & MARIADB_FL_STANDALONE)
            return GtidRead(MariadbGtid.of(domain, server_id, seq), standalone, server_id, timestamp)
        if event_type == XID_EVENT:
            return XID_READ
        if event_type == GTID_LOG_EVENT:
            if len(data) < HEADER_SIZE + MYSQL_GTID_HEAD.size:
                return None
            _, sid, gno = MYSQL_GTID_HEAD.unpack_from(data, HEADER_SIZE)
            return GtidRead(mysql_gtid(sid, gno), True, server_id, timestamp)
        if event_type == TABLE_MAP_EVENT:
            known = table_maps.remembered(self._body(data, event_size, self._event_kw()))
            if known is None:
                return None
            table_id, table = known
            self._reader.table_map[table_id] = table
            return _DROPPED
        if event_type == QUERY_EVENT:
            kw = self._event_kw()
            begin = begin_fields(self._body(data, event_size, kw), kw["post_header_lengths"])
            return BEGIN_READ if begin is not None else None
        return _DROPPED if event_type in self._dropped else None

    def _event_kw(self) -> dict[str, Any]:
        """The keywords the reader's ``fetchone`` gives an event (its settings, the server's version and
        post-header lengths as its last format description gave them)."""
        reader = self._reader
        version, lengths = reader.mysql_version, getattr(reader, _PRIVATE + "post_header_lengths", None)
        kw = self._kw
        if kw is None or kw["mysql_version"] is not version or kw["post_header_lengths"] is not lengths:
            kw = self._kw = {name: getattr(reader, _PRIVATE + name, None) for name in _READER_KW}
            kw.update(mysql_version=version, post_header_lengths=lengths)
        return kw

    @staticmethod
    def _body(data: bytes, event_size: int, kw: dict[str, Any]) -> bytes:
        """The event's body: after the header, before the checksum (as the library's parse sees it)."""
        checksum = 4 if kw["use_checksum"] else 0
        return data[HEADER_SIZE : HEADER_SIZE + event_size - 19 - checksum]


_DROPPED = FrameRead("dropped")
_PRIVATE = "_BinLogStreamReader__"
_READER_KW = (  # the reader's own settings it passes every event (1.0.17's names)
    "only_tables",
    "ignored_tables",
    "only_schemas",
    "ignored_schemas",
    "freeze_schema",
    "ignore_decode_errors",
    "verify_checksum",
    "optional_meta_data",
    "enable_logging",
    "use_column_name_cache",
    "use_checksum",
)
ROWS_CLASSES = {  # the rows events read here whole when plain (rows_events.framed_rows_event)
    BINLOG.WRITE_ROWS_EVENT_V1: WriteRowsEvent,
    BINLOG.WRITE_ROWS_EVENT_V2: WriteRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V1: UpdateRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V2: UpdateRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V1: DeleteRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V2: DeleteRowsEvent,
}


def _connected(reader: BinLogStreamReader) -> bool:
    return bool(
        getattr(reader, _PRIVATE + "connected_stream", False)
        and getattr(reader, _PRIVATE + "connected_ctl", False)
    )
