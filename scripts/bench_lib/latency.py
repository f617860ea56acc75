"""f. Commit-to-visible latency in the Delta mirror at 5,000 rows/s.

``gtidsnap run`` (streaming, Delta sink, defaults: a commit every ``sink.batch_ms`` = 1 s) follows an
empty table ``bench.lat``; once it runs, a writer inserts ~5,000 rows/s into it on the primary for
``--latency-seconds`` (transactions of 50 rows), logging the wall time right after each COMMIT
returned. When gtidsnap's checkpoint covers the writer's last transaction, gtidsnap is stopped
(Ctrl-C) and the mirror's Change Data Feed is read once: per inserted row, latency =
``_commit_timestamp`` of the Delta commit that made it visible minus the source commit time. Both clocks
are this machine's; ``_commit_timestamp`` has millisecond resolution.

Bounded: if gtidsnap has not caught up ``--timeout`` seconds after the writer's end it is stopped
anyway; rows not visible then count with the time they had waited so far, and the result says
``lower_bound``.

Steady state: before the measured writer starts, one warm-up transaction is written and waited for,
so the Delta tables' creation (their first commit) is not in the figures. If gtidsnap cannot keep
up with the writer the backlog grows for as long as the writer runs, and so do the latencies: the
result also gives the rate gtidsnap sustained (rows over writer start to caught up).
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from pathlib import Path
from typing import Any

from bench_lib import cli_run, writer
from bench_lib.context import Context, spark
from bench_lib.env import DATABASE
from bench_lib.stats import percentile, quantiles
from bench_lib.tables import recreate_empty
from gtidsnap.checkpoint import CheckpointStore
from gtidsnap.model import TableId

log = logging.getLogger("bench.latency")

TABLE = "lat"
RATE = 5_000.0
BATCH = 50  # rows per writer transaction: 100 transactions/s
WARM_UP_IDS = 1_000  # ids below this belong to the warm-up transaction
WARM_UP_TIMEOUT_S = 600.0  # start-up and the first commit (it creates the Delta tables): not measured
_BATCH_LINE = re.compile(r"batch (\d+): (\d+) records of \d+ tables in ([\d.]+) s")


def _source_commits(path: Path) -> dict[int, float]:
    commits: dict[int, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        first, count, at = line.split()
        for i in range(int(first), int(first) + int(count)):
            commits[i] = float(at)
    return commits


def _wait_caught_up(ctx: Context, checkpoint: Path, run: cli_run.CliRun, timeout: float) -> float | None:
    """Seconds until gtidsnap's checkpoint covers everything the replica has executed; None if it
    did not within ``timeout``."""
    target = ctx.pair.wait_replicated()
    started = time.monotonic()
    store = CheckpointStore(checkpoint)
    while time.monotonic() - started < timeout:
        saved = store.load()
        if saved is not None and target <= saved.processed:
            return time.monotonic() - started
        if not run.alive():
            raise RuntimeError(f"gtidsnap stopped while streaming; see {run.log}")
        time.sleep(0.2)
    return None


def _visible(mirror: str) -> list[tuple[int, int]]:
    """(id, commit time in µs) of every insert in the mirror's Change Data Feed."""
    from pyspark.sql import functions as F

    feed = (
        spark()
        .read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(mirror)
        .where("_change_type = 'insert'")
        .select("id", F.unix_micros("_commit_timestamp").alias("at_us"))
        .toArrow()
    )
    return list(zip(feed.column("id").to_pylist(), feed.column("at_us").to_pylist(), strict=True))


def measure_f(ctx: Context) -> dict[str, Any]:
    from gtidsnap.sinks.delta import absolute_root, mirror_path

    recreate_empty(ctx.pair, TABLE)
    work = ctx.work("latency")
    checkpoint = work / "checkpoint.json"
    env = cli_run.cli_env(ctx.pair, work, "delta", [f"{DATABASE}.{TABLE}"])
    run = cli_run.spawn(["run"], env, ctx.log_path("latency"))
    try:
        run.wait_mark("started", WARM_UP_TIMEOUT_S)
        warm_up = writer.start(ctx.pair, TABLE, "insert", RATE, batch=BATCH, transactions=1)
        warm_up.wait()  # one transaction: the Delta tables get created now, not in the measurement
        warm_up_s = _wait_caught_up(ctx, checkpoint, run, WARM_UP_TIMEOUT_S)
        if warm_up_s is None:
            raise RuntimeError(
                f"gtidsnap did not stream one transaction in {WARM_UP_TIMEOUT_S:.0f}s; see {run.log}"
            )
        commits_log = work / "source-commits.txt"
        started = time.monotonic()
        w = writer.start(
            ctx.pair,
            TABLE,
            "insert",
            RATE,
            batch=BATCH,
            duration=ctx.latency_s,
            log=commits_log,
            start_id=WARM_UP_IDS + 1,
        )
        written = w.wait(timeout=ctx.latency_s + 600)
        catch_up = _wait_caught_up(ctx, checkpoint, run, ctx.timeout)
        streamed_s = time.monotonic() - started
        stopped_at = time.time()  # rows not visible by now have a latency of at least now - commit
    finally:
        run.interrupt()
        result = run.wait(cli_run.STOP_S, ok=(0, 130))
    source = _source_commits(commits_log)
    visible = dict(_visible(mirror_path(absolute_root(str(work / "delta")), TableId(DATABASE, TABLE))))
    latencies = [visible[i] / 1e6 - at if i in visible else stopped_at - at for i, at in source.items()]
    shown = sum(1 for i in source if i in visible)
    batches = [
        (int(m.group(2)), float(m.group(3)))
        for m in _BATCH_LINE.finditer(result.log.read_text(encoding="utf-8"))
    ]
    shutil.rmtree(work, ignore_errors=True)
    if not shown:
        raise RuntimeError(f"no inserted row is visible in the Delta mirror; see {result.log}")
    out: dict[str, Any] = {
        "target_rows_per_s": RATE,
        "writer": written,
        "rows_written": len(source),
        "rows_visible": shown,
        "lower_bound": shown < len(source),  # gtidsnap did not catch up: the figures are lower bounds
        "warm_up_s": round(warm_up_s, 3),
        "catch_up_after_writer_s": round(catch_up, 3) if catch_up is not None else None,
        "sustained_rows_per_s": round(shown / streamed_s, 1),
        "p50_s": round(percentile(latencies, 50), 3),
        "p90_s": round(percentile(latencies, 90), 3),
        "p99_s": round(percentile(latencies, 99), 3),
        "max_s": round(max(latencies), 3),
        "min_s": round(min(latencies), 3),
        "quantiles_s": [round(v, 4) for v in quantiles(latencies)],
        "delta_batches": len(batches),
        "delta_batch_mean_s": round(sum(s for _, s in batches) / len(batches), 3) if batches else None,
        "delta_batch_mean_records": round(sum(n for n, _ in batches) / len(batches), 1) if batches else None,
        "gtidsnap": result.facts(),
    }
    if out["lower_bound"]:
        log.warning(
            "%s: gtidsnap did not catch up within %.0f s of the writer's end: %d of %d rows visible",
            ctx.flavor,
            ctx.timeout,
            shown,
            len(source),
        )
    log.info(
        "%s: commit-to-visible in Delta at %.0f rows/s: p50 %.2f s, p99 %.2f s (%d rows, %d batches)",
        ctx.flavor,
        written["rows_per_s"],
        out["p50_s"],
        out["p99_s"],
        len(latencies),
        len(batches),
    )
    return out
