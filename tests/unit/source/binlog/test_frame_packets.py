"""Framing packets read without the library's event objects give what the library's own read gives.

A real ``BinLogStreamReader`` (1.0.17), marked connected, reads scripted packets from a dump connection
that is gtidsnap's :class:`DumpConnection` over a socket's bytes; the same packets go once through its plain
``fetchone`` and once through :class:`FramePackets`. What the translator reads of each must be equal,
the reader's position too, and the framing packets must not have reached the library."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysql.connections import MysqlPacket
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants.BINLOG import (
    GTID_LOG_EVENT,
    MARIADB_ANNOTATE_ROWS_EVENT,
    MARIADB_GTID_EVENT,
    QUERY_EVENT,
    XID_EVENT,
)
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent, XidEvent

from gtidsnap.core.gtid import MariadbGtid
from gtidsnap.source.binlog import transaction_events
from gtidsnap.source.binlog.frame_packets import (
    BEGIN_READ,
    XID_READ,
    FramePackets,
    GtidRead,
    mysql_gtid,
)
from gtidsnap.source.binlog.library import DumpConnection, GuardedConnect
from gtidsnap.source.binlog.translator import EVENTS_READ

SERVER_ID = 7


class _Control:
    """The control connection, as far as an event's parse touches it."""

    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mysql"


class _Dump(DumpConnection):  # type: ignore[misc]
    """A dump connection whose socket holds the packets the server would send, each with its 4-byte
    header (length, sequence number), read by PyMySQL's own ``_read_packet`` or cut out of blocks."""

    def __init__(self, packets: list[MysqlPacket]) -> None:
        wire = b"".join(
            len(p._data).to_bytes(3, "little") + bytes([seq % 256]) + p._data for seq, p in enumerate(packets)
        )
        self._rfile = io.BufferedReader(io.BytesIO(wire))  # type: ignore[arg-type]
        self._next_seq_id = 0
        self._read_timeout = self._current_timeout = None
        self._result = None
        self.encoding = "utf8"

    @property
    def reads(self) -> int:
        """Packets read off the socket (a packet given back and read again is read once)."""
        return self._next_seq_id


def _packet(event_type: int, body: bytes, log_pos: int) -> MysqlPacket:
    """An OK byte, the 19-byte event header, the body and its CRC32, as the dump connection reads them."""
    size = 19 + len(body) + 4
    header = struct.pack("<IBIIIH", 1_700_000_000, event_type, SERVER_ID, size, log_pos, 0)
    return MysqlPacket(b"\x00" + header + body + struct.pack("<I", zlib.crc32(header + body)), "utf8")


def _query_body(query: bytes, schema: bytes = b"shop") -> bytes:
    status = b"\x00" + struct.pack("<I", 0)  # flags2
    return struct.pack("<IIBHH", 42, 3, len(schema), 0, len(status)) + status + schema + b"\x00" + query


def _reader(packets: list[MysqlPacket]) -> tuple[BinLogStreamReader, GuardedConnect, _Dump]:
    reader = BinLogStreamReader(
        connection_settings={}, server_id=99, only_events=EVENTS_READ, filter_non_implemented_events=False
    )
    dump = _Dump(packets)
    guard = GuardedConnect()
    guard.dump = dump
    reader._stream_connection = dump
    reader._ctl_connection = _Control()
    reader.mysql_version = (8, 0, 40)
    reader._BinLogStreamReader__connected_stream = True  # as after its first fetchone
    reader._BinLogStreamReader__connected_ctl = True
    reader._BinLogStreamReader__use_checksum = True
    return reader, guard, dump


def _read(raw: Any) -> tuple[Any, ...]:
    """What the translator takes from an event."""
    if isinstance(raw, GtidRead):
        return ("gtid", raw.gtid, raw.standalone)
    if isinstance(raw, MariadbGtidEvent):
        return ("gtid", MariadbGtid(raw.domain_id, raw.server_id, raw.gtid_seq_no), bool(raw.flags & 1))
    if isinstance(raw, GtidEvent):
        return ("gtid", mysql_gtid(raw.sid, raw.gno), True)
    if raw is XID_READ or isinstance(raw, XidEvent):
        return ("xid",)
    if raw is BEGIN_READ:
        return ("query", "BEGIN")
    if isinstance(raw, QueryEvent):
        return ("query", raw.query)
    return ("other", type(raw).__name__)


