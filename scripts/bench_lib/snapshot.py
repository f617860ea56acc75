"""a. Snapshot throughput against its limits, and e. peak RSS against table size.

a. With a writer changing ~1,000 random rows/s of the table on the primary, in this order: a bare
keyset scan of the replica (PyMySQL, ``id > last ORDER BY id LIMIT chunk``, rows fetched and
dropped), ``gtidsnap run --snapshot --until-caught-up`` into JSON lines, the bare scan again, the same
into Delta, the bare scan a third time, then Spark's own append of the same rows into Delta. Each
gtidsnap run is compared with the mean of the two scans around it (the machine is shared: the limit
drifts). gtidsnap's rows/s is the table's rows over the time from its "first run" log line (sink
open, Spark up) to its final summary (last commit done); start-up is reported apart.

The Spark append (:func:`spark_append`), the Delta path's second limit: the rows are read once more
(gtidsnap's own replica adapter, keyset chunks, normalised) and turned into Arrow tables by gtidsnap's
own Delta conversion (``plan_columns``, ``arrow_rows``: the mirror's columns and types, with the meta
columns ``_op``, ``_seq``, ``_gtid``, ``_source_ts``) in batches of the default ``sink.batch_rows``;
then, in the bench's own SparkSession (``build_spark_session``, the default ``sink.spark_master``) and
after a tiny warm-up append elsewhere, only ``spark.createDataFrame(batch, schema=...)`` +
``.write.format("delta").mode("append").save(path)`` per batch into a fresh table is timed. Reading,
converting and the JVM's start-up are reported apart, not in the rows/s. CPU seconds of the timed
part: this process (``time.process_time``) plus the JVM (``/proc/<pid>/stat``). The session and its
JVM are stopped at the end of a. (no gtidsnap run shares the machine with them). gtidsnap commits
every ``sink.batch_ms`` or ``batch_rows`` records, whichever comes first, and MERGEs the mirror plus
appends the changelog per commit: the append is what Spark and Delta alone need to store the rows.

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
from gtidsnap.config.loading import DEFAULTS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import types as T

log = logging.getLogger("bench.snapshot")

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
    ctx: Context, table: str, sink: str, rows: int, readers: int | None = None
) -> dict[str, Any]:
    """``gtidsnap run --snapshot bench.<table> --until-caught-up`` into ``sink``, fresh output;
    ``readers`` chunk readers (None: the default, CPUs - 1)."""
    work = ctx.work(f"snapshot-{sink}-{table}")
    env = cli_run.cli_env(ctx.pair, work, sink, [f"{DATABASE}.{table}"], ctx.chunk_size)
    if readers is not None:
        env["GTIDSNAP_SNAPSHOT_READERS"] = str(readers)
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


def _arrow_batches(ctx: Context, table: str, batch_rows: int) -> tuple[list[pa.Table], T.StructType]:
    """The rows of ``bench.<table>`` as gtidsnap's Delta sink hands a fresh mirror's snapshot rows to
    Spark: read by gtidsnap's replica adapter in keyset chunks (normalised), as snapshot records
    (``r``, no GTID), converted by the sink's own code, ``batch_rows`` rows per Arrow table."""
    from gtidsnap.core.model import TableId
    from gtidsnap.core.records import Record
    from gtidsnap.sinks.delta import arrow_rows, changes_of, plan_columns
    from gtidsnap.sinks.delta import types as delta_types
    from gtidsnap.source.replica import Replica

    tid = TableId(DATABASE, table)
    batches: list[pa.Table] = []
    struct: T.StructType | None = None
    pending: list[Record] = []
    seq, now = 0, int(time.time())
    with Replica(ctx.pair.reader_settings()) as replica:
        schema = replica.schema(tid)
        plan = plan_columns(tid, "the Spark append's table", None, schema, {})

        def flush(records: list[Record]) -> None:
            nonlocal struct
            arrow, struct = arrow_rows(tid, plan, changes_of(schema, records), delta_types.MIRROR_META)
            batches.append(arrow)

        upto, after = replica.max_key(schema), None
        while upto is not None:
            chunk = replica.select_chunk(schema, after, upto, ctx.chunk_size)
            if not chunk.count:
                break
            for key, row in chunk.rows:
                seq += 1
                pending.append(
                    Record(
                        op="r",
                        table=tid,
                        key=key,
                        before=None,
                        after=row,
                        gtid=None,
                        seq=seq,
                        snapshot=True,
                        source_ts=now,
                    )
                )
            after = chunk.last_raw_key
            while len(pending) >= batch_rows:
                flush(pending[:batch_rows])
                del pending[:batch_rows]
        if pending:
            flush(pending)
    if struct is None:
        raise RuntimeError(f"{DATABASE}.{table} is empty on the {ctx.flavor} replica")
    return batches, struct


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


def spark_append(ctx: Context, table: str) -> dict[str, Any]:
    """The Delta limit: Spark's append of the table's rows from Arrow into a fresh Delta table (see the
    module doc); only the Spark calls are timed."""
    batch_rows = int(DEFAULTS["sink"]["batch_rows"])
    started = time.monotonic()
    batches, struct = _arrow_batches(ctx, table, batch_rows)
    read_s = time.monotonic() - started
    rows = sum(b.num_rows for b in batches)
    log.info(
        "%s: %d rows of %s read and converted to Arrow in %.1f s (%d batches, %.0f MB)",
        ctx.flavor,
        rows,
        table,
        read_s,
        len(batches),
        sum(b.nbytes for b in batches) / 1e6,
    )
    work = ctx.work("spark-append")
    try:
        started = time.monotonic()
        session = spark()
        warm_up = batches[0].slice(0, WARM_UP_ROWS)
        session.createDataFrame(warm_up, schema=struct).write.format("delta").mode("append").save(
            str(work / "warm-up")
        )
        startup_s = time.monotonic() - started
        path = str(work / "table")
        cpu, jvm_cpu = time.process_time(), _jvm_cpu_s()
        started = time.monotonic()
        for batch in batches:
            session.createDataFrame(batch, schema=struct).write.format("delta").mode("append").save(path)
        took = time.monotonic() - started
        cpu, jvm_cpu = time.process_time() - cpu, _jvm_cpu_s() - jvm_cpu
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {
        "rows": rows,
        "batch_rows": batch_rows,
        "batches": len(batches),
        "arrow_mb": round(sum(b.nbytes for b in batches) / 1e6, 1),
        "read_s": round(read_s, 3),  # reading and converting: not timed
        "startup_s": round(startup_s, 3),  # JVM start-up and the warm-up append: not timed
        "seconds": round(took, 3),
        "rows_per_s": round(rows / took, 1),
        "cpu_s": round(cpu + jvm_cpu, 3),
        "python_cpu_s": round(cpu, 3),
        "jvm_cpu_s": round(jvm_cpu, 3),
    }
    log.info(
        "%s: Spark append of %s into Delta: %.0f rows/s (%.1f s, CPU %.1f s: Python %.1f, JVM %.1f; "
        "start-up %.1f s)",
        ctx.flavor,
        table,
        out["rows_per_s"],
        took,
        out["cpu_s"],
        cpu,
        jvm_cpu,
        startup_s,
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
    limit_append = append.get("rows_per_s", math.nan)
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
