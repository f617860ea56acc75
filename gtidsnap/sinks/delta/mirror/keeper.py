"""Who updates the mirrors, and when: from what the batches hand over, in the background once a batch's
checkpoint is saved, or inline in the batch (the rule of one update: :mod:`.mirror.rule`).

Background (the default of a run with a changelog): a batch only appends to the changelogs and stages
its snapshot rows, both durable before its checkpoint; what it hands the mirrors (changes to merge,
staged files to append) is taken in once that checkpoint is saved (:meth:`MirrorKeeper.checkpointed`),
and a thread of its own, on a Spark session of its own, updates each mirror when due. So a mirror's
long APPEND or MERGE never holds back the batches (the changelog stays fresh, the snapshot reads on),
and a mirror only ever takes checkpointed data: its commits are never undone (they carry
``gtidsnap_mirror`` with the checkpointed batch, not a batch of their own), and a restart finds in
them how far the mirror got (its watermarks) and takes the rest again from the changelog and the
staged files the checkpoint names. Inline (no changelog, the only durable record of waiting changes;
``sink.merge_interval_s = 0``, a mirror current at every checkpoint; or a sink used without an engine
that reports its checkpoints): the batch updates the mirrors itself, its commits tagged and undone
with it.

When a mirror is due: its waiting changes every ``sink.merge_interval_s`` (or ``sink.merge_rows``);
its staged snapshot rows once ``sink.snapshot_rows`` wait or none came for a while (the table's
snapshot is done); while they still come, the table's MERGEs wait too (up to ``sink.merge_rows``), so
the changes of a table being snapshotted are folded into its staged rows instead of rewriting the
mirror's files; and everything at the end of a run.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.core.run_stats import DurationHistogram
from gtidsnap.sinks.delta import staging
from gtidsnap.sinks.delta.catch_up import has_streamed_rows
from gtidsnap.sinks.delta.change_rows import plan_schema
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.layout import mirror_path
from gtidsnap.sinks.delta.mirror.rule import MergePolicy
from gtidsnap.sinks.delta.mirror.update import MirrorState, MirrorWriter
from gtidsnap.sinks.delta.tables import Shape
from gtidsnap.sinks.delta.util import short_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

IDLE_S = 0.25  # how often the background thread looks for due work when nothing wakes it
POOL = "gtidsnap-mirrors"  # the Spark scheduler pool of the mirrors' jobs


@dataclass
class Handover:
    """What one batch hands the mirror of one table: its shape and column plan, its changes (mirror
    rows) and its staged snapshot files."""

    shape: Shape
    plan: ColumnPlan
    waiting: list[pa.Table] = field(default_factory=list)
    staged: list[staging.StagedFile] = field(default_factory=list)
    created: bool = False  # the mirror was created empty in this run


@dataclass
class MirrorEntry:
    """A table's mirror as the keeper keeps it: its state, the shape and plan it is written with, and
    the changelog range a restart put back to wait (merged at its next update)."""

    state: MirrorState
    shape: Shape
    plan: ColumnPlan
    catch_up: tuple[int | None, int] | None = None
    last_staged_at: float | None = None  # when its newest staged file was taken in
    staged_gap_s: float = 0.0  # the time between its last two staged files

    def __copy__(self) -> MirrorEntry:
        state, at, gap = copy.copy(self.state), self.last_staged_at, self.staged_gap_s
        return MirrorEntry(state, self.shape, self.plan, self.catch_up, at, gap)


class MirrorKeeper:
    """Keeps the mirrors of one sink (see the module docstring). In the background, only its thread
    touches the entries' states; the batches' handovers and the checkpoints reach it under its lock."""

    def __init__(
        self, spark: SparkSession, writer: MirrorWriter, root: str, settings: SinkSettings, background: bool
    ) -> None:
        self.spark, self.writer, self.root, self.settings = spark, writer, root, settings
        self.background = background
        interval = settings.merge_interval_s if settings.changelog else 0.0
        self.policy = MergePolicy(interval_s=interval, max_rows=settings.merge_rows)
        # no staged file this long: the snapshot is done (its batches come every snapshot_batch_ms)
        self.quiet_s = max(2.0, 3 * settings.batch_ms / 1000, 1.5 * settings.snapshot_batch_ms / 1000)
        self._entries: dict[TableId, MirrorEntry] = {}
        self._handed: dict[int, dict[TableId, Handover]] = {}  # by batch, until its checkpoint is saved
        self.reading: frozenset[TableId] = frozenset()  # tables a snapshot will still read (the engine's)
        self._checkpointed = 0  # the newest batch whose checkpoint is saved
        self._in_flight: list[staging.StagedFile] = []  # staged files of the update running
        self._applied: list[staging.StagedFile] = []  # in the mirror; not yet taken by a position
        self._draining = False
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._error: BaseException | None = None
        self.merges = DurationHistogram()  # how long each MERGE took (/metrics)

    def mirror_facts(self) -> dict[TableId, tuple[int, float | None]]:
        """Each mirror's changes waiting for it and since when (monotonic), for /metrics: read without
        the lock, so a scrape never holds up a write (at worst it reads a number one update old)."""
        try:
            return {t: (e.state.waiting_rows, e.state.waiting_since) for t, e in list(self._entries.items())}
        except RuntimeError:  # changed while read: the next scrape reads it
            return {}

    # ------------------------------------------------------------------ from the sink
    def resume(self, table: TableId, entry: MirrorEntry, batch: int) -> None:
        """What a restart found waiting for ``table``'s mirror: checkpointed data, the mirror's at once."""
        with self._lock:
            self._entries[table] = entry
            self._checkpointed = max(self._checkpointed, batch)

    def hand_over(self, batch: int, handovers: dict[TableId, Handover]) -> None:
        """What batch ``batch`` hands the mirrors: theirs once its checkpoint is saved (inline: now,
        the batch then updates the mirrors itself, :meth:`update_due`)."""
        with self._lock:
            self._handed[batch] = handovers
            if not self.background:
                self._take_in(batch)

    def checkpointed(self, batch: int) -> None:
        """Batch ``batch``'s checkpoint is saved: what it and the batches before it handed over is the
        mirrors' now."""
        with self._lock:
            self._checkpointed = max(self._checkpointed, batch)
            self._lock.notify_all()

    def drain(self) -> None:
        """The run ends: inline, the next batch brings every mirror up to date. (In the background,
        :meth:`finish` does, once the last batch is taken in: updating before would MERGE changes
        whose keys the last staged rows hold, rewriting the mirror instead of folding them.)"""
        if not self.background:
            with self._lock:
                self._draining = True

    def position_files(self) -> tuple[list[staging.StagedFile], list[staging.StagedFile]]:
        """For a checkpoint: the staged files no mirror holds for sure yet (it names them), and those
        appended since the last call (deleted once that checkpoint is saved)."""
        with self._lock:
            pending = [f for e in self._entries.values() for f in e.state.staged]
            pending += [f for handed in self._handed.values() for h in handed.values() for f in h.staged]
            pending += [f for f in self._in_flight if f not in pending]
            applied, self._applied = self._applied, []
            return pending, applied

    def due(self) -> bool:
        """Inline: is an update due (so a batch runs even with nothing new)?"""
        return not self.background and any(any(self._due(e)) for e in self._entries.values())

    def check(self) -> None:
        """Raise the error of a failed background update."""
        if self._error is not None:
            raise SinkError(f"updating a mirror failed: {short_error(self._error)}") from self._error

    def saved(self) -> tuple[dict[TableId, MirrorEntry], dict[int, dict[TableId, Handover]]]:
        """Inline: the state before a batch, put back with :meth:`restore` if the batch fails."""
        with self._lock:
            return {t: copy.copy(e) for t, e in self._entries.items()}, dict(self._handed)

    def restore(self, saved: tuple[dict[TableId, MirrorEntry], dict[int, dict[TableId, Handover]]]) -> None:
        with self._lock:
            self._entries, self._handed = dict(saved[0]), dict(saved[1])
            self._in_flight = []

    # ------------------------------------------------------------------ the background thread
    def start(self) -> None:
        if self.background and self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name="gtidsnap-mirrors", daemon=True)
            self._thread.start()

    def finish(self, wait: bool) -> None:
        """Stop the thread; with ``wait``, once every mirror holds what was taken in (the run drains),
        raising the error of a failed update. Without, an update under way ends first."""
        thread = self._thread
        if thread is None:
            return
        with self._lock:
            if wait:
                self._draining = True
                self._lock.notify_all()
                while self._error is None and self._work_left():
                    self._lock.wait(IDLE_S)
            self._stop = True
            self._lock.notify_all()
        thread.join()
        self._thread = None
        if wait:
            self.check()

    def _run(self) -> None:
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", POOL)
        while True:
            with self._lock:
                if self._stop:
                    return
                self._take_in(self._checkpointed)
                batch = self._checkpointed
            try:
                worked = self.update_due(batch)
            except BaseException as exc:  # the engine raises it on its thread (check)
                log.error("updating a mirror failed: %s", short_error(exc))
                with self._lock:
                    self._error = exc
                    self._lock.notify_all()
                return
            with self._lock:
                self._lock.notify_all()
                if not worked and not self._stop:
                    self._lock.wait(IDLE_S)

    def _work_left(self) -> bool:
        taken = any(b <= self._checkpointed for b in self._handed)
        return taken or any(e.state.waiting or e.state.staged for e in self._entries.values())

    def _take_in(self, batch: int) -> None:
        """The handovers of the batches up to ``batch`` join the entries (under the lock)."""
        for number in sorted(b for b in self._handed if b <= batch):
            for table, handed in self._handed.pop(number).items():
                entry = self._entries.get(table)
                if entry is None:
                    entry = self._entries[table] = MirrorEntry(MirrorState(), handed.shape, handed.plan)
                    if handed.created:  # it holds only what this run writes: every key it merges is held
                        entry.state.held_known = True
                        entry.state.held = _no_keys(handed)
                        entry.state.held_is_all = True  # until staged rows go in
                entry.shape, entry.plan = handed.shape, handed.plan
                for rows in handed.waiting:
                    entry.state.wait(rows)
                if entry.state.waiting_rows >= self.settings.merge_rows:  # a MERGE is due unless few keys
                    entry.state.compact(entry.shape.schema.key)
                if handed.staged:
                    entry.state.staged.extend(handed.staged)
                    now = time.monotonic()
                    if entry.last_staged_at is not None:
                        entry.staged_gap_s = now - entry.last_staged_at
                    entry.last_staged_at = now

    # ------------------------------------------------------------------ updates
    def update_due(self, batch: int) -> bool:
        """Update every mirror that is due, as of ``batch``; did any?"""
        worked = False
        for table in sorted(self._entries):
            entry = self._entries[table]
            merge, staged = self._due(entry)
            state = entry.state
            append = state.unseen and state.held is not None and state.held_is_all and not state.staged
            append = append and table not in self.reading  # its snapshot's chunks may read those keys
            if merge or staged or append:
                self._update(table, entry, batch, merge, append)
                worked = True
        return worked

    def _due(self, entry: MirrorEntry) -> tuple[bool, bool]:
        """Is a MERGE of the waiting changes due, and an APPEND of the staged rows?

        While a table's snapshot rows are still coming, its mirror is only appended to, in pieces of
        ``snapshot_rows`` (each folding the changes then waiting for its keys): a MERGE meanwhile would
        read the mirror and rewrite what it touches while the snapshot needs the CPU, and every change
        waiting for the mirror after the snapshot is merged at once then (unless ``merge_rows`` wait:
        they are held in memory)."""
        state, now = entry.state, time.monotonic()
        eager = self._draining or entry.catch_up is not None or self.policy.interval_s <= 0
        merge = bool(state.waiting) and (
            eager or self.policy.due(state.waiting_rows, state.waiting_since, now)
        )
        # still coming: the next file is not late yet (slow batches space them out)
        quiet = max(self.quiet_s, 2 * entry.staged_gap_s)
        coming = entry.last_staged_at is not None and now - entry.last_staged_at < quiet
        if coming and not eager:
            merge = bool(state.waiting) and state.waiting_rows >= self.settings.merge_rows
        if not state.staged:
            return merge, False
        return merge, eager or merge or not coming or state.staged_rows >= self.settings.snapshot_rows

    def _update(self, table: TableId, entry: MirrorEntry, batch: int, merge: bool, append: bool) -> None:
        mirror = mirror_path(self.root, table)
        state = entry.state
        log.debug(
            "%s: update of %d staged rows, %d waiting changes", mirror, state.staged_rows, state.waiting_rows
        )
        with self._lock:
            self._in_flight = list(state.staged)
        try:
            if state.staged and not state.held_known:  # decided once a run, at its first staged rows
                state.held_known = True
                if has_streamed_rows(self.spark, mirror):
                    log.info(
                        "%s: its mirror holds streamed rows from before: its snapshot rows are merged", table
                    )
                    state.held = None
                else:
                    state.held = _no_keys(entry)
            catch_up, entry.catch_up = entry.catch_up, None
            if catch_up is not None:
                crash_point("delta-before-catch-up")
            started = time.monotonic()
            done = self.writer.update(
                mirror, entry.shape.schema.key, entry.plan, state, batch, merge, self.background, append
            )
            if done.merged:
                self.merges.observe(time.monotonic() - started)
            if catch_up is not None:
                crash_point("delta-after-catch-up")
                log.info("%s: caught up with its changelog from _seq %s to %d", mirror, *catch_up)
        except SinkError:  # its staged files stay in flight, so a checkpoint still names them
            raise
        except Exception as exc:
            what = (
                f"with what batches up to {batch} gave"
                if self.background
                else f"for batch {batch} of {table}"
            )
            raise SinkError(f"updating the mirror {mirror} {what} failed: {short_error(exc)}") from exc
        with self._lock:
            self._applied.extend(state.applied)
            state.applied = []
            self._in_flight = []
        if done.appended or done.merged:
            log.info(
                "%s: %d rows appended (staged, and changes of keys it cannot hold), %d merged",
                mirror,
                done.appended,
                done.merged,
            )


def _no_keys(of: Handover | MirrorEntry) -> pa.Table:
    return plan_schema(of.plan, False).empty_table().select(list(of.shape.schema.key))


__all__ = ["Handover", "MirrorEntry", "MirrorKeeper"]
