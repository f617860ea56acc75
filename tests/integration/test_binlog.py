"""The binlog adapter against real replicas: the normalised event sequence, types that equal the
snapshot's, reconnects that neither lose nor repeat a row, restarts, and errors. Each test runs on
MariaDB and on MySQL.

Other test runs may write to the same servers at the same time, so checks look at this test's own
transactions (known by GTID) and at the well-formedness of the whole stream. Nothing is timed: the
tests wait for what they check (a commit, a heartbeat, a reconnect) and time only bounds the wait, as a
generous hang guard that names what was awaited and what was seen (speed is measured by scripts/bench).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson
import pymysql
import pytest

from gtidsnap.core.errors import ConfigError, FatalSourceError, SourceError
from gtidsnap.core.gtid import Gtid, GtidSet, MariadbGtid, MysqlGtid
from gtidsnap.core.model import (
    BinlogEvent,
    Heartbeat,
    RowChange,
    RowChanges,
    SchemaChange,
    TableId,
    TxBegin,
    TxCommit,
)
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.binlog.stream import BinlogStream
from gtidsnap.source.connection import ConnectionSettings, Secret, TlsMode
from gtidsnap.source.replica import Replica
from tests.integration.fixtures.db_servers import READER, ReplicaPair

pytestmark = pytest.mark.integration
TIMEOUT_S = 180.0  # a hang guard only: what the tests wait for normally comes within seconds
HEARTBEAT_S = 0.5


# --------------------------------------------------------------------------- helpers


def reader_settings(
    pair: ReplicaPair, password: str = READER[1], port: int | None = None
) -> ConnectionSettings:
    return ConnectionSettings(pair.host, port or pair.replica_port, READER[0], Secret(password))


def flavor(pair: ReplicaPair) -> Literal["mysql", "mariadb"]:
    return "mysql" if pair.flavor == "mysql" else "mariadb"


def replica_executed(pair: ReplicaPair) -> GtidSet:
    with pair.replica_reader() as replica:
        return pair.executed(replica)


LAST_OWN_GTID = {
    "mariadb": "SELECT @@last_gtid",
    "mysql": "SELECT GTID FROM performance_schema.events_transactions_history WHERE THREAD_ID = "
    "PS_CURRENT_THREAD_ID() AND GTID LIKE '%:%' ORDER BY EVENT_ID DESC LIMIT 1",
}


def commit(pair: ReplicaPair, conn: pymysql.connections.Connection, *statements: str) -> Gtid:
    """Run ``statements`` on the primary in one BEGIN ... COMMIT (a DDL alone: as itself); its GTID.

    The GTID is this session's own (other test runs may write to the same primary meanwhile)."""
    explicit = len(statements) > 1 or statements[0].split()[0].upper() in ("INSERT", "UPDATE", "DELETE")
    with conn.cursor() as cur:
        if explicit:
            cur.execute("BEGIN")
        for statement in statements:
            cur.execute(statement)
        if explicit:
            cur.execute("COMMIT")
        cur.execute(LAST_OWN_GTID[pair.flavor])
        row = cur.fetchone()
    assert row and row[0], f"no GTID recorded for {statements[0][:60]!r}"
    return MariadbGtid.parse(row[0]) if pair.flavor == "mariadb" else MysqlGtid.parse(row[0])


class Captured:
    """The ``schema_of`` callback: the tables in ``tables``, shaped as the replica says.

    Read once per table, like the engine's cache: every test's DDL has reached the replica before
    its stream starts, so the current shape is the right one for all of its row events."""

    def __init__(self, pair: ReplicaPair, *tables: TableId) -> None:
        self.replica = Replica(reader_settings(pair))
        self.tables = set(tables)
        self.schemas: dict[TableId, TableSchema] = {}

    def __call__(self, table: TableId) -> TableSchema | None:
        if table not in self.tables:
            return None
        if table not in self.schemas:
            self.schemas[table] = self.replica.schema(table)
        return self.schemas[table]

    def close(self) -> None:
        self.replica.close()


@pytest.fixture
def open_stream(pair: ReplicaPair) -> Iterator[Callable[..., BinlogStream]]:
    """Build streams on the replica as the read-only user; all closed after the test."""
    made: list[tuple[BinlogStream, Captured]] = []

    def make(start: GtidSet, *tables: TableId, **kwargs: Any) -> BinlogStream:
        captured = Captured(pair, *tables)
        stream = BinlogStream(reader_settings(pair), flavor(pair), start, captured, **kwargs)
        made.append((stream, captured))
        return stream

    yield make
    for stream, captured in made:
        stream.close()
        captured.close()


def collect(
    stream: BinlogStream,
    done: Callable[[list[BinlogEvent]], bool],
    timeout: float = TIMEOUT_S,
    on_event: Callable[[BinlogEvent], None] | None = None,
    awaiting: str | None = None,
) -> list[BinlogEvent]:
    """Events until ``done(events)``; ``timeout`` is a hang guard (``next`` returns at least once per
    heartbeat period), failing with ``awaiting`` (default: ``done``'s docstring) and what was seen."""
    events: list[BinlogEvent] = []
    deadline = time.monotonic() + timeout
    while not done(events):
        if time.monotonic() > deadline:
            pytest.fail(
                f"hang guard: {timeout:.0f}s passed awaiting {awaiting or done.__doc__ or 'the condition'}; "
                f"saw {len(events)} events ({stream.reconnects} reconnects), the last: {events[-5:]}",
                pytrace=False,
            )
        for event in expanded(stream.next()):
            events.append(event)
            if on_event is not None:
                on_event(event)
    return events


