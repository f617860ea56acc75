"""f. Freshness of the Delta output against the offered rate: commit-to-visible latency, p50 and p99,
in the changelog and in the mirror, at 1,000 / 2,000 / 5,000 / 10,000 rows/s (``--latency-rates``).
Before the Delta runs, the stream's own lag into JSON lines at the same rates (``stream_lag_jsonl``:
:mod:`bench_lib.stream_lag`).

Per offered rate, one ``gtidsnap run`` (streaming, Delta sink, every setting at its default: a commit
every ``sink.batch_ms`` = 1 s appends each batch to the table's changelog; the mirror, created by the
run, takes the rows of new keys by APPEND every batch and MERGEs the changes of keys it holds every
``sink.merge_interval_s`` = 15 s, or once ``sink.merge_rows`` wait) follows
a fresh empty table ``bench.lat``, into a fresh Delta folder and checkpoint. Once it runs, a writer
inserts rows at that rate into the table on the primary for ``--latency-seconds``, in 100
transactions/s (rate / 100 rows each: 50 at 5,000 rows/s, as before), logging the wall time right
after each COMMIT returned: the source commit time of its rows. The writer may fall short of the
offered rate on a small machine: the rate it reached is reported beside it.

When gtidsnap's checkpoint covers the writer's last transaction (the changelog then holds every row),
the harness waits for the mirror's first commit that holds every change up to the changelog's highest
``_seq`` (a MERGE, or an APPEND of new keys: its ``gtidsnap_merged_seq``; the mirror then holds every
row as well), stops gtidsnap (Ctrl-C), and reads the Delta tables once. Per
inserted row (by its id):

* changelog: the timestamp of the changelog commit that added the row minus its source commit time.
  The changelog has no Change Data Feed: each row's data file (``_metadata.file_name``) is mapped to
  the commit that added it from the ``add`` actions of ``_delta_log/*.json``, and that version to its
  timestamp by the table's history;
* mirror: the ``_commit_timestamp`` of the first mirror commit that has the row as an ``insert`` in
  the mirror's Change Data Feed minus its source commit time.

Both clocks are this machine's; Delta's commit timestamps have millisecond resolution.

Bounded: if gtidsnap has not caught up ``--timeout`` seconds after the writer's end (the changelog),
or ``--timeout`` seconds after that (the mirror), it is stopped anyway; rows not visible by then
count with the time they had waited so far (also those the stop's final MERGE shows), and that
figure says ``lower_bound``.

Steady state: before the measured writer starts, one warm-up transaction is written and waited for,
in the changelog and in the mirror, so neither the Delta tables' creation nor the first update is in
the figures. If gtidsnap cannot keep up, its backlog grows for as long as the writer runs, and so do
the latencies: the result gives the rate gtidsnap sustained (rows in the changelog over writer start
to caught up) and ``backlog_growth_s``, the median changelog latency of the writer's last quarter of
rows minus that of its first quarter (``backlog_growing`` above :data:`BACKLOG_S`).

The issue's targets, shown beside the figures: changelog p50 <= 1 s and p99 <= 3 s, mirror p50 <= 15 s
at 5,000 rows/s, sustained without a growing backlog. The result keeps the single-rate keys of before (the
mirror at 5,000 rows/s: ``p50_s``, ``p99_s``, ``quantiles_s``, ...) when 5,000 is among the rates.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench_lib import cli_run, delta_log, stream_lag, writer
from bench_lib.context import Context, spark, stop_spark
from bench_lib.env import DATABASE
from bench_lib.stats import backlog_growth, latencies, percentile, quantiles
from bench_lib.tables import recreate_empty
from gtidsnap.core.model import TableId
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.sinks.delta.catch_up import MERGED_SEQ

log = logging.getLogger("bench.latency")

TABLE = "lat"
RATES = (1_000.0, 2_000.0, 5_000.0, 10_000.0)  # offered rows/s (--latency-rates)
RATE = 5_000.0  # the rate of the single-rate keys and of the targets
TRANSACTIONS_PER_S = 100  # writer transactions per second at every rate (rate / 100 rows each)
WARM_UP_IDS = 1_000  # ids up to this (or one transaction) belong to the warm-up transaction
WARM_UP_TIMEOUT_S = 600.0  # start-up, the first commit (it creates the Delta tables), the first MERGE
BACKLOG_S = 2.0  # changelog latency growing more than this over the writer's run: a growing backlog
TARGETS = {"changelog_p50_s": 1.0, "changelog_p99_s": 3.0, "mirror_p50_s": 15.0}  # the issue's, at RATE
POLL_S = 0.2
_BATCH_LINE = re.compile(r"batch (\d+): (\d+) records of \d+ tables in ([\d.]+) s")


@dataclass
class _Run:
    """One rate's gtidsnap run, before its Delta output is read."""

    rate: float
    rows_per_transaction: int
    work: Path
    changelog: str
    mirror: str
    written: dict[str, Any]
    source: dict[int, float]  # id -> source commit time (s since the epoch)
    warm_up_s: float
    catch_up_s: float | None  # writer's end -> checkpoint covers it (the changelog has every row)
    mirror_wait_s: float | None  # then -> the mirror has every row
    streamed_s: float  # writer's start -> caught up (or stopped)
    stopped_at: float  # time.time() when the harness stopped waiting
    result: cli_run.CliResult


