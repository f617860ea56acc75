"""ChunkPlanner against a small in-memory replica (:mod:`tests.fakes`) and inline readers whose reads
finish when the test
says: the ranges it plans, chunks going out in key order whatever order their reads finish in, keys
changed since a window opened removed, a DDL or a changed shape dropping the table's windows and
reading again after the last emitted key, failed reads, a reader pool that keeps dying, stopped
snapshots, and per-reader throughput."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest

from gtidsnap.core.errors import (
    ConfigError,
    FatalSourceError,
    FilterError,
    GtidsnapError,
    QueryError,
    SchemaError,
    SourceError,
)
from gtidsnap.core.gtid import MysqlGtid
from gtidsnap.core.model import BinlogEvent, SchemaChange, TableId, TxBegin, TxCommit
from gtidsnap.core.plan import TableProgress
from gtidsnap.core.run_stats import ReaderThroughput, throughput_line
from gtidsnap.core.schema import TableSchema
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.snapshot.planner import (
    POOL_RESTARTS,
    SCHEMA_RETRIES,
    ChunkPlanner,
    ChunksFailed,
    ChunksPlanned,
    ChunksRedone,
    Output,
    SnapshotDone,
)
from gtidsnap.snapshot.readers import InlineChunkReaders
from gtidsnap.snapshot.windows import ChunkOut
from tests.fakes import OTHER, SCHEMA, START, FakeReplica, T, U, World, gtids


class Rig:
    def __init__(
        self, keys: Iterable[int] = range(1, 11), in_flight: int | None = 10, readers: int = 2
    ) -> None:
        self.replica = FakeReplica(World(keys=keys))
        self.pool = InlineChunkReaders(self.replica, readers=readers, eager=False)
        self.shape_reads = 0
        self.chunks = ChunkPlanner(
            self.replica, self.pool, SchemaCache(self._shape), self.replica.executed(), in_flight
        )

    def _shape(self, table: TableId) -> TableSchema:
        self.shape_reads += 1
        return SCHEMA

    def plan(self, progress: TableProgress | TableId = T, most: int = 10, size: int = 3) -> ChunksPlanned:
        if isinstance(progress, TableId):
            progress = TableProgress(progress)
        outcome = self.chunks.plan(progress, True, size, most)
        assert isinstance(outcome, ChunksPlanned), outcome
        return outcome

    def windows(self) -> list[int]:
        """The windows whose reads are queued, in the order they were planned."""
        return [job.window for job in self.pool.queued]

    def ranges(self) -> list[tuple[Any, Any]]:
        return [(job.after, job.upto) for job in self.pool.queued]

    def read(self, windows: Iterable[int] | None = None) -> list[Output]:
        """Finish the reads of ``windows`` (all when None) and collect."""
        self.pool.finish(windows)
        return self.chunks.collect()

    def feed(self, events: Iterable[BinlogEvent]) -> list[Output]:
        out: list[Output] = []
        for event in events:
            out.extend(self.chunks.feed(event))
        return out


def keys_of(out: ChunkOut) -> list[int]:
    return [row["id"] for row in out.rows]  # type: ignore[index]


def outs(outputs: Iterable[Output]) -> list[tuple[TableId, tuple[Any, ...], bool, list[int]]]:
    """Every ChunkOut as (table, upto, last, keys); anything else fails the test."""
    result = []
    for out in outputs:
        assert isinstance(out, ChunkOut), out
        result.append((out.table, out.upto, out.last, keys_of(out)))
    return result


# ----------------------------------------------------------------------------- planning


def test_plan_opens_a_window_per_range_up_to_the_max_key_and_marks_only_the_last() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    outcome = rig.chunks.plan(TableProgress(T, condition="v >= 0"), True, 3, 10)
    begun = TableProgress(T, condition="v >= 0").begun((10,), True)
    assert outcome == ChunksPlanned(begun, 4)
    assert outcome.progress.started and outcome.progress.max_key == (10,) and outcome.progress.fresh
    assert rig.ranges() == [(None, (3,)), ((3,), (6,)), ((6,), (9,)), ((9,), (10,))]
    assert all(job.schema == SCHEMA and job.condition == "v >= 0" for job in rig.pool.queued)
    assert len(set(rig.windows())) == 4 and rig.chunks.windows.open_windows == 4
    assert rig.chunks.busy
    assert not rig.chunks.has_room(outcome.progress), "its last range is planned"
    assert rig.chunks.has_room(TableProgress(OTHER))

    assert outs(rig.read()) == [
        (T, (3,), False, [1, 2, 3]),
        (T, (6,), False, [4, 5, 6]),
        (T, (9,), False, [7, 8, 9]),
        (T, (10,), True, [10]),
    ]
    assert rig.replica.limits == [None] * 4, "a reader reads its whole range"
    assert not rig.chunks.busy and rig.chunks.windows.open_windows == 0


def test_a_table_snapshotted_again_is_planned_from_its_start() -> None:
    """A second snapshot of a table (a new signal once the first is done) is not held back by the
    frontier the first one left at its end (it was: no range was ever planned again)."""
    rig = Rig(range(1, 7), in_flight=10)
    first = rig.chunks.plan(TableProgress(T), True, 3, 10)
    assert outs(rig.read()) == [(T, (3,), False, [1, 2, 3]), (T, (6,), True, [4, 5, 6])]
    assert not rig.chunks.has_room(first.progress), "the first snapshot's last range is planned"
    again = TableProgress(T)
    assert rig.chunks.has_room(again)
    assert rig.chunks.plan(again, False, 3, 10).windows == 2
    assert rig.ranges()[-2:] == [(None, (3,)), ((3,), (6,))]


def test_a_range_ending_exactly_at_the_max_key_is_the_last() -> None:
    rig = Rig(range(1, 10), in_flight=10)
    assert rig.plan().windows == 3
    assert rig.ranges() == [(None, (3,)), ((3,), (6,)), ((6,), (9,))]
    assert [o[2] for o in outs(rig.read())] == [False, False, True]


def test_plan_on_an_empty_table_is_done_without_a_window() -> None:
    rig = Rig([], in_flight=10)
    outcome = rig.chunks.plan(TableProgress(T), False, 3, 10)
    assert outcome == SnapshotDone(TableProgress(T).begun(None, False), selected=False)
    assert outcome.progress.done
    assert rig.pool.queued == [] and not rig.chunks.busy and rig.chunks.windows.open_windows == 0


def test_in_flight_and_most_bound_the_windows_and_planning_goes_on_from_the_last_planned_range() -> None:
    rig = Rig(range(1, 11), in_flight=2)
    outcome = rig.plan(most=10)
    assert outcome.windows == 2
    assert rig.ranges() == [(None, (3,)), ((3,), (6,))]
    assert not rig.chunks.has_room(outcome.progress), "in_flight reached"
    assert not rig.chunks.has_room(TableProgress(OTHER)), "in_flight reached"
    assert outs(rig.read(rig.windows()[:1])) == [(T, (3,), False, [1, 2, 3])]
    assert rig.chunks.has_room(outcome.progress)
    # The table's progress says (3,) went out, but (3,)-(6,] is planned already: the next starts at 6.
    progress = outcome.progress.chunk_read((3,), 3)
    assert rig.plan(progress, most=1).windows == 1
    assert rig.ranges()[-1] == ((6,), (9,))


def test_in_flight_defaults_to_two_ranges_per_reader() -> None:
    replica = FakeReplica(range(1, 11))
    readers = InlineChunkReaders(replica, readers=3, eager=False)
    chunks = ChunkPlanner(replica, readers, SchemaCache(lambda t: SCHEMA), gtids(START))
    assert chunks.in_flight == 6


# ----------------------------------------------------------------------------- reads and the stream


def test_reads_finishing_out_of_order_go_out_in_key_order() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan()
    w1, w2, w3, w4 = rig.windows()
    assert rig.read([w2]) == [], "the first window is not read yet"
    assert rig.chunks.busy
    assert outs(rig.read([w1])) == [(T, (3,), False, [1, 2, 3]), (T, (6,), False, [4, 5, 6])]
    assert rig.chunks.busy
    assert rig.read([w4]) == []
    assert outs(rig.read([w3])) == [(T, (9,), False, [7, 8, 9]), (T, (10,), True, [10])]
    assert not rig.chunks.busy


def test_a_key_changed_after_the_low_watermark_is_removed_from_its_chunk() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan()
    changed = rig.replica.write(2, 99) + rig.replica.write(8, 99) + rig.replica.write(5, 99, table=OTHER)
    for event in changed:
        assert list(rig.chunks.feed(event)) == [event], "the change itself goes out as usual"
    assert outs(rig.read()) == [
        (T, (3,), False, [1, 3]),
        (T, (6,), False, [4, 5, 6]),  # key 5 of another table changed: not this one's
        (T, (9,), False, [7, 9]),
        (T, (10,), True, [10]),
    ]


def test_a_change_in_the_low_watermark_streamed_after_the_window_opened_takes_its_key() -> None:
    rig = Rig(range(1, 4), in_flight=10)
    events = rig.replica.write(2, 99)  # in the executed set before the window opens, streamed after
    rig.plan()
    rig.feed(events)
    [(_, _, _, keys)] = outs(rig.read())
    assert keys == [1, 3], "MariaDB names a transaction in lw before a read sees it: the stream's row wins"


def test_a_chunk_read_before_the_stream_passed_its_high_watermark_goes_out_after_that_commit() -> None:
    rig = Rig(range(1, 4), in_flight=10)
    rig.plan()
    begin, change, commit = rig.replica.write(2, 99)
    assert rig.read() == [], "the SELECT saw a transaction the stream has not processed yet"
    assert rig.chunks.busy
    assert rig.feed([begin, change]) == [begin, change]
    out = list(rig.chunks.feed(commit))
    assert out[0] == commit
    assert outs(out[1:]) == [(T, (3,), True, [1, 3])]


# ----------------------------------------------------------------------------- DDL and failed reads


def test_a_ddl_drops_the_tables_windows_and_planning_starts_again_after_the_last_emitted_key() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    progress = rig.plan().progress
    w1, w2, w3, _ = rig.windows()
    [first] = rig.read([w1])
    assert isinstance(first, ChunkOut) and first.upto == (3,)
    assert first.key_columns == ("id",), "the key of the shape the range was read with"
    progress = progress.chunk_read(first.upto, len(first.rows))
    begin, ddl, commit = rig.replica.ddl()
    assert rig.read([w2]) == [], "read after the DDL, waiting for the stream to pass it"
    out = rig.feed([begin, ddl, commit])
    assert out[:2] == [begin, ddl] and out[-1] == commit
    [redone] = out[2:-1]
    assert isinstance(redone, ChunksRedone) and redone.table == T
    assert "changed before the window closed" in redone.reason
    assert not rig.chunks.busy and rig.chunks.windows.open_windows == 0
    assert rig.read([w3]) == [] and rig.read() == [], "reads of dropped windows are ignored"
    assert rig.chunks.throughput[os.getpid()].chunks == 2, "ignored reads are not counted"

    assert rig.plan(progress).windows == 3
    assert rig.ranges() == [((3,), (6,)), ((6,), (9,)), ((9,), (10,))]
    assert outs(rig.read()) == [
        (T, (6,), False, [4, 5, 6]),
        (T, (9,), False, [7, 8, 9]),
        (T, (10,), True, [10]),
    ]


def test_a_ddl_of_another_table_leaves_the_windows_alone() -> None:
    rig = Rig(range(1, 4), in_flight=10)
    rig.plan()
    gtid = MysqlGtid(U, "", START + 1)
    rig.replica.gno += 1
    events = [
        TxBegin(gtid),
        SchemaChange(gtid, frozenset({OTHER}), "ALTER TABLE shop.other ADD c INT"),
        TxCommit(gtid),
    ]
    assert rig.feed(events) == events
    assert outs(rig.read()) == [(T, (3,), True, [1, 2, 3])]


def redo_once(rig: Rig, progress: TableProgress) -> list[Output]:
    rig.plan(progress, most=2)
    return rig.read()


def test_a_shape_changed_under_a_reader_is_read_again_then_fails_the_table() -> None:
    rig = Rig(range(1, 11), in_flight=2)
    rig.replica.failure = SchemaError("column v is gone")
    progress = TableProgress(T).begun((10,), True)
    for attempt in range(1, SCHEMA_RETRIES + 1):
        [redone] = redo_once(rig, progress)
        assert isinstance(redone, ChunksRedone) and redone.table == T
        assert "changed under a reader: column v is gone" in redone.reason
        assert not rig.chunks.busy and rig.pool.queued == []
        assert rig.shape_reads == attempt, "the shape is read again before the next plan"
        assert rig.ranges() == []
    [failed] = redo_once(rig, progress)
    assert isinstance(failed, ChunksFailed) and failed.table == T
    assert isinstance(failed.error, SchemaError) and str(failed.error) == "column v is gone"
    assert not rig.chunks.busy
    [again] = redo_once(rig, progress)
    assert isinstance(again, ChunksRedone), "the count starts again after a failed table"


def test_a_chunk_going_out_resets_the_shape_retries() -> None:
    rig = Rig(range(1, 21), in_flight=2)
    progress = TableProgress(T).begun((20,), True)
    rig.replica.failure = SchemaError("changed")
    for _ in range(SCHEMA_RETRIES):
        assert isinstance(redo_once(rig, progress)[0], ChunksRedone)
    rig.replica.failure = None
    rig.plan(progress, most=1)
    [out] = rig.read()
    assert isinstance(out, ChunkOut)
    progress = progress.chunk_read(out.upto, len(out.rows))
    rig.replica.failure = SchemaError("changed")
    for _ in range(SCHEMA_RETRIES):
        assert isinstance(redo_once(rig, progress)[0], ChunksRedone)
    assert isinstance(redo_once(rig, progress)[0], ChunksFailed)


def test_a_table_failing_on_a_refused_statement_leaves_the_next_table_every_shape_retry() -> None:
    rig = Rig(range(1, 11), in_flight=2)
    rig.replica.failure = SchemaError("changed")
    for _ in range(SCHEMA_RETRIES - 1):
        assert isinstance(redo_once(rig, TableProgress(T).begun((10,), True))[0], ChunksRedone)
    rig.replica.failure = QueryError("refused")
    assert isinstance(redo_once(rig, TableProgress(T).begun((10,), True))[0], ChunksFailed)
    rig.replica.failure = SchemaError("changed")
    other = TableProgress(OTHER).begun((10,), True)
    for _ in range(SCHEMA_RETRIES):
        assert isinstance(redo_once(rig, other)[0], ChunksRedone)
    assert isinstance(redo_once(rig, other)[0], ChunksFailed)


@pytest.mark.parametrize("error", [QueryError("statement timeout"), FilterError("filter refused")])
def test_a_refused_statement_drops_every_window_of_the_table_and_fails_once(error: GtidsnapError) -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan(most=3)
    rig.replica.failure = error
    [failed] = rig.read()
    assert isinstance(failed, ChunksFailed) and failed.table == T
    assert type(failed.error) is type(error) and str(failed.error) == str(error)
    assert not rig.chunks.busy and rig.chunks.windows.open_windows == 0
    assert rig.shape_reads == 1, "the shape is not the problem"


def test_a_failed_read_drops_the_later_windows_of_its_table_even_ready_ones() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan(most=3)
    w1, w2, w3 = rig.windows()
    assert rig.read([w2]) == []
    rig.replica.failure = QueryError("refused")
    out = rig.read([w1])
    assert [type(o) for o in out] == [ChunksFailed], "the second chunk must not go out without the first"
    assert not rig.chunks.busy
    rig.replica.failure = None
    assert rig.read([w3]) == []


@pytest.mark.parametrize(
    "error",
    [SourceError("lost connection"), FatalSourceError("grants revoked"), ConfigError("login refused")],
)
def test_any_other_reader_failure_is_raised_as_its_own_type(error: GtidsnapError) -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan(most=2)
    rig.replica.failure = error
    rig.pool.finish()
    with pytest.raises(SourceError if isinstance(error, SourceError) else ConfigError) as raised:
        rig.chunks.collect()
    assert type(raised.value) is type(error) and str(raised.value) == str(error)
    assert raised.value.retryable == error.retryable


# ----------------------------------------------------------------------------- a dying pool


def break_pool(rig: Rig) -> list[Output]:
    rig.pool.broken = True
    return rig.chunks.collect()


def test_a_broken_pool_redoes_each_table_with_windows() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan(T, most=2)
    rig.plan(OTHER, most=2)
    rig.pool.finish(rig.windows()[1:2])  # read but not collected: lost with the pool
    out = break_pool(rig)
    assert out == [
        ChunksRedone(T, "a chunk reader process died"),
        ChunksRedone(OTHER, "a chunk reader process died"),
    ]
    assert not rig.chunks.busy and rig.chunks.windows.open_windows == 0 and rig.pool.queued == []
    assert rig.chunks.collect() == []


def test_a_pool_dying_again_and_again_stops_the_run() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    progress = TableProgress(T).begun((10,), True)
    for _ in range(POOL_RESTARTS):
        rig.plan(progress, most=2)
        assert break_pool(rig) == [ChunksRedone(T, "a chunk reader process died")]
    rig.plan(progress, most=2)
    with pytest.raises(SourceError, match=r"snapshot\.readers") as raised:
        break_pool(rig)
    assert f"{POOL_RESTARTS + 1} times in a row" in str(raised.value)


def test_a_chunk_going_out_between_pool_deaths_resets_their_count() -> None:
    rig = Rig(range(1, 31), in_flight=10)
    progress = TableProgress(T).begun((30,), True)
    for _ in range(POOL_RESTARTS):
        rig.plan(progress, most=2)
        assert len(break_pool(rig)) == 1
    rig.plan(progress, most=1)
    [out] = rig.read()
    assert isinstance(out, ChunkOut)
    progress = progress.chunk_read(out.upto, len(out.rows))
    for _ in range(POOL_RESTARTS):
        rig.plan(progress, most=2)
        assert break_pool(rig) == [ChunksRedone(T, "a chunk reader process died")]
    with pytest.raises(SourceError, match=r"snapshot\.readers"):
        break_pool(rig)


# ----------------------------------------------------------------------------- stopped snapshots


def test_stopping_a_table_drops_its_windows_and_lets_the_ones_behind_go_out() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan(T, most=2)
    rig.plan(OTHER, most=2)
    t1, t2, o1, o2 = rig.windows()
    assert rig.read([t2, o1]) == [], "they wait for the first window"
    # The table's second window is ready too: it must not go out once the first is dropped.
    assert outs(rig.chunks.stop([T])) == [(OTHER, (3,), False, [1, 2, 3])]
    assert rig.chunks.busy and rig.chunks.windows.open_windows == 1
    assert rig.read([t1]) == [], "reads of stopped windows are ignored"
    assert rig.chunks.stop([T]) == []
    assert rig.chunks.busy
    assert outs(rig.read([o2])) == [(OTHER, (6,), False, [4, 5, 6])]
    assert rig.plan(TableProgress(T).begun((10,), True), most=1).windows == 1
    assert rig.ranges()[-1] == (None, (3,)), "a stopped table starts again at its last emitted key"


def test_stopping_everything_drops_every_window() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan(T, most=2)
    rig.plan(OTHER, most=2)
    assert rig.chunks.stop(None) == []
    assert not rig.chunks.busy and rig.chunks.windows.open_windows == 0
    assert rig.read() == []
    assert rig.chunks.throughput == {}


# ----------------------------------------------------------------------------- throughput


def test_throughput_is_counted_per_reader_process() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan()
    assert len(rig.read()) == 4
    stats = rig.chunks.throughput[os.getpid()]
    assert (stats.rows, stats.chunks) == (10, 4)
    assert stats.busy_s >= 0
    assert list(rig.chunks.throughput) == [os.getpid()]


def test_a_failed_read_is_not_counted() -> None:
    rig = Rig(range(1, 11), in_flight=10)
    rig.plan(most=1)
    rig.replica.failure = QueryError("refused")
    assert isinstance(rig.read()[0], ChunksFailed)
    assert rig.chunks.throughput == {}


def test_throughput_line_lists_readers_by_process_id() -> None:
    throughput = {
        200: ReaderThroughput(rows=2_000, chunks=2, busy_s=1.0),
        100: ReaderThroughput(rows=82_400, chunks=8, busy_s=2.0),
        300: ReaderThroughput(rows=0, chunks=0, busy_s=0.0),
    }
    assert throughput_line(throughput) == (
        "reader 1: 41.2k rows/s · reader 2: 2.0k rows/s · reader 3: 0.0k rows/s"
    )
    assert throughput_line({}) == ""
