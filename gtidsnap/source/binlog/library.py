"""What python-mysql-replication 1.0.17 needs from gtidsnap to be used safely, kept apart from the
binlog adapter (:mod:`gtidsnap.source.binlog.stream`): the event types it cannot decode (which must stop the
stream, not be skipped), a guard against its silent redial from the start
position, and the empty GTID set it accepts as "from the beginning"; and what gtidsnap's faster parses of
some of its events share (:mod:`~gtidsnap.source.binlog.table_maps`,
:mod:`~gtidsnap.source.binlog.transaction_events`, :mod:`~gtidsnap.source.binlog.rows_events`): the
versions they were tested on, an event's body."""

from __future__ import annotations

import select
import ssl
from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import pymysql
from pymysql.connections import MysqlPacket
from pymysql.constants.CR import CR_SERVER_LOST

from gtidsnap.source.socket_packets import payloads

# The library versions whose internals gtidsnap's patches rely on (table_maps, *_events).
TESTED_VERSIONS = ("1.0.17",)


def library_tested() -> bool:
    """Is the installed python-mysql-replication one whose internals the patches were tested on?"""
    return version("mysql-replication") in TESTED_VERSIONS


# Event types 1.0.17 cannot decode and that must not be skipped silently (they hold rows or GTIDs).
UNSUPPORTED_EVENT_TYPES = {
    40: "a compressed transaction payload (set binlog_transaction_compression=OFF)",
    42: "a tagged GTID (MySQL 8.4 gtid tags are not supported by python-mysql-replication 1.0.17)",
    165: "a compressed query event (set log_bin_compress=OFF)",
    166: "a compressed row event (set log_bin_compress=OFF)",
    167: "a compressed row event (set log_bin_compress=OFF)",
    168: "a compressed row event (set log_bin_compress=OFF)",
    169: "a compressed row event (set log_bin_compress=OFF)",
    170: "a compressed row event (set log_bin_compress=OFF)",
    171: "a compressed row event (set log_bin_compress=OFF)",
}


class LibraryReconnect(Exception):
    """Raised from inside ``fetchone`` when the library tries to redial on its own (see the docstring
    of :mod:`gtidsnap.source.binlog.stream`: its redial would start over from the original position)."""


DUMP_READ_BLOCK = 16 * 1024
"""The most bytes a dump connection takes off its socket at once: about what PyMySQL's own buffered reads
hold (8 KiB, or one rows event), so a connection that drops inside a transaction is still noticed there,
not a block of read-ahead later."""


class DumpConnection(pymysql.connections.Connection):  # type: ignore[misc]
    """PyMySQL's connection, its packets cut out of blocks of the socket's bytes once
    :meth:`read_payload` is first called (:func:`gtidsnap.source.socket_packets.payloads`), with one
    packet that can be given back to be read again by the library's ``fetchone``
    (:mod:`gtidsnap.source.binlog.frame_packets` reads packets before it, most without a packet object)."""

    _pushed: MysqlPacket | None = None
    _payloads: Iterator[bytes] | None = None
    bytes_ahead = 0  # bytes of the block read ahead, after the last packet cut (socket_packets.payloads)

    def has_data(self) -> bool:
        """Whether a packet's bytes are here or at the socket, so that a read would not wait for the
        server (the stream reads ahead only then)."""
        if self._pushed is not None or self.bytes_ahead > 0:
            return True
        sock = self._sock
        if sock is None:
            return False
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        try:
            return bool(select.select([sock], [], [], 0)[0])
        except (OSError, ValueError):  # closed meanwhile: the next read reports it
            return True

    def push_back(self, packet: MysqlPacket) -> None:
        self._pushed = packet

    def read_payload(self) -> bytes:
        """The next packet's bytes; an error packet raises, as PyMySQL's ``_read_packet`` raises it."""
        pushed = self._pushed
        if pushed is not None:
            self._pushed = None
            return bytes(pushed._data)
        if self._payloads is None:
            self._payloads = payloads(self, DUMP_READ_BLOCK)
        payload = next(self._payloads, None)
        if payload is None:  # the cutting failed before (and raised then): the connection is closed
            raise pymysql.err.OperationalError(CR_SERVER_LOST, "Lost connection to MySQL server during query")
        if payload[:1] == b"\xff":
            MysqlPacket(payload, self.encoding).raise_for_error()
        return payload

    def _read_packet(self, packet_type: Any = MysqlPacket) -> MysqlPacket:
        pushed = self._pushed
        if pushed is not None:
            self._pushed = None
            return pushed
        if self._payloads is not None:  # bytes read ahead: from here on every packet is cut from them
            return packet_type(self.read_payload(), self.encoding)
        return super()._read_packet(packet_type)


class GuardedConnect:
    """``pymysql_wrapper`` that opens one dump connection only (a :class:`DumpConnection`); the control
    one is told apart by the ``cursorclass`` the library gives it."""

    def __init__(self) -> None:
        self.dump: pymysql.connections.Connection | None = None

    def __call__(self, **kwargs: Any) -> pymysql.connections.Connection:
        if "cursorclass" in kwargs:
            if "db" in kwargs:  # the library still uses PyMySQL's deprecated name
                kwargs["database"] = kwargs.pop("db")
            return pymysql.connect(**kwargs)
        if self.dump is not None:
            raise LibraryReconnect("connection lost (the library tried to redial from its start position)")
        self.dump = DumpConnection(**kwargs)
        return self.dump


class EmptyMysqlPosition(list[str]):
    """An empty GTID set the library accepts as ``auto_position``: it tests ``if not auto_position``
    (an empty string would mean "start at the current binlog position", not "from the beginning")
    and encodes a list of GTIDs, here none."""

    def __bool__(self) -> bool:
        return True


def event_head(from_packet: Any, size: int) -> bytes | None:
    """Up to ``size`` bytes from the start of the body of the event the library is about to parse, not
    consumed; None where its packet wrapper is not laid out as in 1.0.17 (the caller then lets the
    library parse)."""
    packet = getattr(from_packet, "packet", None)
    data, position = getattr(packet, "_data", None), getattr(packet, "_position", None)
    if not isinstance(data, bytes | bytearray) or not isinstance(position, int) or size <= 0:
        return None
    if getattr(from_packet, "_BinLogPacketWrapper__data_buffer", b""):  # bytes pushed back: not at the start
        return None
    return bytes(data[position : position + size])


def event_body(from_packet: Any, size: int) -> bytes | None:
    """The body (after the header, before the checksum) of the event the library is about to parse, not
    consumed; None where its packet wrapper is not laid out as in 1.0.17."""
    body = event_head(from_packet, size)
    return body if body is not None and len(body) == size else None