def expanded(event: BinlogEvent | None) -> list[BinlogEvent]:
    """The event, a decoder's ``RowChanges`` as one ``RowChange`` a row (its values read back from the
    JSON the decoder wrote), so the tests below check both streams alike."""
    if event is None:
        return []
    if not isinstance(event, RowChanges):
        return [event]
    changes: list[BinlogEvent] = []
    for i, body in enumerate(event.bodies):
        values = orjson.loads(b"{" + body + b"}")
        old = event.old_keys[i] if event.old_keys is not None else None
        change = RowChange(
            event.gtid, event.table, event.op, event.keys[i], values["before"], values["after"], old
        )
        changes.append(dataclasses.replace(change, source_ts=event.source_ts))
    return changes


@pytest.fixture(params=[0, 1], ids=["inline", "decoders"])
def decoders(request: pytest.FixtureRequest) -> int:
    """Rows decoded on the stream's thread, or in a decoder process (``BinlogStream(decoders=...)``)."""
    return int(request.param)


def committed(*gtids: Gtid) -> Callable[[list[BinlogEvent]], bool]:
    wanted = set(gtids)

    def done(events: list[BinlogEvent]) -> bool:
        return wanted <= {e.gtid for e in events if isinstance(e, TxCommit)}

    done.__doc__ = f"the commits of {', '.join(map(str, gtids))}"
    return done


def heartbeat(events: list[BinlogEvent]) -> bool:
    """a heartbeat"""
    return any(isinstance(e, Heartbeat) for e in events)


def next_returning(stream: BinlogStream, what: str, guard_s: float = TIMEOUT_S) -> BinlogEvent | None:
    """``stream.next()``, failing (instead of hanging the run) should it not return within ``guard_s``."""
    result: list[BinlogEvent | None] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            result.append(stream.next())
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=call, name="stream-next", daemon=True)
    worker.start()
    worker.join(guard_s)
    if worker.is_alive():
        pytest.fail(f"hang guard: stream.next() blocked for {guard_s:.0f}s; awaited {what}", pytrace=False)
    if errors:
        raise errors[0]
    return result[0]


def server_now(conn: pymysql.connections.Connection) -> int:
    """The server's clock, in the whole seconds a binlog event carries."""
    with conn.cursor() as cur:
        cur.execute("SELECT UNIX_TIMESTAMP()")
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def check_well_formed(events: Sequence[BinlogEvent]) -> None:
    """Transactions never overlap, each begins and commits once, nothing of one strays outside it."""
    begun: set[Gtid] = set()
    done: set[Gtid] = set()
    current: Gtid | None = None
    for i, event in enumerate(events):
        where = f"event {i} {event!r}"
        if isinstance(event, TxBegin):
            assert current is None, f"{where}: begins inside {current}"
            assert event.gtid not in begun, f"{where}: begins twice"
            begun.add(event.gtid)
            current = event.gtid
        elif isinstance(event, RowChange | SchemaChange):
            assert current == event.gtid, f"{where}: outside its transaction (open: {current})"
        elif isinstance(event, TxCommit):
            assert current == event.gtid, f"{where}: commits {event.gtid} while {current} is open"
            assert event.gtid not in done, f"{where}: commits twice"
            done.add(event.gtid)
            current = None
        else:
            assert isinstance(event, Heartbeat)
            assert current is None, f"{where}: heartbeat inside {current}"


def of(events: Sequence[BinlogEvent], *gtids: Gtid) -> list[BinlogEvent]:
    """The events of these transactions, in stream order, with source_ts zeroed for comparison."""
    wanted = set(gtids)
    out: list[BinlogEvent] = []
    for e in events:
        if not isinstance(e, Heartbeat) and e.gtid in wanted:
            out.append(dataclasses.replace(e, source_ts=0) if isinstance(e, RowChange) else e)
    return out


def kill_dump(pair: ReplicaPair, connection_id: int | None) -> bool:
    """KILL the stream's own dump thread on the replica (as admin); False if it is already gone."""
    assert connection_id is not None, "the stream has no dump connection open"
    with pair.connect(pair.replica_port) as admin, admin.cursor() as cur:
        cur.execute(
            "SELECT USER, COMMAND FROM information_schema.PROCESSLIST WHERE ID = %s", (connection_id,)
        )
        row = cur.fetchone()
        if row is None:
            return False
        assert row[0] == READER[0] and str(row[1]).startswith("Binlog Dump"), row
        try:
            cur.execute(f"KILL {int(connection_id)}")
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != 1094:  # ER_NO_SUCH_THREAD: it ended meanwhile
                raise
            return False
    return True


# --------------------------------------------------------------------------- the event sequence


