"""The one-step parse of BEGIN and GTID events gives what the library's own parse gives.

Real event bytes go through the library's real packet wrapper (PyMySQL's packet over them), once with
the library's parse and once with gtidsnap's; what the translator reads must be equal, and any query
other than ``BEGIN`` must still be the library's parse, every attribute alike."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysql.connections import MysqlPacket
from pymysqlreplication.constants.BINLOG import GTID_LOG_EVENT, MARIADB_GTID_EVENT, QUERY_EVENT
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent
from pymysqlreplication.packet import BinLogPacketWrapper

from gtidsnap.source.binlog import transaction_events

MYSQL_VERSION = (8, 0, 40)


class _Control:
    """The control connection, as far as an event's parse touches it."""

    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mysql"


def _packet(event_type: int, body: bytes) -> MysqlPacket:
    """An OK byte, the 19-byte event header, the body and its CRC32, as the dump connection reads them."""
    size = 19 + len(body) + 4
    header = struct.pack("<IBIIIH", 1_700_000_000, event_type, 7, size, 4096, 0)
    checksum = struct.pack("<I", zlib.crc32(header + body))
    return MysqlPacket(b"\x00" + header + body + checksum, "utf8")


def _parse(event_type: int, body: bytes, event_class: type) -> Any:
    wrapper = BinLogPacketWrapper(
        _packet(event_type, body), {}, _Control(), MYSQL_VERSION, True, {event_class},
        None, None, None, None, False, False, False, False, False,
    )  # fmt: skip
    return wrapper.event


def _query_body(query: bytes, schema: bytes = b"shop", error_code: int = 0) -> bytes:
    status = b"\x00" + struct.pack("<I", 0) + b"\x01" + struct.pack("<Q", 1 << 21)  # flags2, sql_mode
    post_header = struct.pack("<IIBHH", 42, 3, len(schema), error_code, len(status))
    return post_header + status + schema + b"\x00" + query


def _gtid_body(flag: int, sid: bytes, gno: int, last: int, seq: int, tail: bytes = b"") -> bytes:
    return struct.pack("<B16sQBQQ", flag, sid, gno, 2, last, seq) + tail


@pytest.fixture
def library_and_ours() -> Iterator[None]:
    transaction_events.uninstall()
    yield
    transaction_events.uninstall()


def _both(event_type: int, body: bytes, event_class: type) -> tuple[Any, Any]:
    transaction_events.uninstall()
    library = _parse(event_type, body, event_class)
    transaction_events.install()
    ours = _parse(event_type, body, event_class)
    transaction_events.uninstall()
    return library, ours


def _fields(event: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(event, name) for name in names}


QUERY_FIELDS = ("query", "schema", "schema_length", "error_code", "status_vars_length", "execution_time",
                "slave_proxy_id", "event_type", "timestamp", "event_size", "_processed")  # fmt: skip
GTID_FIELDS = ("sid", "gno", "gtid", "commit_flag", "lt_type", "last_committed", "sequence_number",
               "event_type", "timestamp", "_processed")  # fmt: skip


@pytest.mark.usefixtures("library_and_ours")
@pytest.mark.parametrize("schema", [b"shop", b"", "grüße".encode()])
def test_a_begin_reads_as_the_library_reads_it(schema: bytes) -> None:
    library, ours = _both(QUERY_EVENT, _query_body(b"BEGIN", schema), QueryEvent)
    assert _fields(ours, QUERY_FIELDS) == _fields(library, QUERY_FIELDS)
    assert ours.query == "BEGIN" and not hasattr(ours, "flags2")  # the one-step read, not the library's


@pytest.mark.usefixtures("library_and_ours")
@pytest.mark.parametrize(
    "query",
    [b"COMMIT", b"CREATE TABLE t (id INT)", b"XA BEGIN", b"begin", b"BEGIN WORK", b"/* x */ BEGIN", b"BEGI"],
)
def test_any_other_query_is_the_library_parse(query: bytes) -> None:
    library, ours = _both(QUERY_EVENT, _query_body(query), QueryEvent)
    assert ours.query == query.decode()
    assert ours.flags2 == library.flags2 == 0  # the status variables: the library read it
    assert _fields(ours, QUERY_FIELDS) == _fields(library, QUERY_FIELDS)


@pytest.mark.usefixtures("library_and_ours")
def test_a_schema_ending_in_begin_is_not_taken_for_the_statement() -> None:
    library, ours = _both(QUERY_EVENT, _query_body(b"COMMIT", b"BEGIN"), QueryEvent)
    assert ours.query == library.query == "COMMIT"


@pytest.mark.usefixtures("library_and_ours")
@given(
    flag=st.integers(0, 255),
    sid=st.binary(min_size=16, max_size=16),
    gno=st.integers(1, 2**63 - 1),
    last=st.integers(0, 2**64 - 1),
    seq=st.integers(0, 2**64 - 1),
    tail=st.binary(max_size=20),  # 8.0's commit timestamps and server versions, unread by either
)
def test_a_gtid_event_reads_as_the_library_reads_it(
    flag: int, sid: bytes, gno: int, last: int, seq: int, tail: bytes
) -> None:
    library, ours = _both(GTID_LOG_EVENT, _gtid_body(flag, sid, gno, last, seq, tail), GtidEvent)
    assert _fields(ours, GTID_FIELDS) == _fields(library, GTID_FIELDS)


MARIADB_GTID_FIELDS = ("server_id", "gtid_seq_no", "domain_id", "flags", "gtid", "event_type", "_processed")


@pytest.mark.usefixtures("library_and_ours")
@given(
    seq=st.integers(0, 2**64 - 1),
    domain=st.integers(0, 2**32 - 1),
    flags=st.integers(0, 255),
    tail=st.binary(max_size=12),  # a commit id or XA fields after the flags, unread by either
)
def test_a_mariadb_gtid_event_reads_as_the_library_reads_it(
    seq: int, domain: int, flags: int, tail: bytes
) -> None:
    body = struct.pack("<QIB", seq, domain, flags) + tail
    library, ours = _both(MARIADB_GTID_EVENT, body, MariadbGtidEvent)
    assert _fields(ours, MARIADB_GTID_FIELDS) == _fields(library, MARIADB_GTID_FIELDS)
