"""One chunk between two watermarks, and what became of the attempt (chunk_taker), on a scripted fake."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gtidsnap.chunk_taker import (
    SCHEMA_RETRIES,
    ChunkTaken,
    ChunkTaker,
    ShapeChanged,
    SnapshotDone,
    SnapshotFailed,
)
from gtidsnap.errors import QueryError, SchemaError
from gtidsnap.gtid import GtidSet, MysqlGtidSet
from gtidsnap.model import TableId
from gtidsnap.plan import TableProgress
from gtidsnap.schema import Column, TableSchema
from gtidsnap.schema_cache import SchemaCache

T = TableId("shop", "orders")
U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
SCHEMA = TableSchema(T, (Column("id", "int", "int"),), ("id",))
NOTHING = MysqlGtidSet()  # what the stream processed: the fake's executed set always covers it


@dataclass
class Rows:
    rows: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...]
    last_raw_key: tuple[Any, ...] | None
    count: int


@dataclass
class ScriptedReplica:
    """Keys 1..n; each executed() call moves the executed set one transaction on; select_chunk fails
    with the queued errors first."""

    keys: list[int]
    errors: list[Exception] = field(default_factory=list)
    missing: bool = False
    gno: int = 10
    calls: list[str] = field(default_factory=list)
    flavor = "mysql"

    def describe(self) -> str:
        return "scripted"

    def executed(self) -> GtidSet:
        self.calls.append("executed")
        self.gno += 1
        return MysqlGtidSet.parse(f"{U}:1-{self.gno}")

    def executed_and_visible(self) -> tuple[GtidSet, GtidSet]:
        executed = self.executed()
        return executed, executed

    def purged(self) -> GtidSet:
        return MysqlGtidSet()

    def tables(self) -> list[TableId]:
        return [T]

    def schema(self, table: TableId, surrogate_key: tuple[str, ...] | None = None) -> TableSchema:
        if self.missing:
            raise SchemaError(f"table {table} does not exist")
        return SCHEMA

    def max_key(self, schema: TableSchema, condition: str | None = None) -> tuple[Any, ...] | None:
        self.calls.append("max_key")
        return (max(self.keys),) if self.keys else None

    def select_chunk(
        self, schema: TableSchema, after: Any, upto: Any, limit: int, condition: str | None = None
    ) -> Rows:
        self.calls.append("select")
        if self.errors:
            raise self.errors.pop(0)
        keys = [k for k in self.keys if (after is None or k > after[0]) and k <= upto[0]][:limit]
        return Rows(tuple(((k,), {"id": k}) for k in keys), (keys[-1],) if keys else None, len(keys))


def taker(replica: ScriptedReplica) -> tuple[ChunkTaker, list[float]]:
    pauses: list[float] = []
    return ChunkTaker(replica, SchemaCache(lambda t: replica.schema(t)), pauses), pauses


def test_a_chunk_is_selected_between_the_watermarks_and_hw_excludes_lw() -> None:
    replica = ScriptedReplica(keys=[1, 2, 3])
    chunks, pauses = taker(replica)
    outcome = chunks.take(TableProgress(T), first_snapshot=True, chunk_size=2, processed=NOTHING)
    assert isinstance(outcome, ChunkTaken)
    assert replica.calls == ["executed", "max_key", "select", "executed"]
    assert str(outcome.lw) == f"{U}:1-11" and str(outcome.hw) == f"{U}:12"
    assert outcome.chunk.count == 2 and outcome.progress.started and outcome.progress.max_key == (3,)
    assert outcome.progress.fresh and len(pauses) == 1


def test_an_empty_table_is_done_without_a_select_and_an_exhausted_one_after_it() -> None:
    replica = ScriptedReplica(keys=[])
    empty = taker(replica)[0].take(TableProgress(T), first_snapshot=False, chunk_size=2, processed=NOTHING)
    assert isinstance(empty, SnapshotDone) and not empty.selected and "select" not in replica.calls
    replica = ScriptedReplica(keys=[1])
    done = TableProgress(T).begun((1,), False).chunk_read((1,), 1)
    exhausted = taker(replica)[0].take(done, first_snapshot=False, chunk_size=2, processed=NOTHING)
    assert isinstance(exhausted, SnapshotDone) and exhausted.selected


def test_a_changed_shape_is_retried_a_few_times_then_fails_and_the_count_resets() -> None:
    replica = ScriptedReplica(keys=[1, 2], errors=[SchemaError("column v changed")] * (SCHEMA_RETRIES + 1))
    chunks, pauses = taker(replica)
    outcomes = [chunks.take(TableProgress(T), True, 2, NOTHING) for _ in range(SCHEMA_RETRIES + 1)]
    assert all(isinstance(o, ShapeChanged) for o in outcomes[:-1])
    assert isinstance(outcomes[-1], SnapshotFailed) and "column v changed" in str(outcomes[-1].error)
    assert outcomes[0].progress.started, "the begun progress is kept for the retry"
    assert len(pauses) == SCHEMA_RETRIES + 1, "a failed SELECT still counts its pause"
    replica.errors = [SchemaError("again")]
    assert isinstance(chunks.take(TableProgress(T), True, 2, NOTHING), ShapeChanged), "retries counted anew"


def test_a_dropped_table_fails_at_once_and_a_refused_statement_fails_with_its_reason() -> None:
    replica = ScriptedReplica(keys=[1], missing=True)
    failed = taker(replica)[0].take(TableProgress(T), True, 2, NOTHING)
    assert isinstance(failed, SnapshotFailed) and "does not exist" in str(failed.error)
    replica = ScriptedReplica(keys=[1], errors=[QueryError("statement over the time limit")])
    refused = taker(replica)[0].take(TableProgress(T), True, 2, NOTHING)
    assert isinstance(refused, SnapshotFailed) and str(refused.error) == "statement over the time limit"