def test_stream_yields_each_transaction_normalised_in_order(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream]
) -> None:
    items = TableId(fresh_db, "items")  # captured; `other` is not
    with pair.primary(fresh_db) as conn:
        commit(pair, conn, "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20), qty INT)")
        commit(pair, conn, "CREATE TABLE other (id INT PRIMARY KEY, v INT)")
        pair.wait_replicated(conn)
        start = replica_executed(pair)
        # The primary's clock before each transaction and once the replica has it: its rows' source_ts,
        # the time its statements ran, lies in between (whichever server stamped the replica's binlog).
        clock: dict[Gtid, tuple[int, int]] = {}

        def timed(*statements: str) -> Gtid:
            before = server_now(conn)
            gtid = commit(pair, conn, *statements)
            pair.wait_replicated(conn)
            clock[gtid] = (before, server_now(conn))
            return gtid

        t1 = timed(
            "INSERT INTO items VALUES (1, 'a', 1)", "INSERT INTO items VALUES (2, 'b', 2), (3, 'c', 3)"
        )
        t2 = timed("UPDATE items SET qty = 20 WHERE id = 2")
        t3 = timed("UPDATE items SET id = 30 WHERE id = 3")
        t4 = timed("DELETE FROM items WHERE id = 1")
        t5 = timed("INSERT INTO other VALUES (1, 1)")
        alter = "ALTER TABLE items ADD COLUMN note VARCHAR(10) NULL"
        t6 = timed(alter)
        t7 = timed("INSERT INTO items (id, name, qty, note) VALUES (4, 'd', 4, 'new')")
    stream = open_stream(start, items, heartbeat_s=HEARTBEAT_S)
    events = collect(stream, committed(t7))
    check_well_formed(events)

    def row(id_: int, name: str, qty: int) -> dict[str, Any]:
        return {"id": id_, "name": name, "qty": qty}

    by_id = ("id",)  # the key columns each change was decoded with

    assert of(events, t1, t2, t3, t4, t5, t6, t7) == [
        TxBegin(t1),
        RowChange(t1, items, "c", (1,), None, row(1, "a", 1), key_columns=by_id),
        RowChange(t1, items, "c", (2,), None, row(2, "b", 2), key_columns=by_id),
        RowChange(t1, items, "c", (3,), None, row(3, "c", 3), key_columns=by_id),
        TxCommit(t1),
        TxBegin(t2),
        RowChange(t2, items, "u", (2,), row(2, "b", 2), row(2, "b", 20), key_columns=by_id),
        TxCommit(t2),
        TxBegin(t3),
        RowChange(t3, items, "u", (30,), row(3, "c", 3), row(30, "c", 3), old_key=(3,), key_columns=by_id),
        TxCommit(t3),
        TxBegin(t4),
        RowChange(t4, items, "d", (1,), row(1, "a", 1), None, key_columns=by_id),
        TxCommit(t4),
        TxBegin(t5),  # other is not captured: the transaction still shows, without rows
        TxCommit(t5),
        TxBegin(t6),
        SchemaChange(t6, frozenset({items}), alter),
        TxCommit(t6),
        TxBegin(t7),
        RowChange(t7, items, "c", (4,), None, {**row(4, "d", 4), "note": "new"}, key_columns=by_id),
        TxCommit(t7),
    ]
    stamps = [(e.gtid, e.source_ts) for e in events if isinstance(e, RowChange) and e.gtid in clock]
    assert len(stamps) == 7, stamps
    outside = [(str(g), ts, clock[g]) for g, ts in stamps if not clock[g][0] <= ts <= clock[g][1]]
    assert not outside, f"source_ts outside the primary's clock around its transaction: {outside}"
    assert all(gtid in stream.processed for gtid in (t1, t2, t3, t4, t5, t6, t7))
    assert start <= stream.processed

    # Idle: a heartbeat comes and names a committed transaction; next() returns (None or a heartbeat,
    # or another test run's transaction) rather than blocking.
    beats = collect(stream, heartbeat, awaiting="a heartbeat on the idle stream")
    beat = next(e for e in beats if isinstance(e, Heartbeat))
    assert beat.last_gtid is not None and beat.last_gtid in stream.processed, (beat, stream.processed)
    ours = set(clock)
    for _ in range(3):
        got = next_returning(stream, "None or a Heartbeat from an idle stream")
        assert got is None or isinstance(got, Heartbeat) or got.gtid not in ours, got


