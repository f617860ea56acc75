"""MySQL protocol packets cut out of blocks of a connection's socket bytes.

PyMySQL reads a packet in two buffered reads (its 4-byte header, then its payload), unpacks the header,
checks the sequence number, joins the parts and wraps them in a packet object: a few microseconds of
interpreter time a packet, which is most of what a small packet costs. Where packets come in long runs
(a chunk's result rows, a binlog dump) they are cut here out of blocks of whatever the socket has, with
the same checks and the same outcomes as PyMySQL's ``_read_packet``: each packet's sequence number, a
payload split at 16 MiB, the connection lost (closed, then ``OperationalError`` 2013). An error packet
is the caller's to raise (it knows what the connection was doing).

Used by :mod:`gtidsnap.source.result_rows` (chunk reads) and
:class:`gtidsnap.source.binlog.library.DumpConnection` (the binlog stream).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import Any, NoReturn

from pymysql import err as pymysql_err
from pymysql.constants import CR

MAX_PACKET = 2**24 - 1  # a payload this long continues in the next packet
READ_BLOCK = 1 << 18  # bytes asked of the socket at a time


def read_block(conn: Any, rfile: Any, size: int = READ_BLOCK) -> bytes:
    """What the socket has (at most ``size`` bytes; waits only while it has nothing), as PyMySQL's
    ``_read_bytes`` reads: a lost connection closes it and is ``OperationalError`` 2013."""
    while True:
        try:
            data: bytes = rfile.read1(size)
            break
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            conn._force_close()
            raise pymysql_err.OperationalError(
                CR.CR_SERVER_LOST, f"Lost connection to MySQL server during query ({exc})"
            ) from exc
        except BaseException:
            conn._force_close()
            raise
    if not data:
        conn._force_close()
        raise pymysql_err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
    return data


def wrong_sequence(conn: Any, got: int, expected: int) -> NoReturn:
    """PyMySQL's outcome of a packet out of sequence: the connection closed, and its error."""
    conn._force_close()
    if got == 0:  # MariaDB sends an error packet numbered 0 when it shuts down
        raise pymysql_err.OperationalError(CR.CR_SERVER_LOST, "Lost connection to MySQL server during query")
    raise pymysql_err.InternalError(f"Packet sequence number wrong - got {got} expected {expected}")


def long_payload(conn: Any, rfile: Any, buf: bytes, p: int, seq: int) -> tuple[bytes, int, int, bytes]:
    """A payload split into 16 MiB packets, the first at ``p`` (its sequence number checked already,
    ``seq`` the next one expected): the whole payload, where the packet after it starts, the next
    sequence number, and the buffer (blocks read meanwhile appended)."""
    parts: list[bytes] = []
    n = MAX_PACKET
    while True:
        q = p + 4 + n
        while q > len(buf):
            buf += read_block(conn, rfile)
        parts.append(buf[p + 4 : q])
        p = q
        if n < MAX_PACKET:
            return b"".join(parts), p, seq, buf
        while p + 4 > len(buf):
            buf += read_block(conn, rfile)
        n = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
        if buf[p + 3] != seq:
            wrong_sequence(conn, buf[p + 3], seq)
        seq = (seq + 1) & 0xFF


def payloads(conn: Any, block: int = READ_BLOCK) -> Iterator[bytes]:
    """The payloads of the connection's packets one after the other (a split one whole), cut out of
    blocks read ahead; waits for the socket only when the block has no whole packet left. Once this
    reads a connection, every read of it must come through here (the block holds bytes PyMySQL's own
    reads would never see). ``block``: the most bytes taken off the socket at once (what is read ahead of
    the packet handed out). A generator: its place in the block stays in its frame, so the next packet
    costs a resume, not a call. A failure (raised as PyMySQL raises it) ends it. ``conn.bytes_ahead``
    says how many bytes of the block are left after each packet handed out (the next read waits for
    the socket only when none are)."""
    buf, p, end = b"", 0, 0
    rfile = conn._rfile
    while True:
        if p + 4 <= end:
            n = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
            q = p + 4 + n
            if q <= end or n == MAX_PACKET:
                seq = conn._next_seq_id
                if buf[p + 3] != seq:
                    wrong_sequence(conn, buf[p + 3], seq)
                if n == MAX_PACKET:
                    payload, p, conn._next_seq_id, buf = long_payload(conn, rfile, buf, p, (seq + 1) & 0xFF)
                    end = len(buf)
                    conn.bytes_ahead = end - p
                    yield payload
                    continue
                conn._next_seq_id = (seq + 1) & 0xFF
                start, p = p + 4, q
                conn.bytes_ahead = end - p
                yield buf[start:q]
                continue
        more = read_block(conn, rfile, block)
        buf = buf[p:] + more if p < end else more
        p, end = 0, len(buf)
