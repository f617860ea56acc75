"""When and how the output commits: every ``batch_rows`` records or checkpoint interval
(:class:`Commits`), and for a sink that can seal, in the background, one at a time and in order, while
the engine keeps reading (:class:`BackgroundCommitter`).

A Delta commit takes seconds of Spark work; done inline, the engine would neither read chunks nor the
binlog meanwhile. A sink that can *seal* (hand over everything written so far as one batch, and take
new writes at once) lets the engine go on while the batch is committed here. Each job commits its
batch and then saves the checkpoint taken when the batch was sealed, so the order "sink commit, then
the checkpoint that names it" holds exactly as in the inline path, and a crash at any point leaves a
checkpoint that is at or behind what the sink holds (the sink's ``open`` undoes the rest).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.ports import CheckpointedSink, CheckpointPort, SealingSink, Sink, SnapshotAwareSink
from gtidsnap.core.records import Emitted, Record, emitted_rows
from gtidsnap.core.run_stats import RunStats
from gtidsnap.engine.loop_step import EngineSettings, commit_due


def commit_then_save(
    commit: Callable[[], Any],
    state: Checkpoint,
    store: CheckpointPort,
    saved: Callable[[Any, Checkpoint], None] | None = None,
) -> None:
    """The one order of a commit: the sink's batch, then the checkpoint naming the sink's position
    (``state`` was taken when the batch was sealed, so it describes exactly what the batch holds),
    then the sink told it is saved (``saved``, a :class:`CheckpointedSink`'s)."""
    position = commit()
    crash_point("between-commit-and-checkpoint")
    checkpoint = replace(state, sink_position=position)
    store.save(checkpoint)
    if saved is not None:
        saved(position, checkpoint)


class BackgroundCommitter:
    """A single worker thread that runs commit jobs one after the other.

    At most one job runs and none waits: :meth:`submit` first waits for the previous job, so batches
    are never reordered and never more than two are held in memory (the one committing, the one
    filling). A job's exception is kept and raised in the engine's thread by :meth:`check`.
    """

    def __init__(self, name: str = "gtidsnap-commit") -> None:
        self._name = name
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` in the background once the previous one is done."""
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(job,), name=self._name, daemon=True)
        self._thread.start()

    def wait(self, waiting: Callable[[], None] | None = None) -> None:
        """Block until no job runs; raise the error of a job that failed. ``waiting`` is called every
        second meanwhile (the engine's liveness: waiting for its committer is not being stuck)."""
        if self._thread is not None:
            while self._thread.is_alive():
                self._thread.join(1.0)
                if waiting is not None:
                    waiting()
            self._thread = None
        self.check()

    def check(self) -> None:
        """Raise (once) the exception of a failed job, in the caller's thread."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # handed to the engine's thread, which stops on it
            self._error = exc


class Commits:
    """The engine's commits: sink first, then the checkpoint that names the sink's position. Inline
    until :meth:`start_background`; from then on, for a :class:`SealingSink`, in the background: the
    batch and the engine's state are taken together at :meth:`commit`, so the checkpoint saved after
    the batch is committed describes exactly what the batch holds, while the engine reads on."""

    def __init__(self, sink: Sink, store: CheckpointPort, stats: RunStats | None = None) -> None:
        self.sink, self.store = sink, store
        self.stats = stats or RunStats()  # each commit's duration and freshness, for /metrics
        self._saved = sink.checkpointed if isinstance(sink, CheckpointedSink) else None
        self.uncommitted = 0  # records (and signals) written since the last commit
        self.chunk_rows = 0  # rows of chunks (read as columns or lines) written since the last commit
        self._last_at = time.monotonic()
        self._background: BackgroundCommitter | None = None

    def start_background(self) -> None:
        if isinstance(self.sink, SealingSink):
            self._background = BackgroundCommitter()

    def count(self, records: Sequence[Emitted]) -> int:
        """Count what the engine just wrote to the sink; how many records it holds (a row each)."""
        changes = list(map(type, records)).count(Record)  # no bytecode a record: it runs once a row event
        rows = changes if changes == len(records) else emitted_rows(records)
        self.uncommitted += changes
        self.chunk_rows += rows - changes
        return rows

    def due(self, settings: EngineSettings, snapshotting: bool = False) -> bool:
        """Is a commit due (``snapshotting``: a snapshot is being read, its own interval applies)?
        Rows of read chunks (compact: columns or encoded lines) count toward ``snapshot_batch_rows``
        where it is set, other records toward ``batch_rows``."""
        since = time.monotonic() - self._last_at
        quiet = not snapshotting and not self.chunk_rows and self.uncommitted < settings.batch_rows
        if quiet and since < settings.checkpoint_interval_s:  # asked once a streamed transaction: mostly no
            return False
        busy = self._background is not None and self._background.busy
        interval = settings.checkpoint_interval_s
        if snapshotting and settings.snapshot_interval_s is not None:
            interval = settings.snapshot_interval_s
        records = self.uncommitted
        if settings.snapshot_batch_rows is None:
            records += self.chunk_rows
        elif self.chunk_rows >= settings.snapshot_batch_rows:
            return True
        return commit_due(records, settings.batch_rows, busy, since, interval)

    def commit(self, state: Checkpoint) -> None:
        source_ts = self.stats.source_ts  # the newest change in this batch
        if isinstance(self.sink, SnapshotAwareSink):
            self.sink.snapshots_pending(frozenset(t.table for t in state.context.pending()))
        if self._background is not None and isinstance(self.sink, SealingSink):
            self._background.wait(self._waiting)
            job = self.sink.seal()
            self._background.submit(lambda: self._timed(job, state, source_ts))
        else:
            self._timed(self.sink.commit, state, source_ts)
        self.uncommitted = self.chunk_rows = 0
        self._last_at = time.monotonic()

    def _waiting(self) -> None:
        self.stats.tick_at = time.monotonic()

    def _timed(self, commit: Callable[[], Any], state: Checkpoint, source_ts: int) -> None:
        started = time.monotonic()
        commit_then_save(commit, state, self.store, self._saved)
        stats, now = self.stats, time.time()
        stats.commits.observe(time.monotonic() - started)
        if source_ts != stats.committed_source_ts:  # a batch that carried changes (not an idle commit)
            stats.committed_freshness_s = max(0.0, now - source_ts)
        stats.committed_at, stats.committed_source_ts = now, source_ts
        stats.committed_processed = state.processed

    def check(self) -> None:
        """Raise the error of a background commit that failed."""
        if self._background is not None:
            self._background.check()

    def finish(self) -> None:
        """Wait for the commit in flight (raising its error) and go back to inline commits."""
        background, self._background = self._background, None
        if background is not None:
            background.wait()

    def abandon(self) -> None:
        """The run is failing: wait for the commit in flight, keeping the first error the run's."""
        with contextlib.suppress(Exception):
            self.finish()
