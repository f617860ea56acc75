"""A rows event's header read in one step.

Every rows event (WRITE/UPDATE/DELETE; version 1 as MariaDB writes them, version 2 as MySQL does) opens
with the table id, its flags (version 2: the extra data's length), the column count and the
columns-present bitmap(s). python-mysql-replication reads them in a dozen calls, builds the table's
``data`` dict to find its primary key and checks four table filters gtidsnap never sets: measured on a
stream of 10-row transactions, a quarter of the library's own time a transaction (its packet wrapper
and event objects cost ~34 us a transaction on the machine of session 35, whatever the rows).

:func:`install` patches the three classes' parses so that a plain header (the post-header length its
event type defines, no extra data, fewer than 251 columns, a table map known, no filter set) is read
from one slice of the event; anything else is the library's own parse. Either way exactly the header is
consumed, every attribute the library sets is set alike, and the rows stay where they are for
:mod:`gtidsnap.source.binlog.row_images` (or the library's ``rows``).

Patched in place like :mod:`gtidsnap.source.binlog.table_maps`, on the tested library version only."""

from __future__ import annotations

from typing import Any

from pymysqlreplication.constants import BINLOG
from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from gtidsnap.source.binlog.library import event_head

# The post-header length each plain rows event type defines: table id (6), flags (2), v2: extra length (2).
POST_HEADER = {
    BINLOG.WRITE_ROWS_EVENT_V1: 8,
    BINLOG.UPDATE_ROWS_EVENT_V1: 8,
    BINLOG.DELETE_ROWS_EVENT_V1: 8,
    BINLOG.WRITE_ROWS_EVENT_V2: 10,
    BINLOG.UPDATE_ROWS_EVENT_V2: 10,
    BINLOG.DELETE_ROWS_EVENT_V2: 10,
}
_FILTERS = ("only_tables", "ignored_tables", "only_schemas", "ignored_schemas")
_MOST_BITMAP = (250 + 7) // 8  # a column count of one byte: at most 250 columns

_library_inits = {cls: cls.__init__ for cls in (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)}


def plain_header(from_packet: Any, event_size: int, table_map: Any, kw: dict[str, Any], bitmaps: int) -> Any:
    """``(the header's bytes, the table map's table, the column count, the header's length)`` of a plain
    rows event (see the module doc), read without consuming it; None for anything the library must parse."""
    post = POST_HEADER.get(from_packet.event_type)
    if post is None or any(kw.get(name) is not None for name in _FILTERS):
        return None
    declared = kw.get("post_header_lengths")
    index = from_packet.event_type - 1
    if declared and index < len(declared) and declared[index] != post:
        return None
    head = event_head(from_packet, min(event_size, post + 1 + bitmaps * _MOST_BITMAP))
    if head is None or len(head) < post + 1:
        return None
    if post == 10 and head[8:10] != b"\x02\x00":  # extra data (partition or NDB information)
        return None
    count = head[post]
    size = post + 1 + bitmaps * ((count + 7) // 8)
    table = table_map.get(int.from_bytes(head[:6], "little"))
    if count >= 251 or size > len(head) or table is None:
        return None
    return head, table, count, size


def _fast(cls: type) -> Any:
    library_init = _library_inits[cls]
    bitmaps = 2 if cls is UpdateRowsEvent else 1

    def init(
        self: Any, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any, **kw: Any
    ) -> None:
        found = plain_header(from_packet, event_size, table_map, kw, bitmaps)
        if found is None:
            library_init(self, from_packet, event_size, table_map, ctl_connection, **kw)
            return
        BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kw)
        _read_plain_header(self, from_packet, found, bitmaps, kw)

    return init


