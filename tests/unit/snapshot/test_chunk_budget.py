"""A chunk's rows capped by the table's row size: the pure rule, and the engine's per-table memory of
the estimate (read once per snapshot, the cap told once)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.config.settings import MAX_CHUNK_SIZE
from gtidsnap.core.errors import PrerequisiteError, QueryError, SourceError
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import TableProgress
from gtidsnap.snapshot.chunk_budget import (
    CHUNK_BYTES_BUDGET,
    MIN_BUDGETED_ROWS,
    ChunkSizes,
    budgeted_chunk_size,
)
from tests import fakes

MIB = 2**20
T = fakes.T


@pytest.mark.parametrize(
    ("chunk_size", "avg_row_length", "expected"),
    [
        (1024, None, 1024),  # no estimate: as configured
        (1024, 0, 1024),  # an empty or new table
        (10_000_000, None, 10_000_000),
        (1024, 200, 1024),  # narrow rows: the budget is far away
        (1024, 32 * 1024, 1024),  # exactly the budget
        (1024, 32 * 1024 + 1, 1023),
        (10_000_000, 200, CHUNK_BYTES_BUDGET // 200),
        (100_000, 16 * 1024, 2048),
        (100_000, 10 * MIB, MIN_BUDGETED_ROWS),  # huge rows: the floor
        (10, 10 * MIB, 10),  # never more than configured
        (1, 4000, 1),
    ],
)
def test_the_chunk_size_is_capped_by_the_rows_estimated_bytes(
    chunk_size: int, avg_row_length: int | None, expected: int
) -> None:
    assert CHUNK_BYTES_BUDGET == 32 * MIB
    assert budgeted_chunk_size(chunk_size, avg_row_length) == expected


@given(st.integers(1, MAX_CHUNK_SIZE), st.one_of(st.none(), st.integers(-5, 2**40)))
def test_a_budgeted_chunk_stays_within_the_budget_or_at_its_floor(
    chunk_size: int, avg_row_length: int | None
) -> None:
    size = budgeted_chunk_size(chunk_size, avg_row_length)
    assert min(chunk_size, MIN_BUDGETED_ROWS) <= size <= chunk_size
    if avg_row_length and avg_row_length > 0 and size > MIN_BUDGETED_ROWS:
        assert size * avg_row_length <= CHUNK_BYTES_BUDGET
        assert size == chunk_size or (size + 1) * avg_row_length > CHUNK_BYTES_BUDGET  # no row wasted
    if not avg_row_length or avg_row_length <= 0:
        assert size == chunk_size


def started(table: TableId = T) -> TableProgress:
    return TableProgress(table).begun((10,), fresh=True)


def test_the_estimate_is_read_once_a_snapshot_and_the_cap_told_once(caplog: pytest.LogCaptureFixture) -> None:
    replica = fakes.FakeReplica()
    replica.row_length = 16 * 1024
    sizes = ChunkSizes(replica)
    with caplog.at_level(logging.INFO, "gtidsnap.snapshot.chunk_budget"):
        assert sizes.of(TableProgress(T), 100_000) == 2048  # the snapshot starts
        assert sizes.of(started(), 100_000) == 2048
        assert sizes.of(started(), 100_000) == 2048
    assert replica.row_length_reads == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"{T}: chunks of 2,048 rows, not snapshot.chunk_size = 100,000: its rows are ~16,384 bytes each by "
        "the server's estimate (AVG_ROW_LENGTH), and a reader holds a chunk whole, so chunks are kept to "
        "~32 MiB of rows (at least 100 rows)"
    ]
    assert caplog.records[0].levelno == logging.INFO


def test_a_new_snapshot_of_the_table_reads_its_estimate_again(caplog: pytest.LogCaptureFixture) -> None:
    replica = fakes.FakeReplica()
    replica.row_length = 200
    sizes = ChunkSizes(replica)
    with caplog.at_level(logging.INFO, "gtidsnap.snapshot.chunk_budget"):
        assert sizes.of(TableProgress(T), 1024) == 1024
        replica.row_length = 64 * 1024  # the table's rows grew meanwhile
        assert sizes.of(started(), 1024) == 1024  # same snapshot: the estimate it started with
        assert sizes.of(TableProgress(T), 1024) == 512  # its next snapshot
    assert replica.row_length_reads == 2
    assert len(caplog.records) == 1 and "chunks of 512 rows, not snapshot.chunk_size = 1,024" in caplog.text


def test_a_resumed_snapshot_reads_the_estimate_when_first_planned() -> None:
    replica = fakes.FakeReplica()
    replica.row_length = 64 * 1024
    sizes = ChunkSizes(replica)
    assert sizes.of(started(), 1024) == 512
    assert sizes.of(started(), 1024) == 512
    assert replica.row_length_reads == 1


def test_tables_are_sized_apart_and_a_changed_chunk_size_is_told_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = TableId("shop", "other")
    replica = fakes.FakeReplica()
    replica.row_length = 1024
    sizes = ChunkSizes(replica)
    with caplog.at_level(logging.INFO, "gtidsnap.snapshot.chunk_budget"):
        assert sizes.of(TableProgress(T), 1_000_000) == 32 * 1024
        assert sizes.of(TableProgress(other), 1_000) == 1_000  # under the cap: nothing to tell
        assert sizes.of(started(), 500_000) == 32 * 1024  # SetChunkSize: told again
        assert sizes.of(started(), 500_000) == 32 * 1024
        assert sizes.of(started(), 100) == 100
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [str(T), str(T)]
    assert "not snapshot.chunk_size = 500,000" in caplog.records[1].getMessage()


class RefusingReplica(fakes.FakeReplica):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def avg_row_length(self, table: TableId) -> int | None:
        raise self.error


@pytest.mark.parametrize(
    "error",
    [QueryError("error 1142: denied"), PrerequisiteError(["reading the average row length was denied"])],
)
def test_an_estimate_the_server_refuses_leaves_the_chunks_as_configured(
    error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    sizes = ChunkSizes(RefusingReplica(error))
    with caplog.at_level(logging.INFO, "gtidsnap.snapshot.chunk_budget"):
        assert sizes.of(TableProgress(T), 100_000) == 100_000
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(f"cannot read the average row length of {T}, so its chunks")


def test_a_lost_connection_is_not_swallowed() -> None:
    with pytest.raises(SourceError):
        ChunkSizes(RefusingReplica(SourceError("lost"))).of(TableProgress(T), 1024)
