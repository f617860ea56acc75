"""``gtidsnap verify`` on both servers: a running gtidsnap snapshots a table under a writer and a table of
many column types; verify compares them with their Delta mirrors while the writer runs (no false alarm,
in ranges small enough that many are read), then finds rows changed and deleted in the mirrors by hand
(exit 1, naming the keys and columns), by hash and with ``--no-hash`` row by row."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta import mirror_path
from tests.integration.cdc import Writer, create_table, gtidsnap_cmd, source_rows
from tests.integration.fixtures.db_servers import ReplicaPair, fresh_database
from tests.integration.test_delta_engine import DeltaCli, kill_group, read, tail

pytestmark = pytest.mark.integration

KINDS = """CREATE TABLE kinds (
  id INT UNSIGNED PRIMARY KEY, big BIGINT UNSIGNED, small SMALLINT, amount DECIMAL(12,3), f FLOAT,
  d DOUBLE, day DATE, at DATETIME(6), ts TIMESTAMP(3) NULL DEFAULT NULL, t TIME(2), y YEAR,
  c CHAR(5), s VARCHAR(40) CHARACTER SET utf8mb4, txt TEXT, b VARBINARY(16), bl BLOB,
  e ENUM('x','y','z'), st SET('a','b','c'), j JSON, bits BIT(10)
)"""
KIND_ROWS = 90
# the types a range hash writes alike on both sides (gtidsnap.core.row_hash), from kinds' rows
PLAIN = """CREATE TABLE plain (
  id INT UNSIGNED PRIMARY KEY, big BIGINT UNSIGNED, small SMALLINT, amount DECIMAL(12,3), day DATE,
  at DATETIME(6), ts TIMESTAMP(3) NULL DEFAULT NULL, y YEAR, c CHAR(5),
  s VARCHAR(40) CHARACTER SET utf8mb4, l VARCHAR(20) CHARACTER SET latin1, txt TEXT, b VARBINARY(16),
  bl BLOB, e ENUM('x','y','z'), st SET('a','b','c')
)"""


def kinds_row(i: int) -> tuple[Any, ...]:
    """Row ``i`` of ``kinds``: each type's values in a few forms, NULL in every column now and then."""
    if i % 17 == 5:
        return (i, *([None] * 19))
    return (
        i,
        2**64 - 1 - i,
        -(i * 7),
        f"{i * 1.5:.3f}",
        i / 3,
        (-1) ** i * i / 7,
        f"2024-{i % 12 + 1:02d}-{i % 28 + 1:02d}",
        f"2023-05-06 07:08:{i % 60:02d}.{i:06d}",
        f"2022-01-02 03:04:{i % 60:02d}.{i % 1000:03d}",
        f"{'-' if i % 2 else ''}{i:02d}:34:56.{i % 100:02d}",
        1990 + i,
        f"c{i}",
        f"é{i} ☃ {'x' * (i % 5)}",
        f"text {i}\nline",
        bytes([i % 256, 0, 255]),
        bytes(range(i % 20)),
        "xyz"[i % 3],
        ",".join("abc"[: i % 4]) or "",
        json.dumps({"i": i, "list": [1, 2.5, None], "s": f"v{i}"}),
        i % 1024,
    )


def verify(
    cli: DeltaCli, *tables: str, options: tuple[str, ...] = (), **env: str
) -> subprocess.CompletedProcess[str]:
    args = gtidsnap_cmd(
        "verify",
        *(f"{cli.db}.{t}" for t in tables),
        "--sink-path",
        cli.root,
        "--checkpoint",
        str(cli.out / "checkpoint.json"),
        "--range-rows",
        "40",
        "--wait",
        "120",
        *options,
    )
    return subprocess.run(
        args, env=cli.env(**env), cwd=cli.out, capture_output=True, text=True, timeout=300, check=False
    )


