"""Acceptance scenarios of the snapshot + stream engine on real replicas (MariaDB and MySQL).

Each runs gtidsnap as the read-only user against the replica, writes only to the primary, and checks
the invariants on the JSON-lines output (tests/integration/cdc.py)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gtidsnap.core.errors import SchemaError
from gtidsnap.core.model import TableId
from tests.integration.cdc import (
    REPO,
    Writer,
    check_invariants,
    cli_env,
    create_table,
    execute,
    gtidsnap_cmd,
    read_records,
    run_engine,
    source_rows,
)
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration


def orphaned_readers(wait_s: float = 10.0, known: frozenset[str] = frozenset()) -> list[str]:
    """Reader processes of this checkout (spawned by multiprocessing with this interpreter) whose engine
    is gone, after up to ``wait_s``; ``known`` ones (there before the test) are not counted."""
    deadline = time.monotonic() + wait_s
    while True:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            mine = cmdline.startswith(sys.executable) and "multiprocessing.spawn" in cmdline
            if mine and ppid == 1 and proc.name not in known:
                found.append(f"{proc.name}: {cmdline}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.parametrize("readers", [0, 2])  # on the engine's thread (stream paused), and two readers
def test_snapshot_only_10000_rows_chunk_100(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, readers: int
) -> None:
    create_table(pair, fresh_db, "orders", 10_000)
    stats = run_engine(pair, tmp_path, [TableId(fresh_db, "orders")], chunk_size=100, readers=readers)
    records = read_records(tmp_path)
    assert stats.chunks == 100 and stats.snapshot_rows == 10_000
    assert all(r["op"] == "r" and r["snapshot"] for r in records)
    assert [r["key"][0] for r in records] == list(range(0, 20_000, 2)), "keyset order, each row once"
    check_invariants(records, {f"{fresh_db}.orders": source_rows(pair, fresh_db, "orders")})


@pytest.mark.parametrize("seed", range(20))  # 20 seeds per flavour, sized to keep CI near 2 s each
def test_concurrent_writers_inserts_updates_deletes(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, seed: int
) -> None:
    """Scenarios 2-4 and 10: writes of every kind, multi-row transactions across two tables; chunks read
    on the engine's thread or by one to four reader processes."""
    for name in ("a", "b"):
        create_table(pair, fresh_db, name, 400)
    writer = Writer(pair, fresh_db, ["a", "b"], seed=seed, transactions=150).start()
    tables = [TableId(fresh_db, "a"), TableId(fresh_db, "b")]
    rnd = random.Random(seed)
    run_engine(pair, tmp_path, tables, chunk_size=rnd.choice([7, 50, 128]), readers=seed % 5)
    writer.join()
    run_engine(pair, tmp_path, [], tables=tables)  # the writer may finish after the snapshot: catch up
    records = read_records(tmp_path)
    assert any(not r["snapshot"] for r in records) and any(r["snapshot"] for r in records)
    check_invariants(records, {f"{fresh_db}.{t}": source_rows(pair, fresh_db, t) for t in ("a", "b")})


