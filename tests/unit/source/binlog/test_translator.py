"""The binlog translator on plain data: raw python-mysql-replication events (the library's own classes,
built without a packet and given the attributes the translator reads) in, gtidsnap's events out.

What a server does to the stream (reconnects, real row decoding) is tested against real replicas in
tests/integration/test_binlog.py; here each rule of the translation is checked on its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from gtidsnap.core.errors import FatalSourceError
from gtidsnap.core.gtid import GtidSet, MariadbGtid, MariadbGtidSet, MysqlGtid, MysqlGtidSet
from gtidsnap.core.model import BinlogEvent, Heartbeat, RowChange, SchemaChange, TableId, TxBegin, TxCommit
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.source.binlog.translator import EventTranslator

WHERE = "reader@127.0.0.1:3306"
ITEMS = TableId("shop", "items")
SCHEMA = TableSchema(
    ITEMS,
    (Column("id", "int", "int", False), Column("name", "varchar", "varchar(20)")),
    ("id",),
)
UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
TS = 1_700_000_000

E = TypeVar("E")


# --------------------------------------------------------------------------- raw events


def raw(cls: type[E], **attrs: Any) -> E:
    """An instance of the library's class ``cls`` without its packet parsing, with ``attrs`` set."""
    event: E = object.__new__(cls)
    for name, value in attrs.items():
        setattr(event, name, value)
    return event


def mariadb_gtid(seq: int, standalone: bool = False, domain: int = 0, server: int = 1) -> MariadbGtidEvent:
    flags = 0x01 if standalone else 0x00
    return raw(
        MariadbGtidEvent, domain_id=domain, server_id=server, gtid_seq_no=seq, flags=flags, timestamp=TS
    )


def mysql_gtid(gno: int) -> GtidEvent:
    sid = bytes.fromhex(UUID.replace("-", ""))
    return raw(GtidEvent, sid=sid, gno=gno, timestamp=TS, packet=SimpleNamespace(server_id=7))


def query(statement: str, schema: bytes = b"shop") -> QueryEvent:
    return raw(QueryEvent, query=statement, schema=schema)


def xid() -> XidEvent:
    return raw(XidEvent)


def heartbeat() -> HeartbeatLogEvent:
    return raw(HeartbeatLogEvent)


def rows_event(cls: type[E], rows: list[dict[str, Any]], table: TableId = ITEMS) -> E:
    """A row event whose rows are already decoded (the library's private cache of ``rows``)."""
    return raw(cls, schema=table.schema, table=table.name, timestamp=TS, _RowsEvent__rows=rows)


def inserted(*ids: int) -> WriteRowsEvent:
    return rows_event(WriteRowsEvent, [{"values": {"id": i, "name": f"n{i}"}} for i in ids])


class NotToBeDecoded(WriteRowsEvent):  # type: ignore[misc]
    """A row event that fails the test if its rows are read (the library would decode them then)."""

    @property
    def rows(self) -> list[dict[str, Any]]:
        raise AssertionError(f"the rows of {self.schema}.{self.table} were decoded")


# --------------------------------------------------------------------------- helpers


def captured(*tables: TableSchema) -> Any:
    by_id = {t.table: t for t in tables}
    return by_id.get


def translator(processed: GtidSet | None = None, *tables: TableSchema) -> EventTranslator:
    start = processed if processed is not None else MariadbGtidSet()
    return EventTranslator(captured(*(tables or (SCHEMA,))), WHERE, start)


def feed(tr: EventTranslator, events: Iterable[Any]) -> list[BinlogEvent]:
    out: list[BinlogEvent] = []
    for event in events:
        tr.translate(event, out)
    return out


def hand_out(tr: EventTranslator, events: Iterable[BinlogEvent]) -> None:
    for event in events:
        tr.handed_out(event)


def row(gtid: MariadbGtid | MysqlGtid, i: int) -> RowChange:
    after = {"id": i, "name": f"n{i}"}
    return RowChange(gtid, ITEMS, "c", (i,), None, after, None, TS, ("id",))


G7 = MariadbGtid(0, 1, 7)


# --------------------------------------------------------------------------- transactions


