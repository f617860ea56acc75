"""Chunk readers: the SELECT of a chunk's range and its high watermark, in processes of their own.

A chunk's rows cost the client more CPU than anything else in a snapshot (PyMySQL's parsing of the
result set, then normalising each value): on the engine's thread they stop the stream and cap the
snapshot at one core. Here each reader is a process with its own read-only connection; it SELECTs a
key range the engine planned (:mod:`gtidsnap.snapshot.planner`), normalises and keys the rows, reads
the executed set right after (the chunk's high watermark, before subtracting ``lw``) and sends it all
back. The window opened at the stream's position when the job was handed out (its ``lw``): before
its SELECT the reader makes sure every transaction of ``lw`` is visible to it
(:mod:`gtidsnap.source.low_watermark`; the visible set it read with its previous chunk's high watermark
usually shows it, so it costs no round trip), which spares the engine's thread a round trip per
chunk. The engine's loop never waits for a reader: it collects what is finished. For a JSON-lines
output the reader also renders the rows in the output's form (``ChunkJob.render``, the sink's
``chunk_renderer``): each row's JSON for JSON lines (:func:`gtidsnap.core.records.snapshot_line_body`,
which the engine only splices into the row's line), the chunk's Arrow columns for Delta
(:mod:`gtidsnap.sinks.arrow_columns`), so the engine's thread, the snapshot's limit once chunks are
read elsewhere, does no work a row; bytes and columns also cost less to send than values. Where the
output takes columns (:class:`gtidsnap.core.ports.ColumnsRenderer`: Delta) and the table's types allow,
the SELECT is read into Arrow by a compiled client (:mod:`gtidsnap.source.arrow_chunks`) and no row is
ever a Python object; the visibility wait before it and ``hw`` after it stay on the reader's session.

The pool is the standard library's ``ProcessPoolExecutor`` with the ``spawn`` start method (the
engine's process has threads, a Kafka client and perhaps a JVM: forking it is unsafe). A reader's
connection opens on its first job, so a refused login or a lost server reaches the engine as that
job's failure. Failures travel as the error's type name and message (gtidsnap's errors are rebuilt by
:func:`rebuilt_error`, so ``retryable`` and the CLI's exit code survive); a reader process that dies
(kill -9, out of memory) breaks the pool: :meth:`ProcessChunkReaders.collect` reports ``broken`` and
the pool is built anew on the next submit, the engine reading the lost ranges again.

:class:`InlineChunkReaders` runs the same jobs on a replica object in the calling thread: the engine's
own reader when ``snapshot.readers = 0``, and unit tests, deciding when each read finishes.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

from gtidsnap.core.errors import (
    ConfigError,
    FatalSourceError,
    FilterError,
    GtidsnapError,
    PrerequisiteError,
    QueryError,
    SchemaError,
    SinkError,
    SourceError,
)
from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.core.model import Key, ReadRows
from gtidsnap.core.ports import ChunkJob, ChunkRead, ColumnsRenderer, ReplicaPort
from gtidsnap.core.records import split_chunk_rows
from gtidsnap.process_memory import lean_process
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.low_watermark import LowWatermark

log = logging.getLogger(__name__)

PARENT_CHECK_S = 0.5  # how often a reader checks that its engine is alive
HUNG_SLACK_S = 10.0  # added to the longest a read can take before its reader counts as hung
# The shortest ``hung_after_s``: a read handed to the readers may wait behind another in the call queue,
# and a healthy reader taken for hung costs a restart of every reader (four in a row stop the run).
MIN_HUNG_AFTER_S = 1.0
READER_EXIT_S = 2.0  # how long a closing pool waits for a reader to end before killing it


def read_chunk(replica: ReplicaPort, job: ChunkJob, watermark: LowWatermark | None = None) -> ChunkRead:
    """One job on ``replica``: once ``job.lw`` is visible (:meth:`LowWatermark.ensure_visible`; the
    visible set read with the previous chunk's ``hw`` usually shows it, so no round trip), the SELECT,
    then the executed set, ``hw`` (so it covers the SELECT), with the visible set for the next job.
    ``watermark``: the reader's own, kept from job to job."""
    started = time.perf_counter()
    watermark = watermark if watermark is not None else LowWatermark(replica)
    gave_up = watermark.gave_up
    try:
        if job.lw:
            watermark.ensure_visible(parse_gtid_set(str(replica.flavor), job.lw))
        read = _compiled_read(replica, job)
        if read is None:
            chunk = replica.select_chunk(job.schema, job.after, job.upto, None, job.condition)
        executed, visible = replica.executed_and_visible()  # after the SELECT, whichever client ran it
        watermark.saw(visible)
        if read is None:
            keys, rows = job.render(chunk.rows, job.schema) if job.render else split_chunk_rows(chunk.rows)
        else:
            keys, rows = read
    except GtidsnapError as exc:
        return ChunkRead(job.window, reader=os.getpid(), error_type=type(exc).__name__, error=str(exc))
    warning = watermark.gave_up if watermark.gave_up != gave_up else None
    seconds = time.perf_counter() - started
    return ChunkRead(job.window, keys, rows, str(executed), os.getpid(), seconds, warning=warning or "")


def _compiled_read(replica: ReplicaPort, job: ChunkJob) -> tuple[tuple[Key, ...], ReadRows] | None:
    """The chunk read into Arrow by the compiled client and rendered from its columns, where the output
    takes columns and the client serves the table; None: the Python path reads it."""
    if not isinstance(job.render, ColumnsRenderer):
        return None
    columns = replica.select_chunk_columns(job.schema, job.after, job.upto, job.condition)
    if columns is None:
        return None
    try:
        return job.render.from_columns(columns, job.schema)
    except SinkError as exc:  # a value that does not fit its column: the Python path names it, or reads it
        log.warning("%s; the chunk is read by the Python path", exc)
        return None


_ERRORS: dict[str, Callable[[str], GtidsnapError]] = {
    cls.__name__: cls
    for cls in (ConfigError, SourceError, FatalSourceError, QueryError, SchemaError, FilterError)
}
_ERRORS[PrerequisiteError.__name__] = lambda message: PrerequisiteError([message])


def rebuilt_error(read: ChunkRead) -> GtidsnapError:
    """The reader's failure as the engine's own error type (unknown types: a retryable SourceError)."""
    make = _ERRORS.get(read.error_type or "", SourceError)
    return make(read.error)


# ----------------------------------------------------------------------------- in processes

_worker_settings: ConnectionSettings | None = None
# In a reader process (or a Spark executor's Python worker): one connection per replica, and what it
# saw last, for every job the process runs.
_connections: dict[ConnectionSettings, tuple[ReplicaPort, LowWatermark]] = {}


def worker_connection(settings: ConnectionSettings) -> tuple[ReplicaPort, LowWatermark]:
    """This process's connection to the replica of ``settings``, opened on first use, with its
    :class:`LowWatermark`; raises what connecting raises."""
    found = _connections.get(settings)
    if found is None:
        from gtidsnap.source.replica import Replica  # the reader's process imports it, the engine's has it

        replica = Replica(settings)
        found = _connections[settings] = (replica, LowWatermark(replica))
    return found


def read_with(settings: ConnectionSettings, job: ChunkJob) -> ChunkRead:
    """``job`` on this process's connection to ``settings``' replica; a refused connection is the job's
    failure, sent back as data."""
    try:
        replica, watermark = worker_connection(settings)
    except GtidsnapError as exc:
        return ChunkRead(job.window, reader=os.getpid(), error_type=type(exc).__name__, error=str(exc))
    return read_chunk(replica, job, watermark)


def _worker_start(settings: ConnectionSettings, engine_pid: int) -> None:
    global _worker_settings
    _worker_settings = settings
    lean_process()
    threading.Thread(target=_exit_with_engine, args=(engine_pid,), daemon=True).start()


def _exit_with_engine(engine_pid: int) -> None:
    """A reader outlives a killed engine (kill -9) blocked on its job queue, holding a connection to
    the replica: it checks twice a second that its engine is still its parent, and ends when not.
    ``engine_pid`` comes from the engine, not from ``getppid()`` at start: an engine killed while its
    readers start up has already handed them to another parent."""
    while os.getppid() == engine_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _worker_warm() -> None:
    """A reader's first call, at the engine's start: the imports and the connection happen while the
    engine starts up, not when the first chunk waits for them. A connection that fails here is opened
    again by the first job, which reports the failure."""
    assert _worker_settings is not None
    with contextlib.suppress(GtidsnapError):
        worker_connection(_worker_settings)


def _worker_read(job: ChunkJob) -> ChunkRead:
    """A job in a reader process, on the process's own connection (opened on first use)."""
    assert _worker_settings is not None
    return read_with(_worker_settings, job)


@dataclass
class ProcessChunkReaders:
    """``size`` reader processes, each with its own connection to the replica (see the module doc).

    A read that has not come back ``hung_after_s`` after it was handed to a reader (a stopped or hung
    process: its statements are bounded by the server's limit and the socket's timeout) is reported,
    the readers are killed and started again, and the chunks in flight are read again, as when a
    reader dies. Closing kills a reader that does not end by itself, so a run never waits on one."""

    settings: ConnectionSettings
    readers: int
    hung_after_s: float | None = None  # None: twice the longest a read can take (statement and socket)
    _pool: ProcessPoolExecutor | None = None
    _futures: list[Future[ChunkRead]] = field(default_factory=list)
    _handed: dict[Future[ChunkRead], float] = field(default_factory=dict)  # when each went to a reader

    def __post_init__(self) -> None:
        if self.hung_after_s is None:  # a job may wait in the call queue behind one that runs
            self.hung_after_s = 2 * self.settings.read_timeout + HUNG_SLACK_S
        if not self.hung_after_s >= MIN_HUNG_AFTER_S:  # NaN too
            raise ValueError(
                f"hung_after_s = {self.hung_after_s!r}: a read must be given at least {MIN_HUNG_AFTER_S:g} s "
                "before its reader counts as hung"
            )

    @property
    def size(self) -> int:
        return self.readers

    @property
    def in_flight(self) -> int:
        return 2 * self.readers

    def start(self) -> None:
        """Start the reader processes now, each importing what it needs and connecting (a new Python
        process takes ~0.5 s of CPU to get there), so they are ready when the first chunk is planned."""
        pool = self._started()
        for _ in range(self.readers):  # one call each: each call on an idle pool starts a process
            pool.submit(_worker_warm)

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                self.readers,
                mp_context=context,
                initializer=_worker_start,
                initargs=(self.settings, os.getpid()),
            )
        return self._pool

    def submit(self, job: ChunkJob) -> None:
        self._started()
        assert self._pool is not None
        try:
            self._futures.append(self._pool.submit(_worker_read, job.portable()))
        except BrokenProcessPool:
            self._futures.append(_broken_future())

    def collect(self) -> tuple[list[ChunkRead], bool]:
        if not self._futures:
            return [], False
        done = [f for f in self._futures if f.done()]
        if not done:
            return [], self._hung()
        reads: list[ChunkRead] = []
        broken = False
        for future in done:
            try:
                reads.append(future.result())
            except BrokenProcessPool:
                broken = True
        if broken:
            log.warning("a chunk reader process died; its pool is started again and the chunks read again")
            self._drop_pool()
            return [], True
        # Keep exactly the futures not read above: one finishing meanwhile is read next time, never lost.
        self._futures = [f for f in self._futures if f not in done]
        for future in done:
            self._handed.pop(future, None)
        return reads, False

    def _hung(self) -> bool:
        """Has a read handed to a reader not come back within ``hung_after_s``? Then start again."""
        now = time.monotonic()
        for future in self._futures:
            if future.running():  # handed to the readers' call queue
                self._handed.setdefault(future, now)
        waited = max((now - t for f, t in self._handed.items() if not f.done()), default=0.0)
        assert self.hung_after_s is not None
        if waited <= self.hung_after_s:
            return False
        log.warning(
            "a chunk read has not come back from its reader in %.0f s (the process is stopped or hung): "
            "the readers are started again and the chunks in flight read again",
            waited,
        )
        self._drop_pool(kill=True)
        return True

    def _drop_pool(self, kill: bool = False) -> None:
        """Shut the readers down; ``kill``: at once (a stopped process never ends by itself), else
        each gets ``READER_EXIT_S`` to end on its own."""
        pool, self._pool, self._futures, self._handed = self._pool, None, [], {}
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())  # CPython's, read only here
        if kill:
            for process in processes:
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + READER_EXIT_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():  # stopped or hung: the run must not wait for it at exit
                process.kill()

    def close(self) -> None:
        self._drop_pool()


