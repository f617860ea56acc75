"""The loop's next step and its tuning, chosen without a replica, a stream or a clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.core.commands import SetChunkDelay, SetChunkSize
from gtidsnap.core.errors import ConfigError
from gtidsnap.engine.loop_step import (
    SHORT_CHUNK_WAIT_S,
    EngineSettings,
    LoopFacts,
    Step,
    commit_due,
    next_step,
)


def facts(between: bool = True, waiting: bool = True, wait: float = 0.0, until: bool = False) -> LoopFacts:
    return LoopFacts(between, waiting, wait, until)


def test_a_due_chunk_is_taken_between_transactions_only() -> None:
    assert next_step(facts(wait=0.0)) is Step.TAKE_CHUNK
    assert next_step(facts(wait=-3.0)) is Step.TAKE_CHUNK
    assert next_step(facts(between=False, wait=0.0)) is Step.READ_STREAM


def test_a_short_wait_is_slept_a_long_one_reads_the_stream() -> None:
    assert next_step(facts(wait=SHORT_CHUNK_WAIT_S / 2)) is Step.SLEEP
    assert next_step(facts(wait=SHORT_CHUNK_WAIT_S)) is Step.SLEEP
    assert next_step(facts(wait=SHORT_CHUNK_WAIT_S * 2)) is Step.READ_STREAM
    assert next_step(facts(wait=SHORT_CHUNK_WAIT_S * 2, until=True)) is Step.READ_STREAM


def test_caught_up_is_checked_only_when_no_snapshot_waits_and_between_transactions() -> None:
    assert next_step(facts(waiting=False, until=True)) is Step.CHECK_CAUGHT_UP
    assert next_step(facts(waiting=False, until=False)) is Step.READ_STREAM
    assert next_step(facts(between=False, waiting=False, until=True)) is Step.READ_STREAM


@given(st.booleans(), st.booleans(), st.floats(-10, 10), st.booleans())
def test_a_chunk_is_never_taken_inside_a_window_or_transaction(
    between: bool, waiting: bool, wait: float, until: bool
) -> None:
    step = next_step(facts(between, waiting, wait, until))
    if not between:
        assert step is Step.READ_STREAM
    if step is Step.TAKE_CHUNK:
        assert waiting and wait <= 0


def test_commit_due_by_rows_even_while_a_commit_runs_otherwise_by_time() -> None:
    assert commit_due(100, 100, committer_busy=True, since_commit_s=0.0, interval_s=1.0)
    assert not commit_due(99, 100, committer_busy=True, since_commit_s=50.0, interval_s=1.0)
    assert commit_due(1, 100, committer_busy=False, since_commit_s=1.0, interval_s=1.0)
    assert not commit_due(1, 100, committer_busy=False, since_commit_s=0.5, interval_s=1.0)


def test_while_a_snapshot_is_read_commits_come_at_their_own_interval() -> None:
    from gtidsnap.engine.committer import Commits

    commits = Commits(sink=object(), store=object())  # type: ignore[arg-type]
    commits.uncommitted = 10
    commits._last_at -= 2.0  # the last commit 2 s ago
    settings = EngineSettings(checkpoint_interval_s=1.0, snapshot_interval_s=5.0)
    assert commits.due(settings) and not commits.due(settings, snapshotting=True)
    commits._last_at -= 3.0
    assert commits.due(settings, snapshotting=True)
    commits.uncommitted = settings.batch_rows  # a full batch commits at once either way
    commits._last_at += 5.0
    assert commits.due(settings, snapshotting=True)
    commits.uncommitted, commits._last_at = 10, commits._last_at - 2.0
    assert commits.due(EngineSettings(checkpoint_interval_s=1.0), snapshotting=True), "no own interval"
    assert EngineSettings().snapshot_interval_s is None, "the same interval unless told"


def test_rows_of_read_chunks_count_toward_their_own_batch_size_where_one_is_set() -> None:
    import pyarrow as pa

    from gtidsnap.core.model import TableId
    from gtidsnap.core.records import SnapshotColumns
    from gtidsnap.engine.committer import Commits
    from gtidsnap.sinks.arrow_columns import ArrowRows

    chunk = SnapshotColumns(
        TableId("d", "t"), ArrowRows(pa.record_batch({"id": pa.array(range(60), pa.int64())})), 1, 0, True
    )
    commits = Commits(sink=object(), store=object())  # type: ignore[arg-type]
    assert commits.count([chunk]) == 60 and (commits.uncommitted, commits.chunk_rows) == (0, 60)
    apart = EngineSettings(checkpoint_interval_s=9.0, batch_rows=50, snapshot_batch_rows=100)
    together = EngineSettings(checkpoint_interval_s=9.0, batch_rows=50)
    assert not commits.due(apart, snapshotting=True), "60 rows of chunks: under snapshot_batch_rows"
    assert commits.due(together, snapshotting=True), "counted as records: over batch_rows"
    commits.count([chunk])
    assert commits.due(apart, snapshotting=True), "120 rows of chunks"
    commits.uncommitted, commits.chunk_rows = 50, 0
    assert commits.due(apart), "other records still count toward batch_rows"


def test_tuning_the_chunk_size_and_delay() -> None:
    settings = EngineSettings()
    assert settings.tuned(SetChunkSize(10)).chunk_size == 10
    assert settings.tuned(SetChunkDelay(-1.0)).chunk_delay_s == 0.0
    assert settings.tuned(SetChunkDelay(0.25)) == EngineSettings(chunk_delay_s=0.25)
    with pytest.raises(ConfigError, match="chunk size must be at least 1, got 0"):
        settings.tuned(SetChunkSize(0))


def test_a_sink_that_asks_is_told_which_tables_a_snapshot_will_still_read_before_each_commit() -> None:
    from typing import Any

    from gtidsnap.core.checkpoint import Checkpoint
    from gtidsnap.core.gtid import parse_gtid_set
    from gtidsnap.core.model import TableId
    from gtidsnap.core.plan import SnapshotContext, TableProgress
    from gtidsnap.engine.committer import Commits

    class Sink:
        def __init__(self) -> None:
            self.told: list[frozenset[TableId]] = []

        def open(self, committed: Any) -> None: ...
        def write(self, records: Any) -> None: ...
        def commit(self) -> Any:
            return {"at": len(self.told)}

        def close(self) -> None: ...
        def snapshots_pending(self, tables: frozenset[TableId]) -> None:
            self.told.append(tables)

    class Store:
        def __init__(self) -> None:
            self.saved: list[Checkpoint] = []

        def save(self, checkpoint: Checkpoint) -> None:
            self.saved.append(checkpoint)

    a, b, c = TableId("d", "a"), TableId("d", "b"), TableId("d", "c")
    context = SnapshotContext((TableProgress(a, done=True), TableProgress(b, started=True), TableProgress(c)))
    state = Checkpoint("mariadb", parse_gtid_set("mariadb", "0-1-1"), 1, None, context)
    sink, store = Sink(), Store()
    Commits(sink=sink, store=store).commit(state)  # type: ignore[arg-type]
    assert sink.told == [frozenset({b, c})], "the table being read and the one queued, not the one done"
    assert store.saved[-1].sink_position == {"at": 1}, "told before the sink's commit"
