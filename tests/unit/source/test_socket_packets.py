"""Packets cut out of blocks of a socket's bytes are PyMySQL's packets, with PyMySQL's errors.

The same bytes, arriving in pieces of any size, go once through PyMySQL's own ``_read_packet`` and once
through :func:`socket_packets.payloads` (and :class:`DumpConnection`, which reads with it): the payloads, the
sequence numbers after them and every failure must be the same."""

from __future__ import annotations

import io

import pymysql
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql.connections import Connection

from gtidsnap.source import socket_packets
from gtidsnap.source.binlog.library import DumpConnection
from gtidsnap.source.socket_packets import MAX_PACKET
from tests.unit.source.test_result_rows import Trickle, packets


class Wired(DumpConnection):  # type: ignore[misc]
    """A connection over ``data`` (PyMySQL's own reads work on it too: this skips only its connect)."""

    def __init__(self, data: bytes, sizes: list[int], seq: int) -> None:
        self._rfile = io.BufferedReader(Trickle(data, sizes), buffer_size=7)
        self._next_seq_id = seq
        self._read_timeout = self._current_timeout = None
        self._result = None
        self._sock = None
        self.encoding = "utf8"
        self.closed = False

    def _force_close(self) -> None:
        self.closed = True


def wire(payloads: list[bytes], seq: int) -> bytes:
    """Each payload as packets (split at 16 MiB), numbered on from ``seq``."""
    return packets(payloads, seq)[0]


def pymysql_reads(conn: Connection, count: int) -> list[bytes]:
    return [bytes(Connection._read_packet(conn)._data) for _ in range(count)]


def block_reads(conn: Connection, count: int) -> list[bytes]:
    cut = socket_packets.payloads(conn)
    return [next(cut) for _ in range(count)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=40).filter(lambda b: b[:1] != b"\xff"), min_size=1, max_size=20),
    st.integers(0, 255),
    st.lists(st.integers(1, 30), max_size=30),
)
def test_payloads_are_pymysqls_whatever_the_pieces(payloads: list[bytes], seq: int, sizes: list[int]) -> None:
    data = wire(payloads, seq)
    theirs = Wired(data, sizes, seq)
    expected = pymysql_reads(theirs, len(payloads))
    ours = Wired(data, sizes, seq)
    assert block_reads(ours, len(payloads)) == expected == payloads
    assert ours._next_seq_id == theirs._next_seq_id and not ours.closed


def test_a_payload_of_16_mib_or_more_is_whole() -> None:
    payloads = [b"a" * (MAX_PACKET - 1), b"c" * (MAX_PACKET + 5), b"d"]
    conn = Wired(wire(payloads, 250), [70_000] * 5, 250)
    assert block_reads(conn, len(payloads)) == payloads
    assert conn._next_seq_id == (250 + 1 + 2 + 1) & 0xFF


@pytest.mark.parametrize(("got", "error", "code"), [(0, pymysql.err.OperationalError, 2013),
                                                    (9, pymysql.err.InternalError, None)])  # fmt: skip
def test_a_packet_out_of_sequence_is_pymysqls_error(
    got: int, error: type[Exception], code: int | None
) -> None:
    data = wire([b"ok"], 4) + wire([b"late"], got)
    for read in (lambda c: pymysql_reads(c, 2), lambda c: block_reads(c, 2)):
        conn = Wired(data, [], 4)
        with pytest.raises(error) as raised:
            read(conn)
        assert conn.closed
        if code is not None:
            assert raised.value.args[0] == code


@pytest.mark.parametrize("cut", [0, 2, 5, 7])
def test_a_connection_lost_mid_packet_is_closed_and_2013(cut: int) -> None:
    data = wire([b"first", b"second"], 1)[: len(wire([b"first"], 1)) + cut]
    conn = Wired(data, [3], 1)
    assert conn.read_payload() == b"first"
    with pytest.raises(pymysql.err.OperationalError) as raised:
        conn.read_payload()
    assert raised.value.args[0] == 2013 and conn.closed
    with pytest.raises(pymysql.err.OperationalError) as raised:
        conn.read_payload()  # and on every later read
    assert raised.value.args[0] == 2013


def test_the_dump_connection_raises_an_error_packet_and_reads_on_from_its_blocks() -> None:
    error = b"\xff" + (1236).to_bytes(2, "little") + b"#HY000Could not find first log file name"
    conn = Wired(wire([b"\x00event", b"\x00next", b"\x00last", error], 1), [], 1)
    assert conn.read_payload() == b"\x00event"
    assert conn._read_packet()._data == b"\x00next"  # the library's read: from the same blocks
    conn.push_back(conn._read_packet())
    assert conn.read_payload() == b"\x00last"  # the packet given back, read again
    with pytest.raises(pymysql.err.OperationalError) as raised:
        conn.read_payload()
    assert raised.value.args[0] == 1236
