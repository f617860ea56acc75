"""The engine: one single-threaded loop that alternates "read one chunk" and "stream to its fence".

Binlog processing pauses only while a chunk is taken (low watermark, SELECT, high watermark): the
loop simply does not read the stream then; the server keeps sending and the socket buffers. Every
other thread (CLI, signal consumer) talks to the loop through :attr:`Engine.commands`, so nothing
touches the window or the context concurrently.

Each emitted record gets the next sequence number. Output and checkpoint advance together (sink
commit, then checkpoint) and only at transaction boundaries, so a kill -9 anywhere resumes from the
last checkpoint with no loss and no duplicate in the output.

Threads: the loop owns the window, the snapshot context, the sink's current batch and the sequence
numbers. A sink that can seal (Delta) hands each batch to one background committer thread
(:mod:`gtidsnap.committer`), which owns that batch until its commit and the checkpoint saved right
after it; the loop waits for it before sealing the next one. The signal consumer thread only puts
commands (:mod:`gtidsnap.commands`) on :attr:`Engine.commands`. The ports the loop drives are declared
in :mod:`gtidsnap.ports`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gtidsnap.checkpoint import Checkpoint, resume_problem
from gtidsnap.commands import (
    Command,
    PauseSnapshots,
    ResumeSnapshots,
    SetChunkDelay,
    SetChunkSize,
    Shutdown,
    SignalReceived,
    StartSnapshot,
    StopSnapshot,
)
from gtidsnap.committer import BackgroundCommitter
from gtidsnap.crashpoints import crash_point
from gtidsnap.errors import CheckpointError, ConfigError, FilterError, GtidsnapError, QueryError, SchemaError
from gtidsnap.filters import check_filter
from gtidsnap.gtid import GtidSet
from gtidsnap.model import (
    BinlogEvent,
    ChunkDiscarded,
    ChunkEmitted,
    Row,
    RowChange,
    SchemaChange,
    TableId,
    TxBegin,
    TxCommit,
    WindowOutput,
)
from gtidsnap.plan import RawKey, SnapshotContext, TableProgress
from gtidsnap.ports import (
    CheckpointPort,
    DrainingSink,
    ReplicaPort,
    SealingSink,
    Sink,
    StreamFactory,
)
from gtidsnap.records import Record
from gtidsnap.run_stats import RunStats
from gtidsnap.schema import TableSchema
from gtidsnap.schema_cache import SchemaCache
from gtidsnap.selectors import SelectorError, resolve
from gtidsnap.signal_ledger import SignalLedger, SignalOutcome
from gtidsnap.window import ChunkWindow

log = logging.getLogger("gtidsnap.engine")


# A chunk due sooner than this is waited for with a sleep; a later one lets the stream run meanwhile
# (an idle stream's read returns only at the next heartbeat, which would cost a heartbeat per chunk).
SHORT_CHUNK_WAIT_S = 0.05
SCHEMA_RETRIES = 3  # a chunk that fails on a changed schema is tried again with the shape read anew
REASON_CHARS = 500  # longest reason kept in the checkpoint (signal outcomes, snapshot errors)


def cut(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters: reasons are stored in every checkpoint."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class InFlightChunk:
    """The chunk whose window is open: its table's progress when it was selected, and how it ends."""

    progress: TableProgress
    last_raw_key: RawKey | None  # the next chunk's lower bound, exactly as the server returned it
    count: int  # rows selected
    limit: int  # the chunk size asked for

    @property
    def last(self) -> bool:
        """Fewer rows than asked for: the table's snapshot ends with this chunk."""
        return self.count < self.limit


@dataclass(frozen=True)
class EngineSettings:
    chunk_size: int = 1024
    chunk_delay_s: float = 0.0
    checkpoint_interval_s: float = 1.0
    commit_rows: int = 100_000


# ----------------------------------------------------------------------------- the loop


