"""What a run did, counted by the engine's loop and read by the CLI's progress and summary."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from gtidsnap.core.gtid import GtidSet
from gtidsnap.core.model import RowChange, TableId

# Upper bounds (seconds) of the duration histograms /metrics shows: a JSON-lines commit takes
# milliseconds, a Delta commit about a second, a MERGE of a big backlog tens of seconds.
DURATION_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass
class DurationHistogram:
    """Durations counted into fixed buckets (cumulative on export), as a Prometheus histogram: plain
    data, so the engine and the sinks need no metrics library and cost nothing when nobody scrapes."""

    bounds: tuple[float, ...] = DURATION_BUCKETS_S
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; the last is +Inf
    sum_s: float = 0.0

    def observe(self, seconds: float) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
        i = next((i for i, bound in enumerate(self.bounds) if seconds <= bound), len(self.bounds))
        self.counts[i] += 1
        self.sum_s += seconds

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs, the last ``+Inf``: what a histogram's ``_bucket`` samples hold."""
        counts = self.counts or [0] * (len(self.bounds) + 1)
        total, out = 0, []
        for bound, n in zip([*map(str, self.bounds), "+Inf"], counts, strict=True):
            total += n
            out.append((bound, total))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)


@dataclass
class ReaderThroughput:
    """One reader's work, for the progress display."""

    rows: int = 0
    chunks: int = 0
    busy_s: float = 0.0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.busy_s if self.busy_s > 0 else 0.0


@dataclass
class RunStats:
    """What a run did, for the CLI's summary and progress."""

    records: int = 0
    snapshot_rows: int = 0
    chunks: int = 0
    chunk_pause_s: list[float] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)
    # A chunk's window stays open until the stream reaches its high watermark: under heavy writes the
    # snapshot advances at the stream's pace. How long windows waited, and since when the open one waits:
    window_wait_s: float = 0.0
    window_opened_at: float | None = None
    # With chunk readers (gtidsnap.snapshot.planner): each reader's work, by its process id.
    readers: dict[int, ReaderThroughput] = field(default_factory=dict)
    decoded: list[int] = field(default_factory=list)  # rows decoded by each binlog decoder process
    decoder_restarts: int = 0  # decoder processes started again (one died)
    failed: dict[str, str] = field(default_factory=dict)  # snapshots that failed in this run: table -> why
    # For /metrics (gtidsnap.observe.metrics), counted where it happens, read when scraped:
    # (schema, table, op) -> records: strings, whose hashes are cached (a TableId's is a Python call)
    changes: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    events: int = 0  # binlog events decoded (heartbeats included)
    tick_at: float | None = None  # the loop's last turn (liveness); None: not turning yet (start-up)
    source_ts: int = 0  # the source commit time of the last change emitted (epoch seconds)
    commits: DurationHistogram = field(default_factory=DurationHistogram)  # output commit + checkpoint
    committed_at: float | None = None  # wall time of the last commit saved with its checkpoint
    committed_processed: GtidSet | None = None  # the transactions that checkpoint names as processed
    committed_source_ts: int = 0  # the newest source commit time in the output then
    committed_freshness_s: float = 0.0  # commit time - newest source time in it, at that commit
    reader_restarts: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # kind -> count (snapshot_failed, ...)
    signals: Counter[str] = field(default_factory=Counter)  # done, ignored, refused -> count

    def signal_outcome(self, outcome: str) -> None:
        kind = outcome.split(":")[0]
        self.signals[kind] += 1
        if kind == "refused":
            self.errors["signal_refused"] += 1

    def saw_change(self, change: RowChange) -> None:
        """One change emitted (per change: measured ~0.2 µs)."""
        table = change.table
        self.changes[table.schema, table.name, change.op] += 1
        self.source_ts = change.source_ts

    def saw_changes(self, table: TableId, op: str, rows: int, source_ts: int) -> None:
        """``rows`` changes of one rows event emitted (decoded by a decoder process)."""
        self.changes[table.schema, table.name, op] += rows
        self.source_ts = source_ts

    def saw_chunk(self, table: TableId, rows: int) -> None:
        """A chunk emitted, with its ``rows`` rows."""
        self.chunks += 1
        self.snapshot_rows += rows
        self.changes[table.schema, table.name, "r"] += rows

    def window_waiting_s(self, now: float | None = None) -> float:
        """How long the open window has been waiting for the stream (0 when none is open)."""
        if self.window_opened_at is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.window_opened_at


def decoders_line(stats: RunStats) -> str:
    """Per-decoder rows for the progress display, e.g. ``decoder 1: 812.0k rows``."""
    return " · ".join(
        f"decoder {i}: {rows / 1000:.1f}k rows" for i, rows in enumerate(stats.decoded, start=1)
    )


def throughput_line(throughput: dict[int, ReaderThroughput]) -> str:
    """Per-reader rows/s for the progress display, e.g. ``reader 1: 41.2k rows/s · reader 2: ...``."""
    parts = [
        f"reader {i}: {stats.rows_per_s / 1000:.1f}k rows/s"
        for i, (_, stats) in enumerate(sorted(throughput.items()), start=1)
    ]
    return " · ".join(parts)
