"""A table's snapshot read by chunk readers while the stream runs on: the one snapshot path.

The readers are a :class:`gtidsnap.snapshot.readers.ChunkReaderPool`: reader processes, Spark tasks, or
(``snapshot.readers = 0``) one reader on the engine's thread that reads one chunk per loop turn, the
only pause the stream then sees. The windows' algorithm is specified in :mod:`gtidsnap.snapshot.windows`.

The engine's thread plans: at a transaction boundary, for each free reader, it takes where the next
chunk ends (:meth:`Replica.chunk_ends` finds the ends of ``ENDS_AT_ONCE`` chunks in one round trip:
only key columns cross the wire), opens a window at the stream's position, its ``lw``
(:class:`gtidsnap.snapshot.windows.ChunkWindows`), and hands the range to a reader
(:mod:`gtidsnap.snapshot.readers`), which waits until its SELECT sees all of ``lw``. No query of a
snapshot runs on the engine's thread: the chunk-ends query and the snapshot's greatest key (both run
its filter) are answered by a planning thread (:mod:`gtidsnap.snapshot.planning_queries`) while the
loop reads the stream. The readers SELECT their ranges and read their own high watermarks;
the engine collects their rows between transactions, and every event it processes passes the windows.
A window goes out when its rows are known and the stream has passed its high watermark, in the order
the windows were opened: so chunks reach the output in key order, and the table's progress is still
"the last key emitted" (:class:`gtidsnap.core.plan.TableProgress`), however many readers.

What can go wrong with a chunk, and what becomes of it (returned as plain data for the engine):
- a DDL of the table before its window went out, or a reader's SELECT that found the shape changed:
  every window of the table is dropped and reading starts again after the last emitted key
  (:class:`ChunksRedone`); a shape that keeps changing ends the snapshot like a failed statement;
- the server refused or timed out a reader's SELECT (:class:`ChunksFailed`): that table's snapshot
  ends with the reason, the others go on;
- a reader process died: every window in flight is dropped, the pool is started again, reading
  starts again after the last emitted key; a pool that keeps dying stops the run (``SourceError``);
- any other failure of a reader (the replica unreachable past its retries, a refused login) is
  raised as the engine's own error type.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gtidsnap.core.errors import FilterError, GtidsnapError, QueryError, SchemaError, SourceError
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.model import BinlogEvent, TableId
from gtidsnap.core.plan import RawKey, TableProgress
from gtidsnap.core.ports import ChunkJob, ChunkRead, ChunkReaderPool, ChunkRenderer, ReplicaPort
from gtidsnap.core.run_stats import ReaderThroughput, RunStats
from gtidsnap.core.schema import TableSchema
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.snapshot.chunk_budget import ChunkSizes, row_length_estimate
from gtidsnap.snapshot.planning_queries import (
    PENDING,
    InlinePlanningQueries,
    Pending,
    PlanningQueries,
    planning_queries,
)
from gtidsnap.snapshot.readers import rebuilt_error
from gtidsnap.snapshot.windows import ChunkOut, ChunkWindows, WindowDiscarded
from gtidsnap.snapshot.windows import Output as WindowsOutput
from gtidsnap.source.low_watermark import LowWatermark

log = logging.getLogger(__name__)

POOL_RESTARTS = 3  # reader pools that die in a row, without a chunk going out between, before giving up
ENDS_AT_ONCE = 8  # chunk ends found by one query (a stale end only makes its chunk larger or smaller)
SCHEMA_RETRIES = 3  # a chunk that fails on a changed schema is tried again with the shape read anew


@dataclass(frozen=True)
class SnapshotDone:
    """Nothing left to read: no row matched at the start (``selected`` False, no SELECT was sent)."""

    progress: TableProgress
    selected: bool


@dataclass(frozen=True)
class ShapeChanged:
    """The replica applied a DDL the stream has not reached: try again with the shape read anew."""

    progress: TableProgress


@dataclass(frozen=True)
class SnapshotFailed:
    """The server refused the statement, stopped it at the time limit, the filter no longer passes
    its check, or the shape kept changing: this table's snapshot ends with the reason."""

    progress: TableProgress
    error: GtidsnapError


@dataclass(frozen=True)
class ChunksRedone:
    """Every window of ``table`` was dropped (its shape changed, or a reader died): reading starts
    again after the last emitted key."""

    table: TableId
    reason: str


