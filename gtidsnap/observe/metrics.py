"""``/metrics``: a run's state in Prometheus' text and OpenMetrics formats, read when scraped.

Nothing is counted for the metrics alone on the hot path: the engine and the sinks keep plain counters
(:class:`gtidsnap.core.run_stats.RunStats`, the mirror keeper's MERGE durations) as they always do, and
this collector turns them into metric families at each scrape, so a run nobody scrapes pays nothing.
Labels have bounded cardinality: ``table`` (the captured tables), ``op`` (c, u, d, r), ``reader`` (1..n),
``state``, ``kind``, ``outcome``, ``path``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gtidsnap.core.model import TableId
from gtidsnap.core.retention import Headroom
from gtidsnap.core.run_stats import DurationHistogram, RunStats
from gtidsnap.engine.loop import Engine
from gtidsnap.observe.health import HealthFacts
from gtidsnap.observe.probe import ReplicaProbe
from gtidsnap.source.binlog import library

GAUGES = (
    "gtidsnap_replica_info",
    "gtidsnap_source_lag_seconds",
    "gtidsnap_source_transactions_behind",
    "gtidsnap_snapshot_rows",
    "gtidsnap_snapshot_rows_estimated",
    "gtidsnap_snapshot_eta_seconds",
    "gtidsnap_snapshot_tables",
    "gtidsnap_reader_rows_per_second",
    "gtidsnap_changelog_freshness_seconds",
    "gtidsnap_mirror_freshness_seconds",
    "gtidsnap_mirror_changes_waiting",
    "gtidsnap_checkpoint_age_seconds",
    "gtidsnap_loop_tick_age_seconds",
    "gtidsnap_binlog_retention_headroom_seconds",
    "gtidsnap_binlog_fast_path",
)
COUNTERS = (
    "gtidsnap_stream_events",
    "gtidsnap_records",
    "gtidsnap_snapshot_chunks",
    "gtidsnap_snapshot_window_wait_seconds",
    "gtidsnap_snapshot_failures",
    "gtidsnap_reader_restarts",
    "gtidsnap_decoder_rows",
    "gtidsnap_decoder_restarts",
    "gtidsnap_errors",
    "gtidsnap_signals",
)
HISTOGRAMS = ("gtidsnap_batch_commit_duration_seconds", "gtidsnap_mirror_merge_duration_seconds")
METRIC_SAMPLE_NAMES: frozenset[str] = frozenset(
    [
        *GAUGES,
        *(f"{c}_total" for c in COUNTERS),
        *(f"{h}_{s}" for h in HISTOGRAMS for s in ("bucket", "sum", "count")),
    ]
)
"""Every sample name the exposition can hold (docs/monitoring is checked against it)."""


@dataclass
class RunView:
    """What the collector and the health endpoints read: the engine (its stats, context, sink), the
    probe, and the replica in use."""

    engine: Engine
    probe: ReplicaProbe
    replica: str  # HOST:PORT
    flavor: str
    stall_after_s: float
    heartbeat_s: float
    probe_interval_s: float = 5.0
    retention: Callable[[], Headroom | None] = lambda: None  # the retention watch's last measurement
    _waited_s: float = 0.0  # the window-wait counter's last value (two fields summed: never shown lower)
    _eta_from: dict[TableId, tuple[float, int]] = field(default_factory=dict)  # table -> (time, rows)

    def health(self) -> HealthFacts:
        stats, facts = self.engine.stats, self.probe.facts
        age = None if stats.committed_at is None else max(0.0, time.time() - stats.committed_at)
        return HealthFacts(
            now=time.monotonic(),
            tick_at=stats.tick_at,
            stall_after_s=self.stall_after_s,
            replica_error=facts.error,
            last_event_at=facts.stream_seen_at,
            heartbeat_s=self.heartbeat_s,
            probe_interval_s=self.probe_interval_s,
            checkpoint_age_s=age,
            behind=facts.behind,
        )

    def lag_s(self) -> float | None:
        """How far the output is behind the source, 0 when the checkpoint holds all the replica executed
        (None: not known yet). While behind: since the source commit time of the newest change committed,
        bounded by since the replica was last seen at a point the checkpoint holds (the probe): changes
        of tables not captured move no source time, and are no lag."""
        stats, facts = self.engine.stats, self.probe.facts
        if facts.behind is None:
            return None
        if facts.behind == 0:
            return 0.0
        now = time.time()
        candidates = [now - t for t in (stats.committed_source_ts or None, facts.held_at) if t]
        return max(0.0, min(candidates)) if candidates else None


class RunCollector(Collector):
    """The metric families of one run, built from :class:`RunView` at each scrape."""

    def __init__(self, view: RunView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view, engine = self.view, self.view.engine
        stats: RunStats = engine.stats
        facts = view.probe.facts
        info = GaugeMetricFamily("gtidsnap_replica_info", "The replica in use", labels=["replica", "flavor"])
        info.add_metric([view.replica, view.flavor], 1)
        yield info
        lag = view.lag_s()
        if lag is not None:
            yield _gauge("gtidsnap_source_lag_seconds", "Source commit -> committed to the output", lag)
        if facts.behind is not None:
            yield _gauge(
                "gtidsnap_source_transactions_behind",
                "Transactions the replica executed that the checkpoint does not hold",
                facts.behind,
            )
        yield _counter("gtidsnap_stream_events", "Binlog events decoded (heartbeats included)", stats.events)
        records = CounterMetricFamily("gtidsnap_records", "Records emitted", labels=["table", "op"])
        for (schema, table, op), n in sorted(dict.copy(stats.changes).items()):
            records.add_metric([f"{schema}.{table}", op], n)
        yield records
        yield from self._snapshot(stats, facts.estimates)
        yield from self._readers(stats)
        yield _histogram(
            "gtidsnap_batch_commit_duration_seconds",
            "A batch's output commit and its checkpoint",
            stats.commits,
        )
        yield _gauge(
            "gtidsnap_changelog_freshness_seconds",
            "Commit time minus the newest source time, at the last commit that carried changes",
            stats.committed_freshness_s,
        )
        yield from self._mirrors(engine)
        if stats.committed_at is not None:
            age = max(0.0, time.time() - stats.committed_at)
            yield _gauge("gtidsnap_checkpoint_age_seconds", "Since the last checkpoint was saved", age)
        headroom = view.retention()
        if headroom is not None and headroom.seconds is not None:
            yield _gauge(
                "gtidsnap_binlog_retention_headroom_seconds",
                "Until the replica purges the oldest binlog the checkpoint needs",
                headroom.seconds,
            )
        gate = library.installed()
        if gate is not None:
            fast = GaugeMetricFamily(
                "gtidsnap_binlog_fast_path",
                "1: a fast path through the binlog libraries' internals is on (their tested versions)",
                labels=["path"],
            )
            for path, on in gate.paths.items():
                fast.add_metric([path], 1 if on else 0)
            yield fast
        tick = 0.0 if stats.tick_at is None else max(0.0, time.monotonic() - stats.tick_at)
        yield _gauge("gtidsnap_loop_tick_age_seconds", "Since the engine's loop last turned", tick)
        errors = CounterMetricFamily("gtidsnap_errors", "Errors by kind", labels=["kind"])
        counts = {**dict.copy(stats.errors), "reader_restart": stats.reader_restarts}
        counts["replica_probe"] = view.probe.failures
        for kind in ("snapshot_failed", "signal_refused", "reader_restart", "replica_probe"):
            errors.add_metric([kind], counts.get(kind, 0))
        yield errors
        signals = CounterMetricFamily(
            "gtidsnap_signals", "Signals by what became of them", labels=["outcome"]
        )
        for outcome in ("done", "ignored", "refused"):
            signals.add_metric([outcome], stats.signals.get(outcome, 0))
        yield signals

    def _snapshot(self, stats: RunStats, estimates: Mapping[TableId, int]) -> Iterator[Metric]:
        context = getattr(self.view.engine, "context", None)
        rows = GaugeMetricFamily(
            "gtidsnap_snapshot_rows", "Rows read by the table's snapshot", labels=["table"]
        )
        estimated = GaugeMetricFamily(
            "gtidsnap_snapshot_rows_estimated", "The server's estimate of the table's rows", labels=["table"]
        )
        eta = GaugeMetricFamily("gtidsnap_snapshot_eta_seconds", "Estimated time left", labels=["table"])
        states = {"queued": 0, "reading": 0, "done": 0, "failed": 0}
        latest = {t.table: t for t in (context.tables if context is not None else ())}  # last entry wins
        now = time.monotonic()
        for table, progress in sorted(latest.items(), key=lambda i: str(i[0])):
            state = "failed" if progress.state == "error" else progress.state
            states[state] += 1
            rows.add_metric([str(table)], progress.rows)
            total = estimates.get(table)
            if total is not None:
                estimated.add_metric([str(table)], max(total, progress.rows))
            if state == "reading" and total is not None:
                since, done0 = self.view._eta_from.setdefault(table, (now, progress.rows))
                rate = (progress.rows - done0) / (now - since) if now > since else 0.0
                if rate > 0:
                    eta.add_metric([str(table)], max(0.0, total - progress.rows) / rate)
            elif state != "reading":
                self.view._eta_from.pop(table, None)
        yield rows
        yield estimated
        yield eta
        tables = GaugeMetricFamily("gtidsnap_snapshot_tables", "Snapshots by state", labels=["state"])
        for state, n in states.items():
            tables.add_metric([state], n)
        yield tables
        yield _counter("gtidsnap_snapshot_chunks", "Chunks emitted", stats.chunks)
        waited = self.view._waited_s = max(
            self.view._waited_s, stats.window_wait_s + stats.window_waiting_s()
        )
        yield _counter(
            "gtidsnap_snapshot_window_wait_seconds", "Chunk windows waiting for the stream", waited
        )
        yield _counter(
            "gtidsnap_snapshot_failures", "Snapshots that failed", stats.errors.get("snapshot_failed", 0)
        )

    def _readers(self, stats: RunStats) -> Iterator[Metric]:
        rates = GaugeMetricFamily(
            "gtidsnap_reader_rows_per_second", "Rows/s of each reader", labels=["reader"]
        )
        for i, (_, work) in enumerate(sorted(dict.copy(stats.readers).items()), start=1):
            rates.add_metric([str(i)], work.rows_per_s)
        yield rates
        yield _counter(
            "gtidsnap_reader_restarts", "Times the chunk readers were started again", stats.reader_restarts
        )
        decoded = CounterMetricFamily(
            "gtidsnap_decoder_rows", "Binlog rows decoded by each decoder process", labels=["decoder"]
        )
        for i, rows in enumerate(list(stats.decoded), start=1):
            decoded.add_metric([str(i)], rows)
        yield decoded
        yield _counter(
            "gtidsnap_decoder_restarts", "Decoder processes started again (one died)", stats.decoder_restarts
        )

    def _mirrors(self, engine: Engine) -> Iterator[Metric]:
        keeper = getattr(engine.sink, "_keeper", None)  # a Delta sink keeping its mirrors
        merges = getattr(keeper, "merges", DurationHistogram())
        yield _histogram("gtidsnap_mirror_merge_duration_seconds", "A mirror's MERGE of changes", merges)
        fresh = GaugeMetricFamily(
            "gtidsnap_mirror_freshness_seconds",
            "Age of the oldest change waiting for the mirror",
            labels=["table"],
        )
        waiting = GaugeMetricFamily(
            "gtidsnap_mirror_changes_waiting",
            "Changes (newest per key) waiting for the mirror",
            labels=["table"],
        )
        now = time.monotonic()
        facts = keeper.mirror_facts() if keeper is not None else {}
        for table, (rows, since) in sorted(facts.items(), key=lambda i: str(i[0])):
            fresh.add_metric([str(table)], max(0.0, now - since) if since is not None and rows else 0.0)
            waiting.add_metric([str(table)], rows)
        yield fresh
        yield waiting


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


def _counter(name: str, text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, text, value=value)


def _histogram(name: str, text: str, durations: DurationHistogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, text, buckets=durations.cumulative(), sum_value=durations.sum_s)
