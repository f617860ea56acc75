"""c. Binlog pause per chunk minus the chunk SELECT's own time, and d. window close on an idle source.

Both run the engine in this process (``build_engine``, JSON-lines sink, defaults but the chunk size)
on a :class:`TimedReplica`: gtidsnap's own :class:`~gtidsnap.source.replica.Replica` with timers around
``select_chunk`` and around the SQL round trip inside it (``_query``: execute + fetch, the part a bare
keyset scan also pays). The engine records the pause itself (``RunStats.chunk_pause_s``: low
watermark, SELECT, high watermark), one per chunk in the same order, so per chunk:

* ``pause``: the binlog pause (the engine's own figure);
* ``select``: ``select_chunk`` whole (the SQL round trip and whatever else gtidsnap does in it, e.g.
  normalising rows, which gtidsnap now defers until after the high watermark);
* ``query``: the SQL round trip alone;
* ``pause - query``: what gtidsnap adds to the SELECT (watermark reads, anything else inside the
  pause): the headline;
* ``pause - select``: the two watermark reads and the bookkeeping.

If ``Replica._query`` (a private method) is renamed, ``query`` stays empty and the headline falls back
to ``pause - select`` (``query_timed`` says which). A product hook, e.g. ``RunStats.chunk_select_s``
next to ``chunk_pause_s``, would make this independent of the adapter's insides.

c. runs on the ``--rows`` table with the 1,000 rows/s writer. d. runs on an idle source (nothing
written), on a small table, with the default heartbeat: per chunk, the time from ``select_chunk``
returning to the chunk's rows being emitted (the window closed), seen through ``on_progress``. On an
idle, caught-up source the high watermark is empty and the stream has processed the low one, so the
window closes as soon as it opens (no heartbeat is waited for); the figure is then the time to read
the high watermark, normalise the chunk and hand its records over.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from typing import Any

from bench_lib import writer
from bench_lib.context import WRITER_BATCH, WRITER_RATE, Context
from bench_lib.env import DATABASE
from bench_lib.stats import quantiles, summary_ms
from bench_lib.tables import ensure_table
from gtidsnap.config.loading import Config, SinkSettings, SnapshotSettings
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.run_stats import RunStats
from gtidsnap.run import build_engine
from gtidsnap.source.replica import Replica
from gtidsnap.source.result_rows import ChunkResult

log = logging.getLogger("bench.pauses")

IDLE_CHUNKS = 30  # chunks of the idle table (d.)


class TimedReplica(Replica):
    """The product's replica adapter with timers; behaviour unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.select_s: list[float] = []
        self.query_s: list[float] = []  # SQL round trips inside select_chunk, one per select
        self.selected_at: list[float] = []  # time.monotonic() when each select_chunk returned
        self._in_select = False
        self._query_sum = 0.0
        super().__init__(*args, **kwargs)

    def select_chunk(self, *args: Any, **kwargs: Any) -> ChunkResult:
        self._in_select, self._query_sum = True, 0.0
        started = time.perf_counter()
        try:
            return super().select_chunk(*args, **kwargs)
        finally:
            self.select_s.append(time.perf_counter() - started)
            self.query_s.append(self._query_sum)
            self.selected_at.append(time.monotonic())
            self._in_select = False

    def _query(self, *args: Any, **kwargs: Any) -> Any:  # private hook: see the module doc
        if not self._in_select:
            return super()._query(*args, **kwargs)
        started = time.perf_counter()
        try:
            return super()._query(*args, **kwargs)
        finally:
            self._query_sum += time.perf_counter() - started


def _config(ctx: Context, table: str, name: str) -> Config:
    work = ctx.work(name)
    return Config(
        source=ctx.pair.reader_settings(),
        tables=(TableId(DATABASE, table),),
        snapshot=SnapshotSettings(chunk_size=ctx.chunk_size),
        sink=SinkSettings(type="jsonl", path=str(work / "changes.jsonl")),
        checkpoint_path=work / "checkpoint.json",
    )