def test_a_mariadb_transaction_is_its_begin_its_rows_and_its_commit() -> None:
    tr = translator()
    update = rows_event(
        UpdateRowsEvent,
        [{"before_values": {"id": 1, "name": "a"}, "after_values": {"id": 2, "name": "b"}}],
    )
    delete = rows_event(DeleteRowsEvent, [{"values": {"id": 3, "name": "c"}}])
    out = feed(tr, [mariadb_gtid(7), inserted(1), update, delete, xid()])
    assert out == [
        TxBegin(G7),
        row(G7, 1),
        RowChange(G7, ITEMS, "u", (2,), {"id": 1, "name": "a"}, {"id": 2, "name": "b"}, (1,), TS, ("id",)),
        RowChange(G7, ITEMS, "d", (3,), {"id": 3, "name": "c"}, None, None, TS, ("id",)),
        TxCommit(G7),
    ]
    hand_out(tr, out)
    assert G7 in tr.processed
    commit = out[-1]
    assert isinstance(commit, TxCommit) and (commit.server_id, commit.timestamp) == (1, TS), "its stamp"


def test_a_mysql_transaction_opened_by_begin_ends_at_its_xid() -> None:
    tr = translator(MysqlGtidSet())
    gtid = MysqlGtid.parse(f"{UUID}:5")
    out = feed(tr, [mysql_gtid(5), query("BEGIN"), inserted(1), xid()])
    assert out == [TxBegin(gtid), row(gtid, 1), TxCommit(gtid)]
    commit = out[-1]
    assert isinstance(commit, TxCommit) and (commit.server_id, commit.timestamp) == (7, TS), "its stamp"


def test_a_standalone_mariadb_ddl_is_a_transaction_of_its_own() -> None:
    tr = translator()
    out = feed(tr, [mariadb_gtid(7, standalone=True), query("ALTER TABLE items ADD COLUMN c INT")])
    assert out == [
        TxBegin(G7),
        SchemaChange(G7, frozenset({ITEMS}), "ALTER TABLE items ADD COLUMN c INT"),
        TxCommit(G7),
    ]
    # It ended on its own: the next GTID opens a new transaction instead of failing.
    g8 = MariadbGtid(0, 1, 8)
    assert feed(tr, [mariadb_gtid(8, standalone=True)]) == [TxBegin(g8)]
    # Without the flag the GTID opens a transaction that only its commit ends, whatever it holds.
    tr = translator()
    out = feed(tr, [mariadb_gtid(8), query("ALTER TABLE items ADD COLUMN c INT")])
    assert out == [TxBegin(g8), SchemaChange(g8, frozenset({ITEMS}), "ALTER TABLE items ADD COLUMN c INT")]
    assert feed(tr, [query("COMMIT")]) == [TxCommit(g8)]


def test_a_transaction_already_processed_is_skipped_whole() -> None:
    tr = translator(MariadbGtidSet.parse("0-1-7"))
    skipped = feed(tr, [mariadb_gtid(7), inserted(1), xid(), mariadb_gtid(6, standalone=True)])
    skipped += feed(tr, [query("ALTER TABLE items ADD COLUMN c INT")])
    assert skipped == []
    g8 = MariadbGtid(0, 1, 8)
    assert feed(tr, [mariadb_gtid(8), inserted(2), xid()]) == [TxBegin(g8), row(g8, 2), TxCommit(g8)]


def test_a_replay_after_a_reconnect_swallows_what_was_handed_out() -> None:
    tr = translator()
    first = feed(tr, [mariadb_gtid(7), inserted(1, 2)])
    assert first == [TxBegin(G7), row(G7, 1), row(G7, 2)]
    hand_out(tr, first[:2])  # the consumer got TxBegin and one row; then the connection dropped
    tr.interrupted()
    replayed = feed(tr, [mariadb_gtid(7), inserted(1, 2), inserted(3), xid()])
    assert replayed == [row(G7, 2), row(G7, 3), TxCommit(G7)]
    hand_out(tr, replayed)
    assert G7 in tr.processed
    # Nothing is swallowed any more once the transaction was handed out to its end.
    g8 = MariadbGtid(0, 1, 8)
    assert feed(tr, [mariadb_gtid(8), inserted(4), xid()]) == [TxBegin(g8), row(g8, 4), TxCommit(g8)]


def test_a_replay_that_resumes_at_another_transaction_stops_the_stream() -> None:
    tr = translator()
    hand_out(tr, feed(tr, [mariadb_gtid(7)]))
    tr.interrupted()
    with pytest.raises(FatalSourceError) as caught:
        feed(tr, [mariadb_gtid(9)])
    assert str(caught.value) == (
        f"after a reconnect to {WHERE} the stream resumed at 0-1-9, not at the interrupted transaction 0-1-7"
    )