def _read_plain_header(self: Any, from_packet: Any, found: Any, bitmaps: int, kw: dict[str, Any]) -> None:
    """What the library's rows event parse sets after its ``BinLogEvent`` part, from ``plain_header``."""
    head, table, count, size = found
    from_packet.read(size)  # the header, consumed as the library's reads consume it
    width = (count + 7) // 8
    post = size - 1 - bitmaps * width
    self.__dict__.update(
        _RowsEvent__rows=None,
        _RowsEvent__only_tables=None,
        _RowsEvent__ignored_tables=None,
        _RowsEvent__only_schemas=None,
        _RowsEvent__ignored_schemas=None,
        _RowsEvent__use_column_name_cache=kw.get("use_column_name_cache", False),
        _RowsEvent__enable_logging=kw.get("enable_logging", False),
        _RowsEvent__none_sources={},
        table_id=int.from_bytes(head[:6], "little"),
        primary_key=table.primary_key,
        schema=table.schema,
        table=table.table,
        flags=int.from_bytes(head[6:8], "little"),
        number_of_columns=count,
        columns=table.columns,
        columns_present_bitmap=head[post + 1 : post + 1 + width],
    )
    if post == 10:
        self.extra_data_length = 2
    if bitmaps == 2:
        self.columns_present_bitmap2 = head[post + 1 + width : size]


def framed_rows_event(
    cls: type, packet: Any, header: tuple[int, int, int, int, int, int], reader: Any, kw: dict[str, Any]
) -> Any:
    """A plain rows event of ``cls`` (Write/Update/DeleteRowsEvent) in the library's packet wrapper, both
    made as the library makes them but without their keyword calls: for
    :mod:`gtidsnap.source.binlog.frame_packets`, whose packet ``packet`` is, its header ``header``
    (timestamp, type, server id, event size, next position, flags) read already. ``kw``: what the
    reader's ``fetchone`` passes the event (no filter, no checksum check). None (the packet untouched)
    for anything but a plain rows event (see ``plain_header``): the library's then."""
    timestamp, event_type, server_id, size, log_pos, flags = header
    ctl = reader._ctl_connection
    wrapper = BinLogPacketWrapper.__new__(BinLogPacketWrapper)
    wrapper.__dict__.update(
        read_bytes=0,
        _BinLogPacketWrapper__data_buffer=b"",
        packet=packet,
        charset=ctl.charset,
        enable_logging=kw["enable_logging"],
        use_column_name_cache=kw["use_column_name_cache"],
        timestamp=timestamp,
        event_type=event_type,
        server_id=server_id,
        event_size=size,
        log_pos=log_pos,
        flags=flags,
        event=None,
    )
    event_size = size - (23 if kw["use_checksum"] else 19)
    table_map, bitmaps = reader.table_map, 2 if cls is UpdateRowsEvent else 1
    packet._position = 20  # the OK byte and the event header, as the wrapper reads them
    found = plain_header(wrapper, event_size, table_map, kw, bitmaps)
    if found is None or kw["verify_checksum"]:
        packet._position = 0
        return None
    event: Any = object.__new__(cls)
    event.__dict__.update(  # BinLogEvent.__init__, as it sets them
        packet=wrapper,
        table_map=table_map,
        event_type=event_type,
        timestamp=timestamp,
        event_size=event_size,
        _post_header_lengths=kw["post_header_lengths"],
        _ctl_connection=ctl,
        mysql_version=kw["mysql_version"],
        _ignore_decode_errors=kw["ignore_decode_errors"],
        _verify_checksum=False,
        _is_event_valid=None,
        _processed=True,
        complete=True,
        dbms=ctl._get_dbms(),
    )
    _read_plain_header(event, wrapper, found, bitmaps, kw)
    wrapper.event = event
    return event


def install() -> None:
    """Patch the three parses (idempotent; :func:`gtidsnap.source.binlog.library.install` calls it on a
    tested version only)."""
    for cls in _library_inits:
        cls.__init__ = _fast(cls)


def uninstall() -> None:
    """The library's own parses again (the benchmark's bare decode, tests)."""
    for cls, library_init in _library_inits.items():
        cls.__init__ = library_init
