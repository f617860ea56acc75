"""Faults and schema changes mid-snapshot (acceptance scenarios 14 and 20), on both flavours."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pymysql
import pytest

from gtidsnap.core.model import TableId
from gtidsnap.run import build_engine
from gtidsnap.source.connection import Secret
from gtidsnap.source.replica import Replica
from tests.integration.cdc import (
    Writer,
    check_invariants,
    create_table,
    execute,
    make_config,
    read_records,
    run_engine,
    source_rows,
)
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration


@pytest.fixture
def own_reader(pair: ReplicaPair) -> Iterator[tuple[str, str]]:
    """A read-only user of this test alone (the same three grants), so its connections can be killed
    without touching anyone else's."""
    user, password = f"r_{uuid.uuid4().hex[:10]}", "kill-test-pw"
    execute(
        pair,
        "",
        f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'",
        f"GRANT SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO '{user}'@'%'",
    )
    yield user, password
    execute(pair, "", f"DROP USER IF EXISTS '{user}'@'%'")


def test_replica_and_binlog_connections_killed_mid_snapshot(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, own_reader: tuple[str, str]
) -> None:
    """Scenario 20: every connection of the tool is killed on the replica, again and again, while it
    snapshots and streams; it reconnects and finishes with nothing lost or doubled."""
    create_table(pair, fresh_db, "t", 8000)
    writer = Writer(pair, fresh_db, ["t"], seed=20, transactions=300, pause_s=0.01).start()
    table = TableId(fresh_db, "t")
    base = make_config(pair, tmp_path, [table], chunk_size=40)
    config = replace(base, source=replace(base.source, user=own_reader[0], password=Secret(own_reader[1])))
    config = replace(config, snapshot=replace(config.snapshot, chunk_delay_s=0.04))  # ~8 s to kill into
    kills = 0
    stop = threading.Event()

    def killer() -> None:
        nonlocal kills
        with pair.connect(pair.replica_port) as admin, admin.cursor() as cur:
            while kills < 8 and not stop.wait(1.2):  # slower than a heartbeat, so each reconnect reads
                cur.execute("SELECT id FROM information_schema.PROCESSLIST WHERE user = %s", (own_reader[0],))
                for (conn_id,) in cur.fetchall():
                    try:
                        cur.execute(f"KILL {int(conn_id)}")
                        kills += 1
                    except pymysql.err.OperationalError:
                        pass  # already gone

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        with Replica(config.source) as replica:
            build_engine(config, replica).run(snapshot=[table], until_caught_up=True)
    finally:
        stop.set()
        thread.join(10)
    writer.join()
    run_engine(pair, tmp_path, [], tables=[table])
    assert kills >= 4, f"only {kills} connections were killed: the run was too short to test anything"
    check_invariants(read_records(tmp_path), {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def _alter_once_rows_are_out(pair: ReplicaPair, db: str, out: Path, *statements: str) -> threading.Thread:
    """Runs ``statements`` once the run has written its first records: mid-snapshot however long the
    run takes to start (chunk reader processes take about a second)."""
    changes = out / "changes.jsonl"

    def go() -> None:
        deadline = time.monotonic() + 60
        while not (changes.exists() and changes.stat().st_size > 0) and time.monotonic() < deadline:
            time.sleep(0.01)
        execute(pair, db, *statements)

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_drop_and_modify_column_mid_snapshot(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    """Scenario 14: the snapshot goes on with the new shape; every row ends as the source has it."""
    execute(
        pair,
        fresh_db,
        "CREATE TABLE t (id BIGINT PRIMARY KEY, v INT NOT NULL, doomed VARCHAR(10), n SMALLINT)",
        many=[("INSERT INTO t VALUES (%s, 0, 'x', %s)", [(i, i % 100) for i in range(4000)])],
    )
    thread = _alter_once_rows_are_out(
        pair,
        fresh_db,
        tmp_path,
        "ALTER TABLE t DROP COLUMN doomed",
        "ALTER TABLE t MODIFY COLUMN n BIGINT",
        "UPDATE t SET n = n + 100000, v = 1 WHERE id % 7 = 0",
    )
    table = TableId(fresh_db, "t")
    config = make_config(pair, tmp_path, [table], chunk_size=20)
    config = replace(config, snapshot=replace(config.snapshot, chunk_delay_s=0.002))
    with Replica(config.source) as replica:
        build_engine(config, replica).run(snapshot=[table], until_caught_up=True)
    thread.join()
    run_engine(pair, tmp_path, [], tables=[table])
    records = read_records(tmp_path)
    assert any("doomed" not in (r["after"] or {}) for r in records), "rows after the DROP lack the column"
    # A consumer drops the column from rows read before the DROP, as documented; so does this check.
    for r in records:
        for image in (r["after"], r["before"]):
            if image is not None:
                image.pop("doomed", None)
    check_invariants(records, {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def test_rename_table_mid_snapshot_ends_it_with_a_clear_error(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    create_table(pair, fresh_db, "t", 6000)
    thread = _alter_once_rows_are_out(pair, fresh_db, tmp_path, "RENAME TABLE t TO t_old")
    table = TableId(fresh_db, "t")
    config = make_config(pair, tmp_path, [table], chunk_size=20)
    config = replace(config, snapshot=replace(config.snapshot, chunk_delay_s=0.003))
    with Replica(config.source) as replica:
        build_engine(config, replica).run(snapshot=[table], until_caught_up=True)
    thread.join()
    (progress,) = json.loads((tmp_path / "checkpoint.json").read_text())["context"]["tables"]
    assert progress["done"] and progress["error"] and f"{fresh_db}.t" in progress["error"], progress
    assert 0 < progress["rows"] < 6000