def test_a_gtid_before_the_commit_of_the_last_stops_the_stream() -> None:
    tr = translator()
    with pytest.raises(FatalSourceError) as caught:
        feed(tr, [mariadb_gtid(7), inserted(1), mariadb_gtid(8)])
    assert str(caught.value) == (
        f"transaction 0-1-7 has no commit before 0-1-8 in the binlog of {WHERE} "
        "(an event type python-mysql-replication cannot read?)"
    )


# --------------------------------------------------------------------------- fails loudly


def test_a_row_event_outside_a_transaction_stops_the_stream() -> None:
    tr = translator()
    with pytest.raises(FatalSourceError) as caught:
        feed(tr, [inserted(1)])
    assert str(caught.value) == (
        f"a row event of shop.items outside a transaction in the binlog of {WHERE} "
        "(gtid_mode must be ON; or a GTID event type that cannot be read)"
    )


def test_statement_logged_dml_on_a_captured_table_stops_the_stream() -> None:
    tr = translator(MysqlGtidSet())
    feed(tr, [mysql_gtid(5), query("BEGIN")])
    # On a table that is not captured it changes nothing gtidsnap writes: no error.
    assert feed(tr, [query("INSERT INTO other VALUES (1)")]) == []
    with pytest.raises(FatalSourceError) as caught:
        feed(tr, [query("INSERT INTO items VALUES (1, 'a')")])
    assert str(caught.value) == (
        f"statement-logged DML in the binlog of {WHERE} (\"INSERT INTO items VALUES (1, 'a')\"): "
        "its rows cannot be captured; binlog_format must be ROW"
    )


def test_an_event_type_the_library_cannot_read_stops_the_stream() -> None:
    tr = translator()
    with pytest.raises(FatalSourceError) as caught:
        feed(tr, [raw(NotImplementedEvent, event_type=166)])
    assert str(caught.value) == (
        f"the binlog of {WHERE} holds a compressed row event (set log_bin_compress=OFF); "
        "its rows cannot be read"
    )
    assert feed(tr, [raw(NotImplementedEvent, event_type=35)]) == []  # a type that holds no rows


# --------------------------------------------------------------------------- heartbeats, filtering


def test_a_heartbeat_comes_only_outside_a_transaction() -> None:
    tr = translator()
    assert feed(tr, [heartbeat()]) == [Heartbeat(None)]
    begun = feed(tr, [mariadb_gtid(7), heartbeat()])
    assert begun == [TxBegin(G7)]  # being read: no heartbeat
    hand_out(tr, begun)
    tr.interrupted()
    assert feed(tr, [heartbeat()]) == []  # the consumer is inside it, to be replayed: no heartbeat
    rest = feed(tr, [mariadb_gtid(7), inserted(1), xid()])
    hand_out(tr, rest)
    assert feed(tr, [heartbeat()]) == [Heartbeat(G7)]  # and it names the last commit handed out


def test_the_rows_of_a_table_not_captured_are_never_decoded() -> None:
    tr = translator()
    other = TableId("shop", "other")
    out = feed(tr, [mariadb_gtid(7), rows_event(NotToBeDecoded, [], other), xid()])
    assert out == [TxBegin(G7), TxCommit(G7)]  # the transaction is still seen, without rows
    # The probe does catch a decode: the same event on a captured table is read.
    tr = translator(None, SCHEMA, TableSchema(other, SCHEMA.columns, SCHEMA.key))
    with pytest.raises(AssertionError, match="were decoded"):
        feed(tr, [mariadb_gtid(7), rows_event(NotToBeDecoded, [], other)])


@given(sid=st.binary(min_size=16, max_size=16), gno=st.integers(1, 2**63 - 1))
def test_a_mysql_gtid_is_read_as_its_text_parses(sid: bytes, gno: int) -> None:
    event = raw(GtidEvent, sid=sid, gno=gno, timestamp=TS, packet=SimpleNamespace(server_id=1))
    tr = translator(MysqlGtidSet())
    begun = feed(tr, [event])
    assert begun == [TxBegin(MysqlGtid.parse(event.gtid))]
    assert str(begun[0].gtid) == event.gtid  # the library's text, as a checkpoint writes it


def test_begin_opens_an_explicit_transaction_as_its_variants_do() -> None:
    for opening in ("BEGIN", "begin", "BEGIN WORK", "/* c */ BEGIN"):
        tr = translator(MysqlGtidSet())
        out = feed(tr, [mysql_gtid(5), query(opening), inserted(1), xid()])
        assert [type(e) for e in out] == [TxBegin, RowChange, TxCommit], opening
