"""Binlog retention watched while a run goes: at its start and every ``source.retention_check_s``, how
long until the replica purges the oldest binlog the checkpoint needs (:mod:`gtidsnap.core.retention`),
on a connection of its own. Below ``source.retention_warn_s`` it is a WARNING in the log; each
measurement also goes into the checkpoint (``status`` shows it) and to /metrics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Self

from gtidsnap.core.errors import CheckpointError, GtidsnapError
from gtidsnap.core.model import TableId
from gtidsnap.core.retention import Headroom, with_snapshot
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.source.binlog.retention import replica_headroom
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.replica import Replica

log = logging.getLogger("gtidsnap.observe.retention")
TIMEOUT_S = 10.0  # connect and read timeouts of a measurement


class RetentionWatch:
    """A daemon thread; ``measured(headroom, line, low)`` is told each measurement."""

    def __init__(
        self,
        settings: ConnectionSettings,
        checkpoint: Path,
        warn_below_s: float,
        every_s: float,
        measured: Callable[[Headroom, str, bool], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``checkpoint``: the run's checkpoint file, read for the position it holds and the snapshots
        under way (their estimated time left is compared with the headroom)."""
        self.settings = replace(settings, connect_timeout=min(settings.connect_timeout, TIMEOUT_S))
        self.store, self.warn_below_s = CheckpointStore(checkpoint), warn_below_s
        self.every_s, self.measured, self.clock = every_s, measured, clock
        self.latest: Headroom | None = None
        self._read: tuple[float, int] | None = None  # (monotonic time, snapshot rows read) last measured
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gtidsnap-retention", daemon=True)
        self._failed = ""

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT_S * 2)

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            if self.measure(first) is not None:
                first = False
            self._stop.wait(self.every_s if not first else min(self.every_s, 5.0))

    def measure(self, first: bool = False) -> Headroom | None:
        """One measurement (None: no checkpoint yet, or the replica could not be read; said once)."""
        try:
            checkpoint = self.store.load()
        except CheckpointError:
            checkpoint = None  # being replaced as it was read: the next measurement will do
        if checkpoint is None:
            return None
        try:
            with Replica(self.settings, read_timeout=TIMEOUT_S) as replica:
                found = replica_headroom(replica, checkpoint.processed)
                left_s = self._snapshot_left_s(
                    replica, [(t.table, t.rows) for t in checkpoint.context.pending()]
                )
        except GtidsnapError as exc:
            if str(exc) != self._failed:
                log.warning("cannot measure the binlog retention headroom: %s", exc)
            self._failed = str(exc)
            return None
        self._failed = ""
        line, low = with_snapshot(*found.line(self.warn_below_s), found, left_s)
        if low:
            log.warning("binlog retention: %s", line)
        elif first:
            log.info("binlog retention: %s", line)
        self.latest = found
        self.measured(found, line, low)
        return found

    def _snapshot_left_s(self, replica: Replica, tables: Sequence[tuple[TableId, int]]) -> float | None:
        """The snapshots' time left: rows left (the server's estimates) over the rows/s read since the
        last measurement; None without a snapshot, or before a rate is known."""
        now, read = self.clock(), sum(rows for _, rows in tables)
        before, self._read = self._read, (now, read)
        if not tables or before is None or read <= before[1] or now <= before[0]:
            return None
        left = sum(max(0, (replica.estimated_rows(table) or 0) - rows) for table, rows in tables)
        return left / ((read - before[1]) / (now - before[0]))
