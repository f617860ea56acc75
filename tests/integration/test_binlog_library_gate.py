"""The binlog libraries' gate (``source/binlog/library.py``) with real other releases, on both servers.

``scripts/setup`` installs python-mysql-replication 1.0.16 and PyMySQL 1.2.3
(``lock/untested-binlog-libs.txt``) into ``.state/untested-binlog-libs``; a ``gtidsnap run`` with that
folder first on its path imports them instead of the tested 1.0.17 and 1.2.4. It must say so in one
WARNING naming both, take none of the fast paths through their internals, and write the same output as a
run on the tested versions: a snapshot, then a stream of inserts, updates and deletes whose TIME and
DATETIME values need the value fixes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cdc import (
    REPO,
    check_invariants,
    cli_env,
    execute,
    gtidsnap_cmd,
    read_records,
    run_args,
    source_rows,
)
from tests.integration.fixtures.db_servers import STATE_DIR, ReplicaPair

pytestmark = pytest.mark.integration

UNTESTED_LIBS = STATE_DIR / "untested-binlog-libs"
GATE_LINE = (
    "untested library versions: mysql-replication 1.0.16 (tested: 1.0.17), PyMySQL 1.2.3 (tested: 1.2.4)"
)
RUN_TIMEOUT_S = 240.0


def run(out: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        gtidsnap_cmd(*(args or run_args(out))),
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def content(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What two runs must agree on: each record's table, op, key and images, in seq order (snapshot rows,
    whose order follows the readers, sorted by key)."""
    snapshot = sorted((r for r in records if r["op"] == "r"), key=lambda r: r["key"])
    changes = [r for r in records if r["op"] != "r"]
    return [(r["table"], r["op"], r["key"], r.get("before"), r.get("after")) for r in snapshot + changes]


def test_untested_releases_are_named_and_served_by_the_libraries_own_parses(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path
) -> None:
    assert (UNTESTED_LIBS / "pymysqlreplication").is_dir(), f"{UNTESTED_LIBS} is missing: run scripts/setup"
    db, table = fresh_db, f"{fresh_db}.t"
    execute(
        pair,
        db,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, tm TIME(3), at DATETIME(2), s VARCHAR(20))",
        many=[
            (
                "INSERT INTO t VALUES (%s, 0, '-00:59:59.999', '2024-02-29 23:59:59.99', %s)",
                [(i, f"s{i}") for i in range(300)],
            )
        ],
    )
    tested_env = cli_env(pair)
    untested_env = {**tested_env, "PYTHONPATH": os.pathsep.join([str(UNTESTED_LIBS), str(REPO)])}
    tested, untested = tmp_path / "tested", tmp_path / "untested"
    logs: dict[Path, str] = {tested: "", untested: ""}
    for out, env in ((tested, tested_env), (untested, untested_env)):
        out.mkdir()
        logs[out] += run(out, env, *run_args(out, table)).stderr
    execute(
        pair,
        db,
        *(
            f"UPDATE t SET v = v + 1, tm = '-838:59:58.{i:03d}', at = '2001-01-01 00:00:0{i % 10}.5' "
            f"WHERE id = {i}"
            for i in range(0, 300, 7)
        ),
        "DELETE FROM t WHERE id % 11 = 0",
        "INSERT INTO t VALUES (1000, 1, '-00:00:00.001', '1999-12-31 23:59:59.01', 'new')",
    )
    for out, env in ((tested, tested_env), (untested, untested_env)):
        logs[out] += run(out, env).stderr  # the stream, from each run's checkpoint
    assert "untested library versions" not in logs[tested], logs[tested][-3000:]
    lines = [line for line in logs[untested].splitlines() if "untested library versions" in line]
    assert len(lines) == 2 and all(GATE_LINE in line for line in lines), logs[untested][-3000:]  # once a run
    assert "(table_maps, transaction_events, rows_events, frame_packets, chunk_rows)" in lines[0]
    expected = {table: source_rows(pair, db, "t")}
    for out in (tested, untested):
        check_invariants(read_records(out), expected)
    assert content(read_records(untested)) == content(read_records(tested))
