"""Benchmark: a snapshot of N rows from the local MariaDB replica into JSON lines, against a bare keyset
scan of the same table with PyMySQL (the limit). Writes a JSON result file; asserts nothing.

    .venv/bin/python scripts/bench_snapshot.py --rows 1000000 --chunk-size 4096
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import time
from pathlib import Path

import pymysql

from gtidsnap.config import Config, SinkSettings, SnapshotSettings
from gtidsnap.connection import ConnectionSettings, Secret
from gtidsnap.model import TableId
from gtidsnap.replica import Replica
from gtidsnap.runner import build_engine

PRIMARY, REPLICA = 33061, 33062
ADMIN = ("admin", "admin-test-pw")
READER = ("gtidsnap", "gtidsnap-test-pw")


def load(rows: int) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=PRIMARY, user=ADMIN[0], password=ADMIN[1], autocommit=True)
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS bench")
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='bench' AND table_name='t'"
        )
        if cur.fetchone()[0]:
            cur.execute("SELECT COUNT(*) FROM bench.t")
            if cur.fetchone()[0] == rows:
                return
            cur.execute("DROP TABLE bench.t")
        cur.execute(
            "CREATE TABLE bench.t (id BIGINT PRIMARY KEY, name VARCHAR(64), n INT, ts DATETIME,"
            " amount DECIMAL(12,2), body TEXT)"
        )
        batch = 10_000
        for start in range(0, rows, batch):
            cur.executemany(
                "INSERT INTO bench.t VALUES (%s, %s, %s, '2026-01-01 00:00:00', %s, %s)",
                [
                    (i, f"name-{i}", i % 1000, f"{i % 100000 / 100:.2f}", "x" * 40)
                    for i in range(start, min(rows, start + batch))
                ],
            )
    # wait for the replica
    with (
        pymysql.connect(host="127.0.0.1", port=REPLICA, user=READER[0], password=READER[1]) as r,
        r.cursor() as c,
    ):
        for _ in range(600):
            c.execute("SELECT COUNT(*) FROM bench.t")
            if c.fetchone()[0] == rows:
                return
            time.sleep(0.5)
    raise SystemExit("the replica did not catch up")


def bare_scan(chunk: int) -> float:
    conn = pymysql.connect(host="127.0.0.1", port=REPLICA, user=READER[0], password=READER[1])
    start, last, n = time.monotonic(), -1, 0
    with conn.cursor() as cur:
        while True:
            cur.execute("SELECT * FROM bench.t WHERE id > %s ORDER BY id LIMIT %s", (last, chunk))
            got = cur.fetchall()
            if not got:
                break
            n += len(got)
            last = got[-1][0]
    return n / (time.monotonic() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-size", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=Path(".state/bench/snapshot.json"))
    a = ap.parse_args()
    load(a.rows)
    work = a.out.parent / "run"
    shutil.rmtree(work, ignore_errors=True)
    config = Config(
        source=ConnectionSettings("127.0.0.1", REPLICA, READER[0], Secret(READER[1])),
        tables=(TableId("bench", "t"),),
        snapshot=SnapshotSettings(chunk_size=a.chunk_size),
        sink=SinkSettings(type="jsonl", path=str(work / "changes.jsonl")),
        checkpoint_path=work / "checkpoint.json",
    )
    scan = bare_scan(a.chunk_size)
    with Replica(config.source) as replica:
        started = time.monotonic()
        stats = build_engine(config, replica).run(snapshot=[TableId("bench", "t")], until_caught_up=True)
        took = time.monotonic() - started
    pauses = sorted(stats.chunk_pause_s)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} cores={os.cpu_count()}",
        "rows": stats.snapshot_rows,
        "chunk_size": a.chunk_size,
        "bare_keyset_scan_rows_per_s": round(scan),
        "gtidsnap_jsonl_rows_per_s": round(stats.snapshot_rows / took),
        "ratio": round(stats.snapshot_rows / took / scan, 3),
        "pause_per_chunk_ms_p50": round(statistics.median(pauses) * 1000, 2),
        "pause_per_chunk_ms_p99": round(pauses[int(len(pauses) * 0.99) - 1] * 1000, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
