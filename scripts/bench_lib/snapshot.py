"""a. Snapshot throughput against the limit, and e. peak RSS against table size.

a. With a writer changing ~1,000 random rows/s of the table on the primary, in this order: a bare
keyset scan of the replica (PyMySQL, ``id > last ORDER BY id LIMIT chunk``, rows fetched and
dropped), ``gtidsnap run --snapshot --until-caught-up`` into JSON lines, the bare scan again, the same
into Delta, the bare scan a third time. Each gtidsnap run is compared with the mean of the two scans
around it (the machine is shared: the limit drifts). gtidsnap's rows/s is the table's rows over the
time from its "first run" log line (sink open, Spark up) to its final summary (last commit done);
start-up is reported apart.

e. Peak RSS (``wait4``) of the same JSON-lines CLI run on the ``--rows`` table and on the
``--big-rows`` table, writer on in both; the first is a.'s run when a. ran.
"""

from __future__ import annotations

import logging
import shutil
import time
from typing import Any

from bench_lib import cli_run, writer
from bench_lib.context import WRITER_BATCH, WRITER_RATE, Context
from bench_lib.env import DATABASE
from bench_lib.stats import mean, ratio

log = logging.getLogger("bench.snapshot")


def bare_scan(ctx: Context, table: str) -> dict[str, Any]:
    """The limit: a keyset walk of the whole table on the replica with PyMySQL, nothing else."""
    started = time.monotonic()
    rows, last = 0, 0
    with ctx.pair.reader() as conn, conn.cursor() as cur:
        while True:
            cur.execute(
                f"SELECT * FROM {DATABASE}.{table} WHERE id > %s ORDER BY id LIMIT %s", (last, ctx.chunk_size)
            )
            got = cur.fetchall()
            if not got:
                break
            rows += len(got)
            last = got[-1][0]
    took = time.monotonic() - started
    log.info("%s: bare keyset scan of %s: %d rows in %.1f s", ctx.flavor, table, rows, took)
    return {"rows": rows, "seconds": round(took, 3), "rows_per_s": round(rows / took, 1)}


def cli_snapshot(ctx: Context, table: str, sink: str, rows: int) -> dict[str, Any]:
    """``gtidsnap run --snapshot bench.<table> --until-caught-up`` into ``sink``, fresh output."""
    work = ctx.work(f"snapshot-{sink}-{table}")
    env = cli_run.cli_env(ctx.pair, work, sink, [f"{DATABASE}.{table}"], ctx.chunk_size)
    result = cli_run.run(
        ["run", "--snapshot", f"{DATABASE}.{table}", "--until-caught-up"],
        env,
        ctx.log_path(f"snapshot-{sink}-{table}"),
        ctx.timeout,
        checkpoint=work / "checkpoint.json",
    )
    facts = result.facts()
    done = rows
    if result.timed_out:  # the snapshot rows committed by the deadline
        done = sum(t.rows for t in result.progress.context.tables) if result.progress else 0
        facts["rows_done"] = done
        log.warning("%s: the snapshot into %s was stopped after %.0f s", ctx.flavor, sink, ctx.timeout)
    facts["rows_per_s"] = round(done / result.seconds(), 1)
    log.info(
        "%s: gtidsnap snapshot of %s into %s: %.0f rows/s (work %.1f s, start-up %.1f s, peak RSS %.0f MB)",
        ctx.flavor,
        table,
        sink,
        facts["rows_per_s"],
        facts["work_s"],
        facts["startup_s"],
        facts["peak_rss_mb"],
    )
    shutil.rmtree(work, ignore_errors=True)
    return facts


def _writer(ctx: Context, table: str, rows: int) -> writer.Writer:
    return writer.start(ctx.pair, table, "update", WRITER_RATE, batch=WRITER_BATCH, max_id=rows)


def measure_a(ctx: Context) -> dict[str, Any]:
    w = _writer(ctx, ctx.table, ctx.rows)
    try:
        bare = [bare_scan(ctx, ctx.table)]
        jsonl = cli_snapshot(ctx, ctx.table, "jsonl", ctx.rows)
        bare.append(bare_scan(ctx, ctx.table))
        delta = cli_snapshot(ctx, ctx.table, "delta", ctx.rows)
        bare.append(bare_scan(ctx, ctx.table))
    finally:
        written = w.stop()
    ctx.shared["snapshot-jsonl"] = jsonl
    limit_jsonl = mean([bare[0]["rows_per_s"], bare[1]["rows_per_s"]])
    limit_delta = mean([bare[1]["rows_per_s"], bare[2]["rows_per_s"]])
    return {
        "rows": ctx.rows,
        "chunk_size": ctx.chunk_size,
        "writer": written,
        "bare_scans": bare,
        "bare_rows_per_s": round(mean([b["rows_per_s"] for b in bare]), 1),
        "jsonl": jsonl,
        "delta": delta,
        "limit_for_jsonl_rows_per_s": round(limit_jsonl, 1),
        "limit_for_delta_rows_per_s": round(limit_delta, 1),
        "ratio_jsonl": ratio(jsonl["rows_per_s"], limit_jsonl),
        "ratio_delta": ratio(delta["rows_per_s"], limit_delta),
    }


def measure_e(ctx: Context) -> dict[str, Any]:
    small = ctx.shared.get("snapshot-jsonl")
    reused = small is not None
    if small is None:
        w = _writer(ctx, ctx.table, ctx.rows)
        try:
            small = cli_snapshot(ctx, ctx.table, "jsonl", ctx.rows)
        finally:
            w.stop()
    w = _writer(ctx, ctx.big_table, ctx.big_rows)
    try:
        big = cli_snapshot(ctx, ctx.big_table, "jsonl", ctx.big_rows)
    finally:
        written = w.stop()
    return {
        "rows": ctx.rows,
        "big_rows": ctx.big_rows,
        "chunk_size": ctx.chunk_size,
        "small_reused_from_a": reused,
        "small": small,
        "big": big,
        "writer_big": written,
        "rss_mb": small["peak_rss_mb"],
        "big_rss_mb": big["peak_rss_mb"],
        "ratio": ratio(big["peak_rss_mb"], small["peak_rss_mb"]),
    }
