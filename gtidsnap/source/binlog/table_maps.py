"""Table maps parsed once per table version.

Each transaction's row events follow a TABLE_MAP event per table they touch, so a stream of small
transactions carries a table map every few rows, and python-mysql-replication parses each in full
(every column's type and metadata, the optional metadata with names, charsets and keys): 17% of a run
streaming 10-row transactions. A table map's body (after the event header) holds nothing but the table's
id, names and columns (with ``binlog_row_metadata=FULL``, which preflight demands where it exists), so
the same body parses to the same table: :func:`install` makes the library's ``TableMapEvent`` parse a
body once and reuse that parse for every later event with the same bytes. A table that changes (DDL) or
is reopened under a new table id has new bytes, hence a parse of its own. A parse whose column names
the library fetched from the server (no names in the event) is never reused.

The library's class is patched in place, not subclassed: its packet reader only builds events whose
class is ``TableMapEvent`` itself. The library's gate (:func:`gtidsnap.source.binlog.library.install`,
when a stream starts) installs the patch, and only on the versions whose internals it relies on."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from pymysqlreplication.event import BinLogEvent
from pymysqlreplication.row_event import TableMapEvent

from gtidsnap.source.binlog.library import event_body

KEPT = 512  # distinct table map bodies remembered (the least recently used go first)

_parsed: OrderedDict[bytes, dict[str, Any]] = OrderedDict()  # body -> the parse's attributes
_library_init = TableMapEvent.__init__
# set by BinLogEvent.__init__ for each event: never copied from the remembered parse
_PER_EVENT = frozenset(
    {
        "packet",
        "table_map",
        "event_type",
        "timestamp",
        "event_size",
        "_post_header_lengths",
        "_ctl_connection",
        "mysql_version",
        "_ignore_decode_errors",
        "_verify_checksum",
        "_is_event_valid",
        "_processed",
        "complete",
        "dbms",
    }
)


def _cached_init(
    self: TableMapEvent,
    from_packet: Any,
    event_size: int,
    table_map: dict[int, Any],
    ctl_connection: Any,
    **kw: Any,
) -> None:
    body = event_body(from_packet, event_size)
    known = _parsed.get(body) if body is not None else None
    if body is None or known is None:
        _library_init(self, from_packet, event_size, table_map, ctl_connection, **kw)
        if body is not None and self._processed and _self_contained(self):
            _parsed[body] = {name: value for name, value in vars(self).items() if name not in _PER_EVENT}
            if len(_parsed) > KEPT:
                _parsed.popitem(last=False)
        return
    _parsed.move_to_end(body)
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kw)
    self.__dict__.update(known)
    table_map[self.table_id] = self.table_obj


def remembered(body: bytes) -> tuple[int, Any] | None:
    """The table id and table of a table map body parsed before (what the library's reader maps), or None:
    :mod:`gtidsnap.source.binlog.frame_packets` then needs no event object for it."""
    known = _parsed.get(body)
    if known is None:
        return None
    _parsed.move_to_end(body)
    return known["table_id"], known["table_obj"]


def _self_contained(event: TableMapEvent) -> bool:
    """Does the parse come from the bytes alone? Column names come with the event only where
    ``binlog_row_metadata`` is FULL; otherwise the library asks the server for them at each parse (the
    table's current names), and such a parse is not reused."""
    names = getattr(getattr(event, "optional_metadata", None), "column_name_list", None) or []
    columns = getattr(event, "column_count", None)
    return getattr(event, "table_obj", None) is not None and bool(names) and len(names) == columns


def install() -> None:
    """Patch the library's table map parse (idempotent; :func:`gtidsnap.source.binlog.library.install`
    calls it on a tested version only)."""
    TableMapEvent.__init__ = _cached_init


def uninstall() -> None:
    """The library's own parse again, every remembered one dropped (the benchmark's bare decode, tests)."""
    TableMapEvent.__init__ = _library_init
    _parsed.clear()
