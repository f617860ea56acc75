"""The replica pairs are real: replication works, the executed GTID set is read the way the product
reads it, python-mysql-replication streams the replica with GTID auto-position and heartbeats, and
the tool's account can only read. Each test runs on MariaDB and on MySQL."""

from __future__ import annotations

import random
import re
import time

import pymysql
import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import GtidEvent, HeartbeatLogEvent, MariadbGtidEvent

from gtidsnap.gtid import GtidSet, MariadbGtid, MysqlGtid
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration
TIMEOUT_S = 30.0


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


@pytest.mark.filterwarnings("ignore:'db' is deprecated:DeprecationWarning")  # inside pymysqlreplication
def test_binlog_stream_of_replica_sees_the_write_and_heartbeats(pair: ReplicaPair, fresh_db: str) -> None:
    with pair.replica_reader() as replica:
        start = pair.executed(replica)
    gtid = write_on_primary(pair, fresh_db, "streamed")
    gtid_event = MariadbGtidEvent if pair.flavor == "mariadb" else GtidEvent
    stream = BinLogStreamReader(
        connection_settings={**pair.reader_settings(), "read_timeout": 10},
        server_id=random.randint(100_000, 2**31 - 1),  # unique: the servers are 1 and 2
        auto_position=str(start) if pair.flavor == "mysql" else start.as_position(),  # type: ignore[attr-defined]
        is_mariadb=pair.flavor == "mariadb",
        blocking=True,
        slave_heartbeat=1,
        only_events=[gtid_event, HeartbeatLogEvent],
    )
    seen: list[str] = []
    heartbeats = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline and not (str(gtid) in seen and heartbeats):
            event = stream.fetchone()
            if isinstance(event, gtid_event):
                seen.append(str(event.gtid).lower())
            elif isinstance(event, HeartbeatLogEvent):
                heartbeats += 1
    finally:
        stream.close()
    assert str(gtid) in seen, f"{gtid} not streamed; saw {seen}"
    assert heartbeats, "no heartbeat within the timeout"


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
