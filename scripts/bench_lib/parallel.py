"""g. Parallel chunk readers (``snapshot.readers``): the snapshot by reader count, and under a writer.

In this order, on the ``--rows`` table, every gtidsnap run a fresh ``run --snapshot --until-caught-up``
into JSON lines (the real CLI):

* the limit: the bare single-connection PyMySQL keyset scan (as in a.);
* gtidsnap with each reader count of ``--readers`` (default 0, 1, 2; 0 reads chunks on the engine's
  thread, pausing the stream), no writer;
* the bare scan again (the limit is the mean of the two);
* the splits read by Spark's executors instead (``snapshot.reader_pool = spark``, ``LAG_READERS`` at
  once, ``SPARK_SPLIT_ROWS`` rows each; Spark ``local[2]`` on the same 2 cores), after the pairs below;
* ``WRITER_PAIRS`` times, interleaved: gtidsnap with ``LAG_READERS`` readers and no writer
  (configured as the next run, the empty lag table captured too), then the same while a writer
  INSERTs ``LAG_RATE`` rows/s (20 rows per transaction) into that second captured table: the
  stream's lag is each inserted row's time from its source commit (the writer's wall clock right
  after COMMIT returned) to its line appearing in the output file (a thread tails the file every
  20 ms; the checkpoint interval is 0.1 s so the output is flushed that often), p50 / p99 / max over
  the rows that reached the output before the run ended; and the snapshot's rate against the
  no-writer run just before it. The pair with the median ratio is reported (each pair is in the
  JSON): on 2 cores the snapshot, the writer, the primary and the replica share the CPU, and one
  pair's ratio moved by +-0.1 from run to run.

The issue's targets: with 2 readers >= 1.0 of the bare scan; under a 2,000 rows/s writer the lag
< 1 s and the snapshot rate >= 0.8 of the no-writer rate.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from bench_lib import cli_run, writer
from bench_lib.context import Context
from bench_lib.env import DATABASE
from bench_lib.snapshot import SPARK_SPLIT_ROWS, bare_scan
from bench_lib.stats import mean, percentile, ratio
from bench_lib.tables import recreate_empty

log = logging.getLogger("bench.parallel")

READER_COUNTS = (0, 1, 2)
LAG_READERS = 2
LAG_RATE = 2_000.0
LAG_BATCH = 20
LAG_TABLE = "lag_rows"
WRITER_PAIRS = 5
TAIL_EVERY_S = 0.02


class Tail(threading.Thread):
    """Notes when each line of ``table`` first appears in a growing JSON-lines file."""

    def __init__(self, path: Path, table: str) -> None:
        super().__init__(daemon=True)
        self.path, self.table = path, table
        self.seen: dict[int, float] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        # Only the first key column of the lines of ``table`` is read, by one C-level regular expression
        # over what was appended (a record writes "table" then "key"; splitting the output into lines
        # and parsing them cost this process ~0.7 s of CPU a run at 2,000 rows/s, taken from the
        # 2 cores gtidsnap runs on).
        offset, partial = 0, b""
        table = re.escape(json.dumps(self.table).encode())
        keys = re.compile(rb'"table":' + table + rb',"key":\[(-?\d+)[,\]]')
        while not self._halt.is_set():
            if self.path.exists():
                with self.path.open("rb") as f:
                    f.seek(offset)
                    data = f.read()
                now = time.time()
                offset += len(data)
                cut = data.rfind(b"\n") + 1  # complete lines only; the rest waits for its newline
                if not cut:
                    partial += data
                else:
                    complete, partial = partial + data[:cut], data[cut:]
                    for found in keys.finditer(complete):
                        self.seen.setdefault(int(found.group(1)), now)
            self._halt.wait(TAIL_EVERY_S)

    def stop(self) -> None:
        self._halt.set()
        self.join()


def _snapshot(
    ctx: Context,
    readers: int,
    name: str,
    work: Path | None = None,
    paired: bool = False,
    spark_split: int | None = None,
) -> dict[str, Any]:
    """``run --snapshot --until-caught-up`` of the table with ``readers``; ``work`` given: the run under
    the writer (its table captured too, the output flushed every 0.1 s so the lag is the stream's);
    ``paired``: the no-writer run it is compared with, configured alike (the lag table captured, the
    same checkpoint interval), only the writer missing; ``spark_split``: the splits read by Spark's
    executors (``snapshot.reader_pool = spark``), this many rows each."""
    under_writer = work is not None
    work = work if work is not None else ctx.work(name)
    tables = [f"{DATABASE}.{ctx.table}", *([f"{DATABASE}.{LAG_TABLE}"] if under_writer or paired else [])]
    env = cli_run.cli_env(ctx.pair, work, "jsonl", tables, ctx.chunk_size)
    env["GTIDSNAP_SNAPSHOT_READERS"] = str(readers)
    if spark_split is not None:
        env["GTIDSNAP_SNAPSHOT_READER_POOL"] = "spark"
        env["GTIDSNAP_SNAPSHOT_CHUNK_SIZE"] = str(spark_split)
    if under_writer or paired:
        env["GTIDSNAP_CHECKPOINT_INTERVAL_S"] = "0.1"
    result = cli_run.run(
        ["run", "--snapshot", f"{DATABASE}.{ctx.table}", "--until-caught-up"],
        env,
        ctx.log_path(name),
        ctx.timeout,
        checkpoint=work / "checkpoint.json",
    )
    facts = result.facts()
    facts["readers"] = readers
    facts["rows_per_s"] = round(ctx.rows / result.seconds(), 1) if not result.timed_out else 0.0
    log.info(
        "%s: %s: %.0f rows/s (peak RSS %.0f MB)", ctx.flavor, name, facts["rows_per_s"], facts["peak_rss_mb"]
    )
    return facts


def _under_writer(ctx: Context) -> dict[str, Any]:
    """The snapshot with LAG_READERS readers while the writer inserts into the captured LAG_TABLE."""
    recreate_empty(ctx.pair, LAG_TABLE)
    name = f"parallel-writer-{LAG_READERS}"
    work = ctx.work(name)
    commits_log = work.parent / f"{ctx.flavor}-{name}-commits.txt"
    tail = Tail(work / "changes.jsonl", f"{DATABASE}.{LAG_TABLE}")
    tail.start()
    w = writer.start(ctx.pair, LAG_TABLE, "insert", LAG_RATE, batch=LAG_BATCH, log=commits_log)
    try:
        facts = _snapshot(ctx, LAG_READERS, name, work)
    finally:
        written = w.stop()
        tail.stop()
    commits = writer.commit_times(commits_log)
    lags = [tail.seen[i] - at for i, at in commits.items() if i in tail.seen]
    facts.update(
        writer=written,
        rows_streamed=len(lags),
        lag_p50_s=round(percentile(lags, 50), 3) if lags else None,
        lag_p99_s=round(percentile(lags, 99), 3) if lags else None,
        lag_max_s=round(max(lags), 3) if lags else None,
    )
    return facts


def measure_g(ctx: Context, counts: tuple[int, ...] = READER_COUNTS) -> dict[str, Any]:
    bare = [bare_scan(ctx, ctx.table)]
    runs = {str(n): _snapshot(ctx, n, f"parallel-{n}") for n in counts}
    bare.append(bare_scan(ctx, ctx.table))
    limit = mean([b["rows_per_s"] for b in bare])
    pairs = []
    for _ in range(WRITER_PAIRS):
        recreate_empty(ctx.pair, LAG_TABLE)
        quiet = _snapshot(ctx, LAG_READERS, f"parallel-quiet-{LAG_READERS}", paired=True)
        loaded = _under_writer(ctx)
        pairs.append(
            {
                "quiet": quiet,
                "under_writer": loaded,
                "ratio": ratio(loaded["rows_per_s"], quiet["rows_per_s"]),
            }
        )
    median = sorted(pairs, key=lambda p: p["ratio"])[len(pairs) // 2]
    on_spark = _snapshot(ctx, LAG_READERS, f"parallel-spark-{LAG_READERS}", spark_split=SPARK_SPLIT_ROWS)
    return {
        "rows": ctx.rows,
        "chunk_size": ctx.chunk_size,
        "bare_scans": bare,
        "limit_rows_per_s": round(limit, 1),
        "by_readers": runs,
        "ratio_by_readers": {n: ratio(r["rows_per_s"], limit) for n, r in runs.items()},
        "under_writer": median["under_writer"],
        "writer_rate": LAG_RATE,
        "ratio_under_writer": median["ratio"],
        "writer_pairs": pairs,
        "spark_readers": {**on_spark, "split_rows": SPARK_SPLIT_ROWS},
        "ratio_spark_readers": ratio(on_spark["rows_per_s"], limit),
        "lag_p99_worst_s": max(p["under_writer"]["lag_p99_s"] or 0.0 for p in pairs),
    }
