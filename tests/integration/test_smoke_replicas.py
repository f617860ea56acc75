"""The replica pairs are real: replication works, the executed GTID set is read the way the product
reads it, python-mysql-replication streams the replica with GTID auto-position and heartbeats, and
the tool's account can only read. Each test runs on MariaDB and on MySQL."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent

from gtidsnap.core.gtid import GtidSet, MariadbGtid, MysqlGtid
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration
TIMEOUT_S = 30.0
# Hang guards only (a loaded machine may be slow; nothing here is timed):
HANG_GUARD_S = 180.0
STREAM_READ_TIMEOUT_S = 60


def write_on_primary(pair: ReplicaPair, db: str, value: str) -> MysqlGtid | MariadbGtid:
    """Insert one row on the primary in its own transaction; return that transaction's GTID."""
    with pair.primary(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE IF NOT EXISTS t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))")
        before = pair.executed(conn)
        cur.execute("INSERT INTO t (v) VALUES (%s)", (value,))
        new: GtidSet = pair.executed(conn) - before
    top = new.max_per_source().values()
    gtids = list(new) if pair.flavor == "mysql" else [MariadbGtid(0, 1, n) for n in top]
    assert len(gtids) == 1, f"expected exactly one new transaction on the primary, got {new}"
    return gtids[0]  # type: ignore[return-value]


def test_write_on_primary_reaches_replica_and_its_watermark(pair: ReplicaPair, fresh_db: str) -> None:
    with pair.replica_reader() as replica:
        before = pair.executed(replica)
        assert before, "the replica already holds the bootstrap transactions"
        gtid = write_on_primary(pair, fresh_db, "hello")
        assert gtid not in before
        deadline = time.monotonic() + TIMEOUT_S
        while gtid not in (after := pair.executed(replica)):
            assert time.monotonic() < deadline, f"{gtid} never reached the replica's executed set {after}"
            time.sleep(0.02)
        assert before <= after and not after <= before
        with replica.cursor() as cur:
            cur.execute(f"SELECT v FROM `{fresh_db}`.t")
            assert cur.fetchall() == (("hello",),)


class Redialled(Exception):
    """The library tried to open a second dump connection (see :class:`OneDumpConnection`)."""


class OneDumpConnection:
    """``pymysql_wrapper`` that opens the dump connection once. ``fetchone`` (1.0.17) swallows a lost
    connection or a read timeout (pymysql errors 2013, 2006) and silently dials again from the
    ``auto_position`` it was built with, replaying everything: the stream would then never end when
    the server sends nothing. A second dial raises instead, so the test fails saying so. The control
    connection is the one the library opens with a ``cursorclass``."""

    def __init__(self) -> None:
        self.dumps = 0

    def __call__(self, **kwargs: Any) -> pymysql.connections.Connection:
        if "cursorclass" not in kwargs:
            self.dumps += 1
            if self.dumps > 1:
                raise Redialled("the dump connection was lost or read nothing for read_timeout")
        return pymysql.connect(**kwargs)


@pytest.mark.filterwarnings("ignore:'db' is deprecated:DeprecationWarning")  # inside pymysqlreplication
def test_binlog_stream_of_replica_sees_the_write_and_heartbeats(pair: ReplicaPair, fresh_db: str) -> None:
    """Waits for what it checks: the write's GTID streamed and then at least one heartbeat, however long
    it takes (a server sends heartbeats only while it has nothing else to send, so any other writer
    holds them back), up to a hang guard. ``read_timeout`` is far above the heartbeat period (the
    library asks for min(read_timeout / 2, slave_heartbeat) = 1 s), so a delayed heartbeat is not a
    lost connection; should nothing at all arrive for that long, the refused re-dial ends the wait."""
    with pair.replica_reader() as replica:
        start = pair.executed(replica)
    gtid = write_on_primary(pair, fresh_db, "streamed")
    gtid_event = MariadbGtidEvent if pair.flavor == "mariadb" else GtidEvent
    stream = BinLogStreamReader(
        connection_settings={**pair.reader_settings(), "read_timeout": STREAM_READ_TIMEOUT_S},
        server_id=random.randint(100_000, 2**31 - 1),  # unique: the servers are 1 and 2
        auto_position=str(start) if pair.flavor == "mysql" else start.as_position(),  # type: ignore[attr-defined]
        is_mariadb=pair.flavor == "mariadb",
        blocking=True,
        slave_heartbeat=1,
        only_events=[gtid_event, HeartbeatLogEvent],
        pymysql_wrapper=OneDumpConnection(),
    )
    seen: list[str] = []
    heartbeats = 0

    def awaited() -> str:
        return (
            f"awaited {gtid} and a heartbeat after it on the binlog stream of 127.0.0.1:{pair.replica_port}; "
            f"saw {heartbeats} heartbeat(s) and {len(seen)} GTID(s), the last: {seen[-5:]}"
        )

    deadline = time.monotonic() + HANG_GUARD_S  # fetchone returns at least once per heartbeat period
    try:
        while not (str(gtid) in seen and heartbeats):
            if time.monotonic() > deadline:
                pytest.fail(f"hang guard: {HANG_GUARD_S:.0f}s passed; {awaited()}", pytrace=False)
            try:
                event = stream.fetchone()
            except Redialled as exc:
                pytest.fail(f"{exc} ({STREAM_READ_TIMEOUT_S}s); {awaited()}", pytrace=False)
            if isinstance(event, gtid_event):
                seen.append(str(event.gtid).lower())
            elif isinstance(event, HeartbeatLogEvent) and str(gtid) in seen:
                heartbeats += 1  # MySQL also sends one per stretch of skipped (already executed) events
    finally:
        stream.close()


# MariaDB 10.5+ shows REPLICATION CLIENT under its newer name.
PRIVILEGE_ALIASES = {"BINLOG MONITOR": "REPLICATION CLIENT"}


def test_tool_account_can_only_read(pair: ReplicaPair, fresh_db: str) -> None:
    write_on_primary(pair, fresh_db, "existing")
    with pair.primary() as primary:
        pair.wait_replicated(primary)
    with pair.replica_reader(fresh_db) as conn, conn.cursor() as cur:
        with pytest.raises(pymysql.err.OperationalError) as denied:
            cur.execute("INSERT INTO t (v) VALUES ('nope')")
        assert denied.value.args[0] == 1142, denied.value  # ER_TABLEACCESS_DENIED_ERROR
        with pytest.raises(pymysql.err.OperationalError) as denied_db:
            cur.execute("CREATE DATABASE gtidsnap_must_not_exist")
        assert denied_db.value.args[0] == 1044, denied_db.value  # ER_DBACCESS_DENIED_ERROR
        cur.execute("SHOW GRANTS")
        grants = [row[0] for row in cur.fetchall()]
    assert len(grants) == 1, grants
    match = re.match(r"GRANT (.+?) ON \*\.\* TO [`']gtidsnap[`']@[`']%[`']", grants[0])
    assert match, grants
    privileges = {PRIVILEGE_ALIASES.get(p.strip(), p.strip()) for p in match.group(1).split(",")}
    assert privileges == {"SELECT", "REPLICATION CLIENT", "REPLICATION SLAVE"}
