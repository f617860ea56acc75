"""The replica asked from outside the engine, every few seconds, on a connection of its own: how far it
has executed (so: how many transactions the checkpoint is behind, and the lag), the row estimates of
the tables being snapshotted (progress, ETA), and whether it answers at all (/readyz)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gtidsnap.core.gtid import GtidSet
from gtidsnap.core.model import TableId
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.replica import Replica

log = logging.getLogger("gtidsnap.observe.probe")
PROBE_TIMEOUT_S = 5.0  # a stopped server fails a probe within this (connect and each read)
SAMPLES_KEPT = 10_000  # probes kept while the checkpoint is behind them (~14 h at 5 s)


@dataclass(frozen=True)
class ProbeFacts:
    """The last probe's answers (``checked_at``: monotonic; ``error``: why it failed, None if it did not)."""

    checked_at: float | None = None
    error: str | None = "not probed yet"
    behind: int | None = None  # transactions executed by the replica that the checkpoint does not hold
    # The wall time of the newest probe whose executed set the checkpoint wholly holds: the replica was
    # there then, so the output is at most now - held_at behind it (None: no such probe kept).
    held_at: float | None = None
    estimates: Mapping[TableId, int] = field(default_factory=dict)
    stream_seen_at: float = field(default_factory=time.monotonic)  # the stream's events last moved


class ReplicaProbe:
    """A daemon thread probing the replica every ``interval_s``; :attr:`facts` is always the latest.
    ``position``: the checkpoint's processed set (None before the first); ``tables``: whose row
    estimates to read (the tables being snapshotted)."""

    def __init__(
        self,
        settings: ConnectionSettings,
        interval_s: float,
        position: Callable[[], GtidSet | None],
        tables: Callable[[], Iterable[TableId]],
        events: Callable[[], int] = lambda: 0,
    ) -> None:
        """``events``: the stream's events so far (heartbeats included); each probe notes whether they
        moved, so /readyz can tell a stream that delivers from one that does not, at no cost a row."""
        self.settings = replace(settings, connect_timeout=min(settings.connect_timeout, PROBE_TIMEOUT_S))
        self.interval_s, self.position, self.tables, self.events = interval_s, position, tables, events
        self._events = -1
        self._samples: deque[tuple[float, GtidSet]] = deque(maxlen=SAMPLES_KEPT)  # (wall time, executed)
        self.facts = ProbeFacts()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gtidsnap-probe", daemon=True)
        self._replica: Replica | None = None
        self.failures = 0  # probes that failed (/metrics: gtidsnap_errors_total{kind="replica_probe"})

    def start(self) -> ReplicaProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * PROBE_TIMEOUT_S)
        self._close()

    def probe(self) -> ProbeFacts:
        """One probe now (the thread calls it; tests may)."""
        events, seen_at = self.events(), self.facts.stream_seen_at
        if events != self._events:
            self._events, seen_at = events, time.monotonic()
            self.facts = replace(self.facts, stream_seen_at=seen_at)
        try:
            if self._replica is None:
                self._replica = Replica(self.settings, read_timeout=PROBE_TIMEOUT_S)
            executed = self._replica.executed()
            estimates = dict(self.facts.estimates)  # read once a table: it is an estimate anyway
            for table in (t for t in self.tables() if t not in estimates):
                rows = self._replica.estimated_rows(table)
                if rows is not None:
                    estimates[table] = rows
            behind, held_at = self._held(executed)
        except Exception as exc:  # any failure is the answer: the replica is not reachable
            return self._failed(exc)
        self.facts = ProbeFacts(time.monotonic(), None, behind, held_at, estimates, seen_at)
        return self.facts

    def _held(self, executed: GtidSet) -> tuple[int | None, float | None]:
        """How many transactions the checkpoint lacks, and since when the replica has been ahead of it
        (from the probes kept: only those not yet held, and the newest held)."""
        now, position = time.time(), self.position()
        self._samples.append((now, executed))
        if position is None or type(position) is not type(executed):
            return None, None
        behind = (executed - position).count()
        held = next(
            (i for i in range(len(self._samples) - 1, -1, -1) if self._samples[i][1] <= position), None
        )
        if held is None:
            return behind, None
        for _ in range(held):
            self._samples.popleft()
        return behind, self._samples[0][0] if behind else now

    def _failed(self, exc: Exception) -> ProbeFacts:
        self._close()
        self.failures += 1
        text = " ".join(str(exc).split())[:300] or type(exc).__name__
        if self.facts.error is None or self.facts.checked_at is None:  # said once per outage
            log.warning("the replica probe failed: %s", text)
        self.facts = replace(self.facts, checked_at=time.monotonic(), error=text)
        return self.facts

    def _run(self) -> None:
        while not self._stop.is_set():
            self.probe()
            self._stop.wait(self.interval_s)

    def _close(self) -> None:
        replica, self._replica = self._replica, None
        if replica is not None:
            with contextlib.suppress(Exception):  # closing a dead connection: nothing to tell
                replica.close()
