"""a. Snapshot throughput against its limits, and e. peak RSS against table size.

a. With a writer changing ~1,000 random rows/s of the table on the primary, in this order: a bare
keyset scan of the replica (PyMySQL, ``id > last ORDER BY id LIMIT chunk``, rows fetched and
dropped), ``gtidsnap run --snapshot --until-caught-up`` into JSON lines, the bare scan again, the same
into Delta, the bare scan a third time, the same into Delta with the splits read by Spark's executors
(``snapshot.reader_pool = spark``, ``SPARK_READERS`` splits of ``SPARK_SPLIT_ROWS`` rows at once), the
bare scan a fourth time, then Spark's own append of the same rows into Delta. Each
gtidsnap run is compared with the mean of the two scans around it (the machine is shared: the limit
drifts). gtidsnap's rows/s is the table's rows over the time from its "first run" log line (sink
open, Spark up) to its final summary (last commit done); start-up is reported apart.

Spark's best append (:func:`spark_append`), the Delta path's second limit: the rows are read once
more (gtidsnap's own replica adapter, keyset chunks, rendered as Arrow by the chunk readers' own
renderer, with the mirror's meta columns by the sink's own code: exactly what gtidsnap stages), then,
in the bench's own SparkSession (``build_spark_session``, the default ``sink.spark_master``) and after
a tiny warm-up append elsewhere, two ways into a fresh table each: (1) the whole Arrow table through
``createDataFrame`` with Arrow batches of 250,000 rows (Spark's default of 10,000 makes a Parquet file
per 10,000 rows), (2) Parquet files of 250,000 rows written by pyarrow (timed apart), then
``spark.read.parquet(...)`` appended. The faster is Spark's best append. Reading, rendering and the
JVM's start-up are reported apart. CPU seconds of each timed part: this process and the JVM. The
session and its JVM are stopped at the end of a. (no gtidsnap run shares the machine with them).
gtidsnap's own runs report the CPU seconds of each of their processes (engine, chunk readers, JVM),
per row in the results.

e. Peak RSS (``wait4``) of the same JSON-lines CLI run on the ``--rows`` table and on the
``--big-rows`` table, writer on in both; the first is a.'s run when a. ran.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench_lib import cli_run, writer
from bench_lib.context import WRITER_BATCH, WRITER_RATE, Context, spark, stop_spark
from bench_lib.env import DATABASE
from bench_lib.stats import mean, ratio

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("bench.snapshot")

SPARK_READERS = 2  # splits read at once by Spark's executors (local[2]) in a.'s run with reader_pool = spark
SPARK_SPLIT_ROWS = 100_000  # rows of a split there (a Spark job costs ~0.1-0.4 s whatever its size)
WARM_UP_ROWS = 100  # the Spark append's untimed first write (class loading, JIT), into its own table


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


def cli_snapshot(
    ctx: Context, table: str, sink: str, rows: int, readers: int | None = None, spark_split: int | None = None
) -> dict[str, Any]:
    """``gtidsnap run --snapshot bench.<table> --until-caught-up`` into ``sink``, fresh output;
    ``readers`` chunk readers (None: the default, one per CPU but one); ``spark_split``: the splits
    read by Spark's executors (``snapshot.reader_pool = spark``), this many rows each."""
    name = f"snapshot-{sink}-{table}" + ("-spark-readers" if spark_split else "")
    work = ctx.work(name)
    env = cli_run.cli_env(ctx.pair, work, sink, [f"{DATABASE}.{table}"], ctx.chunk_size)
    if readers is not None:
        env["GTIDSNAP_SNAPSHOT_READERS"] = str(readers)
    if spark_split is not None:
        env["GTIDSNAP_SNAPSHOT_READER_POOL"] = "spark"
        env["GTIDSNAP_SNAPSHOT_CHUNK_SIZE"] = str(spark_split)
    result = cli_run.run(
        ["run", "--snapshot", f"{DATABASE}.{table}", "--until-caught-up"],
        env,
        ctx.log_path(name),
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


def _arrow_rows(ctx: Context, table: str) -> pa.Table:
    """The rows of ``bench.<table>`` exactly as gtidsnap stages a fresh mirror's snapshot rows: read by
    gtidsnap's replica adapter in keyset chunks, rendered by the chunk readers' own Arrow renderer, with
    the mirror's meta columns (``_op`` r, ``_seq``, no GTID, ``_source_ts``) by the sink's own code."""
    from gtidsnap.core.model import TableId
    from gtidsnap.core.records import SnapshotColumns
    from gtidsnap.sinks.arrow_columns import ArrowRenderer
    from gtidsnap.sinks.delta import plan_columns
    from gtidsnap.sinks.delta.change_rows import snapshot_rows
    from gtidsnap.source.replica import Replica

    tid = TableId(DATABASE, table)
    render, chunks, seq, now = ArrowRenderer(), [], 1, int(time.time())
    with Replica(ctx.pair.reader_settings()) as replica:
        schema = replica.schema(tid)
        plan = plan_columns(tid, "the Spark append's table", None, schema, {})
        upto, after = replica.max_key(schema), None
        while upto is not None:
            chunk = replica.select_chunk(schema, after, upto, ctx.chunk_size)
            if not chunk.count:
                break
            _, rows = render(chunk.rows, schema)
            chunks.append(SnapshotColumns(tid, rows, seq, now, True))
            seq += chunk.count
            after = chunk.last_raw_key
    if not chunks:
        raise RuntimeError(f"{DATABASE}.{table} is empty on the {ctx.flavor} replica")
    return snapshot_rows(plan, chunks, changelog=False).combine_chunks()


def _jvm_cpu_s() -> float:
    """CPU seconds (user + system) so far of the Java processes below this one: the bench's Spark JVM
    (the writer is Python)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in cli_run.descendants(os.getpid()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "java":
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat
    return total / ticks


STAGED_FILE_ROWS = 250_000  # rows per Parquet file of the staged path (4 files a million: a few a core)
ARROW_BATCH_ROWS = 250_000  # Arrow batch of the in-memory path (Spark's default, 10,000, makes 100 files)


def _timed(fn: Any) -> dict[str, float]:
    cpu, jvm_cpu, started = time.process_time(), _jvm_cpu_s(), time.monotonic()
    fn()
    took = time.monotonic() - started
    cpu, jvm_cpu = time.process_time() - cpu, _jvm_cpu_s() - jvm_cpu
    return {"seconds": round(took, 3), "python_cpu_s": round(cpu, 3), "jvm_cpu_s": round(jvm_cpu, 3)}


def spark_append(ctx: Context, table: str) -> dict[str, Any]:
    """The Delta limit, Spark's best append of the table's rows into a fresh Delta table (see the
    module doc): from Arrow in memory with large Arrow batches, and from Parquet staged by pyarrow;
    only the Spark calls (and, apart, pyarrow's writing) are timed."""
    import pyarrow.parquet as pq
    from pyspark.sql import types as T

    from gtidsnap.sinks.delta import types as delta_types

    started = time.monotonic()
    rows = _arrow_rows(ctx, table)
    read_s = time.monotonic() - started
    log.info(
        "%s: %d rows of %s read as Arrow in %.1f s (%.0f MB)",
        ctx.flavor,
        rows.num_rows,
        table,
        read_s,
        rows.nbytes / 1e6,
    )
    struct = T.StructType(
        [T.StructField(f.name, delta_types.spark_type_of_arrow(f.type), True) for f in rows.schema]
    )
    work = ctx.work("spark-append")
    try:
        started = time.monotonic()
        session = spark()
        session.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
        session.createDataFrame(rows.slice(0, WARM_UP_ROWS), schema=struct).write.format("delta").mode(
            "append"
        ).save(str(work / "warm-up"))
        startup_s = time.monotonic() - started
        arrow = _timed(
            lambda: (
                session.createDataFrame(rows, schema=struct)
                .write.format("delta")
                .mode("append")
                .save(str(work / "arrow"))
            )
        )
        stage = work / "stage"
        stage.mkdir()

        def write_staged() -> None:
            for i, start in enumerate(range(0, rows.num_rows, STAGED_FILE_ROWS)):
                pq.write_table(rows.slice(start, STAGED_FILE_ROWS), stage / f"part-{i}.parquet")

        staged_write = _timed(write_staged)
        staged = _timed(
            lambda: (
                session.read.parquet(str(stage))
                .write.format("delta")
                .mode("append")
                .save(str(work / "staged"))
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = rows.num_rows
    best = min(arrow["seconds"], staged["seconds"])
    out: dict[str, Any] = {
        "rows": n,
        "arrow_mb": round(rows.nbytes / 1e6, 1),
        "read_s": round(read_s, 3),  # reading and rendering: not timed
        "startup_s": round(startup_s, 3),  # JVM start-up and the warm-up append: not timed
        "arrow": {
            **arrow,
            "rows_per_s": round(n / arrow["seconds"], 1),
            "arrow_batch_rows": ARROW_BATCH_ROWS,
        },
        "staged_write": {**staged_write, "file_rows": STAGED_FILE_ROWS},
        "staged": {**staged, "rows_per_s": round(n / staged["seconds"], 1)},
        "rows_per_s": round(n / best, 1),  # the best of the two
        "seconds": best,
    }
    log.info(
        "%s: Spark's append of %s into Delta: from Arrow %.0f rows/s (JVM CPU %.1f s), from staged Parquet "
        "%.0f rows/s (JVM CPU %.1f s; pyarrow's writing %.1f s)",
        ctx.flavor,
        table,
        out["arrow"]["rows_per_s"],
        arrow["jvm_cpu_s"],
        out["staged"]["rows_per_s"],
        staged["jvm_cpu_s"],
        staged_write["seconds"],
    )
    return out


RSS_READERS = 2  # the "with N readers"


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
        spark_delta = cli_snapshot(
            ctx, ctx.table, "delta", ctx.rows, readers=SPARK_READERS, spark_split=SPARK_SPLIT_ROWS
        )
        bare.append(bare_scan(ctx, ctx.table))
        try:  # a failure here must not waste the gtidsnap runs
            append = spark_append(ctx, ctx.table)
        except Exception as exc:
            log.exception("%s: the Spark append failed", ctx.flavor)
            append = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
    finally:
        written = w.stop()
        stop_spark()
    ctx.shared["snapshot-jsonl"] = jsonl
    limit_jsonl = mean([bare[0]["rows_per_s"], bare[1]["rows_per_s"]])
    limit_delta = mean([bare[1]["rows_per_s"], bare[2]["rows_per_s"]])
    limit_spark_delta = mean([bare[2]["rows_per_s"], bare[3]["rows_per_s"]])
    limit_append = append.get("rows_per_s", math.nan)
    delta_cpu = delta.get("cpu_s", {})
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
        "spark_append": append,
        "ratio_delta_to_spark_append": ratio(delta["rows_per_s"], limit_append),
        "ratio_delta_to_spark_arrow": ratio(
            delta["rows_per_s"], append.get("arrow", {}).get("rows_per_s", math.nan)
        ),
        "ratio_delta_to_spark_staged": ratio(
            delta["rows_per_s"], append.get("staged", {}).get("rows_per_s", math.nan)
        ),
        "delta_cpu_us_per_row": {k: round(v / ctx.rows * 1e6, 2) for k, v in delta_cpu.items()},
        "spark_delta": spark_delta,
        "limit_for_spark_delta_rows_per_s": round(limit_spark_delta, 1),
        "ratio_spark_delta": ratio(spark_delta["rows_per_s"], limit_spark_delta),
    }


def measure_e(ctx: Context) -> dict[str, Any]:
    """Peak RSS of the 1M and the 5M snapshot with ``RSS_READERS`` chunk readers: the engine's process
    (its own high-water mark) and the engine with its readers (the sum of every process's)."""
    runs = {}
    for name, table, rows in (("small", ctx.table, ctx.rows), ("big", ctx.big_table, ctx.big_rows)):
        w = _writer(ctx, table, rows)
        try:
            runs[name] = cli_snapshot(ctx, table, "jsonl", rows, readers=RSS_READERS)
        finally:
            runs[f"writer_{name}"] = w.stop()
    small, big = runs["small"], runs["big"]
    small_all = small["python_peak_rss_mb"] + small.get("children_peak_rss_mb", 0.0)
    big_all = big["python_peak_rss_mb"] + big.get("children_peak_rss_mb", 0.0)
    return {
        "rows": ctx.rows,
        "big_rows": ctx.big_rows,
        "chunk_size": ctx.chunk_size,
        "readers": RSS_READERS,
        **runs,
        "rss_mb": small["peak_rss_mb"],
        "big_rss_mb": big["peak_rss_mb"],
        "ratio": ratio(big["peak_rss_mb"], small["peak_rss_mb"]),
        "with_readers_rss_mb": round(small_all, 1),
        "with_readers_big_rss_mb": round(big_all, 1),
        "ratio_with_readers": ratio(big_all, small_all),
    }