def _wait_caught_up(
    ctx: Context, checkpoint: Path, changelog: str, run: cli_run.CliRun, timeout: float
) -> float | None:
    """Seconds until gtidsnap's checkpoint covers everything the replica has executed and the changelog
    holds the batches that checkpoint names (a changelog commits a batch after its checkpoint); None if
    not within ``timeout``."""
    from gtidsnap.sinks.delta.position import parse_position

    target = ctx.pair.wait_replicated()
    started = time.monotonic()
    store = CheckpointStore(checkpoint)
    while time.monotonic() - started < timeout:
        saved = store.load()
        if saved is not None and target <= saved.processed:
            waiting = {a.batch for a in parse_position(saved.sink_position).appends}
            if waiting <= {c.batch for c in delta_log.commits(changelog)}:
                return time.monotonic() - started
        if not run.alive():
            raise RuntimeError(f"gtidsnap stopped while streaming; see {run.log}")
        time.sleep(POLL_S)
    return None


def _changelog_top_seq(changelog: str) -> int:
    """The highest ``_seq`` in the changelog: in the files of its newest commit that added any (a
    batch's changes go in ``_seq`` order)."""
    found = [c for c in delta_log.commits(changelog) if c.added]
    if not found:
        raise RuntimeError(f"{changelog} has no commit that added rows")
    names = set(found[-1].added)
    files = [p for p in Path(changelog).rglob("*.parquet") if p.name in names]
    return max(pc.max(pq.read_table(f, columns=["_seq"]).column("_seq")).as_py() for f in files)


def _wait_mirrored(run: cli_run.CliRun, mirror: str, changelog: str, timeout: float) -> float | None:
    """Seconds until the mirror has every row of the changelog: a mirror commit (a MERGE, or an APPEND
    of new keys) that holds every change up to the changelog's highest ``_seq`` (its
    ``gtidsnap_merged_seq``); None if none came within ``timeout``."""
    top = _changelog_top_seq(changelog)
    started, seen = time.monotonic(), -1
    while time.monotonic() - started < timeout:
        for c in delta_log.commits(mirror, after=seen):
            seen = c.version
            merged = c.metadata.get(MERGED_SEQ)
            if isinstance(merged, int) and merged >= top:
                return time.monotonic() - started
        if not run.alive():
            raise RuntimeError(f"gtidsnap stopped while streaming; see {run.log}")
        time.sleep(POLL_S)
    return None


