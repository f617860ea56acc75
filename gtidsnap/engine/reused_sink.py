"""One sink kept across the engines of one run, opened again ahead of time after a replica is lost.

When the replica in use is lost, the run's engine ends and the next one starts from the checkpoint on
another replica (:func:`gtidsnap.runner.run_engine`). The output does not depend on the replica, and
the checkpoint cannot move while no engine runs, so the sink is opened again at the checkpoint's
position on a thread while the next replica is sought (``source.retry_for_s``, then the others): a
Delta output's reopening (recovery, the mirrors resumed: seconds) no longer adds to the switch. The
next engine's ``open`` at that position then only waits for it; at any other position, or if opening
failed, it opens again itself.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from gtidsnap.core.ports import Sink

log = logging.getLogger(__name__)


class ReusedSink:
    """Wraps the run's sink: everything but :meth:`open` and :meth:`close` goes to it, so the engine's
    checks of what a sink can do (its protocols) see the wrapped sink's."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._opening: threading.Thread | None = None
        self._opened_at: Any = None
        self._error: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sink, name)

    def preopen(self, position: Any) -> None:
        """Start opening the sink at ``position`` (the checkpoint's) on a thread."""
        self.settle()
        self._opened_at, self._error = position, None  # (a position of None is a first run's)

        def opening() -> None:
            try:
                self.sink.open(position)
            except BaseException as exc:  # the next engine opens again itself, and says what fails
                self._error = exc

        self._opening = threading.Thread(target=opening, name="gtidsnap-sink-reopen", daemon=True)
        self._opening.start()

    def open(self, committed: Any) -> None:
        if self._opening is not None:
            self._opening.join()
            self._opening = None
            opened_at, self._opened_at = self._opened_at, None
            if self._error is None and committed == opened_at:
                return
            if self._error is not None:
                log.warning("opening the output ahead failed (%s); opening it again", self._error)
            else:
                self.sink.close()
        self.sink.open(committed)

    def close(self) -> None:
        self.settle()
        self.sink.close()

    def discard(self) -> None:
        """Close what was opened ahead and never used (the run ends without a next engine)."""
        if self._opened_at is not None:
            self.close()

    def settle(self) -> None:
        """Wait for an opening under way (nothing else may touch the sink meanwhile)."""
        if self._opening is not None:
            self._opening.join()
            self._opening = None
