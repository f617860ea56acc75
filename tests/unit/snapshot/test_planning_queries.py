"""The planning queries on a thread of their own: the planner gets PENDING while one runs (the loop reads
the stream meanwhile), the answer once it is there, its error raised on the planner's thread."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from gtidsnap.core.errors import QueryError
from gtidsnap.core.plan import TableProgress
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.snapshot.planner import ChunkPlanner, ChunksPlanned
from gtidsnap.snapshot.planning_queries import (
    PENDING,
    InlinePlanningQueries,
    PlanningQueries,
    planning_queries,
)
from gtidsnap.snapshot.readers import InlineChunkReaders
from tests.fakes import SCHEMA, FakeReplica, T, World

WAIT_S = 5.0


class Connection:
    """A replica session the planning thread opens; notes on which thread and whether it was closed."""

    def __init__(self) -> None:
        self.thread = threading.current_thread().name
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


def until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def answered(queries: PlanningQueries, question: Any, query: Any) -> Any:
    until(lambda: not queries.waiting, "the answer")
    return queries.answer(question, query)


def test_an_answer_comes_from_the_thread_after_pending_on_one_connection_made_there() -> None:
    connections: list[Connection] = []
    queries = PlanningQueries(lambda: connections.append(Connection()) or connections[-1])  # type: ignore[arg-type,func-returns-value]
    release = threading.Event()

    def slow(replica: Any) -> str:
        assert release.wait(WAIT_S)
        return f"answered on {threading.current_thread().name}"

    assert queries.answer("q", slow) is PENDING
    assert queries.waiting and queries.answer("q", slow) is PENDING, "asked again: still running"
    release.set()
    assert answered(queries, "q", slow) == "answered on gtidsnap-planning"
    assert not queries.waiting
    assert queries.answer("q2", lambda replica: 2) is PENDING  # the next question, same connection
    assert answered(queries, "q2", None) == 2
    assert [c.thread for c in connections] == ["gtidsnap-planning"]
    queries.close()
    assert connections[0].closed.wait(WAIT_S), "closing ends the thread and its session"


def test_an_error_of_a_query_is_raised_once_in_the_asking_thread() -> None:
    queries = PlanningQueries(Connection)  # type: ignore[arg-type]

    def refused(replica: Any) -> None:
        raise QueryError("the server refused the filter")

    assert queries.answer("q", refused) is PENDING
    with pytest.raises(QueryError, match="refused the filter"):
        answered(queries, "q", refused)
    assert queries.answer("q", lambda replica: "again") is PENDING, "asked anew after the error"
    assert answered(queries, "q", None) == "again"
    queries.close()


def test_a_new_question_or_forget_drops_the_answer_of_the_one_asked_before() -> None:
    queries = PlanningQueries(Connection)  # type: ignore[arg-type]
    release = threading.Event()
    ran: list[str] = []

    def slow(name: str) -> Any:
        def query(replica: Any) -> str:
            ran.append(name)
            assert release.wait(WAIT_S)
            return name

        return query

    assert queries.answer("old", slow("old")) is PENDING
    until(lambda: ran == ["old"], "the first query to run")
    assert queries.answer("new", slow("new")) is PENDING  # the old one runs on, its answer unused
    assert queries.answer("newer", slow("newer")) is PENDING  # "new" never ran: it was cancelled
    release.set()
    assert answered(queries, "newer", None) == "newer"
    assert ran == ["old", "newer"]
    assert queries.answer("q", lambda replica: "stale") is PENDING
    queries.forget()
    until(lambda: not queries.waiting, "forgotten")
    assert queries.answer("q", lambda replica: "fresh") is PENDING, "asked again after forget: run again"
    assert answered(queries, "q", None) == "fresh"
    queries.close()


def test_a_replica_that_cannot_open_another_session_answers_inline() -> None:
    replica = FakeReplica(World(keys=range(1, 5)))
    assert isinstance(planning_queries(replica), InlinePlanningQueries)

    class Twinned(FakeReplica):
        def twin(self) -> FakeReplica:
            return FakeReplica(self.world)

    assert isinstance(planning_queries(Twinned(World(keys=range(1, 5)))), PlanningQueries)


def test_the_planner_opens_no_window_while_its_queries_run_and_the_loop_is_told_to_read_the_stream() -> None:
    """A slow greatest-key query and a slow chunk-ends query (a slow filter) each leave plan() at once:
    ``waiting``, nothing opened, the planner busy; the windows open once the answers are there."""
    gate = threading.Event()

    class Slow(FakeReplica):
        def max_key(self, schema: Any, condition: str | None = None) -> Any:
            assert gate.wait(WAIT_S)
            return super().max_key(schema, condition)

        def chunk_ends(self, *args: Any, **kwargs: Any) -> Any:
            assert gate.wait(WAIT_S)
            return super().chunk_ends(*args, **kwargs)

    replica = Slow(World(keys=range(1, 11)))
    queries = PlanningQueries(lambda: replica)
    pool = InlineChunkReaders(replica, readers=2, eager=False)
    planner = ChunkPlanner(
        replica, pool, SchemaCache(lambda t: SCHEMA), replica.executed(), 10, queries=queries
    )
    progress = TableProgress(T)
    started = time.monotonic()
    outcome = planner.plan(progress, True, 3, 10)
    assert outcome == ChunksPlanned(progress, 0, waiting=True) and planner.busy
    assert time.monotonic() - started < 1.0, "plan() waited for the query"
    gate.set()
    until(lambda: not queries.waiting, "the greatest key")
    outcome = planner.plan(progress, True, 3, 10)  # the key is in: the chunk ends are asked next
    assert isinstance(outcome, ChunksPlanned) and outcome.progress.max_key == (10,)
    until(lambda: not queries.waiting, "the chunk ends")
    outcome = planner.plan(outcome.progress, True, 3, 10)
    assert isinstance(outcome, ChunksPlanned) and outcome.windows == 4 and not outcome.waiting
    assert [(job.after, job.upto) for job in pool.queued] == [
        (None, (3,)),
        ((3,), (6,)),
        ((6,), (9,)),
        ((9,), (10,)),
    ]
    planner.close()


def test_a_resumed_snapshot_reads_its_rows_size_on_the_planning_thread_before_its_next_chunk() -> None:
    """A snapshot resumed by this run: the server's estimate of its rows' size (which caps the chunk
    size, :mod:`gtidsnap.snapshot.chunk_budget`) is asked of the planning thread too, once."""
    replica = FakeReplica(World(keys=range(1, 11)))
    replica.row_length = 2**16  # 64 KiB rows: 512 a chunk
    queries = PlanningQueries(lambda: replica)
    pool = InlineChunkReaders(replica, readers=2, eager=False)
    planner = ChunkPlanner(
        replica, pool, SchemaCache(lambda t: SCHEMA), replica.executed(), 10, queries=queries
    )
    progress = TableProgress(T).begun((10,), True)
    assert planner.plan(progress, True, 1000, 10) == ChunksPlanned(progress, 0, waiting=True)
    outcome = planner.plan(progress, True, 1000, 10)
    while outcome.windows == 0:  # type: ignore[union-attr]
        until(lambda: not queries.waiting, "the planning queries")
        outcome = planner.plan(progress, True, 1000, 10)
    assert outcome == ChunksPlanned(progress, 1)
    assert replica.row_length_reads == 1 and planner.chunk_sizes.of(progress, 1000) == 512
    planner.close()