def _run(ctx: Context, rate: float) -> _Run:
    """gtidsnap following the writer at ``rate`` rows/s, stopped once both tables hold every row."""
    from gtidsnap.sinks.delta import absolute_root, changelog_path, mirror_path

    recreate_empty(ctx.pair, TABLE)
    name = f"latency-{rate:g}"
    work = ctx.work(name)
    checkpoint = work / "checkpoint.json"
    root = absolute_root(str(work / "delta"))
    mirror, changelog = (
        mirror_path(root, TableId(DATABASE, TABLE)),
        changelog_path(root, TableId(DATABASE, TABLE)),
    )
    batch = max(1, round(rate / TRANSACTIONS_PER_S))
    env = cli_run.cli_env(ctx.pair, work, "delta", [f"{DATABASE}.{TABLE}"])
    run = cli_run.spawn(["run"], env, ctx.log_path(name))
    commits_log = work / "source-commits.txt"
    try:
        run.wait_mark("started", WARM_UP_TIMEOUT_S)
        warm_up_started = time.monotonic()
        warm_up = writer.start(ctx.pair, TABLE, "insert", rate, batch=batch, transactions=1)
        warm_up.wait()  # one transaction: the Delta tables get created now, not in the measurement
        if _wait_caught_up(ctx, checkpoint, changelog, run, WARM_UP_TIMEOUT_S) is None:
            raise RuntimeError(
                f"gtidsnap did not stream one transaction in {WARM_UP_TIMEOUT_S:.0f}s; see {run.log}"
            )
        if _wait_mirrored(run, mirror, changelog, WARM_UP_TIMEOUT_S) is None:
            raise RuntimeError(
                f"the mirror did not take the warm-up transaction in {WARM_UP_TIMEOUT_S:.0f}s; see {run.log}"
            )
        warm_up_s = time.monotonic() - warm_up_started
        started = time.monotonic()
        w = writer.start(
            ctx.pair,
            TABLE,
            "insert",
            rate,
            batch=batch,
            duration=ctx.latency_s,
            log=commits_log,
            start_id=max(WARM_UP_IDS, batch) + 1,
        )
        written = w.wait(timeout=ctx.latency_s + 600)
        catch_up = _wait_caught_up(ctx, checkpoint, changelog, run, ctx.timeout)
        streamed_s = time.monotonic() - started
        mirror_wait = _wait_mirrored(run, mirror, changelog, ctx.timeout) if catch_up is not None else None
        stopped_at = time.time()  # rows not visible by now have a latency of at least now - commit
    finally:
        run.interrupt()
        result = run.wait(cli_run.STOP_S, ok=(0, 130))
    return _Run(
        rate=rate,
        rows_per_transaction=batch,
        work=work,
        changelog=changelog,
        mirror=mirror,
        written=written,
        source=writer.commit_times(commits_log),
        warm_up_s=warm_up_s,
        catch_up_s=catch_up,
        mirror_wait_s=mirror_wait,
        streamed_s=streamed_s,
        stopped_at=stopped_at,
        result=result,
    )


def _earliest(ids: Sequence[int], at_us: Sequence[int]) -> dict[int, float]:
    """id -> the earliest of its times (µs in, s since the epoch out)."""
    out: dict[int, float] = {}
    for i, t in zip(ids, at_us, strict=True):
        s = t / 1e6
        if i not in out or s < out[i]:
            out[i] = s
    return out


def _changelog_visible(path: str) -> dict[int, float]:
    """id -> timestamp of the changelog commit that added the row: file -> version from the Delta log,
    version -> timestamp from the table's history (as Delta gives it, the same as a feed's)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    history = DeltaTable.forPath(spark(), path).history().select("version", F.unix_micros("timestamp"))
    stamps = {int(v): int(t) for v, t in history.collect()}
    added = delta_log.added_by(delta_log.commits(path))
    rows = (
        spark()
        .read.format("delta")
        .load(path)
        .select("id", F.col("_metadata.file_name").alias("file"))
        .toArrow()
    )
    files = rows.column("file").to_pylist()
    missing = sorted({f for f in files if f not in added})
    if missing:
        raise RuntimeError(f"{path}: data files in no commit of its _delta_log: {', '.join(missing[:3])}")
    return _earliest(rows.column("id").to_pylist(), [stamps[added[f]] for f in files])


def _mirror_visible(path: str) -> dict[int, float]:
    """id -> ``_commit_timestamp`` of the first insert of the row in the mirror's Change Data Feed."""
    from pyspark.sql import functions as F

    feed = (
        spark()
        .read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(path)
        .where("_change_type = 'insert'")
        .select("id", F.unix_micros("_commit_timestamp").alias("at_us"))
        .toArrow()
    )
    return _earliest(feed.column("id").to_pylist(), feed.column("at_us").to_pylist())