class Engine:
    """Snapshot + stream, resumable. Build it with adapters, call :meth:`run`."""

    def __init__(
        self,
        replica: ReplicaPort,
        open_stream: StreamFactory,
        sink: Sink,
        store: CheckpointPort,
        settings: EngineSettings = EngineSettings(),
        captured: Iterable[TableId] = (),
        surrogate_keys: dict[TableId, tuple[str, ...]] | None = None,
        on_progress: Callable[[SnapshotContext, RunStats], None] | None = None,
        on_started: Callable[[Engine], None] | None = None,
        schemas: SchemaCache | None = None,
    ) -> None:
        self.replica = replica
        self.open_stream = open_stream
        self.sink = sink
        self.store = store
        self.settings = settings
        self.captured: set[TableId] = set(captured)
        self.surrogate_keys = dict(surrogate_keys or {})
        self.on_progress = on_progress
        self.on_started = on_started
        self.commands: queue.Queue[Command] = queue.Queue()
        self.stats = RunStats()
        # shared with the sink when the runner builds both (gtidsnap.schema_cache)
        self.schemas = schemas or SchemaCache(lambda t: replica.schema(t, self.surrogate_keys.get(t)))
        self._window: ChunkWindow | None = None
        self._chunk: InFlightChunk | None = None
        self._in_tx = False
        self._stop = False
        self._last_chunk_at = 0.0
        self._last_commit_at = time.monotonic()
        self._uncommitted = 0
        self._schema_retries = 0
        self._committer: BackgroundCommitter | None = None  # set while run() runs, for a SealingSink

    # ------------------------------------------------------------------ start and resume
    def _resume(self) -> None:
        checkpoint = self.store.load()
        flavor = self._flavor()
        if checkpoint is None:
            self.processed = self.replica.executed()
            self.seq = 1
            self.context = SnapshotContext()
            self.signals = SignalLedger()
            self.sink.open(None)
            log.info("first run: streaming from the replica's executed set %s", self.processed)
            self._commit()  # so a crash before the first commit resumes from here, not later
        else:
            replica = self.replica
            problem = resume_problem(
                checkpoint, flavor, replica.executed(), replica.purged(), replica.describe()
            )
            if problem is not None:
                raise CheckpointError(f"checkpoint {self.store.path} cannot be continued: {problem}")
            self.processed = checkpoint.processed
            self.seq = checkpoint.next_seq
            self.context = checkpoint.context
            self.signals = checkpoint.signals.copy()
            self.sink.open(checkpoint.sink_position)
            log.info("resuming after %s at record %d", self.processed, self.seq)
        # A table once snapshotted stays captured: its mirror must keep following the binlog.
        self.captured.update(t.table for t in self.context.tables)

    def request_snapshot(self, tables: Sequence[TableId], condition: str | None = None) -> None:
        """Queue snapshots of tables never snapshotted before (a restart does not redo finished ones)."""
        self.captured.update(tables)
        known = {t.table for t in self.context.tables}
        new = [t for t in tables if t not in known]
        if new:
            self._apply(StartSnapshot(tuple(new), condition))

    # ------------------------------------------------------------------ the loop
    def run(self, snapshot: Sequence[TableId] = (), until_caught_up: bool = False) -> RunStats:
        """Run until :class:`Shutdown` (or, with ``until_caught_up``, until snapshots are done and the
        stream has reached the replica's executed set read at that moment)."""
        self._resume()
        self.request_snapshot(snapshot)
        if self.on_started is not None:
            self.on_started(self)  # e.g. the signal consumer, which seeks to the checkpointed offsets
        stream = self.open_stream(self.processed, self._schema_of)
        target: GtidSet | None = None
        if isinstance(self.sink, SealingSink):
            self._committer = BackgroundCommitter()
        try:
            while not self._stop:
                if self._committer is not None:
                    self._committer.check()
                self._drain_commands()
                if self._stop:
                    break
                if not self._in_tx and self._commit_due():
                    self._commit()  # also between chunks: a snapshot of an idle source never reads the stream
                if self._window is None and not self._in_tx and self._busy():
                    wait = self._chunk_wait()
                    if wait <= 0:
                        self._take_chunk()
                        continue
                    if wait <= SHORT_CHUNK_WAIT_S:
                        time.sleep(wait)  # cheaper than a heartbeat-long read of an idle stream
                        continue
                if until_caught_up and self._window is None and not self._in_tx and not self._busy():
                    if target is None:
                        target = self.replica.executed()
                        log.info("snapshots done; streaming up to %s", target)
                    if target <= self.processed:
                        break
                event = stream.next()
                if event is not None:
                    self._on_event(event)
                if not self._in_tx and self._commit_due():
                    self._commit()
            if not self._in_tx:
                if isinstance(self.sink, DrainingSink):
                    self.sink.drain()  # the output is whole when a run ends (a deferred MERGE, say)
                self._commit()
            if self._committer is not None:
                self._committer.wait()
        finally:
            committer, self._committer = self._committer, None
            if committer is not None:
                with contextlib.suppress(Exception):  # already failing: let the first error out
                    committer.wait()
            stream.close()
            self.sink.close()
        return self.stats

    def _busy(self) -> bool:
        return bool(self.context.pending()) and not self.context.paused

    def _chunk_wait(self) -> float:
        """Seconds until the next chunk may be taken (``chunk_delay_s`` after the previous one)."""
        return self._last_chunk_at + self.settings.chunk_delay_s - time.monotonic()

    def _commit_due(self) -> bool:
        if self._uncommitted >= self.settings.commit_rows:
            return True  # with a commit in flight this waits for it: memory stays bounded by commit_rows
        if self._committer is not None and self._committer.busy:
            return False  # the next batch grows while the previous one commits
        return time.monotonic() - self._last_commit_at >= self.settings.checkpoint_interval_s

    # ------------------------------------------------------------------ commands
    def _drain_commands(self) -> None:
        if not self.commands.queue:  # checked once per event: a lock-free look (len of a deque is atomic)
            return  # spares the lock and the raised queue.Empty, ~3% of streaming time when profiled
        while True:
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return
            self._apply(command)

    def _apply(self, command: Command) -> None:
        if isinstance(command, SignalReceived):
            self._apply_signal(command)
            return
        if isinstance(command, StartSnapshot):
            tables = list(dict.fromkeys([*command.tables, *self._resolve(command.selectors)]))
            for table in tables:
                self.schemas.get(table)  # fail early, naming the table, if it cannot be snapshotted
            unknown = set(command.conditions) - {str(t) for t in tables}
            if unknown:
                raise SchemaError(f"a filter names {', '.join(sorted(unknown))}, which is not in the request")
            conditions = {  # every filter checked before any table is queued: a request is taken whole
                t: self._filter(t, command.conditions.get(str(t), command.condition)) for t in tables
            }
            for table in tables:
                self.captured.add(table)
                self.context = self.context.enqueue([table], conditions[table])
        elif isinstance(command, StopSnapshot):
            if self._window is not None and (command.tables is None or self._window.table in command.tables):
                self._drop_window()  # rows already streamed stay; the chunk is dropped
            self.context = self.context.stop(command.tables)
        elif isinstance(command, PauseSnapshots):
            self.context = replace(self.context, paused=True)
        elif isinstance(command, ResumeSnapshots):
            self.context = replace(self.context, paused=False)
        elif isinstance(command, SetChunkSize):
            if command.rows < 1:
                raise ConfigError(f"chunk size must be at least 1, got {command.rows}")
            self.settings = replace(self.settings, chunk_size=command.rows)
        elif isinstance(command, SetChunkDelay):
            self.settings = replace(self.settings, chunk_delay_s=max(0.0, command.seconds))
        elif isinstance(command, Shutdown):
            self._stop = True
        log.info("command %s applied", command)

    def _resolve(self, selectors: Sequence[str]) -> list[TableId]:
        """Names as they are, regular expressions (RE2) against the replica's catalog (full match)."""
        if not selectors:
            return []
        try:
            return resolve(selectors, self.replica.tables())
        except SelectorError as exc:
            raise SchemaError(str(exc)) from None

    def _filter(self, table: TableId, condition: str | None) -> str | None:
        """The filter as it will run, so a request is refused when it arrives (FilterError names why);
        the chunk SQL checks it again (a checkpoint may hold one from elsewhere)."""
        if condition is None:
            return None
        return check_filter(condition, table, [c.name for c in self.schemas.get(table).columns])

    def _apply_signal(self, signal: SignalReceived) -> None:
        """Act on a signal once; record what became of it with its offset (see :class:`SignalReceived`)."""
        if self.signals.consumed(signal.partition, signal.offset):
            return  # already consumed before a restart
        if signal.error is not None:
            outcome = f"refused: {cut(signal.error)}"
        elif self.signals.repeated(signal.id):
            outcome = "ignored: duplicate id"
        else:
            try:
                if signal.command is not None:
                    self._apply(signal.command)
                outcome = "done"
            except GtidsnapError as exc:
                outcome = f"refused: {cut(str(exc))}"
        self.signals.record(SignalOutcome(signal.id, signal.kind, signal.partition, signal.offset, outcome))
        (log.warning if outcome.startswith("refused") else log.info)(
            "signal %s (%s) at offset %d: %s", signal.id, signal.kind, signal.offset, outcome
        )
        self._uncommitted += 1  # checkpoint soon: the offset must be durable

    # ------------------------------------------------------------------ schemas
    def _schema_of(self, table: TableId) -> TableSchema | None:
        """The binlog adapter's question: is this table captured, and with which shape?"""
        if table not in self.captured:
            return None
        try:
            return self.schemas.get(table)
        except SchemaError as exc:
            log.error("cannot capture %s: %s", table, exc)
            self.captured.discard(table)
            return None

    # ------------------------------------------------------------------ chunks
    def _take_chunk(self) -> None:
        """Take the next chunk of the current table: low watermark, SELECT, high watermark.

        A schema error (the replica applied a DDL the stream has not reached) reads the shape again and
        retries; a statement the server refuses or stops at the time limit (:class:`QueryError`), or a
        filter that no longer passes its check, fails this table's snapshot with the reason and leaves
        everything else running."""
        progress = self.context.current()
        assert progress is not None
        try:
            schema = self.schemas.get(progress.table)
            condition = progress.condition  # checked by the chunk SQL: FilterError fails the snapshot
            if not progress.started:
                max_key = self.replica.max_key(schema, condition)
                fresh = self.context.first_snapshot(progress.table)
                progress = progress.begun(max_key, fresh)
                self.context = self.context.update(progress) if not progress.done else self._finish(progress)
                if progress.done:
                    log.info("%s is empty: snapshot done", progress.table)
                    return
            assert progress.max_key is not None
            paused_at = time.monotonic()
            lw = self.replica.executed()
            try:
                chunk = self.replica.select_chunk(
                    schema, progress.last_key, progress.max_key, self.settings.chunk_size, condition
                )
            finally:
                self.stats.chunk_pause_s.append(time.monotonic() - paused_at)
            hw = self.replica.executed() - lw
        except SchemaError as exc:
            self.schemas.forget(progress.table)
            if self._schema_retries < SCHEMA_RETRIES and self._table_exists(progress.table):
                # The replica applied a DDL the stream has not reached yet: read the shape again.
                self._schema_retries += 1
                log.info(
                    "schema of %s changed under the snapshot (%s); reading it again", progress.table, exc
                )
                return
            self._fail(progress, exc)
            return
        except (QueryError, FilterError) as exc:
            self._fail(progress, exc)
            return
        self._schema_retries = 0
        self._last_chunk_at = time.monotonic()
        if chunk.count == 0:
            self.context = self._finish(progress)
            return
        self._chunk = InFlightChunk(progress, chunk.last_raw_key, chunk.count, self.settings.chunk_size)
        self._window = ChunkWindow(progress.table, chunk.rows, lw, hw, self.processed)
        self.stats.window_opened_at = time.monotonic()
        self._emit(self._window.start())

    def _fail(self, progress: TableProgress, exc: GtidsnapError) -> None:
        """End one table's snapshot with the reason (shown by ``gtidsnap status``); the rest goes on."""
        log.error("snapshot of %s stopped: %s", progress.table, exc)
        self._schema_retries = 0
        self._last_chunk_at = time.monotonic()
        self.context = self._finish(progress.failed(cut(str(exc))))

    def _table_exists(self, table: TableId) -> bool:
        try:
            self.schemas.get(table)
        except SchemaError:
            return False
        return True

    def _finish(self, progress: TableProgress) -> SnapshotContext:
        self._report()
        return self.context.update(progress.finished())

    # ------------------------------------------------------------------ events and outputs
    def _on_event(self, event: BinlogEvent) -> None:
        outputs = self._window.feed(event) if self._window is not None else (event,)
        self._emit(outputs)
        if isinstance(event, TxBegin):
            self._in_tx = True
        elif isinstance(event, TxCommit):
            self._in_tx = False
            self.processed = self.processed.add(event.gtid)
        elif isinstance(event, SchemaChange):
            for table in event.tables:
                self.schemas.forget(table)  # read again, with the new shape, when next needed
            self._unfresh(event.tables)

    def _emit(self, outputs: Iterable[WindowOutput]) -> None:
        records: list[Record] = []
        for out in outputs:
            if isinstance(out, RowChange) and out.table in self.captured:
                records.append(self._record_of_change(out))
            elif isinstance(out, ChunkEmitted):
                records.extend(self._records_of_chunk(out))
            elif isinstance(out, ChunkDiscarded):
                log.info("chunk of %s discarded, selecting it again: %s", out.table, out.reason)
                self.schemas.forget(out.table)
                self._drop_window()
        if records:
            self.sink.write(records)
            self._uncommitted += len(records)
            self.stats.records += len(records)
        if self._window is not None and self._window.done:
            self._drop_window()

    def _unfresh(self, tables: Iterable[TableId]) -> None:
        """A DDL of a table being snapshotted may change its key order (a collation, a type): the
        rest of that snapshot goes to a Delta mirror by merge, never as appends."""
        progress = self.context.current()
        if progress is not None and progress.fresh and progress.table in set(tables):
            self.context = self.context.update(progress.not_fresh())
            if self._chunk is not None and self._chunk.progress.table == progress.table:
                self._chunk = replace(self._chunk, progress=self._chunk.progress.not_fresh())

    def _drop_window(self) -> None:
        """The window is closed (emitted or discarded) or abandoned: count how long it waited."""
        self.stats.window_wait_s += self.stats.window_waiting_s()
        self.stats.window_opened_at = None
        self._window, self._chunk = None, None

    def _display_key(self, table: TableId, row: Row) -> tuple[Any, ...]:
        return tuple(row.get(c) for c in self.schemas.get(table).key)

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def _record_of_change(self, change: RowChange) -> Record:
        row = change.after if change.after is not None else change.before
        assert row is not None
        return Record(
            op=change.op,
            table=change.table,
            key=self._display_key(change.table, row),
            before=change.before,
            after=change.after,
            gtid=str(change.gtid),
            seq=self._next_seq(),
            snapshot=False,
            source_ts=change.source_ts,
        )

    def _records_of_chunk(self, chunk: ChunkEmitted) -> list[Record]:
        assert self._chunk is not None
        progress = self._chunk.progress
        now = int(time.time())
        records = [
            Record(
                "r",
                chunk.table,
                self._display_key(chunk.table, row),
                None,
                row,
                None,
                self._next_seq(),
                True,
                now,
                progress.fresh,
            )
            for _, row in chunk.rows
        ]
        progress = progress.chunk_read(self._chunk.last_raw_key, len(records))
        if records:
            self.context = self.context.emitted(chunk.table)
        self.context = self._finish(progress) if self._chunk.last else self.context.update(progress)
        self.stats.chunks += 1
        self.stats.snapshot_rows += len(records)
        self._chunk = None
        self._report()
        return records

    # ------------------------------------------------------------------ commits
    def _commit(self) -> None:
        """Sink first, then the checkpoint that names the sink's position: see the module docstring.

        With a :class:`SealingSink` both happen in the background (:mod:`gtidsnap.committer`): the
        batch and the engine's state are taken together here, so the checkpoint saved after the batch
        is committed describes exactly what the batch holds, while the engine reads on."""
        if self._committer is not None and isinstance(self.sink, SealingSink):
            self._committer.wait()
            state = (
                self.processed,
                self.seq,
                self.context,
                self.signals.copy(),
            )  # the engine goes on
            job = self.sink.seal()
            self._committer.submit(lambda: self._checkpoint(job(), *state))
        else:
            self._checkpoint(self.sink.commit(), self.processed, self.seq, self.context, self.signals)
        self._uncommitted = 0
        self._last_commit_at = time.monotonic()
        self._report()

    def _checkpoint(
        self,
        position: Any,
        processed: GtidSet,
        seq: int,
        context: SnapshotContext,
        signals: SignalLedger,
    ) -> None:
        crash_point("between-commit-and-checkpoint")
        self.store.save(Checkpoint(self._flavor(), processed, seq, position, context, signals))

    def _flavor(self) -> str:
        return str(getattr(self.replica.flavor, "value", self.replica.flavor))

    def _report(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.context, self.stats)