def test_table_maps_are_parsed_once_per_table_version(
    pair: ReplicaPair,
    fresh_db: str,
    open_stream: Callable[..., BinlogStream],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small transactions carry a table map each; the library parses a table's map once per version of
    the table (its bytes), the others are known by their bytes without an event object, and every row
    still decodes with its own version's columns."""
    from gtidsnap.source.binlog import rows_events, table_maps

    items = TableId(fresh_db, "maps")
    with pair.primary(fresh_db) as conn:
        commit(pair, conn, "CREATE TABLE maps (id INT PRIMARY KEY, v INT)")
        pair.wait_replicated(conn)
        start = replica_executed(pair)
        before = [commit(pair, conn, f"INSERT INTO maps VALUES ({i}, {i})") for i in range(40)]
        commit(pair, conn, "ALTER TABLE maps ADD COLUMN note VARCHAR(10) NULL")
        after = [commit(pair, conn, f"INSERT INTO maps VALUES ({100 + i}, {i}, 'n{i}')") for i in range(40)]
        pair.wait_replicated(conn)
    table_maps.uninstall()  # nothing remembered from other tests
    parsed: list[int] = []
    library_init = table_maps._library_init

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        parsed.append(1)
        library_init(self, *args, **kwargs)

    monkeypatch.setattr(table_maps, "_library_init", counted)
    remembered = table_maps.remembered
    known: list[bool] = []

    def looked_up(body: bytes) -> Any:
        found = remembered(body)
        known.append(found is not None)
        return found

    monkeypatch.setattr(table_maps, "remembered", looked_up)
    framed_rows = rows_events.framed_rows_event
    framed: list[bool] = []

    def rows_framed(*args: Any) -> Any:
        event = framed_rows(*args)
        framed.append(event is not None)
        return event

    monkeypatch.setattr(rows_events, "framed_rows_event", rows_framed)
    stream = open_stream(start, items, heartbeat_s=HEARTBEAT_S)
    events = collect(stream, committed(after[-1]))
    rows = {e.gtid: e.after for e in events if isinstance(e, RowChange)}
    assert [rows[g] for g in before] == [{"id": i, "v": i} for i in range(40)]
    assert [rows[g] for g in after] == [{"id": 100 + i, "v": i, "note": f"n{i}"} for i in range(40)]
    # 81 table maps in the binlog: parsed once per version (a few more where the server gave the
    # table a new table id), far from once each
    assert 2 <= len(parsed) <= 6, f"the library parsed {len(parsed)} table maps of 81"
    # and the others never became a library event: read off the connection (frame_packets)
    assert sum(known) >= 81 - len(parsed) - 1, f"{sum(known)} table maps of 81 known by their bytes"
    assert sum(framed) >= 76, f"{sum(framed)} rows events of 80 read without the library's wrapper call"


def test_ddl_names_its_tables_and_is_its_own_transaction(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream]
) -> None:
    def t(name: str) -> TableId:
        return TableId(fresh_db, name)

    with pair.primary(fresh_db) as conn:
        start = pair.wait_replicated(conn)
        statements = [
            ("CREATE TABLE a (id INT PRIMARY KEY, v INT)", {t("a")}),
            (f"CREATE TABLE `{fresh_db}`.`b` (id INT PRIMARY KEY)", {t("b")}),
            ("CREATE INDEX iv ON a (v)", {t("a")}),
            ("RENAME TABLE a TO a2, b TO b2", {t("a"), t("a2"), t("b"), t("b2")}),
            ("ALTER TABLE a2 RENAME TO a3", {t("a2"), t("a3")}),
            ("TRUNCATE TABLE a3", {t("a3")}),
            ("DROP TABLE b2", {t("b2")}),
        ]
        gtids = [commit(pair, conn, s) for s, _ in statements]
        commit(pair, conn, "INSERT INTO a3 VALUES (1, 10), (2, 20)")
        ctas = commit(pair, conn, "CREATE TABLE c (PRIMARY KEY (id)) ENGINE=InnoDB AS SELECT * FROM a3")
        pair.wait_replicated(conn)
    stream = open_stream(start, t("c"), heartbeat_s=HEARTBEAT_S)
    events = collect(stream, committed(ctas))
    check_well_formed(events)
    for gtid, (statement, tables) in zip(gtids, statements, strict=True):
        got = of(events, gtid)
        assert [type(e) for e in got] == [TxBegin, SchemaChange, TxCommit], got
        change = got[1]
        assert isinstance(change, SchemaChange)
        assert change.tables == frozenset(tables), statement
    # CREATE ... SELECT: the DDL and its rows are one transaction (BEGIN ... XID on both servers).
    got = of(events, ctas)
    assert [type(e) for e in got] == [TxBegin, SchemaChange, RowChange, RowChange, TxCommit], got
    assert [e.key for e in got if isinstance(e, RowChange)] == [(1,), (2,)]


# --------------------------------------------------------------------------- types


TYPES_TABLE = """CREATE TABLE types (
    id INT PRIMARY KEY,
    i INT, bu BIGINT UNSIGNED, dec12 DECIMAL(12,2), dt6 DATETIME(6), d DATE, tm TIME, j JSON,
    e ENUM('red','green','blue'), s SET('x','y','z'), b8 BIT(8), vb VARBINARY(16), txt TEXT, vc VARCHAR(40),
    f FLOAT, dbl DOUBLE, y YEAR, ts TIMESTAMP(3) NULL, bn BINARY(4), b20 BIT(20), ch CHAR(6),
    tm6 TIME(6)
) DEFAULT CHARSET=utf8mb4"""

ROW_1 = """(1, -2147483648, 18446744073709551615, -1234567890.12, '2024-02-29 23:59:59.999999', '1000-01-01',
    '-838:59:59', '{"k": [1, 2.5, "é😀", null, true, {"n": 12345678901234567890}], "empty": {}}',
    'green', 'x,z', b'10100101', x'00ff7f80', 'Grüße 😀 emoji', 'naïve ✓ 😀',
    1.1, 3.141592653589793, 2155, '2038-01-19 03:14:07.499', x'6162', b'11110000111100001111', 'ab',
    '-00:59:59.999500')"""

ROW_2 = """(2, 0, 9223372036854775808, 0.05, '1970-01-01 00:00:00', '9999-12-31', '12:34:56',
    '"just a string"', 'red', '', b'00000000', x'', '', '', 123456789, -0.0, 0, NULL, x'', b'1', '',
    '-838:59:58.000001')"""

ROW_3 = "(3" + ", NULL" * 21 + ")"

UPDATE_ALL = """UPDATE types SET i = i + 1, bu = 18446744073709551614, dec12 = 99.99,
    dt6 = '2001-02-03 04:05:06.000007', d = '2001-02-03', tm = '838:59:59', j = '[]', e = 'blue', s = 'y',
    b8 = b'1', vb = x'ff', txt = 'ü', vc = '😀', f = 0.1, dbl = 1e300, y = 1901,
    ts = '2001-01-01 00:00:00.001', bn = x'00', b20 = b'0', ch = 'c', tm6 = '-00:00:00.5'
    WHERE id IN (1, 2)"""