def _figures(source: dict[int, float], visible: dict[int, float], stopped_at: float) -> dict[str, Any]:
    """Latency figures of one table; a row not visible by ``stopped_at`` counts with its wait until then."""
    latencies = []
    shown = 0
    for i, at in source.items():
        seen = visible.get(i)
        if seen is not None and seen <= stopped_at:
            shown += 1
            latencies.append(seen - at)
        else:
            latencies.append(stopped_at - at)
    return {
        "rows_visible": shown,
        "lower_bound": shown < len(source),  # not caught up when stopped: the figures are lower bounds
        "p50_s": round(percentile(latencies, 50), 3),
        "p90_s": round(percentile(latencies, 90), 3),
        "p99_s": round(percentile(latencies, 99), 3),
        "max_s": round(max(latencies), 3),
        "min_s": round(min(latencies), 3),
        "quantiles_s": [round(v, 4) for v in quantiles(latencies)],
    }


def _measure(run: _Run) -> dict[str, Any]:
    """One rate's figures from its Delta tables (read with the bench's SparkSession)."""
    if not run.source:
        raise RuntimeError("the writer committed no transaction")
    changelog_seen = _changelog_visible(run.changelog)
    mirror_seen = _mirror_visible(run.mirror)
    changelog = _figures(run.source, changelog_seen, run.stopped_at)
    mirror = _figures(run.source, mirror_seen, run.stopped_at)
    changelog["commits"] = sum(1 for c in delta_log.commits(run.changelog) if c.batch is not None)
    merges = [c for c in delta_log.commits(run.mirror) if c.operation == "MERGE"]
    mirror["merges"] = len(merges)
    merge_ms = [
        float(m) for c in merges if (m := (c.info.get("operationMetrics") or {}).get("executionTimeMs"))
    ]
    mirror["merge_mean_s"] = round(sum(merge_ms) / len(merge_ms) / 1000, 3) if merge_ms else None
    if not changelog["rows_visible"]:
        raise RuntimeError(f"no inserted row is visible in the changelog; see {run.result.log}")
    batches = [
        (int(m.group(2)), float(m.group(3)))
        for m in _BATCH_LINE.finditer(run.result.log.read_text(encoding="utf-8"))
    ]
    growth = backlog_growth(latencies(run.source, changelog_seen, run.stopped_at))
    return {
        "offered_rows_per_s": run.rate,
        "rows_per_transaction": run.rows_per_transaction,
        "writer_rows_per_s": run.written["rows_per_s"],
        "writer": run.written,
        "rows_written": len(run.source),
        "warm_up_s": round(run.warm_up_s, 3),
        "catch_up_after_writer_s": round(run.catch_up_s, 3) if run.catch_up_s is not None else None,
        "mirror_after_changelog_s": round(run.mirror_wait_s, 3) if run.mirror_wait_s is not None else None,
        "sustained_rows_per_s": round(changelog["rows_visible"] / run.streamed_s, 1),
        "backlog_growth_s": round(growth, 3),
        "backlog_growing": changelog["lower_bound"] or growth > BACKLOG_S,
        "changelog": changelog,
        "mirror": mirror,
        "delta_batches": len(batches),
        "delta_batch_mean_s": round(sum(s for _, s in batches) / len(batches), 3) if batches else None,
        "delta_batch_mean_records": round(sum(n for n, _ in batches) / len(batches), 1) if batches else None,
        "gtidsnap": run.result.facts(),
    }


