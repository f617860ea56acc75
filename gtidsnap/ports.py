"""The engine's ports, in one place: what it needs of the replica, the binlog stream, the sink and the
checkpoint store. The adapters (:mod:`gtidsnap.replica`, :mod:`gtidsnap.binlog`, :mod:`gtidsnap.sinks`,
:mod:`gtidsnap.checkpoint`) implement them; unit tests pass fakes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gtidsnap.checkpoint import Checkpoint
from gtidsnap.gtid import GtidSet
from gtidsnap.model import BinlogEvent, Key, TableId
from gtidsnap.plan import RawKey
from gtidsnap.records import Emitted
from gtidsnap.schema import TableSchema


class ChunkRows(Protocol):
    @property
    def rows(self) -> tuple[tuple[Key, dict[str, Any]], ...]: ...
    @property
    def last_raw_key(self) -> RawKey | None: ...
    @property
    def count(self) -> int: ...


class ReplicaPort(Protocol):
    """What the engine needs of the replica (gtidsnap.replica.Replica, or a fake in unit tests)."""

    flavor: Any

    def describe(self) -> str: ...
    def executed(self) -> GtidSet: ...
    def executed_and_visible(self) -> tuple[GtidSet, GtidSet]:
        """The executed set and, read with it, the transactions a new read is sure to see
        (:mod:`gtidsnap.low_watermark`)."""
        ...

    def purged(self) -> GtidSet: ...
    def tables(self) -> list[TableId]: ...
    def schema(self, table: TableId, surrogate_key: tuple[str, ...] | None = None) -> TableSchema: ...
    def max_key(self, schema: TableSchema, condition: str | None = None) -> RawKey | None: ...
    def select_chunk(
        self,
        schema: TableSchema,
        after: RawKey | None,
        upto: RawKey,
        limit: int | None,
        condition: str | None = None,
    ) -> ChunkRows: ...
    def chunk_ends(
        self,
        schema: TableSchema,
        after: RawKey | None,
        upto: RawKey,
        size: int,
        count: int,
        condition: str | None = None,
    ) -> list[RawKey]: ...


class StreamPort(Protocol):
    """What the engine needs of the binlog (gtidsnap.binlog.BinlogStream, or a fake)."""

    def next(self) -> BinlogEvent | None: ...
    def close(self) -> None: ...


StreamFactory = Callable[[GtidSet, Callable[[TableId], TableSchema | None]], StreamPort]


class CheckpointPort(Protocol):
    """Where progress is kept (gtidsnap.checkpoint.CheckpointStore, or a fake)."""

    path: Path

    def load(self) -> Checkpoint | None: ...
    def save(self, checkpoint: Checkpoint) -> None: ...


class Sink(Protocol):
    def open(self, committed: Any) -> None:
        """Start from the position of the last checkpoint (None: nothing committed yet)."""

    def write(self, records: Sequence[Emitted]) -> None:
        r"""Take records; they become durable only at the next ``commit``. :class:`SnapshotLines`
        come only to a sink whose ``takes_encoded_rows`` is true."""

    def commit(self) -> Any:
        """Make everything written durable; return the JSON-able position to checkpoint."""

    def close(self) -> None: ...


@runtime_checkable
class SealingSink(Sink, Protocol):
    """A sink whose commits can run in the background (see :mod:`gtidsnap.committer`)."""

    def seal(self) -> Callable[[], Any]:
        """Take everything written so far as one batch; return the job that commits it and returns its
        position. The job runs in another thread; writes after ``seal`` belong to the next batch."""


@runtime_checkable
class DrainingSink(Sink, Protocol):
    """A sink that defers part of its writes (the Delta mirror's MERGE) past the commits that make
    them durable elsewhere (the changelog)."""

    def drain(self) -> None:
        """The run ends: the next commit also makes every deferred write."""