def snapshot_rows(pair: ReplicaPair, db: str, schema: TableSchema) -> dict[int, dict[str, Any]]:
    """The table as a chunk SELECT sees it through PyMySQL (UTC session, like the replica adapter)."""
    with (
        pair.replica_reader(db, init_command="SET time_zone = '+00:00'", charset="utf8mb4") as conn,
        conn.cursor(pymysql.cursors.DictCursor) as cur,
    ):
        cur.execute("SELECT * FROM types ORDER BY id")
        return {row["id"]: schema.normalize_row(row) for row in cur.fetchall()}


def test_binlog_rows_equal_snapshot_rows_for_every_type(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream]
) -> None:
    table = TableId(fresh_db, "types")
    with pair.primary(fresh_db) as conn:
        commit(pair, conn, TYPES_TABLE)
        start = pair.wait_replicated(conn)
        inserted = commit(pair, conn, f"INSERT INTO types VALUES {ROW_1}, {ROW_2}, {ROW_3}")
        pair.wait_replicated(conn)
        with Replica(reader_settings(pair)) as replica:
            schema = replica.schema(table)
        before = snapshot_rows(pair, fresh_db, schema)
        updated = commit(pair, conn, UPDATE_ALL)
        pair.wait_replicated(conn)
        after = snapshot_rows(pair, fresh_db, schema)
    stream = open_stream(start, table, heartbeat_s=HEARTBEAT_S)
    events = collect(stream, committed(updated))
    inserts = [e for e in of(events, inserted) if isinstance(e, RowChange)]
    updates = [e for e in of(events, updated) if isinstance(e, RowChange)]
    assert [e.after for e in inserts] == [before[1], before[2], before[3]]
    assert [e.before for e in updates] == [before[1], before[2]]
    assert [e.after for e in updates] == [after[1], after[2]]
    # The canonical forms are the documented ones, not merely equal.
    one, two = before[1], before[2]
    assert one["bu"] == 2**64 - 1 and two["bu"] == 2**63
    assert one["dec12"] == "-1234567890.12" and one["dt6"] == "2024-02-29 23:59:59.999999"
    assert one["d"] == "1000-01-01" and one["tm"] == "-838:59:59"
    assert one["tm6"] == "-00:59:59.999500" and two["tm6"] == "-838:59:58.000001"
    assert one["e"] == "green" and one["s"] == ["x", "z"] and two["s"] == []
    assert one["b8"] == 0b10100101 and one["b20"] == 0b11110000111100001111
    assert one["vb"] == "base64:AP9/gA==" and two["vb"] == "base64:"
    assert one["txt"] == "Grüße 😀 emoji" and one["vc"] == "naïve ✓ 😀"
    assert one["f"] == 1.1 and two["f"] == 123457000.0 and one["dbl"] == 3.141592653589793
    assert one["y"] == 2155 and two["y"] == 0
    assert one["ts"] == "2038-01-19 03:14:07.499000" and two["ts"] is None
    assert one["bn"] == "base64:YWIAAA==" and two["bn"] == "base64:AAAAAA=="
    assert set(before[3].values()) == {None, 3}
    if pair.flavor == "mysql":  # MariaDB's JSON is LONGTEXT: text on both sides
        assert one["j"] == {"k": [1, 2.5, "é😀", None, True, {"n": 12345678901234567890}], "empty": {}}
        assert two["j"] == "just a string"


# --------------------------------------------------------------------------- reconnects

BIG_ROWS = 3000


def write_big(pair: ReplicaPair, db: str) -> tuple[GtidSet, Gtid]:
    """A table and a 3000-row transaction on it; (the replica's set before it, its GTID).

    Rows of 4 kB make the transaction (12 MB) larger than what the socket buffers hold after a KILL
    (about 3 MB measured on MySQL 8.0, little on MariaDB): the drop is then seen mid-transaction."""
    with pair.primary(db) as conn:
        commit(pair, conn, "CREATE TABLE big (id INT PRIMARY KEY, payload VARCHAR(4100))")
        start = pair.wait_replicated(conn)
        pad = "p" * 4000
        batches = [
            "INSERT INTO big VALUES " + ", ".join(f"({i}, '{pad}{i}')" for i in range(lo, lo + 500))
            for lo in range(1, BIG_ROWS + 1, 500)
        ]
        big = commit(pair, conn, *batches)
        pair.wait_replicated(conn, timeout=120)
    return start, big


def write_smalls(pair: ReplicaPair, db: str) -> list[Gtid]:
    """Five one-row transactions after the big one."""
    with pair.primary(db) as conn:
        smalls = [
            commit(pair, conn, f"INSERT INTO big VALUES ({BIG_ROWS + n}, 'small {n}')") for n in range(1, 6)
        ]
        pair.wait_replicated(conn)
    return smalls


def write_big_then_small(pair: ReplicaPair, db: str) -> tuple[GtidSet, Gtid, list[Gtid]]:
    start, big = write_big(pair, db)
    return start, big, write_smalls(pair, db)