def _single_rate(r: dict[str, Any]) -> dict[str, Any]:
    """The keys of the single-rate measure of before: the mirror at :data:`RATE`."""
    mirror = r["mirror"]
    out = {
        "target_rows_per_s": r["offered_rows_per_s"],
        "writer": r["writer"],
        "rows_written": r["rows_written"],
        "rows_visible": mirror["rows_visible"],
        "lower_bound": mirror["lower_bound"],
        "warm_up_s": r["warm_up_s"],
        "catch_up_after_writer_s": r["catch_up_after_writer_s"],
        "sustained_rows_per_s": r["sustained_rows_per_s"],
    }
    out.update({k: mirror[k] for k in ("p50_s", "p90_s", "p99_s", "max_s", "min_s", "quantiles_s")})
    out.update({k: r[k] for k in ("delta_batches", "delta_batch_mean_s", "delta_batch_mean_records")})
    return out


def _failed(rate: float, exc: BaseException, flavor: str) -> dict[str, Any]:
    log.error("%s: f. at %g rows/s failed:\n%s", flavor, rate, traceback.format_exc())
    return {"offered_rows_per_s": rate, "error": f"{type(exc).__name__}: {exc}"[:1000]}


def measure_f(ctx: Context, rates: Sequence[float] = RATES) -> dict[str, Any]:
    """Every rate's gtidsnap run first (no Spark of the bench beside them), then their Delta tables
    read in one SparkSession, stopped at the end."""
    stream_lags: list[dict[str, Any]] = []  # into JSON lines first (bench_lib.stream_lag)
    for rate in rates:
        log.info("%s: f. the stream's lag into JSON lines at %g rows/s", ctx.flavor, rate)
        try:
            stream_lags.append(stream_lag.measure(ctx, rate))
        except Exception as exc:  # one failed rate must not waste the others
            stream_lags.append(_failed(rate, exc, ctx.flavor))
    runs: list[_Run | dict[str, Any]] = []
    for rate in rates:
        log.info("%s: f. at %g rows/s", ctx.flavor, rate)
        try:
            runs.append(_run(ctx, rate))
        except Exception as exc:  # one failed rate must not waste the others
            runs.append(_failed(rate, exc, ctx.flavor))
    per_rate: list[dict[str, Any]] = []
    try:
        for run in runs:
            if isinstance(run, dict):
                per_rate.append(run)
                continue
            try:
                per_rate.append(_measure(run))
            except Exception as exc:
                per_rate.append(_failed(run.rate, exc, ctx.flavor))
    finally:
        stop_spark()
        for run in runs:
            if isinstance(run, _Run):
                shutil.rmtree(run.work, ignore_errors=True)
    measured = [r for r in per_rate if "error" not in r]
    if not measured:
        raise RuntimeError("; ".join(f"{r['offered_rows_per_s']:g} rows/s: {r['error']}" for r in per_rate))
    for r in measured:
        c, m = r["changelog"], r["mirror"]
        if c["lower_bound"] or m["lower_bound"]:
            log.warning(
                "%s: at %g rows/s gtidsnap did not catch up within --timeout: %d (changelog) and %d "
                "(mirror) of %d rows visible",
                ctx.flavor,
                r["offered_rows_per_s"],
                c["rows_visible"],
                m["rows_visible"],
                r["rows_written"],
            )
        log.info(
            "%s: offered %g rows/s, writer %.0f, sustained %.0f: changelog p50 %.2f s p99 %.2f s; "
            "mirror p50 %.2f s p99 %.2f s (%d rows, %d batches, %d merges)",
            ctx.flavor,
            r["offered_rows_per_s"],
            r["writer_rows_per_s"],
            r["sustained_rows_per_s"],
            c["p50_s"],
            c["p99_s"],
            m["p50_s"],
            m["p99_s"],
            r["rows_written"],
            r["delta_batches"],
            m["merges"],
        )
    out: dict[str, Any] = {}
    at_rate = next((r for r in measured if r["offered_rows_per_s"] == RATE), None)
    if at_rate is not None:
        out.update(_single_rate(at_rate))
    out["rates"] = per_rate
    out["stream_lag_jsonl"] = stream_lags
    return out
