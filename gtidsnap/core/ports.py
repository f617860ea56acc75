"""The engine's ports, in one place: what it needs of the replica, the binlog stream, the sink, the
checkpoint store and the chunk readers, with the jobs and reads that cross to a reader. The adapters
(:mod:`gtidsnap.source.replica`, :mod:`gtidsnap.source.binlog.stream`, :mod:`gtidsnap.sinks`,
:mod:`gtidsnap.engine.checkpoint_store`, :mod:`gtidsnap.snapshot.readers`,
:mod:`gtidsnap.snapshot.spark_readers`) implement them; unit tests pass fakes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.gtid import GtidSet
from gtidsnap.core.model import BinlogEvent, Key, ReadRows, Row, TableId
from gtidsnap.core.plan import RawKey
from gtidsnap.core.records import Emitted
from gtidsnap.core.schema import TableSchema


class ChunkRows(Protocol):
    @property
    def rows(self) -> tuple[tuple[Key, dict[str, Any]], ...]: ...
    @property
    def last_raw_key(self) -> RawKey | None: ...
    @property
    def count(self) -> int: ...


class ReplicaPort(Protocol):
    """What the engine needs of the replica (gtidsnap.source.replica.Replica, or a fake in unit tests)."""

    flavor: Any

    def describe(self) -> str: ...
    def executed(self) -> GtidSet: ...
    def executed_and_visible(self) -> tuple[GtidSet, GtidSet]:
        """The executed set and, read with it, the transactions a new read is sure to see
        (:mod:`gtidsnap.source.low_watermark`)."""
        ...

    def applied(self) -> GtidSet:
        """Every transaction the replica has applied, logged or not (:mod:`gtidsnap.core.replica_choice`)."""
        ...

    def purged(self) -> GtidSet: ...
    def identity(self) -> str:
        """Who writes its own transactions: server UUID (MySQL), server id (MariaDB)."""
        ...

    def tables(self) -> list[TableId]: ...
    def schema(self, table: TableId, surrogate_key: tuple[str, ...] | None = None) -> TableSchema: ...
    def avg_row_length(self, table: TableId) -> int | None:
        """The server's estimate of a row's bytes (None: it has none), which bounds a chunk's rows
        (:mod:`gtidsnap.snapshot.chunk_budget`)."""
        ...

    def max_key(self, schema: TableSchema, condition: str | None = None) -> RawKey | None: ...
    def select_chunk(
        self,
        schema: TableSchema,
        after: RawKey | None,
        upto: RawKey,
        limit: int | None,
        condition: str | None = None,
    ) -> ChunkRows: ...
    def select_chunk_columns(
        self, schema: TableSchema, after: RawKey | None, upto: RawKey, condition: str | None = None
    ) -> Any | None:
        """The rows of ``after < key <= upto`` as a ``pyarrow.Table`` read by a compiled client, every
        column of ``schema`` in order; None where it does not serve (then :meth:`select_chunk`)."""
        ...

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
    """What the engine needs of the binlog (gtidsnap.source.binlog.stream.BinlogStream, or a fake)."""

    def next(self) -> BinlogEvent | None: ...
    def close(self) -> None: ...


StreamFactory = Callable[[GtidSet, Callable[[TableId], TableSchema | None]], StreamPort]


class CheckpointPort(Protocol):
    """Where progress is kept (gtidsnap.core.checkpoint.CheckpointStore, or a fake)."""

    path: Path

    def load(self) -> Checkpoint | None: ...
    def save(self, checkpoint: Checkpoint) -> None: ...


class DecoderFigures(Protocol):
    """What the engine reports of a binlog stream's decoder processes (progress, metrics)."""

    count: int  # processes at once
    started: int  # processes started, restarts included
    rows: list[int]  # rows decoded by each


class Sink(Protocol):
    def open(self, committed: Any) -> None:
        """Start from the position of the last checkpoint (None: nothing committed yet)."""

    def write(self, records: Sequence[Emitted]) -> None:
        r"""Take records; they become durable only at the next ``commit``. Snapshot rows in another form
        than values (:class:`SnapshotLines`, :class:`SnapshotColumns`) come only from the sink's own
        ``chunk_renderer`` (:class:`RenderingSink`); a stream's changes as :class:`ChangeLines` only when
        the stream's rows are decoded in decoder processes (JSON lines only)."""

    def commit(self) -> Any:
        """Make everything written durable; return the JSON-able position to checkpoint."""

    def close(self) -> None: ...


@runtime_checkable
class RenderingSink(Sink, Protocol):
    """A sink whose snapshot rows its chunk readers render (JSON line bodies, Arrow columns)."""

    def chunk_renderer(self, remote: bool) -> ChunkRenderer | None:
        """The renderer the readers use (None: they send values); ``remote``: they run on other
        machines (Spark executors)."""


@runtime_checkable
class SealingSink(Sink, Protocol):
    """A sink whose commits can run in the background (see :mod:`gtidsnap.engine.committer`)."""

    def seal(self) -> Callable[[], Any]:
        """Take everything written so far as one batch; return the job that commits it and returns its
        position. The job runs in another thread; writes after ``seal`` belong to the next batch."""


@runtime_checkable
class DrainingSink(Sink, Protocol):
    """A sink that defers part of its writes (the Delta mirror's MERGE) past the commits that make
    them durable elsewhere (the changelog)."""

    def drain(self) -> None:
        """The run ends: the next commit also makes every deferred write."""


@runtime_checkable
class SnapshotAwareSink(Sink, Protocol):
    """A sink that writes differently while a snapshot will still read a table (the Delta mirror of
    such a table takes no early APPEND of new keys: a chunk that reads one later would turn the
    snapshot's rows into a MERGE)."""

    def snapshots_pending(self, tables: frozenset[TableId]) -> None:
        """The tables whose snapshot is queued or being read, told before each commit."""


