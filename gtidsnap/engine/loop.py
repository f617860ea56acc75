"""The engine: one single-threaded loop that streams the binlog and lets snapshot chunks into it.

The loop plans chunk ranges (:mod:`gtidsnap.snapshot.planner`) and hands them to chunk readers; every
binlog event passes the open windows, and a chunk goes out where its window closes. The stream is read
on a thread of its own while windows are open (:mod:`gtidsnap.engine.stream_pump`).

Each emitted record gets the next sequence number. Output and checkpoint advance together (sink
commit, then checkpoint) and only at transaction boundaries, so a kill -9 anywhere resumes from the
last checkpoint with no loss and no duplicate in the output.

Threads: the loop owns the windows, the snapshot context, the sink's current batch and the sequence
numbers; a sealed batch goes to the background committer (:mod:`gtidsnap.engine.committer`) until its
commit and checkpoint. Other threads only put commands (:mod:`gtidsnap.core.commands`) on
:attr:`Engine.commands`, or read :attr:`Engine.stats` (/metrics). The next step is chosen by
:func:`gtidsnap.engine.loop_step.next_step` from plain facts.
"""

from __future__ import annotations

import functools
import logging
import queue
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial

from gtidsnap.core.checkpoint import Checkpoint, Edit
from gtidsnap.core.commands import (
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
from gtidsnap.core.errors import SchemaError, SourceError, stored_reason
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.model import BinlogEvent, RowChange, RowChanges, SchemaChange, TableId, TxBegin, TxCommit
from gtidsnap.core.notifications import NO_TOPIC
from gtidsnap.core.plan import SnapshotContext, TableProgress
from gtidsnap.core.ports import (
    CheckpointedSink,
    CheckpointPort,
    ChunkReaderPool,
    DecoderFigures,
    DrainingSink,
    PreparingSink,
    RenderingSink,
    ReplicaPort,
    RowsOnly,
    Sink,
    StreamFactory,
    StreamPort,
)
from gtidsnap.core.records import Emitted, Record, change_lines, change_record, seq_span, snapshot_output
from gtidsnap.core.run_stats import RunStats
from gtidsnap.core.schema import TableSchema
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.core.signal_ledger import SignalLedger
from gtidsnap.core.source_identity import TransactionStamp, stamp_of
from gtidsnap.engine.checkpoint_store import open_at, resumable
from gtidsnap.engine.committer import Commits
from gtidsnap.engine.loop_step import EngineSettings, LoopFacts, Step, next_step, take_commands
from gtidsnap.engine.stream_pump import PumpedStream, ShapesForgotten
from gtidsnap.snapshot.planner import (
    ChunkPlanner,
    ChunksFailed,
    ChunksPlanned,
    ChunksRedone,
    Output,
    ShapeChanged,
    SnapshotFailed,
)
from gtidsnap.snapshot.readers import InlineChunkReaders
from gtidsnap.snapshot.request import checked_request
from gtidsnap.snapshot.windows import ChunkOut

log = logging.getLogger("gtidsnap.engine.loop")
TX_BURST = 1000  # events read in a row (one transaction, or several small ones) before the loop's turn


class Engine:
    """Snapshot + stream, resumable. Build it with adapters, call :meth:`run`."""

    def __init__(
        self,
        replica: ReplicaPort,
        open_stream: StreamFactory,
        sink: Sink,
        store: CheckpointPort,
        settings: EngineSettings | None = None,
        captured: Iterable[TableId] = (),
        surrogate_keys: dict[TableId, tuple[str, ...]] | None = None,
        on_progress: Callable[[SnapshotContext, RunStats], None] | None = None,
        on_started: Callable[[Engine], None] | None = None,
        schemas: SchemaCache | None = None,
        readers: ChunkReaderPool | None = None,
    ) -> None:
        self.replica = replica
        self.open_stream = open_stream
        self.sink = sink
        self.store = store
        self.settings = settings or EngineSettings()
        self.captured: set[TableId] = set(captured)
        self.surrogate_keys = dict(surrogate_keys or {})
        self.on_progress, self.on_started = on_progress, on_started
        self.commands: queue.Queue[Command] = queue.Queue()
        self.stats = RunStats()
        self.delivered: Callable[[], int] = lambda: NO_TOPIC  # notifications on their topic (none: no outbox)
        self.schemas = schemas or SchemaCache(lambda t: replica.schema(t, self.surrogate_keys.get(t)))
        self._in_tx = self._stop = False
        self._last_chunk_at = 0.0
        self._commits = Commits(sink, store, self.stats)
        # No pool given: one reader on this thread, one chunk at a time (pauses kept as chunk_pause_s).
        self.readers: ChunkReaderPool = readers or InlineChunkReaders(
            replica, readers=1, ranges=1, pauses_s=self.stats.chunk_pause_s
        )
        self._chunks: ChunkPlanner | None = None  # set while run() runs
        self._decoders: DecoderFigures | None = None  # the stream's decoder processes, if any
        self._catalog: Callable[[], list[TableId]] = replica.tables  # the replica's tables (request patterns)
        self._prepared: set[TableId] = set()  # captured tables the sink was told of (PreparingSink)
        self._last_tx: tuple[TxCommit, GtidSet] | None = None  # the last commit, the processed set before
        # What a run resumes from (:meth:`_resume`: the checkpoint's, or the replica's on a first run).
        self._flavor = str(getattr(replica.flavor, "value", replica.flavor))
        self.processed: GtidSet = parse_gtid_set(self._flavor, "")  # transactions fully processed
        self.excused: GtidSet = self.processed  # other replicas' own writes, never waited for
        self.seq = 1  # the next record's number
        self.context = SnapshotContext()
        self.signals = SignalLedger()
        self.history: tuple[Edit, ...] = ()  # the checkpoint's deliberate edits, carried on
        self._stamp: TransactionStamp | None = None  # the last transaction processed (source identity)

    # ------------------------------------------------------------------ start and resume
    def _resume(self) -> None:
        checkpoint, self.excused = resumable(self.store, self.replica, self._flavor)  # errant elsewhere
        if isinstance(self.sink, CheckpointedSink):
            self.sink.report_checkpoints()
        self.history = checkpoint.history if checkpoint is not None else ()
        self._stamp = checkpoint.last_transaction if checkpoint is not None else None
        if checkpoint is None:
            self.sink.open(None)  # first: what the replica executes while an output opens is not backlog
            self.processed = self.replica.applied()  # with domains applied but never logged here
            log.info("first run: streaming from the replica's executed set %s", self.processed)
            self._commit()  # so a crash before the first commit resumes from here, not later
        else:
            self.processed = checkpoint.processed
            self.seq = checkpoint.next_seq
            self.context = checkpoint.context
            self.signals = checkpoint.signals.copy()
            open_at(self.sink, checkpoint, self.store.path)  # refused if the output used next_seq
            log.info("resuming after %s at record %d", self.processed, self.seq)
        # A table once snapshotted stays captured: its mirror must keep following the binlog.
        self.captured.update(t.table for t in self.context.tables)

    def request_snapshot(self, tables: Sequence[TableId], condition: str | None = None) -> None:
        """Queue snapshots of tables never snapshotted or whose snapshots all failed (none redone)."""
        self.captured.update(tables)
        known = {t.table for t in self.context.tables if not t.error}
        new = [t for t in tables if t not in known]
        if new:
            self._apply(StartSnapshot(tuple(new), condition))

    # ------------------------------------------------------------------ commands (between transactions)
    def _drain_commands(self) -> None:
        if not self.commands.queue:  # checked once per event: a lock-free look (len of a deque is atomic)
            return  # spares the lock and the raised queue.Empty, ~3% of streaming time when profiled
        self._catalog = functools.cache(self.replica.tables)  # read once a turn, not once a request
        for command in take_commands(self.commands):  # a flood waits for the next turns
            self._apply(command)

    def _apply(self, command: Command) -> None:
        if isinstance(command, SignalReceived):
            self._apply_signal(command)
            return
        if isinstance(command, StartSnapshot):
            for table, condition in checked_request(command, self._catalog, self.schemas).items():
                self.captured.add(table)
                self.context = self.context.enqueue([table], condition)
        elif isinstance(command, StopSnapshot):
            if self._chunks is not None:  # rows already streamed stay; the chunks in flight are dropped
                self._write(self._emitted(self._chunks.stop(command.tables)))
            self.context = self.context.stop(command.tables)
        elif isinstance(command, PauseSnapshots | ResumeSnapshots):
            self.context = replace(self.context, paused=isinstance(command, PauseSnapshots))
            if self._chunks is not None:
                self._chunks.paused()
        elif isinstance(command, SetChunkSize | SetChunkDelay):
            self.settings = self.settings.tuned(command)
        elif isinstance(command, Shutdown):
            self._stop = True
        log.info("command %s applied", command)

    def _apply_signal(self, signal: SignalReceived) -> None:
        """Act on a signal once; the ledger records what became of it with its offset."""
        recorded = self.signals.act_once(signal, self._apply, lambda: self.context)
        if recorded is None:
            return  # already consumed before a restart
        self.stats.signal_outcome(recorded.outcome)
        (log.warning if recorded.outcome.startswith("refused") else log.info)(
            "signal %s (%s) at offset %d: %s", signal.id, signal.kind, signal.offset, recorded.outcome
        )
        self._commits.uncommitted += 1  # checkpoint soon: the offset must be durable

    # ------------------------------------------------------------------ the loop
    def run(self, snapshot: Sequence[TableId] = (), until_caught_up: bool = False) -> RunStats:
        """Run until :class:`Shutdown` (or, with ``until_caught_up``, until snapshots are done and the
        stream has reached the replica's executed set read at that moment)."""
        self.readers.start()  # reader processes start up while the engine does
        try:
            self._resume()
            self.request_snapshot(snapshot)
            if self.on_started is not None:
                self.on_started(self)  # e.g. the signal consumer, which seeks to the checkpointed offsets
            stream: StreamPort = self.open_stream(self.processed, self._schema_of)
            self._decoders = getattr(stream, "decoders", None)  # figures for progress and metrics
        except BaseException:
            self.readers.close()
            raise
        target: GtidSet | None = None
        self._commits.start_background()
        # Readers render rows in the sink's own form (JSON bodies, Arrow columns): no work a row here.
        remote = bool(getattr(self.readers, "remote", False))
        render = self.sink.chunk_renderer(remote) if isinstance(self.sink, RenderingSink) else None
        if render is not None and not self.settings.compiled_reads:
            render = RowsOnly(render)  # snapshot.compiled_reads = false: the Python driver reads all
        start = self.processed - self.excused  # windows never wait for other replicas' errant writes
        chunks = self._chunks = ChunkPlanner(
            self.replica, self.readers, self.schemas, start, render=render, stats=self.stats
        )
        pump = PumpedStream(ShapesForgotten(stream, self.schemas), stream)  # pumped while readers work
        try:
            while not self._stop:
                self.stats.tick_at = time.monotonic()  # liveness (/healthz)
                self._commits.check()
                self._drain_commands()
                if self._stop:
                    break
                if not self._in_tx and self._commits.due(self.settings, self._snapshotting()):
                    self._commit()  # also between chunks: a snapshot of an idle source never reads the stream
                if not self._in_tx:
                    self._write(self._emitted(chunks.collect()))  # finished reads go out between transactions
                facts = self._facts(until_caught_up)
                step = next_step(facts)
                if not self._in_tx:  # a pump thread only while readers have work
                    if facts.snapshots_waiting or chunks.busy:
                        pump.pump()
                    else:
                        pump.unpump()
                if step is Step.TAKE_CHUNK and self._plan_chunks():
                    continue
                if step is Step.SLEEP:
                    time.sleep(facts.chunk_wait_s)  # cheaper than a heartbeat-long read of an idle stream
                    continue
                if step is Step.CHECK_CAUGHT_UP:
                    if target is None:
                        target = self.replica.executed()
                        log.info("snapshots done; streaming up to %s", target)
                    if target <= self.processed:
                        break
                # readers at work: look again soon; otherwise wait as long as commands allow
                event = pump.next(0.002 if chunks.busy else 0.1)
                if event is not None:
                    self._transaction(event, pump.reader(0.1), partial(self._streaming_on, pump, target))
                if not self._in_tx and self._commits.due(self.settings, self._snapshotting()):
                    self._commit()
            if not self._in_tx:
                if isinstance(self.sink, DrainingSink):
                    self.sink.drain()  # the output is whole when a run ends (a deferred MERGE, say)
                self._commit()
            self._commits.finish()
        finally:
            self._commits.abandon()  # already failing: the first error goes out
            chunks.close()
            self._chunks = None
            pump.close()
            self.sink.close()
        return self.stats

    def _transaction(
        self, event: BinlogEvent, read: Callable[[], BinlogEvent | None], on: Callable[[bool], bool]
    ) -> None:
        """``event`` and the rest of its transaction, then the next ones while ``on`` says the loop's
        turn would only read the stream again, up to ``TX_BURST`` events (chunks, commits, finished reads
        wait for a transaction's end; commands, a failed commit for the burst's): a loop turn a transaction
        was ~5% of a stream of small ones. A transaction's records go out in one write at its commit."""
        records: list[Emitted] = []
        self._on_event(event, records)
        going_on = False
        for _ in range(TX_BURST):
            if not self._in_tx:
                self._write(records)  # before a read that may wait for the source
                records = []
                if not on(going_on):
                    break
                going_on = True
            if (more := read()) is None:
                break
            self._on_event(more, records)
        self._write(records)

    def _streaming_on(self, pump: PumpedStream, target: GtidSet | None, going_on: bool) -> bool:
        """Between transactions: would the loop's turn only read the stream again (no readers, commands,
        commit due, or end of an ``until_caught_up`` run)? ``going_on``: asked before in this burst, and
        no snapshot was read then (which only a loop's turn changes: a command, a chunk planned)."""
        if not going_on and (pump.pumped or self._snapshotting()):
            return False
        if self._stop or self.commands.queue or self._commits.due(self.settings):
            return False
        return target is None or not target <= self.processed

    def _snapshotting(self) -> bool:  # chunks out, or tables waiting and not paused
        busy = self._chunks is not None and self._chunks.busy
        return busy or (bool(self.context.pending()) and not self.context.paused)

    def _facts(self, until_caught_up: bool) -> LoopFacts:
        """What :func:`gtidsnap.engine.loop_step.next_step` chooses from."""
        return LoopFacts(
            between_transactions=not self._in_tx,
            snapshots_waiting=bool(self.context.pending()) and not self.context.paused,
            chunk_wait_s=self._last_chunk_at + self.settings.chunk_delay_s - time.monotonic(),
            until_caught_up=until_caught_up,
        )

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
    def _plan_chunks(self) -> bool:
        """Hand the next ranges of the current table to free readers (:mod:`gtidsnap.snapshot.planner`);
        False when none is free (the loop reads the stream meanwhile)."""
        chunks = self._chunks
        assert chunks is not None
        progress = self.context.current()
        assert progress is not None
        if not chunks.has_room(progress):
            return False
        most = 1 if self.settings.chunk_delay_s > 0 else chunks.in_flight
        outcome = chunks.plan(
            progress, self.context.first_snapshot(progress.table), self.settings.chunk_size, most
        )
        if isinstance(outcome, ChunksPlanned | ShapeChanged):
            self.context = self.context.update(outcome.progress)
        elif isinstance(outcome, SnapshotFailed):
            self.context = self._finish(outcome.progress, outcome.error)
        else:
            self.context = self._finish(outcome.progress)
        if isinstance(outcome, ChunksPlanned) and outcome.waiting and not outcome.windows:
            return False  # its query runs on the planning thread: the loop reads the stream meanwhile
        self._last_chunk_at = time.monotonic()
        return True

    def _progress_of(self, table: TableId) -> TableProgress:
        return next(t for t in self.context.tables if t.table == table and not t.done)

    def _finish(self, progress: TableProgress, error: object = None) -> SnapshotContext:
        if error is not None:  # named in the run's summary: --until-caught-up then ends non-zero
            progress = progress.failed(stored_reason(str(error)))
            log.error("snapshot of %s stopped: %s", progress.table, progress.error)
            self.stats.failed[str(progress.table)] = str(progress.error)
            self.stats.errors["snapshot_failed"] += 1
        self._report()
        return self.context.update(progress.finished())

    # ------------------------------------------------------------------ events and outputs
    def _on_event(self, event: BinlogEvent, records: list[Emitted]) -> None:
        assert self._chunks is not None
        self.stats.events += 1
        outputs = self._chunks.feed(event)
        if len(outputs) > 1 or isinstance(event, RowChange | RowChanges):  # alone, others make no record
            self._emitted(outputs, records)
        if isinstance(event, TxBegin):
            self._in_tx = True
        elif isinstance(event, TxCommit):
            if not self._in_tx:  # events of it were lost: stop before it counts as processed
                raise SourceError(f"the binlog stream handed the commit of {event.gtid} without its start")
            self._in_tx = False
            before = self.processed
            self.processed = before.add(event.gtid)
            self._last_tx = (event, before)  # stamped at the next commit (:meth:`_last_stamp`)
        elif isinstance(event, SchemaChange):
            for table in event.tables:
                self.schemas.forget(table)  # read again, with the new shape, when next needed
            self._unfresh(event.tables)

    def _emitted(self, outputs: Iterable[Output], records: list[Emitted] | None = None) -> list[Emitted]:
        """The records of ``outputs``, added to ``records`` (the caller writes them)."""
        records = [] if records is None else records
        for out in outputs:
            if isinstance(out, RowChange) and out.table in self.captured:
                records.append(self._record_of_change(out))
            elif isinstance(out, RowChanges) and out.table in self.captured:
                records.append(change_lines(out, self.seq))
                self.seq += len(out)
                self.stats.saw_changes(out.table, out.op, len(out), out.source_ts)
            elif isinstance(out, ChunkOut):
                records.extend(self._records_of_chunk(out))
            elif isinstance(out, ChunksRedone):
                log.info("chunks of %s dropped, reading them again: %s", out.table, out.reason)
            elif isinstance(out, ChunksFailed):
                self.context = self._finish(self._progress_of(out.table), out.error)
        return records

    def _write(self, records: list[Emitted]) -> None:
        if records:
            self.sink.write(records)
            self.stats.records += self._commits.count(records)

    def _unfresh(self, tables: Iterable[TableId]) -> None:
        """A DDL of a table being snapshotted may change its key order: the rest goes to a mirror by merge."""
        progress = self.context.current()
        if progress is not None and progress.fresh and progress.table in set(tables):
            self.context = self.context.update(progress.not_fresh())

    def _record_of_change(self, change: RowChange) -> Record:
        self.seq += 1
        self.stats.saw_change(change)
        return change_record(change, self.seq - 1)

    def _records_of_chunk(self, chunk: ChunkOut) -> list[Emitted]:
        """A chunk's surviving rows as records; its table's progress moves past it. ``chunk.key_columns``:
        the key of the shape they were read with (a DDL's shape forgotten by the pump, a rename's). They
        are stamped with the source commit time of the last change streamed (the wall clock before any
        in this run): their ``source_ts`` is never later than a key's next change's."""
        progress = self._progress_of(chunk.table)
        table, rows = chunk.table, chunk.rows
        # stamped with the source's time where the stream stands (a key's next change comes later)
        stamp = self.stats.source_ts or int(time.time())
        records = snapshot_output(table, rows, chunk.key_columns, self.seq, progress.fresh, stamp)
        self.seq += seq_span(rows)
        progress = progress.chunk_read(chunk.upto, len(rows))
        if rows:
            self.context = self.context.emitted(table)
        self.context = self._finish(progress) if chunk.last else self.context.update(progress)
        self.stats.saw_chunk(table, len(rows))
        self._report()
        return records

    def _commit(self) -> None:
        """Output and checkpoint advance together (:class:`gtidsnap.engine.committer.Commits`)."""
        if isinstance(self.sink, PreparingSink) and not self.captured <= self._prepared:
            self._prepare(sorted(self.captured - self._prepared))
        self.signals.checkpointing(self.context, self.delivered())  # notifications out, progress in
        state = Checkpoint(self._flavor, self.processed, self.seq, None, self.context, self.signals.copy())
        state = replace(state, last_transaction=self._last_stamp(), history=self.history)
        self._commits.commit(state)
        self._report()

    def _prepare(self, tables: list[TableId]) -> None:
        """Tell the sink of newly captured tables and their shapes (read here, on the loop's thread):
        their output's tables are made with the commit that follows. A table whose shape cannot be read
        is left to the first event that needs it (which says why)."""
        assert isinstance(self.sink, PreparingSink)
        shapes: dict[TableId, TableSchema] = {}
        for table in tables:
            try:
                shapes[table] = self.schemas.get(table)
            except SchemaError as exc:
                log.debug("%s: its output's tables wait for its shape: %s", table, exc)
        self._prepared.update(tables)
        if shapes:
            self.sink.prepare(shapes)

    def _last_stamp(self) -> TransactionStamp | None:
        """The stamp of the last transaction processed (:mod:`gtidsnap.core.source_identity`)."""
        if self._last_tx is not None:
            (commit, before), self._last_tx = self._last_tx, None
            if commit.timestamp:  # 0: a stream that does not say (fakes)
                self._stamp = stamp_of(commit.gtid, commit.server_id, commit.timestamp, before)
        return self._stamp

    def _report(self) -> None:
        decoders = self._decoders
        if decoders is not None:
            self.stats.decoded = list(decoders.rows)
            self.stats.decoder_restarts = max(0, decoders.started - decoders.count)
        if self.on_progress is not None:
            self.on_progress(self.context, self.stats)
