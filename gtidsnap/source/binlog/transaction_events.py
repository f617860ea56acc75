"""The events every transaction carries, read in one step from their bytes.

Each MySQL transaction opens with a GTID event and a ``BEGIN`` query event, each MariaDB one with its
GTID event. python-mysql-replication parses a query event field by field (every status variable: a
dozen calls a variable) and a GTID event likewise, which makes a 10-row transaction cost the stream
about a third more per row than a 1,000-row one. The translator reads nothing of a ``BEGIN`` but its
text, and nothing of a GTID event but its numbers (and MariaDB's flags): :func:`install` patches the
library's three parses so that a query event whose text is exactly ``BEGIN``, any MySQL GTID event of a
5.7+ server and any MariaDB GTID event are read with one ``struct`` call. Every other
event (DDL, a statement-logged DML, a ``COMMIT`` query, anything laid out unexpectedly) goes to the
library's own parse. What the fast path leaves unset (a ``BEGIN``'s status variables) nothing reads.

Patched in place like :mod:`gtidsnap.source.binlog.table_maps`, on the tested library version only."""

from __future__ import annotations

import struct
from typing import Any

from pymysqlreplication.constants.BINLOG import QUERY_EVENT
from pymysqlreplication.event import BinLogEvent, GtidEvent, MariadbGtidEvent, QueryEvent

from gtidsnap.source.binlog.library import event_body

QUERY_POST_HEADER = struct.Struct("<IIBHH")  # thread id, exec time, schema length, error code, status length
GTID_BODY = struct.Struct("<B16sQBQQ")  # commit flag, server id, number, lt type, last committed, seq no
MARIADB_GTID_BODY = struct.Struct("<QIB")  # sequence number, domain id, flags

_library_query_init = QueryEvent.__init__
_library_gtid_init = GtidEvent.__init__
_library_mariadb_gtid_init = MariadbGtidEvent.__init__


def _query_init(
    self: QueryEvent, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any, **kw: Any
) -> None:
    body = event_body(from_packet, event_size)
    fields = begin_fields(body, kw.get("post_header_lengths")) if body is not None else None
    if fields is None:
        _library_query_init(self, from_packet, event_size, table_map, ctl_connection, **kw)
        return
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kw)
    (self.slave_proxy_id, self.execution_time, self.schema_length, self.error_code, self.status_vars_length,
     self.schema) = fields  # fmt: skip
    self.query = "BEGIN"


def begin_fields(body: bytes, post_header_lengths: Any) -> tuple[int, int, int, int, int, bytes] | None:
    """The post-header and schema of a query event whose text is exactly ``BEGIN``; None otherwise."""
    header = QUERY_POST_HEADER.size
    declared = header
    if post_header_lengths and len(post_header_lengths) >= QUERY_EVENT:
        declared = post_header_lengths[QUERY_EVENT - 1]
    if declared < header or len(body) < declared or not body.endswith(b"BEGIN"):
        return None
    proxy_id, exec_time, schema_length, error_code, status_length = QUERY_POST_HEADER.unpack_from(body)
    schema_at = declared + status_length
    if body[schema_at + schema_length + 1 :] != b"BEGIN":
        return None
    schema = body[schema_at : schema_at + schema_length]
    return proxy_id, exec_time, schema_length, error_code, status_length, schema


def _gtid_init(
    self: GtidEvent, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any, **kw: Any
) -> None:
    body = event_body(from_packet, event_size)
    if body is None or len(body) < GTID_BODY.size or kw.get("mysql_version", (0, 0, 0)) < (5, 7):
        _library_gtid_init(self, from_packet, event_size, table_map, ctl_connection, **kw)
        return
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kw)
    flag, self.sid, self.gno, self.lt_type, self.last_committed, self.sequence_number = GTID_BODY.unpack_from(
        body
    )
    self.commit_flag = flag == 1


def _mariadb_gtid_init(
    self: MariadbGtidEvent, from_packet: Any, event_size: int, table_map: Any, ctl_connection: Any, **kw: Any
) -> None:
    body = event_body(from_packet, event_size)
    if body is None or len(body) < MARIADB_GTID_BODY.size:
        _library_mariadb_gtid_init(self, from_packet, event_size, table_map, ctl_connection, **kw)
        return
    BinLogEvent.__init__(self, from_packet, event_size, table_map, ctl_connection, **kw)
    self.server_id = from_packet.server_id
    self.gtid_seq_no, self.domain_id, self.flags = MARIADB_GTID_BODY.unpack_from(body)
    self.gtid = f"{self.domain_id}-{self.server_id}-{self.gtid_seq_no}"


def install() -> None:
    """Patch the three parses (idempotent; :func:`gtidsnap.source.binlog.library.install` calls it on a
    tested version only)."""
    QueryEvent.__init__ = _query_init
    GtidEvent.__init__ = _gtid_init
    MariadbGtidEvent.__init__ = _mariadb_gtid_init


def uninstall() -> None:
    """The library's own parses again (the benchmark's bare decode, tests)."""
    QueryEvent.__init__ = _library_query_init
    GtidEvent.__init__ = _library_gtid_init
    MariadbGtidEvent.__init__ = _library_mariadb_gtid_init
