"""Waiting until a new read is sure to see what the stream emitted: a chunk's ``lw`` before its SELECT.

Why wait: a server hands a transaction to binlog readers before a new read can see it. MySQL sends it
to the binlog once the binlog is synced, then commits it in the engine, then adds its GTID to
``gtid_executed``; MariaDB does the same and adds the GTID to ``gtid_binlog_pos`` when it writes the
binlog, before the engine commit. A chunk selected in that gap misses a change the stream already
emitted, and its stale row would go out after that change: the row would go back in time. Measured on
the test servers under a one-row writer: the stream ran ahead of what a SELECT saw for 6 of 30,000
changes (MariaDB); a chunk's ``lw`` missed a transaction the stream had processed once in 40
integration runs (MySQL, the window refused it).

So before a chunk's SELECT, the replica's *visible* set (transactions a new read is sure to see:
``gtid_executed`` on MySQL, which grows after the engine commit; ``gtid_current_pos`` on a MariaDB
replica, which grows after its applier commits) must cover every transaction the stream processed.
It does within microseconds; this polls with a growing pause.

A chunk's window opens at the stream's position itself, its ``lw`` (no read on the engine's thread;
:mod:`gtidsnap.snapshot.windows` is the algorithm): the reader only waits here
(:meth:`LowWatermark.ensure_visible`) until that position is visible, and the visible set it reads
with each chunk's high watermark answers the next chunk's wait without a round trip unless the stream
moved on past it. :meth:`LowWatermark.read` waits the same way and returns the executed set (the
snapshot's greatest key is read after it, on the planning thread's connection).

A server whose visible set never covers the stream (a MariaDB that is not a replica and whose binlog
holds other servers' GTIDs, say) would make every chunk wait: after ``timeout_s`` once, the run reads
``lw`` without waiting, with a warning that says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from gtidsnap.core.gtid import GtidSet
from gtidsnap.core.ports import ReplicaPort

log = logging.getLogger(__name__)

FIRST_PAUSE_S = 0.0005
LONGEST_PAUSE_S = 0.05
T = TypeVar("T")


class LowWatermark:
    """Reads ``lw`` for the next chunk, after waiting until the stream's transactions are visible; or,
    for a chunk reader whose window opened at the stream's position, only waits (:meth:`ensure_visible`)."""

    def __init__(
        self,
        replica: ReplicaPort,
        timeout_s: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replica = replica
        self.timeout_s = timeout_s
        self.sleep = sleep
        self.clock = clock
        self.waits = 0  # reads that had to wait (for the tests and the curious)
        self.gave_up: str | None = None  # the warning, once the visible set failed to cover the stream
        self._visible: GtidSet | None = None  # the newest visible set read (:meth:`saw`)

    def read(self, processed: GtidSet) -> GtidSet:
        """The executed set, once every transaction in ``processed`` is visible to a new read."""
        executed, _ = self._wait_visible(processed)
        return _covering(executed, processed)

    def ensure_visible(self, processed: GtidSet) -> None:
        """Return once every transaction in ``processed`` is visible to a new read (or waiting was given
        up). A visible set read before (:meth:`saw`, say with a chunk's high watermark) that covers it
        answers at once, with no round trip: visible sets only grow. Once waiting was given up, it
        reads nothing (there is nothing to wait for)."""
        if self.gave_up is None and (self._visible is None or not processed <= self._visible):
            self._wait_visible(processed)

    def saw(self, visible: GtidSet) -> None:
        """``visible`` was read (with a chunk's high watermark): later waits start from it."""
        self._visible = visible

    def _wait_visible(self, processed: GtidSet) -> tuple[GtidSet, GtidSet]:
        """The executed and visible sets, read until the visible one covers ``processed`` (for up to
        ``timeout_s``, then never waiting again, with a warning)."""
        if self.gave_up is not None:
            executed, visible = self.replica.executed_and_visible()
            self._visible = visible
            return executed, visible
        (executed, visible), reads = _poll(
            self.replica.executed_and_visible,
            lambda sets: processed <= sets[1],
            self.timeout_s,
            self.sleep,
            self.clock,
        )
        self.waits += reads > 1
        self._visible = visible
        if not processed <= visible:
            self.gave_up = (
                f"the replica's visible set {visible} has not covered transactions the stream processed "
                f"({processed - visible}) in {self.timeout_s:.0f} s: chunks are read from now on without "
                "waiting for them, so a chunk read in the instant a transaction commits may miss it (is "
                f"{self.replica.describe()} a replica applying its source?)"
            )
            log.warning("%s", self.gave_up)
        return executed, visible


def _covering(executed: GtidSet, processed: GtidSet) -> GtidSet:
    """``executed``, with what the stream processed if it lacks any (only once waiting was given up): a
    window opens on a set that holds everything the stream processed."""
    return executed if processed <= executed else executed | processed


def applied_covering(
    read: Callable[[], GtidSet],
    covers: Callable[[GtidSet], bool],
    timeout_s: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> GtidSet:
    """What ``read`` returns (the replica's applied set), read again for up to ``timeout_s`` until it
    ``covers`` what a checkpoint processed: a run that stopped right after streaming a transaction may
    restart before the replica lists it (MySQL adds a GTID to its executed set after the binlog readers
    got it). Returns the last read whether it covers or not: the caller says what is wrong."""
    applied, _ = _poll(read, covers, timeout_s, sleep, clock)
    return applied


def _poll(
    read: Callable[[], T],
    done: Callable[[T], bool],
    timeout_s: float,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> tuple[T, int]:
    """``read()`` until ``done`` or ``timeout_s`` passed, pausing 0.5 ms doubling to 50 ms; the last
    value read and how many reads it took."""
    value, reads = read(), 1
    deadline = clock() + timeout_s
    pause = FIRST_PAUSE_S
    while not done(value) and clock() < deadline:
        sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE_S)
        value, reads = read(), reads + 1
    return value, reads
