"""What a run did, counted by the engine's loop and read by the CLI's progress and summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


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
    failed: dict[str, str] = field(default_factory=dict)  # snapshots that failed in this run: table -> why

    def window_waiting_s(self, now: float | None = None) -> float:
        """How long the open window has been waiting for the stream (0 when none is open)."""
        if self.window_opened_at is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.window_opened_at


def throughput_line(throughput: dict[int, ReaderThroughput]) -> str:
    """Per-reader rows/s for the progress display, e.g. ``reader 1: 41.2k rows/s · reader 2: ...``."""
    parts = [
        f"reader {i}: {stats.rows_per_s / 1000:.1f}k rows/s"
        for i, (_, stats) in enumerate(sorted(throughput.items()), start=1)
    ]
    return " · ".join(parts)
