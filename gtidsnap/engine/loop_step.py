"""What the engine's loop does next, chosen by pure functions of plain facts.

The loop (:mod:`gtidsnap.engine.loop`) only gathers the facts (is a window open, is a transaction half
read, are snapshots waiting, how long until the next chunk may go) and carries out the step; the
choice itself lives here so it can be tested without a replica, a stream or a clock.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, replace
from enum import Enum

from gtidsnap.config.settings import DEFAULTS
from gtidsnap.core.commands import Command, SetChunkDelay, SetChunkSize
from gtidsnap.core.errors import ConfigError

# A chunk due sooner than this is waited for with a sleep; a later one lets the stream run meanwhile
# (an idle stream's read returns only at the next heartbeat, which would cost a heartbeat per chunk).
SHORT_CHUNK_WAIT_S = 0.05
# Commands (signals) a loop turn takes at most: a flood of them waits for the next turns, the stream and
# the commits going on between (10,000 signals drained in one turn stalled the stream ~15 s).
COMMANDS_PER_TURN = 50


@dataclass(frozen=True)
class EngineSettings:
    """The loop's tuning; chunk size and delay may change at run time (signals, CLI)."""

    chunk_size: int = DEFAULTS["snapshot"]["chunk_size"]
    chunk_delay_s: float = DEFAULTS["snapshot"]["chunk_delay_ms"] / 1000
    checkpoint_interval_s: float = DEFAULTS["checkpoint"]["interval_s"]
    batch_rows: int = DEFAULTS["sink"]["batch_rows"]  # records per sink commit
    snapshot_interval_s: float | None = None  # between commits while a snapshot is read (None: the same)
    snapshot_batch_rows: int | None = None  # rows of read chunks per commit (None: counted as records)
    compiled_reads: bool = DEFAULTS["snapshot"]["compiled_reads"]  # chunks into Arrow by connectorx

    def tuned(self, command: SetChunkSize | SetChunkDelay) -> EngineSettings:
        if isinstance(command, SetChunkDelay):
            return replace(self, chunk_delay_s=max(0.0, command.seconds))
        if command.rows < 1:
            raise ConfigError(f"chunk size must be at least 1, got {command.rows}")
        return replace(self, chunk_size=command.rows)


class Step(Enum):
    TAKE_CHUNK = "take the next chunk (low watermark, SELECT, high watermark)"
    SLEEP = "sleep until the next chunk is due"
    CHECK_CAUGHT_UP = "read the replica's executed set once and stop when the stream has reached it"
    READ_STREAM = "read the next binlog event"


@dataclass(frozen=True)
class LoopFacts:
    """What the loop knows at the top of one turn."""

    between_transactions: bool  # no chunk window open and no transaction half read
    snapshots_waiting: bool  # a table's snapshot is pending and snapshots are not paused
    chunk_wait_s: float  # seconds until the next chunk may be taken (<= 0: now)
    until_caught_up: bool  # the run ends once snapshots are done and the stream caught up


def next_step(facts: LoopFacts) -> Step:
    """A chunk is taken only between transactions (the window must open at a transaction boundary);
    a short wait for it is slept, a long one is spent reading the stream."""
    if facts.between_transactions and facts.snapshots_waiting:
        if facts.chunk_wait_s <= 0:
            return Step.TAKE_CHUNK
        if facts.chunk_wait_s <= SHORT_CHUNK_WAIT_S:
            return Step.SLEEP
    if facts.until_caught_up and facts.between_transactions and not facts.snapshots_waiting:
        return Step.CHECK_CAUGHT_UP
    return Step.READ_STREAM


def commit_due(
    uncommitted: int, batch_rows: int, committer_busy: bool, since_commit_s: float, interval_s: float
) -> bool:
    """A batch of ``batch_rows`` commits at once (with a commit in flight the loop then waits for it,
    so memory stays bounded by ``batch_rows``); otherwise the next batch grows while the previous one
    commits, and a commit is due every ``interval_s``."""
    if uncommitted >= batch_rows:
        return True
    if committer_busy:
        return False
    return since_commit_s >= interval_s


def take_commands(commands: queue.Queue[Command], most: int = COMMANDS_PER_TURN) -> list[Command]:
    """Up to ``most`` of the commands waiting, oldest first, without blocking."""
    taken: list[Command] = []
    while len(taken) < most:
        try:
            taken.append(commands.get_nowait())
        except queue.Empty:
            break
    return taken
