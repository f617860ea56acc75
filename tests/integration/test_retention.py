"""Acceptance scenario 27, binlog retention: how long until the replica purges the oldest binlog the
checkpoint needs, said by ``gtidsnap check``, a run's log and ``status``, with a warning below
``source.retention_warn_s``. On the second replica of each flavour, whose expiry the test sets (and
puts back) and whose binlog it rotates (FLUSH BINARY LOGS, which is not binlogged)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cdc import REPO, cli_env, create_table, gtidsnap_cmd
from tests.integration.fixtures.db_servers import ReplicaPair
from tests.integration.test_failover import wait_replica2

pytestmark = pytest.mark.integration

DAY = 86_400


@pytest.fixture
def expiry_of_a_day(pair: ReplicaPair) -> Iterator[None]:
    with pair.connect(pair.replica2_port) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@global.binlog_expire_logs_seconds")
        (before,) = cur.fetchone()
        cur.execute(f"SET GLOBAL binlog_expire_logs_seconds = {DAY}")
    try:
        yield
    finally:
        with pair.connect(pair.replica2_port) as conn, conn.cursor() as cur:
            cur.execute(f"SET GLOBAL binlog_expire_logs_seconds = {int(before)}")


def cli(pair: ReplicaPair, out: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = cli_env(pair) | {"GTIDSNAP_SOURCE_PORT": str(pair.replica2_port)} | env
    environment["GTIDSNAP_CHECKPOINT_PATH"] = str(out / "checkpoint.json")
    environment["GTIDSNAP_SINK_PATH"] = str(out / "changes.jsonl")
    return subprocess.run(
        gtidsnap_cmd(*args), env=environment, cwd=REPO, capture_output=True, text=True, timeout=240
    )


def test_the_headroom_of_the_checkpoint_is_told_and_warned_of(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, expiry_of_a_day: None
) -> None:
    create_table(pair, fresh_db, "t", 50)
    wait_replica2(pair)
    run = cli(pair, tmp_path, "run", "--snapshot", f"{fresh_db}.t", "--until-caught-up")
    assert run.returncode == 0, run.stderr[-3000:]
    check = cli(pair, tmp_path, "check")
    assert check.returncode == 0, check.stderr
    assert re.search(
        r"binlog retention: the binlog the checkpoint needs \(\S+\) is the one being written", check.stdout
    )
    with pair.primary(fresh_db) as conn, conn.cursor() as cur:  # past the checkpoint, in the same file
        cur.execute("INSERT INTO t VALUES (1001, 1, 'new')")
    wait_replica2(pair)
    with pair.connect(pair.replica2_port) as conn, conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")  # the file the checkpoint needs is closed: its day starts
    check = cli(pair, tmp_path, "check")
    found = re.search(
        r"binlog retention: (\S+), the oldest binlog the checkpoint needs, expires in ([\d.]+) h",
        check.stdout,
    )
    assert found and 23.5 <= float(found[2]) <= 24.0, check.stdout
    warned = cli(pair, tmp_path, "check", GTIDSNAP_SOURCE_RETENTION_WARN_S=str(2 * DAY))
    assert (
        "(below source.retention_warn_s = 2.0 days): keep the run going, or keep binlogs longer"
        in warned.stdout
    )
    # a run says it in its log at once and writes it into the checkpoint, which status shows
    run = cli(pair, tmp_path, "run", "--until-caught-up", GTIDSNAP_SOURCE_RETENTION_WARN_S=str(2 * DAY))
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        f"WARNING gtidsnap.observe.retention: binlog retention: {found[1]}, the oldest binlog" in run.stderr
    )
    status = json.loads(cli(pair, tmp_path, "status", "--json").stdout)
    assert status["replica"]["retention_low"] is True and "expires in" in status["replica"]["retention"]