def _run(
    ctx: Context, table: str, name: str, on_progress: Any = None
) -> tuple[RunStats, TimedReplica, float, Config]:
    config = _config(ctx, table, name)
    with TimedReplica(config.source) as replica:
        engine = build_engine(config, replica, on_progress=on_progress)
        started = time.monotonic()
        stats = engine.run(snapshot=[TableId(DATABASE, table)], until_caught_up=True)
        took = time.monotonic() - started
    shutil.rmtree(config.checkpoint_path.parent, ignore_errors=True)
    return stats, replica, took, config


def _minus(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x - y for x, y in zip(a, b, strict=True)]


def measure_c(ctx: Context) -> dict[str, Any]:
    w = writer.start(ctx.pair, ctx.table, "update", WRITER_RATE, batch=WRITER_BATCH, max_id=ctx.rows)
    try:
        stats, replica, took, _ = _run(ctx, ctx.table, "pauses")
    finally:
        written = w.stop()
    pause = stats.chunk_pause_s
    if len(pause) != len(replica.select_s):
        raise RuntimeError(f"{len(pause)} pauses but {len(replica.select_s)} selects: cannot pair them")
    has_query = any(replica.query_s)
    result: dict[str, Any] = {
        "rows": ctx.rows,
        "chunk_size": ctx.chunk_size,
        "chunks": len(pause),
        "writer": written,
        "in_process_rows_per_s": round(stats.snapshot_rows / took, 1),
        "pause": summary_ms(pause),
        "select_chunk": summary_ms(replica.select_s),
        "pause_minus_select_chunk": summary_ms(_minus(pause, replica.select_s)),
        "query_timed": has_query,
        "quantiles_ms": {
            "pause": [round(v * 1000, 3) for v in quantiles(pause)],
            "select_chunk": [round(v * 1000, 3) for v in quantiles(replica.select_s)],
        },
    }
    if has_query:  # the SQL round trip was timed inside select_chunk
        overhead = _minus(pause, replica.query_s)
        result["query"] = summary_ms(replica.query_s)
        result["pause_minus_query"] = summary_ms(overhead)
        result["quantiles_ms"]["query"] = [round(v * 1000, 3) for v in quantiles(replica.query_s)]
        result["quantiles_ms"]["pause_minus_query"] = [round(v * 1000, 3) for v in quantiles(overhead)]
    headline = result["pause_minus_query"] if has_query else result["pause_minus_select_chunk"]
    result["p50_ms"], result["p99_ms"] = headline["p50_ms"], headline["p99_ms"]
    log.info(
        "%s: binlog pause per chunk p50 %.1f ms; minus the SELECT: p50 %.2f ms, p99 %.2f ms",
        ctx.flavor,
        result["pause"]["p50_ms"],
        result["p50_ms"],
        result["p99_ms"],
    )
    return result


def measure_d(ctx: Context) -> dict[str, Any]:
    table = f"idle_{IDLE_CHUNKS * ctx.chunk_size}"
    ensure_table(ctx.pair, table, IDLE_CHUNKS * ctx.chunk_size)
    ctx.pair.wait_replicated()
    time.sleep(2.0)  # let the source be idle
    emitted: list[float] = []

    def on_progress(context: SnapshotContext, stats: RunStats) -> None:
        if stats.chunks > len(emitted):
            emitted.append(time.monotonic())

    _, replica, took, config = _run(ctx, table, "idle", on_progress)
    close = [e - s for e, s in zip(emitted, replica.selected_at, strict=False)]
    result: dict[str, Any] = {
        "heartbeat_s": config.heartbeat_s,
        "chunks": len(close),
        "run_s": round(took, 3),
        "close": summary_ms(close),
        "close_ms": [round(v * 1000, 3) for v in close],
        "p50_ms": summary_ms(close).get("p50_ms"),
        "max_ms": summary_ms(close).get("max_ms"),
    }
    log.info(
        "%s: idle source: window closed p50 %.3f ms, max %.3f ms after the SELECT (%d chunks)",
        ctx.flavor,
        result["p50_ms"],
        result["max_ms"],
        len(close),
    )
    return result
