"""The queries that plan a snapshot (its greatest key, where its chunks end), answered off the engine's
thread.

Why: both run the snapshot's filter over the table (``SELECT MAX(key) ... WHERE filter``, the chunk-ends
query), so a slow filter, allowed by every check (a backtracking ``REGEXP``, say), takes up to
``source.statement_timeout_s``. On the engine's thread that was a pause of the stream as long, once a
snapshot and once per ``ENDS_AT_ONCE`` chunks, for every reader setting. Here one daemon thread with a
connection of its own runs them; the planner asks on each loop turn and gets the answer or
:data:`PENDING`, and the loop reads the stream meanwhile.

A question is the query's own arguments: asked again with the same ones, it is the same question; a
different question replaces the one asked before (its answer, when it comes, is dropped: the snapshot
was stopped or its shape changed). The thread answers in order, so a slow abandoned query delays the
next answer, never the stream. :class:`InlinePlanningQueries` answers on the caller's thread (unit
tests with a fake replica, which answers at once).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Final, TypeVar

from gtidsnap.core.ports import ReplicaPort

log = logging.getLogger(__name__)

T = TypeVar("T")


class Pending:
    """The type of :data:`PENDING`."""

    def __repr__(self) -> str:
        return "PENDING"


PENDING: Final = Pending()
"""What :meth:`PlanningQueries.answer` gives while the query runs."""

Query = Callable[[ReplicaPort], Any]


class PlanningQueries:
    """One thread, one connection (made by ``connect`` on the thread, on the first question)."""

    def __init__(self, connect: Callable[[], ReplicaPort]) -> None:
        self._connect = connect
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Query] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._asked: tuple[Hashable, Future[Any]] | None = None

    def answer(self, question: Hashable, query: Callable[[ReplicaPort], T]) -> T | Pending:
        """``query``'s result for ``question`` once the thread has it (its error raised here, once),
        else :data:`PENDING`; the first call with a new question hands ``query`` to the thread."""
        if self._asked is not None and self._asked[0] == question:
            future = self._asked[1]
            if not future.done():
                return PENDING
            self._asked = None
            return future.result()  # type: ignore[no-any-return]
        self.forget()  # a question asked before and not answered: its answer is not wanted any more
        asked: Future[Any] = Future()
        self._asked = (question, asked)
        self._start()
        self._jobs.put((asked, query))
        return PENDING

    @property
    def waiting(self) -> bool:
        """Is a question asked and not answered yet?"""
        return self._asked is not None and not self._asked[1].done()

    def forget(self) -> None:
        """Drop the question asked (its answer, when it comes, is not used)."""
        if self._asked is not None:
            self._asked[1].cancel()  # not run at all, if the thread has not taken it yet
            self._asked = None

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gtidsnap-planning", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        replica: ReplicaPort | None = None
        try:
            while (job := self._jobs.get()) is not None:
                future, query = job
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    if replica is None:
                        replica = self._connect()
                    future.set_result(query(replica))
                except BaseException as exc:  # raised on the engine's thread, where it is handled
                    future.set_exception(exc)
        finally:
            close = getattr(replica, "close", None)
            if close is not None:
                try:
                    close()
                except Exception as exc:  # closing a connection that broke: nothing left to do
                    log.debug("closing the planning connection: %s", exc)

    def close(self) -> None:
        """Stop the thread after the query under way, if any (a daemon: an exit never waits on it)."""
        self.forget()
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None


class InlinePlanningQueries:
    """The queries on the caller's thread, on ``replica``: answered at once."""

    def __init__(self, replica: ReplicaPort) -> None:
        self.replica = replica

    def answer(self, question: Hashable, query: Callable[[ReplicaPort], T]) -> T | Pending:
        return query(self.replica)

    @property
    def waiting(self) -> bool:
        return False

    def forget(self) -> None:
        pass

    def close(self) -> None:
        pass


def planning_queries(replica: ReplicaPort) -> PlanningQueries | InlinePlanningQueries:
    """On a thread of their own where ``replica`` can open another session (the real one can), else
    on the caller's (a test's fake replica, which answers at once)."""
    twin = getattr(replica, "twin", None)
    return PlanningQueries(twin) if callable(twin) else InlinePlanningQueries(replica)


__all__ = ["PENDING", "InlinePlanningQueries", "Pending", "PlanningQueries", "planning_queries"]
