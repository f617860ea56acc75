"""Binlog retention watched while a run goes: at its start and every ``source.retention_check_s``, how
long until the replica purges the oldest binlog the checkpoint needs (:mod:`gtidsnap.core.retention`),
on a connection of its own. Below ``source.retention_warn_s`` it is a WARNING in the log; each
measurement also goes into the checkpoint (``status`` shows it) and to /metrics."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Self

from gtidsnap.core.errors import GtidsnapError
from gtidsnap.core.gtid import GtidSet
from gtidsnap.core.retention import Headroom
from gtidsnap.source.binlog.retention import replica_headroom
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.replica import Replica

log = logging.getLogger("gtidsnap.observe.retention")
TIMEOUT_S = 10.0  # connect and read timeouts of a measurement


class RetentionWatch:
    """A daemon thread; ``position``: the checkpoint's processed set (None before the first);
    ``measured(headroom, line, low)`` is told each measurement."""

    def __init__(
        self,
        settings: ConnectionSettings,
        position: Callable[[], GtidSet | None],
        warn_below_s: float,
        every_s: float,
        measured: Callable[[Headroom, str, bool], None],
    ) -> None:
        self.settings = replace(settings, connect_timeout=min(settings.connect_timeout, TIMEOUT_S))
        self.position, self.warn_below_s, self.every_s, self.measured = (
            position,
            warn_below_s,
            every_s,
            measured,
        )
        self.latest: Headroom | None = None
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
        processed = self.position()
        if processed is None:
            return None
        try:
            with Replica(self.settings, read_timeout=TIMEOUT_S) as replica:
                found = replica_headroom(replica, processed)
        except GtidsnapError as exc:
            if str(exc) != self._failed:
                log.warning("cannot measure the binlog retention headroom: %s", exc)
            self._failed = str(exc)
            return None
        self._failed = ""
        line, low = found.line(self.warn_below_s)
        if low:
            log.warning("binlog retention: %s", line)
        elif first:
            log.info("binlog retention: %s", line)
        self.latest = found
        self.measured(found, line, low)
        return found
