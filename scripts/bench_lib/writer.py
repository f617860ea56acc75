"""The concurrent writer: paced transactions on a primary, in its own process (a thread would share
the bench's GIL and slow down the bare scans it is compared with).

``update`` mode changes ``--batch`` random rows of ids ``1..--max-id`` per transaction; ``insert``
mode inserts ids from ``--start-id`` on and, with ``--log``, records each transaction's first id, row
count and the wall time right after its COMMIT returned (the source commit time of those rows).
Runs for ``--duration`` seconds, ``--transactions`` transactions, or until SIGTERM/SIGINT; prints a
JSON summary on stdout.

    python -m bench_lib.writer --port 33061 --table snap_1000000 --mode update --rate 1000 --max-id 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pymysql

from bench_lib.env import ADMIN, DATABASE, HOST, Pair
from bench_lib.tables import COLUMNS, row

_stop = False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _stop
    _stop = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--mode", choices=("update", "insert"), required=True)
    ap.add_argument("--rate", type=float, required=True, help="rows per second")
    ap.add_argument("--batch", type=int, default=10, help="rows per transaction")
    ap.add_argument("--max-id", type=int, default=0, help="update: ids 1..max-id exist")
    ap.add_argument("--start-id", type=int, default=1, help="insert: the first id")
    ap.add_argument("--duration", type=float, default=0.0, help="seconds; 0: until SIGTERM")
    ap.add_argument("--transactions", type=int, default=0, help="stop after this many; 0: no limit")
    ap.add_argument("--log", default="", help="insert: file of 'first_id count commit_time' lines")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    rnd = random.Random(a.seed)
    conn = pymysql.connect(
        host=HOST, port=a.port, user=ADMIN[0], password=ADMIN[1], autocommit=False, ssl_disabled=True
    )
    log = open(a.log, "w", encoding="utf-8") if a.log else None  # noqa: SIM115 (closed below)
    interval = a.batch / a.rate
    started = time.monotonic()
    end = started + a.duration if a.duration else float("inf")
    next_at, next_id, rows, txs, dropped_s = started, a.start_id, 0, 0, 0.0
    print("ready", file=sys.stderr, flush=True)
    with conn.cursor() as cur:
        while not _stop and time.monotonic() < end and (not a.transactions or txs < a.transactions):
            if a.mode == "update":
                ids = rnd.sample(range(1, a.max_id + 1), a.batch)
                cur.execute(
                    f"UPDATE {DATABASE}.{a.table} SET n = n + 1, ts = NOW() WHERE id IN "
                    f"({', '.join(map(str, ids))})"
                )
            else:
                values = [row(i) for i in range(next_id, next_id + a.batch)]
                cur.executemany(
                    f"INSERT INTO {DATABASE}.{a.table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)", values
                )
            conn.commit()
            committed = time.time()
            if log is not None:
                log.write(f"{next_id} {a.batch} {committed:.6f}\n")
            next_id += a.batch
            rows += a.batch
            txs += 1
            next_at += interval
            now = time.monotonic()
            if next_at > now:
                time.sleep(next_at - now)
            elif now - next_at > 1.0:  # more than a second behind: do not try to catch up in a burst
                dropped_s += now - next_at
                next_at = now
    elapsed = time.monotonic() - started
    if log is not None:
        log.close()
    conn.close()
    summary = {
        "rows": rows,
        "transactions": txs,
        "seconds": round(elapsed, 3),
        "rows_per_s": round(rows / elapsed, 1) if elapsed else 0.0,
        "target_rows_per_s": a.rate,
        "behind_s": round(dropped_s, 3),
        "next_id": next_id,
    }
    print(json.dumps(summary), flush=True)
    return 0


# ----------------------------------------------------------------------------- the parent's handle


@dataclass
class Writer:
    """A running writer process; :meth:`stop` (or :meth:`wait` with a duration) returns its summary."""

    proc: subprocess.Popen[str]

    def stop(self) -> dict[str, Any]:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.wait()

    def wait(self, timeout: float = 600.0) -> dict[str, Any]:
        out, err = self.proc.communicate(timeout=timeout)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if self.proc.returncode != 0 or not lines:
            raise RuntimeError(f"the writer failed (exit {self.proc.returncode}): {err.strip()[-2000:]}")
        summary: dict[str, Any] = json.loads(lines[-1])
        return summary


def start(
    pair: Pair,
    table: str,
    mode: str,
    rate: float,
    *,
    batch: int = 10,
    max_id: int = 0,
    start_id: int = 1,
    duration: float = 0.0,
    transactions: int = 0,
    log: Path | None = None,
) -> Writer:
    """Start a writer on ``pair``'s primary and return once it is connected."""
    cmd = [
        sys.executable,
        "-m",
        "bench_lib.writer",
        "--port",
        str(pair.primary_port),
        "--table",
        table,
        "--mode",
        mode,
        "--rate",
        str(rate),
        "--batch",
        str(batch),
        "--max-id",
        str(max_id),
        "--start-id",
        str(start_id),
        "--duration",
        str(duration),
        "--transactions",
        str(transactions),
    ]
    if log is not None:
        cmd += ["--log", str(log)]
    scripts = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [scripts, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    if first.strip() != "ready":
        proc.kill()
        rest = proc.stderr.read()
        raise RuntimeError(f"the writer did not start: {first}{rest}"[-2000:])
    return Writer(proc)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())


def commit_times(path: Path) -> dict[int, float]:
    """id -> its source commit time (s since the epoch), from an ``insert`` writer's ``--log``."""
    commits: dict[int, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        first, count, at = line.split()
        for i in range(int(first), int(first) + int(count)):
            commits[i] = float(at)
    return commits
