"""One sink kept across the engines of one run, opened again ahead of time after a replica is lost.

When the replica in use is lost, the run's engine ends and the next one starts from the checkpoint on
another replica (:func:`gtidsnap.run.failover.run_engine`). The output does not depend on the replica, and
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

from gtidsnap.core.ports import CutCheckingSink, Sink

log = logging.getLogger(__name__)


class ReusedSink:
    """Wraps the run's sink: everything but :meth:`open` and :meth:`close` goes to it, so the engine's
    checks of what a sink can do (its protocols) see the wrapped sink's."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self._opening: threading.Thread | None = None
        self._opened_at: Any = None
        self._error: BaseException | None = None
        self._mismatch: str | None = None  # the output opened ahead did not match the checkpoint

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sink, name)

    def preopen(self, position: Any, next_seq: int | None = None) -> None:
        """Start opening the sink at ``position`` (the checkpoint's) on a thread; with ``next_seq`` (the
        checkpoint's), once the output is found to match it (:class:`CutCheckingSink`)."""
        self.settle()
        self._opened_at, self._error, self._mismatch = (position, next_seq), None, None

        def opening() -> None:
            try:
                self._mismatch = self._open(position, next_seq)
            except BaseException as exc:  # the next engine opens again itself, and says what fails
                self._error = exc

        self._opening = threading.Thread(target=opening, name="gtidsnap-sink-reopen", daemon=True)
        self._opening.start()

    def open(self, committed: Any) -> None:
        self._reopen(committed, None)

    def open_checked(self, committed: Any, next_seq: int) -> str | None:
        return self._reopen(committed, next_seq)

    def _reopen(self, committed: Any, next_seq: int | None) -> str | None:
        """Open as asked: what was opened ahead at the same place is used as it is (or its mismatch
        said again: nothing was touched), anything else is closed and opened again."""
        if self._opening is not None:
            self._opening.join()
            self._opening = None
            opened_at, self._opened_at = self._opened_at, None
            if self._error is None and opened_at == (committed, next_seq):
                return self._mismatch
            if self._error is not None:
                log.warning("opening the output ahead failed (%s); opening it again", self._error)
            elif self._mismatch is None:
                self.sink.close()
        return self._open(committed, next_seq)

    def _open(self, committed: Any, next_seq: int | None) -> str | None:
        if next_seq is not None and isinstance(self.sink, CutCheckingSink):
            return self.sink.open_checked(committed, next_seq)
        self.sink.open(committed)
        return None

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