@pytest.mark.parametrize("chunk_size", [1, 300])
def test_chunk_size_one_and_table_size(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, chunk_size: int
) -> None:
    create_table(pair, fresh_db, "t", 300)
    writer = Writer(pair, fresh_db, ["t"], seed=chunk_size, transactions=60).start()
    run_engine(pair, tmp_path, [TableId(fresh_db, "t")], chunk_size=chunk_size)
    writer.join()
    run_engine(pair, tmp_path, [], tables=[TableId(fresh_db, "t")])
    check_invariants(read_records(tmp_path), {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def test_empty_table_then_rows_arrive_after_the_snapshot(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    create_table(pair, fresh_db, "t", 0)
    table = TableId(fresh_db, "t")
    stats = run_engine(pair, tmp_path, [table])
    assert stats.snapshot_rows == 0 and read_records(tmp_path) == []
    execute(pair, fresh_db, many=[("INSERT INTO t VALUES (%s, 1, 'late')", [(k,) for k in range(50)])])
    run_engine(pair, tmp_path, [], tables=[table])
    records = read_records(tmp_path)
    assert [r["op"] for r in records] == ["c"] * 50
    check_invariants(records, {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def test_rows_above_the_max_key_captured_at_start(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    create_table(pair, fresh_db, "t", 200)
    writer = Writer(pair, fresh_db, ["t"], seed=9, transactions=80).start()  # inserts far above the max key
    run_engine(pair, tmp_path, [TableId(fresh_db, "t")], chunk_size=10)
    writer.join()
    run_engine(pair, tmp_path, [], tables=[TableId(fresh_db, "t")])
    records = read_records(tmp_path)
    # the max key as the snapshot captured it (the writer may have inserted a few rows before that)
    context = json.loads((tmp_path / "checkpoint.json").read_text())["context"]
    (captured,) = [table["max_key"][0]["int"] for table in context["tables"]]
    assert not any(r["snapshot"] and r["key"][0] > captured for r in records), (
        "no chunk reads above the max key"
    )
    check_invariants(records, {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def test_idle_source_windows_close_without_writes(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    create_table(pair, fresh_db, "t", 500)
    started = time.monotonic()
    stats = run_engine(pair, tmp_path, [TableId(fresh_db, "t")], chunk_size=50, heartbeat_s=1.0)
    took = time.monotonic() - started
    assert stats.chunks == 10
    assert took < 10 * 1.0, f"10 windows on an idle source took {took:.1f}s: more than one heartbeat each"
    check_invariants(read_records(tmp_path), {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def test_writes_only_to_an_uncaptured_table(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    create_table(pair, fresh_db, "t", 300)
    create_table(pair, fresh_db, "noise", 10)
    writer = Writer(pair, fresh_db, ["noise"], seed=3, transactions=150).start()
    run_engine(pair, tmp_path, [TableId(fresh_db, "t")], chunk_size=20)
    writer.join()
    records = read_records(tmp_path)
    assert {r["table"] for r in records} == {f"{fresh_db}.t"}
    check_invariants(records, {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def test_several_tables_in_one_snapshot(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    for i, name in enumerate(("x", "y", "z")):
        create_table(pair, fresh_db, name, 100 * (i + 1))
    tables = [TableId(fresh_db, n) for n in ("x", "y", "z")]
    stats = run_engine(pair, tmp_path, tables, chunk_size=33)
    assert stats.snapshot_rows == 600
    records = read_records(tmp_path)
    order = [r["table"] for r in records]
    assert order == sorted(order, key=[f"{fresh_db}.{n}" for n in "xyz"].index), (
        "tables are read in queue order"
    )
    check_invariants(records, {f"{fresh_db}.{n}": source_rows(pair, fresh_db, n) for n in "xyz"})


KEY_TABLES = {
    "composite": (
        "a INT, b VARCHAR(20), v INT NOT NULL, PRIMARY KEY (a, b)",
        [(i // 3, f"k{i % 3}", 0) for i in range(60)],
    ),
    "ci_varchar": (
        "k VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT NOT NULL",
        [(w, 0) for w in ["alpha", "Bravo", "charlie", "DELTA", "echo", "Foxtrot", "golf", "HOTEL"]],
    ),
    "unsigned": (
        "k BIGINT UNSIGNED PRIMARY KEY, v INT NOT NULL",
        [(2**63 + i * 1000, 0) for i in range(40)] + [(i, 0) for i in range(10)],
    ),
    "datetime": (
        "k DATETIME(6) PRIMARY KEY, v INT NOT NULL",
        [(f"2024-01-{1 + i // 24:02d} {i % 24:02d}:00:00.{i:06d}", 0) for i in range(48)],
    ),
}


@pytest.mark.parametrize("kind", sorted(KEY_TABLES))
def test_key_types(pair: ReplicaPair, fresh_db: str, tmp_path: Path, kind: str) -> None:
    columns, rows = KEY_TABLES[kind]
    marks = ", ".join(["%s"] * len(rows[0]))
    execute(pair, fresh_db, f"CREATE TABLE t ({columns})", many=[(f"INSERT INTO t VALUES ({marks})", rows)])
    key_cols = {"composite": "a = %s AND b = %s"}.get(kind, "k = %s")
    n_key = 2 if kind == "composite" else 1
    run_engine(pair, tmp_path, [TableId(fresh_db, "t")], chunk_size=7)
    # then updates and deletes through the stream, keyed by the same values
    updates = [(1, *r[:n_key]) for r in rows[::5]]
    deletes = [tuple(r[:n_key]) for r in rows[1::7]]
    execute(
        pair,
        fresh_db,
        many=[
            (f"UPDATE t SET v = %s WHERE {key_cols}", updates),
            (f"DELETE FROM t WHERE {key_cols}", deletes),
        ],
    )
    run_engine(pair, tmp_path, [], tables=[TableId(fresh_db, "t")])
    records = read_records(tmp_path)
    assert sum(r["snapshot"] for r in records) == len(rows)
    check_invariants(records, {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})


def test_table_without_primary_key_is_refused_by_name(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    execute(pair, fresh_db, "CREATE TABLE nokey (a INT, b INT)")
    with pytest.raises(SchemaError, match=rf"{fresh_db}\.nokey"):
        run_engine(pair, tmp_path, [TableId(fresh_db, "nokey")])


def test_add_column_mid_snapshot_ends_with_the_new_column(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    create_table(pair, fresh_db, "t", 3000)

    def alter_soon() -> None:
        time.sleep(0.3)
        execute(
            pair,
            fresh_db,
            "ALTER TABLE t ADD COLUMN extra VARCHAR(10) NOT NULL DEFAULT 'new'",
            "UPDATE t SET extra = 'set', v = 5 WHERE id < 100",
        )

    thread = threading.Thread(target=alter_soon)
    thread.start()
    run_engine(pair, tmp_path, [TableId(fresh_db, "t")], chunk_size=20)
    thread.join()
    run_engine(pair, tmp_path, [], tables=[TableId(fresh_db, "t")])
    records = read_records(tmp_path)
    assert any("extra" in (r["after"] or {}) for r in records), "rows read or changed after the DDL have it"
    check_invariants(
        records, {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")}, added_defaults={"extra": "new"}
    )


@pytest.mark.parametrize("readers", [0, 3])
def test_kill_9_at_random_points_then_restart(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, readers: int
) -> None:
    """Scenario 19: the real CLI is killed with SIGKILL at random points, over and over, while a writer
    runs; every restart resumes from the checkpoint; the final output has no loss and no duplicate.
    With readers, their processes end with the killed engine (none is left behind)."""
    known = frozenset(p.split(":")[0] for p in orphaned_readers(wait_s=0))
    create_table(pair, fresh_db, "t", 20_000)
    writer = Writer(pair, fresh_db, ["t"], seed=11, transactions=400, pause_s=0.02).start()
    env = dict(cli_env(pair), GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS="20")  # ~10 s of snapshot to kill into
    env["GTIDSNAP_SNAPSHOT_READERS"] = str(readers)
    args = gtidsnap_cmd(
        "run",
        "--snapshot",
        f"{fresh_db}.t",
        "--until-caught-up",
        "--chunk-size",
        "40",
        "--sink-path",
        str(tmp_path / "changes.jsonl"),
        "--checkpoint",
        str(tmp_path / "checkpoint.json"),
    )
    rnd = random.Random(5)
    kills = 0
    for _ in range(30):
        if kills >= 4 and not writer.running:
            break
        proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rnd.uniform(0.8, 2.0))  # python start-up takes about 0.7 s
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    writer.join()
    final = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert final.returncode == 0, final.stderr[-3000:]
    assert kills >= 4, f"only {kills} kills landed"
    records = read_records(tmp_path)
    assert sum(r["snapshot"] for r in records) >= 1
    check_invariants(records, {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})
    assert orphaned_readers(known=known) == [], "reader processes outlived their engine"


@pytest.mark.parametrize("commit", [1, 2, 5])
def test_kill_9_between_sink_commit_and_checkpoint(
    mariadb_pair: ReplicaPair, tmp_path: Path, commit: int, request: pytest.FixtureRequest
) -> None:
    """The narrowest instant: the output is durable, its checkpoint is not. The restart must drop the
    output written after the previous checkpoint and produce it again, exactly once."""
    pair = mariadb_pair
    db = f"k_{commit}_{random.randrange(10**9)}"
    execute(pair, "", f"CREATE DATABASE `{db}`")
    request.addfinalizer(lambda: execute(pair, "", f"DROP DATABASE IF EXISTS `{db}`"))
    create_table(pair, db, "t", 2000)
    writer = Writer(pair, db, ["t"], seed=commit, transactions=150, pause_s=0.01).start()
    env = dict(
        cli_env(pair),
        GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS="5",
        GTIDSNAP_CHECKPOINT_INTERVAL_S="0.05",
        GTIDSNAP_TEST_CRASH_AT=f"between-commit-and-checkpoint:{commit}",
    )
    args = gtidsnap_cmd(
        "run",
        "--snapshot",
        f"{db}.t",
        "--until-caught-up",
        "--chunk-size",
        "50",
        "--sink-path",
        str(tmp_path / "changes.jsonl"),
        "--checkpoint",
        str(tmp_path / "checkpoint.json"),
    )
    crashed = subprocess.run(
        args, env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    writer.join()
    del env["GTIDSNAP_TEST_CRASH_AT"]
    final = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert final.returncode == 0, final.stderr[-3000:]
    check_invariants(read_records(tmp_path), {f"{db}.t": source_rows(pair, db, "t")})


def test_cli_never_prints_the_password_and_status_reads_the_checkpoint(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    """Scenario 24, and `gtidsnap status`."""
    create_table(pair, fresh_db, "t", 120)
    env = cli_env(pair)
    common = ["--checkpoint", str(tmp_path / "checkpoint.json")]
    run = subprocess.run(
        gtidsnap_cmd(
            "run",
            "--snapshot",
            f"{fresh_db}.t",
            "--until-caught-up",
            "--chunk-size",
            "50",
            "-v",
            "--sink-path",
            str(tmp_path / "changes.jsonl"),
            *common,
        ),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    status = subprocess.run(
        gtidsnap_cmd("status", *common),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert f"{fresh_db}.t" in status.stdout and "done" in status.stdout and "120" in status.stdout
    bad = dict(env, GTIDSNAP_SOURCE_PASSWORD="wrong-Secret-pw-123")
    denied = subprocess.run(
        gtidsnap_cmd("run", *common),
        env=bad,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert denied.returncode == 1 and "error" in denied.stderr.lower()
    everything = run.stdout + run.stderr + status.stdout + status.stderr + denied.stdout + denied.stderr
    everything += (tmp_path / "checkpoint.json").read_text()
    for secret in (env["GTIDSNAP_SOURCE_PASSWORD"], "wrong-Secret-pw-123"):
        assert secret not in everything
    assert json.loads((tmp_path / "checkpoint.json").read_text())["context"]["tables"][0]["rows"] == 120