def check_exactly_once(events: Sequence[BinlogEvent], big: Gtid, smalls: Sequence[Gtid]) -> None:
    check_well_formed(events)
    mine = of(events, big, *smalls)
    expected_keys = [(i,) for i in range(1, BIG_ROWS + 1)]
    got_big = [e for e in mine if isinstance(e, RowChange) and e.gtid == big]
    assert [e.key for e in got_big] == expected_keys, "big transaction: rows missing, repeated or reordered"
    assert all(
        e.op == "c" and e.after is not None and e.after["payload"].endswith(str(e.key[0])) for e in got_big
    )
    order = [e.gtid for e in mine if isinstance(e, TxCommit)]
    assert order == [big, *smalls]
    for n, small in enumerate(smalls, start=1):
        assert [(type(e), getattr(e, "key", None)) for e in of(mine, small)] == [
            (TxBegin, None),
            (RowChange, (BIG_ROWS + n,)),
            (TxCommit, None),
        ]


def test_a_connection_killed_mid_transaction_resumes_without_losing_or_repeating_a_row(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream], decoders: int
) -> None:
    start, big, smalls = write_big_then_small(pair, fresh_db)
    stream = open_stream(start, TableId(fresh_db, "big"), heartbeat_s=HEARTBEAT_S, decoders=decoders)
    rows = 0
    killed = False
    open_tx: Gtid | None = None
    open_at_reconnect: list[Gtid | None] = []

    def on_event(event: BinlogEvent) -> None:
        nonlocal rows, killed, open_tx
        if stream.reconnects > len(open_at_reconnect):  # the reader was rebuilt before this event
            open_at_reconnect.append(open_tx)
        if isinstance(event, TxBegin):
            open_tx = event.gtid
        elif isinstance(event, TxCommit):
            open_tx = None
        elif isinstance(event, RowChange) and event.gtid == big:
            rows += 1
            if rows == 1000:
                killed = kill_dump(pair, stream.dump_connection_id)

    events = collect(stream, committed(*smalls), on_event=on_event)
    assert killed
    assert open_at_reconnect[:1] == [big], "the connection should have dropped inside the big transaction"
    check_exactly_once(events, big, smalls)


@pytest.mark.parametrize("decoder_json", [True, False], ids=["json", "values"])
def test_a_decoder_killed_mid_transaction_loses_and_repeats_no_row(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream], decoder_json: bool
) -> None:
    """kill -9 of a decoder process: what was read ahead is dropped and read again from what was handed
    out, by new processes, as after a lost connection; whether they write JSON (JSON lines) or send
    values back (Delta)."""
    start, big, smalls = write_big_then_small(pair, fresh_db)
    stream = open_stream(
        start, TableId(fresh_db, "big"), heartbeat_s=HEARTBEAT_S, decoders=1, decoder_json=decoder_json
    )
    killed: list[int] = []
    rows = 0

    def on_event(event: BinlogEvent) -> None:
        nonlocal rows
        if isinstance(event, RowChange) and event.gtid == big:
            rows += 1
            if rows in (5, 1500) and stream.decoders is not None:
                for pid in stream.decoders.pids():
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

    events = collect(stream, committed(*smalls), on_event=on_event)
    assert len(killed) == 2 and stream.reconnects >= 1
    assert stream.decoders is not None and stream.decoders.started >= 2
    check_exactly_once(events, big, smalls)


DECODER_HUNG_AFTER_S = 2.0