@runtime_checkable
class PreparingSink(Sink, Protocol):
    """A sink whose tables consumers read by themselves (Delta): each captured table's are created as
    soon as the run knows its shape, so a reader can start before the table's first record."""

    def prepare(self, shapes: Mapping[TableId, TableSchema]) -> None:
        """Tables newly captured, with their shapes: their output's tables exist once the next
        ``commit`` (or sealed batch) is done."""


@runtime_checkable
class CheckpointedSink(Sink, Protocol):
    """A sink that acts once a checkpoint naming its position is saved (the Delta mirrors take only
    checkpointed data, so their updates are never undone)."""

    def report_checkpoints(self) -> None:
        """Called before ``open``: :meth:`checkpointed` will follow every checkpoint saved."""

    def checkpointed(self, position: Any, saved: Checkpoint | None = None) -> None:
        """The checkpoint naming ``position`` (a ``commit``'s) is saved (``saved``, as it was saved)."""


@dataclass(frozen=True)
class HeldSeq:
    """The greatest ``seq`` an output is known to hold, and where (a file, a table)."""

    seq: int
    where: str


@runtime_checkable
class SeqReportingSink(Sink, Protocol):
    """A sink that can tell, once open, the greatest ``seq`` its output holds: a checkpoint whose
    ``next_seq`` is not above it (edited by hand, or another output's) would write those numbers again."""

    def greatest_seq(self) -> HeldSeq | None:
        """Read cheaply after ``open`` (the output cut back to the checkpoint); None: the output is
        empty, or nothing cheap tells."""


@runtime_checkable
class CutCheckingSink(Sink, Protocol):
    """A sink that checks, before it cuts its output back to a checkpoint's position, that the cut
    removes only records numbered at or above the checkpoint's ``next_seq`` (a checkpoint edited, or
    another output's, would cut records nothing writes again)."""

    def open_checked(self, committed: Any, next_seq: int) -> str | None:
        """``open`` at ``committed`` once the output matches it; otherwise what differs, the output
        untouched and the sink not open."""


# ----------------------------------------------------------------------------- chunk readers


class ChunkRenderer(Protocol):
    """How a reader renders a chunk's ``(key, row)`` pairs for the output: their keys (for the window)
    and the rows in the output's own form, made in the reader's process so the engine's thread does no
    work a row. Picklable: it travels with each job. A sink offers one as ``chunk_renderer``."""

    def __call__(
        self, rows: Sequence[tuple[Key, Row]], schema: TableSchema
    ) -> tuple[tuple[Key, ...], ReadRows]: ...


@runtime_checkable
class ColumnsRenderer(Protocol):
    """A :class:`ChunkRenderer` that also renders a chunk read as Arrow columns (the compiled read,
    :meth:`ReplicaPort.select_chunk_columns`): the same keys and rows as from its values."""

    def __call__(
        self, rows: Sequence[tuple[Key, Row]], schema: TableSchema
    ) -> tuple[tuple[Key, ...], ReadRows]: ...

    def from_columns(self, table: Any, schema: TableSchema) -> tuple[tuple[Key, ...], ReadRows]: ...


@dataclass(frozen=True)
class RowsOnly:
    """A renderer offered rows only, never columns from the compiled read (``snapshot.compiled_reads``
    off): it hides the :class:`ColumnsRenderer` it wraps."""

    render: ChunkRenderer

    def __call__(
        self, rows: Sequence[tuple[Key, Row]], schema: TableSchema
    ) -> tuple[tuple[Key, ...], ReadRows]:
        return self.render(rows, schema)


@dataclass(frozen=True)
class ChunkJob:
    """Read the rows with ``after < key <= upto`` (matching ``condition``) for window ``window``, with a
    SELECT that sees every transaction of ``lw`` (the window's low watermark, as text)."""

    window: int
    schema: TableSchema
    after: RawKey | None
    upto: RawKey
    condition: str | None = None
    render: ChunkRenderer | None = None  # the output's form of the rows (None: their values)
    lw: str = ""

    def portable(self) -> ChunkJob:
        """The job without the schema's cached converters (functions do not cross processes)."""
        schema = TableSchema(self.schema.table, self.schema.columns, self.schema.key)
        return replace(self, schema=schema)


@dataclass(frozen=True)
class ChunkRead:
    """What a reader sent back: the rows (normalised and keyed) and the executed set after the SELECT,
    or the failure (``error_type``, ``error``)."""

    window: int
    keys: tuple[Key, ...] = ()  # of ``rows``, in order
    rows: ReadRows = ()
    executed: str = ""  # the replica's executed set right after the SELECT, as the server wrote it
    reader: int = 0  # the reader's process id (per-reader throughput)
    seconds: float = 0.0  # the SELECT and the normalising, in the reader
    error_type: str | None = None
    error: str = ""
    warning: str = ""  # for the engine's log: this read gave up waiting for lw to be visible

    @property
    def failed(self) -> bool:
        return self.error_type is not None


class ChunkReaderPool(Protocol):
    """What the engine needs of its readers."""

    @property
    def size(self) -> int: ...
    @property
    def in_flight(self) -> int:
        """How many ranges to keep planned at once (two per reader: one read, one waiting)."""
        ...

    def start(self) -> None:
        """Get the readers ready ahead of the first job (a no-op where nothing needs starting)."""
        ...

    def submit(self, job: ChunkJob) -> None: ...
    def collect(self) -> tuple[list[ChunkRead], bool]:
        """The reads finished since the last call, in no particular order, and whether the pool broke
        (a reader died: every job not collected is lost)."""
        ...

    def close(self) -> None: ...
