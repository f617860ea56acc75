"""The one-step read of a rows event's header gives what the library's own parse gives.

Event bytes laid out as servers write them go through the library's real packet wrapper (PyMySQL's packet
over them), once with the library's parse and once with gtidsnap's: every attribute must be equal, and
the rows after the header must be read from the same place (what is left of the packet is the same)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysqlreplication.constants import BINLOG
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)
from pymysqlreplication.table import Table

from gtidsnap.source.binlog import rows_events
from tests.unit.source.binlog.test_transaction_events import MYSQL_VERSION, _Control, _packet

TABLE_ID = 4242
CLASSES = {
    BINLOG.WRITE_ROWS_EVENT_V1: WriteRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V1: UpdateRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V1: DeleteRowsEvent,
    BINLOG.WRITE_ROWS_EVENT_V2: WriteRowsEvent,
    BINLOG.UPDATE_ROWS_EVENT_V2: UpdateRowsEvent,
    BINLOG.DELETE_ROWS_EVENT_V2: DeleteRowsEvent,
    BINLOG.PARTIAL_UPDATE_ROWS_EVENT: PartialUpdateRowsEvent,
}
V2 = {BINLOG.WRITE_ROWS_EVENT_V2, BINLOG.UPDATE_ROWS_EVENT_V2, BINLOG.DELETE_ROWS_EVENT_V2}
V2 |= {BINLOG.PARTIAL_UPDATE_ROWS_EVENT}


@pytest.fixture
def library_and_ours() -> Iterator[None]:
    rows_events.uninstall()
    yield
    rows_events.uninstall()


def _body(
    event_type: int, table_id: int, flags: int, count: int, bitmaps: bytes, extra: bytes, rows: bytes
) -> bytes:
    head = table_id.to_bytes(6, "little") + struct.pack("<H", flags)
    if event_type in V2:
        head += struct.pack("<H", 2 + len(extra)) + extra
    column_count = bytes([count]) if count < 251 else b"\xfc" + struct.pack("<H", count)
    return head + column_count + bitmaps + rows


def _parse(
    event_type: int, body: bytes, table_map: dict[int, Any], lengths: list[int] | None
) -> tuple[Any, Any]:
    wrapper = BinLogPacketWrapper(
        _packet(event_type, body), table_map, _Control(), MYSQL_VERSION, True, {CLASSES[event_type]},
        None, None, None, None, False, False, False, False, False, False, lengths,
    )  # fmt: skip
    return wrapper, wrapper.event


def _attributes(event: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(event).items() if k not in ("packet", "table_map", "_ctl_connection")}


def _both(
    event_type: int, body: bytes, table_map: dict[int, Any], lengths: list[int] | None = None
) -> tuple[Any, Any]:
    rows_events.uninstall()
    library = _parse(event_type, body, table_map, lengths)
    rows_events.install()
    ours = _parse(event_type, body, table_map, lengths)
    rows_events.uninstall()
    return library, ours


def _table(count: int) -> Table:
    return Table(TABLE_ID, "shop", "orders", [f"c{i}" for i in range(count)], primary_key="c0")


def _same(library: tuple[Any, Any], ours: tuple[Any, Any]) -> None:
    (library_wrapper, library_event), (our_wrapper, our_event) = library, ours
    assert (our_event is None) == (library_event is None)
    if library_event is None:
        return
    assert _attributes(our_event) == _attributes(library_event)
    assert our_wrapper.read_bytes == library_wrapper.read_bytes
    assert our_wrapper.packet.read_all() == library_wrapper.packet.read_all()  # rows start where they did


@pytest.mark.usefixtures("library_and_ours")
@given(
    event_type=st.sampled_from(sorted(CLASSES)),
    flags=st.integers(0, 2**16 - 1),
    count=st.integers(1, 300),
    extra=st.sampled_from(["none", "partition", "ndb"]),  # the extra data of a version 2 event
    known=st.booleans(),
    data=st.data(),
)
def test_a_rows_event_header_reads_as_the_library_reads_it(
    event_type: int, flags: int, count: int, extra: str, known: bool, data: st.DataObject
) -> None:
    width = (count + 7) // 8
    maps = 2 if CLASSES[event_type] in (UpdateRowsEvent, PartialUpdateRowsEvent) else 1
    # partition ids (an update's two), or NDB information (type, length, format, the rest)
    extras = {"none": b"", "partition": b"\x01" + b"\x07\x00" * maps, "ndb": b"\x00\x04\x01ab"}
    bitmaps = data.draw(st.binary(min_size=maps * width, max_size=maps * width))
    rows = data.draw(st.binary(min_size=0, max_size=80))
    body = _body(
        event_type, TABLE_ID, flags, count, bitmaps, extras[extra] if event_type in V2 else b"", rows
    )
    table_map = {TABLE_ID: _table(count)} if known else {}
    _same(*_both(event_type, body, table_map))


@pytest.mark.usefixtures("library_and_ours")
@pytest.mark.parametrize("event_type", [BINLOG.UPDATE_ROWS_EVENT_V1, BINLOG.WRITE_ROWS_EVENT_V2])
def test_a_plain_header_is_read_in_one_step_and_any_other_by_the_library(event_type: int) -> None:
    """The fast read is taken where it may be (a mutation of its conditions fails the test above)."""
    maps = 2 if event_type == BINLOG.UPDATE_ROWS_EVENT_V1 else 1
    body = _body(event_type, TABLE_ID, 1, 6, b"\x3f" * maps, b"", b"rows")
    table_map = {TABLE_ID: _table(6)}
    assert (
        rows_events.plain_header(_packet_wrapper(event_type, body), len(body), table_map, {}, maps)
        is not None
    )
    lengths = [0] * 40
    lengths[event_type - 1] = 12  # a longer post-header than the event type defines: the library's
    _same(*_both(event_type, body[:6] + b"\x00" * 4 + body[6:], table_map, lengths))
    wrapper = _packet_wrapper(event_type, body)
    assert (
        rows_events.plain_header(wrapper, len(body), table_map, {"post_header_lengths": lengths}, maps)
        is None
    )
    assert rows_events.plain_header(wrapper, len(body), table_map, {"only_tables": ["orders"]}, maps) is None


class _Unparsed:
    """What an event's parse sees of its packet wrapper before reading (the peek only)."""

    def __init__(self, event_type: int, body: bytes) -> None:
        packet = _packet(event_type, body)
        packet.read(20)  # the OK byte and the event header, as the wrapper reads them
        self.packet = packet
        self.event_type = event_type


