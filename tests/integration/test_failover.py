"""Acceptance scenario 27: a run on any replica of the topology. With ``source.hosts`` a snapshot whose
replica is killed (the server process, kill -9) under a writer finishes on the second replica with an
exact output, in JSON lines on both servers and in Delta on MariaDB; a checkpoint continues on a replica that
lags (waited for) and on one provisioned from a backup (MariaDB: a domain its binlog never logged).

The second replica of each flavour (``replica2``) is the one killed, and brought back by its script
afterwards; the first one, which every other test reads, is never touched."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from tests.integration.cdc import (
    REPO,
    Writer,
    check_invariants,
    cli_env,
    create_table,
    gtidsnap_cmd,
    read_records,
    run_args,
    source_rows,
    wait_for,
)
from tests.integration.fixtures.db_servers import ReplicaPair, run_script, server_pid
from tests.integration.test_delta_engine import TABLES, DeltaCli, check_output, read, tail

pytestmark = pytest.mark.integration

RETRY_FOR_S = 3.0  # source.retry_for_s of these runs: a lost replica is tried again this long
RUN_TIMEOUT_S = 240.0


def hosts(pair: ReplicaPair, *ports: int) -> str:
    return ",".join(f"{pair.host}:{p}" for p in ports)


def failover_env(pair: ReplicaPair, *ports: int, **more: str) -> dict[str, str]:
    """The CLI's environment with ``source.hosts`` instead of one host and port."""
    env = {
        k: v for k, v in cli_env(pair).items() if k not in ("GTIDSNAP_SOURCE_HOST", "GTIDSNAP_SOURCE_PORT")
    }
    env |= {
        "GTIDSNAP_SOURCE_HOSTS": hosts(pair, *ports),
        "GTIDSNAP_SOURCE_RETRY_FOR_S": str(RETRY_FOR_S),
        "GTIDSNAP_SOURCE_CATCH_UP_TIMEOUT_S": "60",
    }
    return env | more


class FailoverDeltaCli(DeltaCli):
    """The Delta scenario's CLI, reading ``source.hosts``: replica2 first, then the replica."""

    def env(self, **more: str) -> dict[str, str]:
        env = super().env(**more)
        for name in ("GTIDSNAP_SOURCE_HOST", "GTIDSNAP_SOURCE_PORT"):
            env.pop(name, None)
        return env | failover_env(self.pair, self.pair.replica2_port, self.pair.replica_port) | more


def executed_at(pair: ReplicaPair, port: int) -> GtidSet:
    with pair.connect(port) as conn:
        return pair.executed(conn)


def wait_replica2(pair: ReplicaPair) -> None:
    """Until replica2 has applied everything the primary has."""
    with pair.primary() as primary:
        target = pair.executed(primary)
    wait_for(
        f"{pair.flavor} replica2 to catch up", lambda: target <= applied_at(pair, pair.replica2_port), 60
    )