def _broken_future() -> Future[ChunkRead]:
    future: Future[ChunkRead] = Future()
    future.set_exception(BrokenProcessPool("the reader pool is broken"))
    return future


# ----------------------------------------------------------------------------- in this thread


@dataclass
class InlineChunkReaders:
    """Jobs run on ``replica`` in the caller's thread: at once on :meth:`collect` with ``eager`` (the
    engine's reader with ``snapshot.readers = 0``, one range in flight: the loop pauses for one
    chunk's read at a time, each pause appended to ``pauses_s``), or when :meth:`finish` says so
    (unit tests decide when each read finishes)."""

    replica: ReplicaPort
    readers: int = 2
    eager: bool = True
    queued: list[ChunkJob] = field(default_factory=list)
    _done: list[ChunkRead] = field(default_factory=list)
    broken: bool = False
    _watermark: LowWatermark | None = None
    ranges: int | None = None  # ranges in flight (None: two per reader)
    pauses_s: list[float] | None = None

    @property
    def size(self) -> int:
        return self.readers

    @property
    def in_flight(self) -> int:
        return self.ranges if self.ranges is not None else 2 * self.readers

    def start(self) -> None:
        pass

    def submit(self, job: ChunkJob) -> None:
        self.queued.append(job)

    def finish(self, windows: Iterable[int] | None = None) -> None:
        """Run the queued jobs of ``windows`` (all when None) now; they are collected next."""
        wanted = None if windows is None else set(windows)
        for job in [j for j in self.queued if wanted is None or j.window in wanted]:
            self.queued.remove(job)
            if self._watermark is None:
                self._watermark = LowWatermark(self.replica)
            read = read_chunk(self.replica, job, self._watermark)
            if self.pauses_s is not None:
                self.pauses_s.append(read.seconds)
            self._done.append(read)

    def collect(self) -> tuple[list[ChunkRead], bool]:
        if self.broken:
            self.broken, self.queued, self._done = False, [], []
            return [], True
        if self.eager:
            self.finish()
        done, self._done = self._done, []
        return done, False

    def close(self) -> None:
        self.queued.clear()