def _packet_wrapper(event_type: int, body: bytes) -> Any:
    return _Unparsed(event_type, body)


class _Reader:
    """What ``framed_rows_event`` reads of the library's reader."""

    def __init__(self, table_map: dict[int, Any]) -> None:
        self.table_map = table_map
        self._ctl_connection = _Control()


FRAMED_KW = dict(
    mysql_version=MYSQL_VERSION, only_tables=None, ignored_tables=None, only_schemas=None,
    ignored_schemas=None, freeze_schema=False, ignore_decode_errors=False, verify_checksum=False,
    optional_meta_data=False, enable_logging=False, use_column_name_cache=False, use_checksum=True,
    post_header_lengths=None,
)  # fmt: skip


@pytest.mark.usefixtures("library_and_ours")
@given(
    event_type=st.sampled_from(sorted(set(CLASSES) - {BINLOG.PARTIAL_UPDATE_ROWS_EVENT})),
    flags=st.integers(0, 2**16 - 1),
    count=st.integers(1, 300),
    extra=st.booleans(),
    known=st.booleans(),
    data=st.data(),
)
def test_a_framed_rows_event_is_the_library_s_event_and_wrapper(
    event_type: int, flags: int, count: int, extra: bool, known: bool, data: st.DataObject
) -> None:
    """Built without the wrapper's call (frame_packets): every attribute of the event and of its packet
    wrapper as the library sets them, the rows left where they were; or None, the packet untouched."""
    maps = 2 if CLASSES[event_type] is UpdateRowsEvent else 1
    bitmaps = data.draw(st.binary(min_size=maps * ((count + 7) // 8), max_size=maps * ((count + 7) // 8)))
    rows = data.draw(st.binary(min_size=0, max_size=80))
    partition = b"\x01" + b"\x07\x00" * maps if extra and event_type in V2 else b""
    body = _body(event_type, TABLE_ID, flags, count, bitmaps, partition, rows)
    table_map = {TABLE_ID: _table(count)} if known else {}
    library_wrapper, library_event = _parse(event_type, body, table_map, None)
    packet = _packet(event_type, body)
    header = struct.unpack_from("<xIBIIIH", packet._data)
    event = rows_events.framed_rows_event(CLASSES[event_type], packet, header, _Reader(table_map), FRAMED_KW)
    if event is None:
        assert packet._position == 0  # untouched: the library reads it
        assert not known or partition or count >= 251
        return
    assert _attributes(event) == _attributes(library_event)
    assert event.table_map is table_map and event.packet.event is event
    skip = ("packet", "event", "_BinLogPacketWrapper__data_buffer")
    assert {k: v for k, v in vars(event.packet).items() if k not in skip} == {
        k: v for k, v in vars(library_wrapper).items() if k not in skip
    }
    assert event.packet.read_all() == library_wrapper.packet.read_all()  # rows start where they did
