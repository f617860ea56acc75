"""The one boundary between gtidsnap and the two libraries it borrows for the binlog: python-mysql-replication
(the dump protocol, event headers, table maps, column metadata) and PyMySQL (the connections under it,
and the snapshot's result sets).

Some of gtidsnap's reads rely on their private internals: faster parses of the events every transaction
carries (:mod:`~gtidsnap.source.binlog.table_maps`, :mod:`~gtidsnap.source.binlog.transaction_events`,
:mod:`~gtidsnap.source.binlog.rows_events`), framing packets read off the dump socket
(:mod:`~gtidsnap.source.binlog.frame_packets`), and a chunk's rows cut from the result set's packets
(:mod:`gtidsnap.source.result_rows`). Those are the *fast paths*; each names the libraries it relies on
in :data:`FAST_PATHS`, and is taken only where the installed versions are the ones in
:data:`TESTED_VERSIONS` (written here and nowhere else; ``pyproject.toml`` pins the same, a unit test holds
them equal). Nothing is patched at import: :func:`install` is called when a stream starts (idempotent),
and on an untested version logs one WARNING a process naming what is off and serves the library's
own parses (the same output, slower). The value fixes (:mod:`~gtidsnap.source.binlog.values`) are
correctness, not speed: they are installed on any version that still has the methods they replace, and
a stream refuses to start with a clear error on one that does not. ``gtidsnap_binlog_fast_path{path}``
shows which are on.

Besides: the event types the library cannot decode (which must stop the stream, not be skipped), a guard
against its silent redial from the start position, the empty GTID set it accepts as "from the beginning",
and an event's body for the fast parses."""

from __future__ import annotations

import logging
import select
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pymysql
from pymysql.connections import MysqlPacket
from pymysql.constants.CR import CR_SERVER_LOST

from gtidsnap.source.socket_packets import payloads

log = logging.getLogger(__name__)

TESTED_VERSIONS: Mapping[str, str] = {"mysql-replication": "1.0.17", "PyMySQL": "1.2.4"}
"""The distributions whose internals the fast paths read, and the one version of each they are tested on."""

FAST_PATHS: Mapping[str, tuple[str, ...]] = {
    "table_maps": ("mysql-replication", "PyMySQL"),  # a table map's body parsed once
    "transaction_events": ("mysql-replication", "PyMySQL"),  # BEGIN and GTID events in one step
    "rows_events": ("mysql-replication", "PyMySQL"),  # a rows event's plain header in one step
    "frame_packets": ("mysql-replication", "PyMySQL"),  # framing packets cut off the dump socket
    "chunk_rows": ("PyMySQL",),  # a chunk's rows cut from the result set's packets
}
"""Each fast path and the distributions whose private internals it reads."""


@cache
def installed_versions() -> Mapping[str, str | None]:
    """The installed version of each of :data:`TESTED_VERSIONS`' distributions (None: not found)."""
    found: dict[str, str | None] = {}
    for name in TESTED_VERSIONS:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


@dataclass(frozen=True)
class LibraryGate:
    """The installed versions against the tested ones: which fast paths may be taken."""

    found: Mapping[str, str | None]
    tested: Mapping[str, str]

    @property
    def untested(self) -> tuple[str, ...]:
        """The distributions whose installed version is not the tested one."""
        return tuple(name for name, want in self.tested.items() if self.found.get(name) != want)

    def on(self, path: str) -> bool:
        """May the fast path ``path`` (a key of :data:`FAST_PATHS`) be taken?"""
        return not set(FAST_PATHS[path]) & set(self.untested)

    @property
    def paths(self) -> dict[str, bool]:
        return {path: self.on(path) for path in FAST_PATHS}

    def warning(self) -> str:
        versions = ", ".join(
            f"{name} {self.found.get(name) or '(not found)'} (tested: {self.tested[name]})"
            for name in self.untested
        )
        off = ", ".join(path for path, on in self.paths.items() if not on)
        return (
            f"untested library versions: {versions}. The fast paths that read their internals are off "
            f"({off}): the libraries' own parses serve instead, the same output, slower. Install the "
            "tested versions (scripts/setup installs lock/dev.txt) to have them back"
        )


def library_gate() -> LibraryGate:
    """The installed versions (read once a process) against :data:`TESTED_VERSIONS`."""
    return LibraryGate(installed_versions(), TESTED_VERSIONS)


_LOCK = threading.Lock()
_installed: LibraryGate | None = None  # what install() found, once a process


def _patches() -> tuple[tuple[str, Any], ...]:
    """(fast path, the module that patches it in): imported here, as they import this module."""
    from gtidsnap.source.binlog import rows_events, table_maps, transaction_events

    return (
        ("table_maps", table_maps),
        ("transaction_events", transaction_events),
        ("rows_events", rows_events),
    )


def install() -> LibraryGate:
    """Called when a stream starts: the value fixes, and the fast paths the gate allows (idempotent); one
    WARNING a process on an untested version. Raises RuntimeError (naming the method) where the
    library lacks a method the value fixes replace."""
    global _installed
    from gtidsnap.source.binlog import values

    with _LOCK:
        gate = library_gate()
        values.install()
        for path, module in _patches():
            if gate.on(path):
                module.install()
            else:
                module.uninstall()
        if gate.untested and gate != _installed:  # once a process, not once a stream
            log.warning("%s", gate.warning())
        _installed = gate
        return gate


def installed() -> LibraryGate | None:
    """What :func:`install` found in this process (None: no stream started)."""
    return _installed


def uninstall() -> None:
    """The libraries' own parses again (the benchmark's bare decode, tests); the value fixes stay."""
    global _installed
    with _LOCK:
        for _, module in _patches():
            module.uninstall()
        _installed = None


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
    """``pymysql_wrapper`` that opens one dump connection only (a :class:`DumpConnection`, a plain PyMySQL
    connection where the ``frame_packets`` fast path is off); the control one is told apart by the
    ``cursorclass`` the library gives it."""

    def __init__(self) -> None:
        self.dump: pymysql.connections.Connection | None = None

    def __call__(self, **kwargs: Any) -> pymysql.connections.Connection:
        if "cursorclass" in kwargs:
            if "db" in kwargs:  # the library still uses PyMySQL's deprecated name
                kwargs["database"] = kwargs.pop("db")
            return pymysql.connect(**kwargs)
        if self.dump is not None:
            raise LibraryReconnect("connection lost (the library tried to redial from its start position)")
        dump_class = DumpConnection if library_gate().on("frame_packets") else pymysql.connections.Connection
        self.dump = dump_class(**kwargs)
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