@pytest.fixture(autouse=True)
def _library_parses() -> Iterator[None]:
    transaction_events.uninstall()  # the library's own parse of what reaches it
    yield
    transaction_events.uninstall()


def _event(draw: Any) -> tuple[int, bytes]:
    kind = draw(st.sampled_from(["mariadb-gtid", "mysql-gtid", "begin", "query", "xid", "annotate"]))
    if kind == "mariadb-gtid":
        seq, domain, flags = (
            draw(st.integers(0, 2**64 - 1)),
            draw(st.integers(0, 2**32 - 1)),
            draw(st.integers(0, 255)),
        )
        return MARIADB_GTID_EVENT, struct.pack("<QIB", seq, domain, flags) + draw(st.binary(max_size=12))
    if kind == "mysql-gtid":
        sid, gno = draw(st.binary(min_size=16, max_size=16)), draw(st.integers(1, 2**63 - 1))
        return GTID_LOG_EVENT, struct.pack("<B16sQBQQ", 1, sid, gno, 2, 0, 1)
    if kind == "begin":
        return QUERY_EVENT, _query_body(b"BEGIN")
    if kind == "query":
        text = draw(st.sampled_from([b"COMMIT", b"CREATE TABLE t (id INT)", b"begin", b"BEGIN WORK"]))
        return QUERY_EVENT, _query_body(text)
    if kind == "xid":
        return XID_EVENT, struct.pack("<Q", draw(st.integers(0, 2**64 - 1)))
    return MARIADB_ANNOTATE_ROWS_EVENT, b"UPDATE t SET a = 1"


@st.composite
def _events(draw: Any) -> list[tuple[int, bytes]]:
    return [_event(draw) for _ in range(draw(st.integers(1, 12)))]


@given(events=_events())
def test_framing_packets_read_as_the_library_reads_them(events: list[tuple[int, bytes]]) -> None:
    def packets() -> list[MysqlPacket]:
        return [_packet(kind, body, 4 + 100 * i) for i, (kind, body) in enumerate(events)]

    handed_out = sum(1 for kind, _ in events if kind != MARIADB_ANNOTATE_ROWS_EVENT)
    plain, _, plain_dump = _reader(packets())
    library = [_read(plain.fetchone()) for _ in range(handed_out)]
    framed, guard, framed_dump = _reader(packets())
    frames = FramePackets(framed, guard)
    ours = [_read(frames.fetchone()) for _ in range(handed_out)]
    assert ours == library
    assert framed.log_pos == plain.log_pos  # the position moves on with every event, as the library's
    assert framed_dump.reads == plain_dump.reads  # each read once off the connection: a push back is no read


def test_framing_packets_never_reach_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    for event_class in (MariadbGtidEvent, GtidEvent, XidEvent, QueryEvent):
        original = event_class.__init__

        def counted(self: Any, *args: Any, __original: Any = original, **kw: Any) -> None:
            built.append(type(self).__name__)
            __original(self, *args, **kw)

        monkeypatch.setattr(event_class, "__init__", counted)
    bodies = [
        (MARIADB_GTID_EVENT, struct.pack("<QIB", 5, 0, 0)),
        (MARIADB_ANNOTATE_ROWS_EVENT, b"UPDATE t SET a = 1"),
        (QUERY_EVENT, _query_body(b"BEGIN")),
        (XID_EVENT, struct.pack("<Q", 9)),
        (QUERY_EVENT, _query_body(b"DROP TABLE t")),
    ]
    reader, guard, _ = _reader([_packet(kind, body, 4 + i) for i, (kind, body) in enumerate(bodies)])
    frames = FramePackets(reader, guard)
    got = [_read(frames.fetchone()) for _ in range(4)]
    assert got == [("gtid", MariadbGtid(0, SERVER_ID, 5), False), ("query", "BEGIN"), ("xid",),
                   ("query", "DROP TABLE t")]  # fmt: skip
    assert built == ["QueryEvent"]  # the DDL alone, by the library


def test_an_unconnected_reader_is_the_library_s_alone() -> None:
    reader, guard, dump = _reader([_packet(XID_EVENT, struct.pack("<Q", 1), 4)])
    reader._BinLogStreamReader__connected_stream = False
    reader._BinLogStreamReader__connect_to_stream = lambda: setattr(
        reader, "_BinLogStreamReader__connected_stream", True
    )
    assert isinstance(FramePackets(reader, guard).fetchone(), XidEvent)  # it connects, then reads
    assert dump.reads == 1