def applied_at(pair: ReplicaPair, port: int) -> GtidSet:
    """What the replica at ``port`` has applied (MariaDB: its binlog and slave positions, per domain)."""
    if pair.flavor == "mysql":
        return executed_at(pair, port)
    with pair.connect(port) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@global.gtid_binlog_pos, @@global.gtid_slave_pos")
        binlog, slave = cur.fetchone()
    return parse_gtid_set("mariadb", binlog) | parse_gtid_set("mariadb", slave)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def checkpoint_of(out: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((out / "checkpoint.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    return data


def snapshot_rows(out: Path) -> int:
    cp = checkpoint_of(out)
    return sum(t["rows"] for t in cp["context"]["tables"]) if cp else 0


def replica_in_use(out: Path) -> str:
    cp = checkpoint_of(out)
    return str(cp.get("replica", {}).get("where", "")) if cp else ""


@contextmanager
def replica2_killed_then_restarted(pair: ReplicaPair) -> Iterator[Callable[[], float]]:
    """``kill()`` kills replica2's server with SIGKILL; it is started again (its script) on leaving."""
    killed: list[float] = []

    def kill() -> float:
        pid = server_pid(pair, "replica2")
        os.kill(pid, signal.SIGKILL)
        killed.append(time.monotonic())
        wait_for("the killed server to be gone", lambda: not alive(pid), 30)
        return killed[-1]

    try:
        yield kill
    finally:
        if killed:
            run_script(pair, "start")
            wait_replica2(pair)


def kill_mid_snapshot(
    pair: ReplicaPair, out: Path, proc: subprocess.Popen[Any], kill: Callable[[], float]
) -> float:
    """Kill replica2 once the snapshot is part way through; the seconds until a checkpoint names the
    replica (printed: how fast is measured by scripts/failover_bench.py, not here)."""
    wait_for(
        "the snapshot part way through on replica2",
        lambda: snapshot_rows(out) > 300 or proc.poll() is not None,
        120,
    )
    assert proc.poll() is None, "the run ended before the kill"
    assert f":{pair.replica2_port}" in replica_in_use(out), replica_in_use(out)
    killed_at = kill()
    wait_for(
        "a checkpoint written on the first replica",
        lambda: f":{pair.replica_port}" in replica_in_use(out) or proc.poll() is not None,
        RETRY_FOR_S + 120,  # a hang guard
    )
    return time.monotonic() - killed_at


def through_the_kill(
    pair: ReplicaPair,
    out: Path,
    proc: subprocess.Popen[Any],
    kill: Callable[[], float],
    log: Callable[[], str],
) -> float:
    """The run killed under (:func:`kill_mid_snapshot`), then to its end, which must be a success."""
    try:
        switch_s = kill_mid_snapshot(pair, out, proc, kill)
        assert proc.wait(RUN_TIMEOUT_S) == 0, log()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    return switch_s


def test_a_snapshot_whose_replica_is_killed_finishes_on_the_next_into_json_lines(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    db = fresh_db
    for t in TABLES:
        create_table(pair, db, t, 1500)
    wait_replica2(pair)
    env = failover_env(
        pair,
        pair.replica2_port,
        pair.replica_port,
        GTIDSNAP_SNAPSHOT_CHUNK_SIZE="50",
        GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS="50",
    )
    args = run_args(tmp_path, *(f"{db}.{t}" for t in TABLES))
    # ~1,000 rows/s: 1 to 5 rows a transaction, about 300 transactions a second
    writer = Writer(pair, db, list(TABLES), seed=27, transactions=100_000, pause_s=0.004).start()
    log = tmp_path / "run.log"
    with replica2_killed_then_restarted(pair) as kill:
        try:
            with log.open("w") as sink:
                proc = subprocess.Popen(gtidsnap_cmd(*args), env=env, cwd=REPO, stdout=sink, stderr=sink)
            switch_s = through_the_kill(pair, tmp_path, proc, kill, log.read_text)
        finally:
            writer.stop()
        writer.join()
    text = log.read_text()
    print(f"{pair.flavor}: a checkpoint on the next replica {switch_s:.1f}s after the kill")
    assert f"lost the replica gtidsnap@{pair.host}:{pair.replica2_port}" in text, text[-3000:]
    assert f"continuing on the {pair.flavor} replica gtidsnap@{pair.host}:{pair.replica_port}" in text
    status = subprocess.run(
        gtidsnap_cmd("status", "--json", "--checkpoint", str(tmp_path / "checkpoint.json")),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    shown = json.loads(status.stdout)["replica"]
    assert shown["where"].endswith(f":{pair.replica_port}") and shown["since"], shown
    assert shown["why"].startswith(f"gtidsnap@{pair.host}:{pair.replica2_port} was lost: "), shown
    # what the writer did after the first run caught up: a second run on the same checkpoint
    again = subprocess.run(
        gtidsnap_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert again.returncode == 0, again.stderr[-3000:]
    expected = {f"{db}.{t}": source_rows(pair, db, t) for t in TABLES}
    check_invariants(read_records(tmp_path), expected)


def test_a_snapshot_whose_replica_is_killed_finishes_on_the_next_into_delta(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """The Delta sink across a failover, on MariaDB only: the switch itself (each flavour's GTID
    position on the next replica) is the JSON-lines test's, on both servers; this one adds the Delta
    commits around it, which the flavour does not change, and costs minutes of Spark time a flavour."""
    pair, db = mariadb_pair, maria_db
    for t in TABLES:
        create_table(pair, db, t, 2000)
    wait_replica2(pair)
    settings = {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20", "GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS": "100"}
    # batches (and checkpoints) every half second
    settings |= {"GTIDSNAP_SINK_BATCH_MS": "500", "GTIDSNAP_SINK_SNAPSHOT_BATCH_MS": "500"}
    cli = FailoverDeltaCli(pair, db, tmp_path, settings)
    writer = Writer(pair, db, list(TABLES), seed=28, transactions=100_000, pause_s=0.004).start()
    with replica2_killed_then_restarted(pair) as kill:
        try:
            proc, log = cli.start()
            switch_s = through_the_kill(pair, tmp_path, proc, kill, lambda: tail(read(log)))
        finally:
            writer.stop()
        writer.join()
    text = read(log)
    print(f"{pair.flavor}: a checkpoint on the next replica {switch_s:.1f}s after the kill")
    assert f"lost the replica gtidsnap@{pair.host}:{pair.replica2_port}" in text, tail(text)
    code, final = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(final)
    check_output(spark, pair, db, cli.root)


def sql_on(pair: ReplicaPair, port: int, *statements: str) -> None:
    with pair.connect(port) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def run_cli(pair: ReplicaPair, out: Path, table: str, *ports: int, snapshot: bool = False, **env: str) -> str:
    """``gtidsnap run --until-caught-up`` on ``source.hosts`` = ``ports``; its log (it must succeed)."""
    args = run_args(out, *([table] if snapshot else []))
    env = failover_env(pair, *ports, GTIDSNAP_CAPTURE_TABLES=table, **env)
    done = subprocess.run(
        gtidsnap_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def write(pair: ReplicaPair, db: str, first: int, count: int, *, domain: int | None = None) -> None:
    """``count`` single-row inserts into ``db.t`` from key ``first`` (MariaDB: in GTID ``domain``)."""
    with pair.primary(db) as conn, conn.cursor() as cur:
        if domain is not None:
            cur.execute("SET SESSION gtid_domain_id = %s", [domain])
        for key in range(first, first + count):
            cur.execute("INSERT INTO t VALUES (%s, %s, %s)", (key, 1, f"w{key}"))
        pair.wait_replicated(conn)


def test_a_checkpoint_continues_on_a_replica_that_lags(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    """replica2's applier stopped: the checkpoint written on the replica is ahead of it. The run on
    replica2 says how far behind it is and waits; once its applier runs again the run continues."""
    db, table = fresh_db, f"{fresh_db}.t"
    create_table(pair, db, "t", 100)
    wait_replica2(pair)
    run_cli(pair, tmp_path, table, pair.replica_port, snapshot=True)
    thread = "SLAVE SQL_THREAD" if pair.flavor == "mariadb" else "REPLICA SQL_THREAD"
    sql_on(pair, pair.replica2_port, f"STOP {thread}")
    try:
        write(pair, db, 10_001, 30)
        run_cli(pair, tmp_path, table, pair.replica_port)  # the checkpoint moves past replica2
        args = run_args(tmp_path)
        env = failover_env(pair, pair.replica2_port, GTIDSNAP_CAPTURE_TABLES=table)
        log = tmp_path / "lagging.log"
        with log.open("w") as sink:
            proc = subprocess.Popen(gtidsnap_cmd(*args), env=env, cwd=REPO, stdout=sink, stderr=sink)
        try:
            wait_for("the run to wait for replica2", lambda: "behind the checkpoint" in log.read_text(), 60)
            assert proc.poll() is None, log.read_text()
            sql_on(pair, pair.replica2_port, f"START {thread}")
            assert proc.wait(RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        sql_on(pair, pair.replica2_port, f"START {thread}")
    text = log.read_text()
    assert "30 transaction(s) behind the checkpoint" in text, text[-3000:]
    assert "start over" not in text
    write(pair, db, 20_001, 5)
    wait_replica2(pair)
    run_cli(pair, tmp_path, table, pair.replica2_port)
    check_invariants(read_records(tmp_path), {table: source_rows(pair, db, "t")})


def test_a_checkpoint_continues_on_a_replica_provisioned_from_a_backup(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    """replica2 rebuilt as from a backup: its binlog starts afresh (RESET MASTER) and it knows what it
    applied only from its replication position (MariaDB ``gtid_slave_pos``, with a domain that is idle
    on the primary; MySQL ``gtid_purged``). A checkpoint written on the replica continues there, and
    back on the replica, with nothing replayed twice."""
    db, table = fresh_db, f"{fresh_db}.t"
    create_table(pair, db, "t", 50)
    domain = 100 + int(time.time()) % 800  # an idle domain of the primary, new to this test
    write(pair, db, 5_001, 3, domain=domain if pair.flavor == "mariadb" else None)
    wait_replica2(pair)
    if pair.flavor == "mariadb":
        sql_on(pair, pair.replica2_port, "STOP SLAVE", "RESET MASTER", "START SLAVE")
    else:
        executed = str(executed_at(pair, pair.replica2_port))
        sql_on(
            pair,
            pair.replica2_port,
            "STOP REPLICA",
            "RESET MASTER",
            f"SET GLOBAL gtid_purged = '{executed}'",
            "START REPLICA",
        )
    # (MariaDB refuses a start at the very GTID before its binlog's first one when that binlog began
    # with RESET MASTER: a position it no longer holds; so the checkpoint is taken a few transactions on)
    write(pair, db, 5_501, 3)
    wait_replica2(pair)
    run_cli(pair, tmp_path, table, pair.replica_port, snapshot=True)
    write(pair, db, 6_001, 10)
    wait_replica2(pair)
    text = run_cli(pair, tmp_path, table, pair.replica2_port)
    assert "cannot be continued" not in text
    write(pair, db, 7_001, 10)
    wait_replica2(pair)
    run_cli(pair, tmp_path, table, pair.replica_port)
    records = read_records(tmp_path)
    check_invariants(records, {table: source_rows(pair, db, "t")})
    assert sum(1 for r in records if not r["snapshot"] and r["key"][0] >= 6_001) == 20, "no change twice"


def test_a_replica_that_is_down_at_start_is_passed_over(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    """The first of source.hosts does not answer (nothing listens there): the run starts on the next."""
    db, table = fresh_db, f"{fresh_db}.t"
    create_table(pair, db, "t", 20)
    port = port_nobody_listens_on()
    text = run_cli(pair, tmp_path, table, port, pair.replica_port, snapshot=True)
    assert f"gtidsnap@{pair.host}:{port} cannot serve the run" in text, text[-3000:]
    assert replica_in_use(tmp_path).endswith(f":{pair.replica_port}")
    check_invariants(read_records(tmp_path), {table: source_rows(pair, db, "t")})


def port_nobody_listens_on() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_errant_transactions_neither_stall_windows_nor_bind_the_checkpoint(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    """replica2 has writes of its own (errant transactions: its server UUID, or on MariaDB a domain of
    its own). A checkpoint written there holds them; it continues on the replica, which never has them,
    with a snapshot whose windows do not wait for them; and back on replica2."""
    db = fresh_db
    for name in ("t", "u"):
        create_table(pair, db, name, 200)
    wait_replica2(pair)
    local = f"errant_{uuid.uuid4().hex[:8]}"
    domain = ["SET SESSION gtid_domain_id = 9000"] if pair.flavor == "mariadb" else []
    sql_on(pair, pair.replica2_port, *domain, f"CREATE DATABASE `{local}`")  # a DBA's mistake
    try:
        run_cli(pair, tmp_path, f"{db}.t", pair.replica2_port, snapshot=True)
        origins = json.loads((tmp_path / "checkpoint.json").read_text())["origins"]
        assert len(origins) == 1
        write(pair, db, 20_001, 10)
        args = run_args(tmp_path, f"{db}.u")
        env = failover_env(pair, pair.replica_port, GTIDSNAP_CAPTURE_TABLES=f"{db}.t,{db}.u")
        started = time.monotonic()
        done = subprocess.run(
            gtidsnap_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "errant transactions of a replica the checkpoint was written on" in done.stderr
        assert "has not covered transactions" not in done.stderr, "a window waited for them"
        assert time.monotonic() - started < 60  # a hang guard, not a timing
        write(pair, db, 30_001, 5)
        wait_replica2(pair)
        run_cli(pair, tmp_path, f"{db}.t,{db}.u", pair.replica2_port)  # and back where they were written
    finally:
        sql_on(pair, pair.replica2_port, *domain, f"DROP DATABASE IF EXISTS `{local}`")
    expected = {f"{db}.{name}": source_rows(pair, db, name) for name in ("t", "u")}
    check_invariants(read_records(tmp_path), expected)