@dataclass(frozen=True)
class ChunksFailed:
    """A reader's SELECT of ``table`` failed for good: its snapshot ends with ``error``."""

    table: TableId
    error: GtidsnapError


@dataclass(frozen=True)
class ChunksPlanned:
    """Windows were opened; ``progress`` is the table's (begun, if this was its first chunk).
    ``waiting``: a planning query is still running (the loop reads the stream and asks again)."""

    progress: TableProgress
    windows: int
    waiting: bool = False


PlanOutcome = ChunksPlanned | SnapshotDone | ShapeChanged | SnapshotFailed
Output = BinlogEvent | ChunkOut | ChunksRedone | ChunksFailed


@dataclass
class _Frontier:
    """Where the next range of the table being read starts, and whether its last one is planned; the
    chunk ends found ahead (for chunks of ``size`` rows), and whether the rows ran out after them."""

    table: TableId | None = None
    after: RawKey | None = None
    ended: bool = False
    ends: deque[RawKey] = field(default_factory=deque)
    size: int = 0
    exhausted: bool = False


class ChunkPlanner:
    """Plans ranges, tracks their windows and collects the readers' rows (see the module docstring)."""

    def __init__(
        self,
        replica: ReplicaPort,
        readers: ChunkReaderPool,
        schemas: SchemaCache,
        processed: GtidSet,
        in_flight: int | None = None,
        render: ChunkRenderer | None = None,
        stats: RunStats | None = None,
        queries: PlanningQueries | InlinePlanningQueries | None = None,
    ) -> None:
        """``render``: how readers render rows for the output (None: they send values);
        ``stats``: where per-reader throughput and the windows' waits for the stream are counted;
        ``queries``: who runs the planning queries (default: a thread of their own when ``replica`` can
        open another session, else this thread)."""
        self.replica = replica
        self.render = render
        self.readers = readers
        self.schemas = schemas
        self.windows = ChunkWindows(processed)
        self.chunk_sizes = ChunkSizes(replica)  # chunk_size capped by each table's row size
        # By default two ranges per reader: one being read, one waiting, so no reader idles between
        # collections (a pool may ask for fewer: the inline reader reads one chunk per loop turn).
        self.in_flight = in_flight if in_flight is not None else readers.in_flight
        self.stats = stats if stats is not None else RunStats()
        self.throughput: dict[int, ReaderThroughput] = self.stats.readers
        self._waiting: dict[int, float] = {}  # windows whose rows came, waiting for the stream: since when
        self._planned: dict[int, TableId] = {}  # the table of each open window
        self._frontier = _Frontier()
        self._schema_retries = 0
        self._pool_restarts = 0
        self.queries = queries if queries is not None else planning_queries(replica)
        self._low_watermarks: dict[int, LowWatermark] = {}  # one a connection (it remembers giving up)

    # ------------------------------------------------------------------ planning
    def has_room(self, progress: TableProgress) -> bool:
        """May another range of ``progress``'s table be planned now? (A snapshot not started yet is
        a new one: the frontier an earlier snapshot of the table left behind does not hold it back.)"""
        frontier = self._frontier
        if frontier.table == progress.table and frontier.ended and progress.started:
            return False
        return len(self._planned) < self.in_flight

    @property
    def busy(self) -> bool:
        """Are windows open (planned, being read, or waiting for the stream), or a planning query?"""
        return bool(self._planned) or self.queries.waiting

    def plan(self, progress: TableProgress, first_snapshot: bool, chunk_size: int, most: int) -> PlanOutcome:
        """Open up to ``most`` windows on the next ranges of ``progress``'s table and hand them to the
        readers. Call it between transactions only: the windows open at the stream's position, their
        ``lw``, which each reader waits to see before its SELECT."""
        table, new_snapshot = progress.table, not progress.started
        lw = self.windows.processed  # the stream's position: its readers wait until they see all of it
        try:
            schema = self.schemas.get(table)
            if not progress.started:
                max_key = self.queries.answer(
                    ("max_key", table, schema, progress.condition), self._max_key_query(lw, schema, progress)
                )
                if isinstance(max_key, Pending):
                    return ChunksPlanned(progress, 0, waiting=True)
                max_key, estimate = max_key
                self.chunk_sizes.learn(table, estimate)
                progress = progress.begun(max_key, first_snapshot)
                if progress.done:
                    log.info("%s is empty: snapshot done", table)
                    return SnapshotDone(progress, selected=False)
            elif not self.chunk_sizes.known(table):  # a snapshot this run resumed
                estimate = self.queries.answer(("row_length", table), lambda r: row_length_estimate(r, table))
                if isinstance(estimate, Pending):
                    return ChunksPlanned(progress, 0, waiting=True)
                self.chunk_sizes.learn(table, estimate)
            chunk_size = self.chunk_sizes.of(progress, chunk_size)
            assert progress.max_key is not None
            if self._frontier.table != table or new_snapshot:  # the table again: from its start
                self._frontier = _Frontier(table, progress.last_key)
            opened = 0
            frontier = self._frontier
            lw_text = str(lw)
            while opened < most and not frontier.ended and len(self._planned) < self.in_flight:
                end = self._next_end(schema, progress, chunk_size)
                if isinstance(end, Pending):
                    return ChunksPlanned(progress, opened, waiting=True)
                last = end is None or tuple(end) == tuple(progress.max_key)
                upto = tuple(progress.max_key) if end is None else tuple(end)
                window = self.windows.open(table, lw, upto, last, tuple(schema.key))
                self._planned[window] = table
                self.readers.submit(
                    ChunkJob(window, schema, frontier.after, upto, progress.condition, self.render, lw_text)
                )
                frontier.after, frontier.ended = upto, last
                opened += 1
        except SchemaError as exc:
            return self._shape_changed(progress, exc)
        except (QueryError, FilterError) as exc:
            self._schema_retries = 0
            return SnapshotFailed(progress, exc)
        return ChunksPlanned(progress, opened)

    def _max_key_query(self, lw: GtidSet, schema: TableSchema, progress: TableProgress) -> Any:
        """The snapshot's greatest key, read once the connection sees what was streamed (``lw``), and the
        server's estimate of its rows' size (:mod:`gtidsnap.snapshot.chunk_budget`)."""

        def query(replica: ReplicaPort) -> tuple[RawKey | None, int | None]:
            low_watermark = self._low_watermarks.setdefault(id(replica), LowWatermark(replica))
            low_watermark.read(lw)
            return replica.max_key(schema, progress.condition), row_length_estimate(replica, progress.table)

        return query

    def _next_end(self, schema: TableSchema, progress: TableProgress, chunk_size: int) -> Any:
        """Where the chunk after the frontier ends; None: it runs to the snapshot's greatest key;
        :data:`PENDING` while the query finding the next ends runs. The ends of ``ENDS_AT_ONCE``
        chunks are found at once and kept (dropped if the chunk size changes)."""
        frontier = self._frontier
        max_key = progress.max_key
        assert max_key is not None
        if frontier.size != chunk_size:
            frontier.ends.clear()
            frontier.size, frontier.exhausted = chunk_size, False
        if not frontier.ends and not frontier.exhausted:
            after, condition = frontier.after, progress.condition
            question = ("chunk_ends", frontier.table, schema, after, max_key, chunk_size, condition)
            ends = self.queries.answer(
                question, lambda r: r.chunk_ends(schema, after, max_key, chunk_size, ENDS_AT_ONCE, condition)
            )
            if isinstance(ends, Pending):
                return PENDING
            frontier.ends.extend(tuple(end) for end in ends)
            frontier.exhausted = len(ends) < ENDS_AT_ONCE
        return frontier.ends.popleft() if frontier.ends else None

    def _shape_changed(self, progress: TableProgress, exc: SchemaError) -> ShapeChanged | SnapshotFailed:
        self.schemas.forget(progress.table)
        self._drop_table(progress.table)
        if self._schema_retries < SCHEMA_RETRIES:
            self._schema_retries += 1
            log.info("schema of %s changed under the snapshot (%s); reading it again", progress.table, exc)
            return ShapeChanged(progress)
        self._schema_retries = 0
        return SnapshotFailed(progress, exc)

    # ------------------------------------------------------------------ the stream and the readers
    def feed(self, event: BinlogEvent) -> Sequence[Output]:
        """The outputs of one binlog event, in order (every event passes here, windows open or not)."""
        outputs = self.windows.feed(event)
        return (event,) if len(outputs) == 1 else self._mapped(outputs)  # one output: the event alone

    def collect(self) -> list[Output]:
        """What the finished reads let go out now; call between transactions."""
        reads, broken = self.readers.collect()
        if broken:
            return self._pool_died()
        out: list[Output] = []
        for read in reads:
            out.extend(self._on_read(read))
        return out

    def _on_read(self, read: ChunkRead) -> list[Output]:
        table = self._planned.get(read.window)
        if table is None:
            return []  # its window was dropped meanwhile
        if read.warning:
            log.warning("%s", read.warning)
        if read.failed:
            return self._read_failed(table, read)
        stats = self.throughput.setdefault(read.reader, ReaderThroughput())
        stats.rows += len(read.rows)
        stats.chunks += 1
        stats.busy_s += read.seconds
        lw = self.windows.low_watermark(read.window)
        assert lw is not None  # planned windows are open windows
        hw = parse_gtid_set(str(self.replica.flavor), read.executed) - lw
        self._waiting[read.window] = time.monotonic()
        out = self._mapped(self.windows.rows_read(read.window, read.keys, read.rows, hw))
        self.stats.window_opened_at = min(self._waiting.values(), default=None)
        return out

    def _read_failed(self, table: TableId, read: ChunkRead) -> list[Output]:
        error = rebuilt_error(read)
        if isinstance(error, SchemaError):
            self.schemas.forget(table)
            out = self._drop_table(table)
            if self._schema_retries < SCHEMA_RETRIES:
                self._schema_retries += 1
                return [*out, ChunksRedone(table, f"the shape of {table} changed under a reader: {error}")]
            self._schema_retries = 0
            return [*out, ChunksFailed(table, error)]
        if isinstance(error, QueryError | FilterError):
            self._schema_retries = 0  # the next table starts with every retry
            return [*self._drop_table(table), ChunksFailed(table, error)]
        raise error

    def _pool_died(self) -> list[Output]:
        self._pool_restarts += 1
        self.stats.reader_restarts += 1
        if self._pool_restarts > POOL_RESTARTS:
            raise SourceError(
                f"the chunk readers broke {self._pool_restarts} times in a row (a reader process died, or "
                "a Spark job reading a split failed); see the log for why (memory? a killed process?), or "
                "set snapshot.readers = 0 to read on the engine's thread"
            )
        tables = list(dict.fromkeys(self._planned.values()))
        out: list[Output] = []
        for table in tables:
            out.extend(self._drop_table(table))
            out.append(ChunksRedone(table, "a chunk reader process died"))
        return out

    def paused(self) -> None:
        """Snapshots were paused or resumed: a greatest key asked for before is stale after it."""
        self.queries.forget()

    def stop(self, tables: Iterable[TableId] | None) -> list[Output]:
        """Drop the windows of ``tables`` (all when None): their snapshots were stopped."""
        names = None if tables is None else set(tables)
        self.queries.forget()  # a greatest key asked for before is stale if the table is asked for again
        out: list[Output] = []
        for table in list(dict.fromkeys(self._planned.values())):
            if names is None or table in names:
                out.extend(self._drop_table(table))
        return out

    def _drop_table(self, table: TableId) -> list[Output]:
        """Forget every window of ``table``; the next range starts after the last emitted key."""
        dropped = [w for w, t in self._planned.items() if t == table]
        for window in dropped:
            del self._planned[window]
            self._waited(window)
        if self._frontier.table == table:
            self._frontier = _Frontier()
        return self._mapped(self.windows.abandon(*dropped))  # all at once: none of the table goes out

    def _mapped(self, outputs: Iterable[WindowsOutput]) -> list[Output]:
        out: list[Output] = []
        for item in outputs:
            if isinstance(item, ChunkOut):
                del self._planned[item.window]
                self._waited(item.window)
                self._schema_retries = 0
                self._pool_restarts = 0
                out.append(item)
            elif isinstance(item, WindowDiscarded):
                if item.table in self._planned.values():  # once per table
                    out.extend(self._drop_table(item.table))
                    out.append(ChunksRedone(item.table, item.reason))
            else:
                out.append(item)
        return out

    def _waited(self, window: int) -> None:
        """``window`` went out or was dropped: count how long it waited for the stream (under heavy
        writes the snapshot advances at the stream's pace; the progress display says so)."""
        since = self._waiting.pop(window, None)
        if since is not None:
            self.stats.window_wait_s += time.monotonic() - since
        self.stats.window_opened_at = min(self._waiting.values(), default=None)

    def close(self) -> None:
        self.queries.close()
        self.readers.close()
