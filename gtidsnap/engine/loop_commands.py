"""The commands the engine's loop takes between transactions (:mod:`gtidsnap.core.commands`): snapshot
requests, stops, pauses, tuning, shutdown, and Kafka signals acted on once (the ledger keeps what became
of each with its offset). Kept apart from :mod:`gtidsnap.engine.loop`, whose thread alone runs them."""

from __future__ import annotations

import functools
import logging
import queue
from collections.abc import Callable, Iterable
from dataclasses import replace

from gtidsnap.core.commands import (
    Command,
    PauseSnapshots,
    ResumeSnapshots,
    SetChunkDelay,
    SetChunkSize,
    Shutdown,
    SignalReceived,
    StartSnapshot,
    StopSnapshot,
)
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.ports import ReplicaPort
from gtidsnap.core.records import Emitted
from gtidsnap.core.run_stats import RunStats
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.core.signal_ledger import SignalLedger
from gtidsnap.engine.committer import Commits
from gtidsnap.engine.loop_step import EngineSettings, take_commands
from gtidsnap.snapshot.planner import ChunkPlanner, Output
from gtidsnap.snapshot.request import checked_request

log = logging.getLogger("gtidsnap.engine.loop")


class LoopCommands:
    """What :class:`gtidsnap.engine.loop.Engine` does with a command; the state it changes is the
    engine's (declared here for the type checker)."""

    commands: queue.Queue[Command]
    replica: ReplicaPort
    schemas: SchemaCache
    captured: set[TableId]
    context: SnapshotContext
    settings: EngineSettings
    signals: SignalLedger
    stats: RunStats
    _stop: bool
    _chunks: ChunkPlanner | None
    _commits: Commits
    _catalog: Callable[[], list[TableId]]

    def _write(self, records: list[Emitted]) -> None:
        raise NotImplementedError

    def _emitted(self, outputs: Iterable[Output], records: list[Emitted] | None = None) -> list[Emitted]:
        raise NotImplementedError

    def _drain_commands(self) -> None:
        if not self.commands.queue:  # checked once per event: a lock-free look (len of a deque is atomic)
            return  # spares the lock and the raised queue.Empty, ~3% of streaming time when profiled
        self._catalog = functools.cache(self.replica.tables)  # read once a turn, not once a request
        for command in take_commands(self.commands):  # a flood waits for the next turns
            self._apply(command)

    def _apply(self, command: Command) -> None:
        if isinstance(command, SignalReceived):
            self._apply_signal(command)
            return
        if isinstance(command, StartSnapshot):
            for table, condition in checked_request(command, self._catalog, self.schemas).items():
                self.captured.add(table)
                self.context = self.context.enqueue([table], condition)
        elif isinstance(command, StopSnapshot):
            if self._chunks is not None:  # rows already streamed stay; the chunks in flight are dropped
                self._write(self._emitted(self._chunks.stop(command.tables)))
            self.context = self.context.stop(command.tables)
        elif isinstance(command, PauseSnapshots | ResumeSnapshots):
            self.context = replace(self.context, paused=isinstance(command, PauseSnapshots))
            if self._chunks is not None:
                self._chunks.paused()
        elif isinstance(command, SetChunkSize | SetChunkDelay):
            self.settings = self.settings.tuned(command)
        elif isinstance(command, Shutdown):
            self._stop = True
        log.info("command %s applied", command)

    def _apply_signal(self, signal: SignalReceived) -> None:
        """Act on a signal once; the ledger records what became of it with its offset."""
        recorded = self.signals.act_once(signal, self._apply, lambda: self.context)
        if recorded is None:
            return  # already consumed before a restart
        self.stats.signal_outcome(recorded.outcome)
        (log.warning if recorded.outcome.startswith("refused") else log.info)(
            "signal %s (%s) at offset %d: %s", signal.id, signal.kind, signal.offset, recorded.outcome
        )
        self._commits.uncommitted += 1  # checkpoint soon: the offset must be durable