def executed(pair: ReplicaPair) -> str:
    with pair.connect(pair.replica_port) as conn, conn.cursor() as cur:
        if pair.flavor == "mariadb":
            cur.execute("SELECT @@global.gtid_binlog_pos")
            return str(cur.fetchone()[0])
        cur.execute("SELECT @@global.gtid_executed")
        return str(cur.fetchone()[0]).replace("\n", "")


def wait_checkpoint(cli: DeltaCli, done: Any, what: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        path = cli.out / "checkpoint.json"
        if path.exists() and done(json.loads(path.read_text(encoding="utf-8"))):
            return
        time.sleep(0.5)
    pytest.fail(f"the run's checkpoint never showed {what}")


def test_verify_finds_what_differs_and_nothing_while_a_writer_runs(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    db = fresh_db
    create_table(pair, db, "a", 400)
    with pair.primary(db) as conn, conn.cursor() as cur:
        cur.execute(KINDS)
        cur.executemany(
            f"INSERT INTO kinds VALUES ({', '.join(['%s'] * 20)})", [kinds_row(i) for i in range(KIND_ROWS)]
        )
        cur.execute(PLAIN)
        cur.execute(
            "INSERT INTO plain SELECT id, big, small, amount, day, at, ts, y, c, s, "
            "CONCAT('caf', CHAR(233 USING latin1), id), txt, b, bl, e, st FROM kinds"
        )
        pair.wait_replicated(conn)
    cli = DeltaCli(
        pair, db, tmp_path, {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "50", "GTIDSNAP_SINK_MERGE_INTERVAL_S": "3"}
    )
    args = gtidsnap_cmd(
        "run",
        "--snapshot",
        f"{db}.a",
        "--snapshot",
        f"{db}.kinds",
        "--snapshot",
        f"{db}.plain",
        "--sink-path",
        cli.root,
        "--checkpoint",
        str(tmp_path / "checkpoint.json"),
    )
    proc, log = cli._spawn(args, "run", {})
    try:  # the run streams until killed: killed whatever happens
        writer = Writer(pair, db, ["a"], seed=59, transactions=100_000, pause_s=0.1)
        try:
            wait_checkpoint(
                cli,
                lambda c: len(c["context"]["tables"]) == 3 and all(t["done"] for t in c["context"]["tables"]),
                "the three snapshots done",
            )
            writer.start()
            with pair.primary(db) as conn, conn.cursor() as cur:  # streamed images of every type too
                cur.execute(
                    "UPDATE kinds SET d = d * 3, f = f + 1, j = JSON_SET(j, '$.s', 'w'), t = '01:02:03.04' "
                    "WHERE id % 4 = 1"
                )
                cur.execute("DELETE FROM kinds WHERE id % 10 = 9")
                cur.execute(
                    "INSERT INTO kinds SELECT id + 1000, big, small, amount, f, d, day, at, ts, t, y, c, s, "
                    "txt, b, bl, e, st, j, bits FROM kinds WHERE id < 20"
                )
            time.sleep(3)
            done = verify(cli, "a", "kinds", "plain")
            assert proc.poll() is None, tail(read(log))
            assert done.returncode == 0, (
                f"a false alarm under the writer:\n{done.stdout}\n{done.stderr[-3000:]}"
            )
            for table in ("a", "kinds", "plain"):
                assert f"{db}.{table}: same" in done.stdout, done.stdout
            # every type of plain is hashed alike on both sides: no range of it read row by row
            assert re.search(
                rf"{db}\.plain: same \(\d+ rows in \d+ ranges by hash, 0 read row by row\)", done.stdout
            )
            assert re.search(rf"{db}\.kinds: same \(\d+ rows in \d+ ranges\)", done.stdout), (
                "kinds: row by row"
            )
            ranges = [int(n) for n in re.findall(r"in (\d+) ranges", done.stdout)]
            assert ranges and min(ranges) >= 2, done.stdout
        finally:
            writer.stop()
        writer.join()
        target = parse_gtid_set(pair.flavor, executed(pair))
        wait_checkpoint(
            cli, lambda c: parse_gtid_set(pair.flavor, c["processed"]) >= target, "the writer's end"
        )
        time.sleep(2)  # the changelog commits after its checkpoint
    finally:
        kill_group(proc)

    from delta.tables import DeltaTable

    mirror_a = DeltaTable.forPath(spark, mirror_path(cli.root, TableId(db, "a")))
    # keys whose mirror row is their source row: none of their changes waits in the changelog (a row
    # tampered under a waiting change would be hidden by it)
    source = source_rows(pair, db, "a")
    held = {r["id"]: r.asDict() for r in mirror_a.toDF().select("id", "v", "payload").collect()}
    ids = sorted(k for k, row in held.items() if source.get((k,)) == row)
    assert len(ids) >= 2, f"mirror a holds {held}, the source {source}"
    changed, gone = ids[len(ids) // 3], ids[2 * len(ids) // 3]
    mirror_a.update(f"id = {changed}", {"v": "v + 1000"})
    mirror_a.delete(f"id = {gone}")
    mirror_k = DeltaTable.forPath(spark, mirror_path(cli.root, TableId(db, "kinds")))
    mirror_k.update("id = 2", {"s": "'tampered'", "amount": "amount + 1"})
    found = verify(cli, "a", "kinds", "plain")
    assert found.returncode == 1, f"{found.stdout}\n{found.stderr[-3000:]}"
    report = found.stderr
    assert f"{db}.a: 2 differences" in report and f"{db}.kinds: 1 differences" in report, report
    assert f"(id={changed}) differs: v:" in report and f"(id={gone}) is missing from the mirror" in report, (
        report
    )
    assert "(id=2) differs: amount:" in report and "s: source 'é2" in report, report
    assert f"{db}.plain: same" in found.stdout and f"{db}.a: 2 differences (" in report, (
        f"{found.stdout}\n{report}"
    )
    # --no-hash: plain (which hashes) read row by row, as --json says; the same differences found
    rows = verify(cli, "a", "plain", options=("--no-hash", "--json"))
    assert rows.returncode == 1, f"{rows.stdout}\n{rows.stderr[-3000:]}"
    reports = {r["table"]: r for r in map(json.loads, rows.stdout.splitlines())}
    plain, a = reports[f"{db}.plain"], reports[f"{db}.a"]
    assert plain["same"] and not plain["by_hash"] and plain["ranges_read_row_by_row"] == plain["ranges"] >= 2
    assert not a["by_hash"] and a["differences"] == 2, a


def test_verify_passes_right_after_a_finished_run(mariadb_pair: ReplicaPair, tmp_path: Path) -> None:
    """A snapshot's run exits 0 while the checkpoint it saved last still names staged snapshot files
    that the mirror took after it was saved: verify settles on what the mirror holds (its own
    watermarks), not on that list, and passes at once, quiet source and all."""
    pair = mariadb_pair
    with fresh_database(pair) as db:
        create_table(pair, db, "a", 3000)
        cli = DeltaCli(pair, db, tmp_path, {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "500"})
        args = gtidsnap_cmd(
            "run", "--snapshot", f"{db}.a", "--until-caught-up", "--sink-path", cli.root,
            "--checkpoint", str(tmp_path / "checkpoint.json"),
        )  # fmt: skip
        code, log = cli._finish(*cli._spawn(args, "run", {}), "run")
        assert code == 0, tail(log)
        staged = cli.checkpoint["sink_position"].get("staged")
        assert staged, "the case at hand: the last checkpoint names staged files the mirror has taken"
        done = verify(cli, "a", options=("--json", "--wait", "20"))
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-3000:]}"
        report = json.loads(done.stdout)
        assert report["same"] and report["source_rows"] == 3000, report