@pytest.mark.parametrize("decoder_json", [True, False], ids=["json", "values"])
def test_a_stopped_decoder_is_replaced_and_loses_and_repeats_no_row(
    pair: ReplicaPair,
    fresh_db: str,
    open_stream: Callable[..., BinlogStream],
    decoder_json: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGSTOP of a decoder process while a transaction's rows stream (it neither answers nor dies): once
    its batch is overdue (``decoder_hung_after_s``) it is reported with one WARNING naming it, killed, and
    the rows read again by new processes: the stream goes on within the bound, nothing lost or repeated.
    Without the watch the stream waited for it for ever (the hang guard of ``collect`` would fail)."""
    start, big, smalls = write_big_then_small(pair, fresh_db)
    stream = open_stream(
        start,
        TableId(fresh_db, "big"),
        heartbeat_s=HEARTBEAT_S,
        decoders=1,
        decoder_json=decoder_json,
        decoder_hung_after_s=DECODER_HUNG_AFTER_S,
    )
    stopped: list[tuple[int, float]] = []
    gaps: list[float] = []
    rows = 0

    def on_event(event: BinlogEvent) -> None:
        nonlocal rows
        if len(gaps) < len(stopped):  # the first event after a stop
            gaps.append(time.monotonic() - stopped[-1][1])
        if isinstance(event, RowChange) and event.gtid == big:
            rows += 1
            if rows in (5, 1500) and stream.decoders is not None:
                for pid in stream.decoders.pids():
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append((pid, time.monotonic()))

    result: list[list[BinlogEvent] | BaseException] = []

    def read() -> None:
        try:
            result.append(collect(stream, committed(*smalls), on_event=on_event, timeout=120.0))
        except BaseException as exc:  # raised in the test's thread below
            result.append(exc)

    reader = threading.Thread(target=read, name="collect", daemon=True)
    with caplog.at_level(logging.INFO):
        reader.start()
        reader.join(150.0)  # a stream waiting on a stopped decoder never returns from next()
        hung = reader.is_alive()
        for pid, _ in stopped:  # whatever happened, nothing stays stopped (and the reader ends)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        reader.join(30.0)
    assert not hung, f"the stream waited on a stopped decoder for good (stopped: {stopped})"
    [events] = result
    if isinstance(events, BaseException):
        raise events
    assert len(stopped) == 2 and stream.decoders is not None and stream.decoders.started >= 3
    assert all(gap < DECODER_HUNG_AFTER_S + 15.0 for gap in gaps), f"the stream stalled: {gaps}"
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    for pid, _ in stopped:
        mine = [w for w in warned if f"(pid {pid})" in w]
        assert len(mine) == 1 and "has not answered" in mine[0], warned
    check_exactly_once(events, big, smalls)


def test_a_connection_killed_between_transactions_resumes_after_the_last_commit(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream], decoders: int
) -> None:
    start, big = write_big(pair, fresh_db)
    stream = open_stream(start, TableId(fresh_db, "big"), heartbeat_s=HEARTBEAT_S, decoders=decoders)
    events = collect(stream, committed(big))
    assert kill_dump(pair, stream.dump_connection_id)
    events += collect(stream, lambda _: stream.reconnects >= 1, awaiting="a reconnect after the KILL")
    smalls = write_smalls(pair, fresh_db)  # written after the kill: they come over the new connection
    events += collect(stream, committed(*smalls))
    check_exactly_once(events, big, smalls)


def test_repeated_kills_inside_one_transaction(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream], decoders: int
) -> None:
    start, big, smalls = write_big_then_small(pair, fresh_db)
    stream = open_stream(start, TableId(fresh_db, "big"), heartbeat_s=HEARTBEAT_S, decoders=decoders)
    kills_at = {1, 700, 701, 1500, 2999}
    rows = 0
    kills = 0

    def on_event(event: BinlogEvent) -> None:
        nonlocal rows, kills
        if isinstance(event, TxBegin) and event.gtid == big:
            kills += kill_dump(pair, stream.dump_connection_id)  # right after TxBegin: no row of it yet
        if isinstance(event, RowChange) and event.gtid == big:
            rows += 1
            if rows in kills_at:
                kills += kill_dump(pair, stream.dump_connection_id)

    events = collect(stream, committed(*smalls), on_event=on_event)
    assert kills >= 3 and stream.reconnects >= 2
    check_exactly_once(events, big, smalls)


def test_a_big_transaction_streams_whole_without_a_kill(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream], decoders: int
) -> None:
    """The baseline of the kill tests above. How fast it decodes is measured by scripts/bench (part b),
    not here: a test asserting a rate fails on a loaded machine and proves nothing about correctness."""
    start, big, smalls = write_big_then_small(pair, fresh_db)
    stream = open_stream(start, TableId(fresh_db, "big"), heartbeat_s=HEARTBEAT_S, decoders=decoders)
    events = collect(stream, committed(*smalls))
    check_exactly_once(events, big, smalls)


# --------------------------------------------------------------------------- restart


def test_restart_from_a_set_yields_exactly_the_transactions_after_it(
    pair: ReplicaPair, fresh_db: str, open_stream: Callable[..., BinlogStream], decoders: int
) -> None:
    table = TableId(fresh_db, "r")
    with pair.primary(fresh_db) as conn:
        commit(pair, conn, "CREATE TABLE r (id INT PRIMARY KEY)")
        start = pair.wait_replicated(conn)
        gtids = [
            commit(pair, conn, f"INSERT INTO r VALUES ({n})", f"INSERT INTO r VALUES ({n + 100})")
            for n in range(5)
        ]
        pair.wait_replicated(conn)
    stream = open_stream(start, table, heartbeat_s=HEARTBEAT_S, decoders=decoders)
    middle: list[GtidSet] = []

    def on_event(event: BinlogEvent) -> None:
        if event == TxCommit(gtids[1]):
            middle.append(stream.processed)

    first = collect(stream, committed(gtids[-1]), on_event=on_event)
    assert len(of(first, *gtids)) == 5 * 4
    assert gtids[1] in middle[0] and gtids[2] not in middle[0]

    stream.restart(middle[0])
    assert stream.processed == middle[0]
    again = collect(stream, committed(gtids[-1]))
    check_well_formed(again)
    assert [e.gtid for e in again if isinstance(e, TxBegin) and e.gtid in set(gtids)] == gtids[2:]
    assert of(again, *gtids) == of(first, *gtids[2:])

    # A restart in the middle of a transaction drops what was read of it: it comes again whole.
    stream.restart(middle[0])
    partial = collect(stream, lambda evs: any(isinstance(e, RowChange) for e in evs))
    assert isinstance(partial[-1], RowChange) and partial[-1].gtid == gtids[2]
    stream.restart(middle[0])
    whole = collect(stream, committed(gtids[-1]))
    assert of(whole, *gtids) == of(first, *gtids[2:])


# --------------------------------------------------------------------------- errors


def test_an_error_while_normalising_loses_nothing(pair: ReplicaPair, fresh_db: str, decoders: int) -> None:
    table = TableId(fresh_db, "r")
    with pair.primary(fresh_db) as conn:
        commit(pair, conn, "CREATE TABLE r (id INT PRIMARY KEY)")
        start = pair.wait_replicated(conn)
        gtids = [
            commit(pair, conn, f"INSERT INTO r VALUES ({n})", f"INSERT INTO r VALUES ({n + 100})")
            for n in range(3)
        ]
        pair.wait_replicated(conn)
    captured = Captured(pair, table)
    calls = 0

    def flaky(asked: TableId) -> TableSchema | None:
        nonlocal calls
        calls += asked == table
        if calls == 4 and asked == table:  # the second row event of the second transaction
            raise RuntimeError("schema lookup failed")
        return captured(asked)

    stream = BinlogStream(
        reader_settings(pair), flavor(pair), start, flaky, heartbeat_s=HEARTBEAT_S, decoders=decoders
    )
    events: list[BinlogEvent] = []
    errors = 0
    deadline = time.monotonic() + TIMEOUT_S  # a hang guard
    try:
        while not committed(gtids[-1])(events):
            if time.monotonic() > deadline:
                pytest.fail(
                    f"hang guard: {TIMEOUT_S:.0f}s passed awaiting the commit of {gtids[-1]}; "
                    f"{errors} schema errors, the last events: {events[-5:]}",
                    pytrace=False,
                )
            try:
                event = stream.next()
            except RuntimeError:
                errors += 1
                continue
            events.extend(expanded(event))
    finally:
        stream.close()
        captured.close()
    assert errors == 1
    check_well_formed(events)
    assert [(type(e).__name__, getattr(e, "key", None)) for e in of(events, *gtids)] == [
        item
        for n in range(3)
        for item in [("TxBegin", None), ("RowChange", (n,)), ("RowChange", (n + 100,)), ("TxCommit", None)]
    ]


def test_wrong_password_is_a_config_error_naming_the_account(pair: ReplicaPair) -> None:
    """As on the replica's own connection (tests/integration/test_replica.py): one meaning per code."""
    wrong = "not-the-password-42"
    stream = BinlogStream(
        reader_settings(pair, password=wrong), flavor(pair), replica_executed(pair), lambda _: None
    )
    try:
        with pytest.raises(ConfigError, match="refused the login of the binlog stream") as refused:
            stream.next()
    finally:
        stream.close()
    assert not refused.value.retryable
    assert reader_settings(pair).describe() in str(refused.value)
    assert wrong not in str(refused.value) and READER[1] not in str(refused.value)


def test_tls_is_used_as_configured(pair: ReplicaPair) -> None:
    """MySQL 8.0 made its own CA and certificate at install; the MariaDB replica offers no TLS."""
    with pair.connect(pair.replica_port) as admin, admin.cursor() as cur:
        cur.execute("SELECT @@have_ssl, @@datadir, @@ssl_ca")
        have_ssl, datadir, ssl_ca = cur.fetchone()
    plain = reader_settings(pair)
    if have_ssl != "YES":
        required = dataclasses.replace(plain, tls=TlsMode.REQUIRED)
        stream = BinlogStream(required, flavor(pair), replica_executed(pair), lambda _: None)
        with stream, pytest.raises(FatalSourceError, match="SSL is required"):
            stream.next()
        return
    for settings, ciphered in [
        (plain, False),
        (dataclasses.replace(plain, tls=TlsMode.PREFERRED), True),
        (dataclasses.replace(plain, tls=TlsMode.REQUIRED, ca=Path(datadir) / ssl_ca), True),
    ]:
        with BinlogStream(settings, flavor(pair), replica_executed(pair), lambda _: None) as stream:
            assert collect(stream, lambda evs: bool(evs), awaiting=f"a first event with tls {settings.tls}")
            with pair.connect(pair.replica_port) as admin, admin.cursor() as cur:
                cur.execute(
                    "SELECT s.VARIABLE_VALUE FROM performance_schema.threads t JOIN "
                    "performance_schema.status_by_thread s USING (THREAD_ID) "
                    "WHERE t.PROCESSLIST_ID = %s AND s.VARIABLE_NAME = 'Ssl_cipher'",
                    [stream.dump_connection_id],
                )
                row = cur.fetchone()
            assert bool(row and row[0]) == ciphered, (settings.tls, row)
    # The system's CAs did not sign the server's certificate.
    system_cas = ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt"
    wrong_ca = dataclasses.replace(plain, tls=TlsMode.REQUIRED, ca=Path(system_cas))
    stream = BinlogStream(wrong_ca, flavor(pair), replica_executed(pair), lambda _: None)
    with stream, pytest.raises(FatalSourceError, match="CERTIFICATE_VERIFY_FAILED"):
        stream.next()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_source_is_retried_then_reported(pair: ReplicaPair) -> None:
    """While it retries, next() returns None (every heartbeat_s) instead of raising; once it has failed
    for retry_for_s it raises a retryable SourceError naming the source. Only bounds that load cannot
    break are checked: it gave up no sooner than retry_for_s (a lower bound) and it did give up (a hang
    guard). Connection refused comes at once, so many retries fit in retry_for_s, far above the 2 asked."""
    settings = reader_settings(pair, port=free_port())
    retry_for_s = 3.0
    stream = BinlogStream(
        settings,
        flavor(pair),
        replica_executed(pair),
        lambda _: None,
        heartbeat_s=0.3,
        retry_for_s=retry_for_s,
    )
    began = time.monotonic()
    nones = 0
    try:
        with pytest.raises(SourceError) as failed:
            while True:
                if time.monotonic() - began > TIMEOUT_S:
                    pytest.fail(
                        f"hang guard: {TIMEOUT_S:.0f}s passed awaiting the SourceError of an unreachable "
                        f"source retried for {retry_for_s}s; next() returned None {nones} times, "
                        f"{stream.reconnects} reconnects",
                        pytrace=False,
                    )
                assert stream.next() is None
                nones += 1
    finally:
        stream.close()
    assert failed.value.retryable and not isinstance(failed.value, FatalSourceError)
    assert settings.describe() in str(failed.value)
    assert nones >= 2 and stream.reconnects >= 2, (nones, stream.reconnects)
    assert time.monotonic() - began >= retry_for_s
