"""Chunk readers: one job on a replica (rows and the executed set after, or the failure as plain data),
failures rebuilt as gtidsnap's own error types, jobs that cross processes, the inline readers unit
tests drive, and one real spawn pool (no server: its connection is refused, and that failure comes
back through pickling and the pool)."""

from __future__ import annotations

import os
import pickle
import signal
import socket
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import pytest

from gtidsnap.core.errors import (
    ConfigError,
    FatalSourceError,
    FilterError,
    GtidsnapError,
    PrerequisiteError,
    QueryError,
    SchemaError,
    SourceError,
)
from gtidsnap.core.model import TableId
from gtidsnap.core.ports import ChunkJob, ChunkRead
from gtidsnap.core.records import LineBodies
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.snapshot import readers as chunk_readers
from gtidsnap.snapshot.readers import (
    InlineChunkReaders,
    ProcessChunkReaders,
    _worker_start,
    read_chunk,
    rebuilt_error,
)
from gtidsnap.source.connection import ConnectionSettings, Secret
from gtidsnap.source.low_watermark import LowWatermark
from tests import fakes

T = TableId("shop", "orders")
SCHEMA = TableSchema(T, (Column("id", "int", "int", False), Column("at", "datetime", "datetime(6)")), ("id",))
EXECUTED = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-12"


def FakeReplica(
    keys: Sequence[int] = (1, 2, 3),
    failure: BaseException | None = None,
    visible: Sequence[str] = (EXECUTED,),
) -> fakes.FakeReplica:
    """A replica of ``keys`` whose rows are ``{"id": k, "at": None}``; see :class:`fakes.FakeReplica`."""
    world = fakes.World(keys=keys, start=12, schema=SCHEMA, row=lambda k: {"id": k, "at": None})
    return fakes.FakeReplica(world, failure, visible)


# ----------------------------------------------------------------------------- one job


def test_read_chunk_returns_the_rows_then_the_executed_set_read_after_the_select() -> None:
    replica = FakeReplica((1, 2, 3, 4))
    read = read_chunk(replica, ChunkJob(7, SCHEMA, (1,), (3,), "id > 0"))
    assert read.window == 7 and not read.failed
    assert read.keys == ((2,), (3,))
    assert read.rows == ({"id": 2, "at": None}, {"id": 3, "at": None})
    assert read.executed == EXECUTED
    assert read.reader == os.getpid() and read.seconds >= 0
    assert read.error_type is None and read.error == ""
    assert replica.calls == [("select", SCHEMA, (1,), (3,), None, "id > 0"), ("executed",)]


def test_a_reader_selects_only_once_its_windows_lw_is_visible_and_remembers_what_it_saw() -> None:
    """The window opened at the stream's position (lw): a SELECT that did not see all of it could miss a
    change the stream already emitted. The visible set read with a chunk's hw is kept, so a later job
    whose lw it covers costs no round trip before its SELECT."""
    u = EXECUTED.split(":")[0]
    replica = FakeReplica(visible=(f"{u}:1-8", f"{u}:1-9", f"{u}:1-10"))
    watermark = LowWatermark(replica, sleep=lambda s: None)
    read = read_chunk(replica, ChunkJob(1, SCHEMA, None, (3,), lw=f"{u}:1-10"), watermark)
    assert not read.failed and read.warning == ""
    assert [c[0] for c in replica.calls] == ["executed", "executed", "executed", "select", "executed"]
    replica.calls.clear()
    read = read_chunk(replica, ChunkJob(2, SCHEMA, (3,), (9,), lw=f"{u}:1-10"), watermark)
    assert [c[0] for c in replica.calls] == ["select", "executed"], "seen with the last hw: no wait"
    assert read.executed == EXECUTED


def test_a_reader_that_gives_up_waiting_says_so_once() -> None:
    u = EXECUTED.split(":")[0]
    clock = iter(range(0, 1000))
    replica = FakeReplica(visible=(f"{u}:1-5",))
    watermark = LowWatermark(replica, timeout_s=3, sleep=lambda s: None, clock=lambda: next(clock))
    first = read_chunk(replica, ChunkJob(1, SCHEMA, None, (3,), lw=f"{u}:1-10"), watermark)
    assert not first.failed and "without waiting" in first.warning and "fake replica" in first.warning
    replica.calls.clear()
    second = read_chunk(replica, ChunkJob(2, SCHEMA, None, (3,), lw=f"{u}:1-11"), watermark)
    assert not second.failed and second.warning == ""
    assert [c[0] for c in replica.calls] == ["select", "executed"], "given up: no read to wait"


def test_an_encoding_job_sends_each_rows_json_and_a_row_orjson_cannot_write_as_values() -> None:
    """For a JSON-lines output the reader writes each row's line body; a value orjson refuses (an
    integer past 64 bits) keeps its row as values, encoded later the way a record is."""
    replica = FakeReplica((1, 2, 2**70))
    job = ChunkJob(7, SCHEMA, None, (2**70,), None, render=LineBodies())
    read = read_chunk(replica, pickle.loads(pickle.dumps(job.portable())))
    assert read.keys == ((1,), (2,), (2**70,))
    assert read.rows == (
        b'"key":[1],"before":null,"after":{"id":1,"at":null}',
        b'"key":[2],"before":null,"after":{"id":2,"at":null}',
        {"id": 2**70, "at": None},
    )


@pytest.mark.parametrize(
    "failure", [QueryError("timeout"), SchemaError("column at is gone"), SourceError("lost connection")]
)
def test_read_chunk_returns_a_gtidsnap_failure_as_data(failure: GtidsnapError) -> None:
    read = read_chunk(FakeReplica(failure=failure), ChunkJob(3, SCHEMA, None, (3,)))
    assert read.failed
    assert (read.window, read.error_type, read.error) == (3, type(failure).__name__, str(failure))
    assert read.rows == () and read.keys == () and read.executed == "" and read.reader == os.getpid()


def test_read_chunk_lets_a_bug_through() -> None:
    with pytest.raises(ZeroDivisionError):
        read_chunk(FakeReplica(failure=ZeroDivisionError()), ChunkJob(3, SCHEMA, None, (3,)))


# ----------------------------------------------------------------------------- errors rebuilt


@pytest.mark.parametrize(
    "cls", [SchemaError, QueryError, FilterError, ConfigError, FatalSourceError, SourceError]
)
def test_a_readers_failure_is_rebuilt_as_its_own_type(cls: type[GtidsnapError]) -> None:
    read = read_chunk(FakeReplica(failure=cls("the reason")), ChunkJob(1, SCHEMA, None, (3,)))
    error = rebuilt_error(read)
    assert type(error) is cls
    assert str(error) == "the reason"
    assert error.retryable == cls.retryable


def test_a_prerequisite_error_keeps_its_whole_message() -> None:
    original = PrerequisiteError(["TLS is required"])
    read = read_chunk(FakeReplica(failure=original), ChunkJob(1, SCHEMA, None, (3,)))
    error = rebuilt_error(read)
    assert type(error) is PrerequisiteError
    assert "TLS is required" in str(error)
    assert error.retryable is False


def test_retryable_is_preserved_across_the_rebuild() -> None:
    assert rebuilt_error(ChunkRead(1, error_type="SourceError", error="x")).retryable is True
    assert rebuilt_error(ChunkRead(1, error_type="QueryError", error="x")).retryable is False
    assert rebuilt_error(ChunkRead(1, error_type="FatalSourceError", error="x")).retryable is False


@pytest.mark.parametrize("name", ["CheckpointError", "KeyError", "NoSuchError", ""])  # not sent by readers
def test_an_unknown_failure_becomes_a_retryable_source_error(name: str) -> None:
    error = rebuilt_error(ChunkRead(1, error_type=name, error="something broke"))
    assert type(error) is SourceError
    assert str(error) == "something broke" and error.retryable


# ----------------------------------------------------------------------------- jobs across processes


def test_a_portable_job_drops_the_schemas_cached_converters() -> None:
    schema = TableSchema(SCHEMA.table, SCHEMA.columns, SCHEMA.key)
    schema.normalize_values(["id", "at"], [1, None])  # caches converters: local functions
    job = ChunkJob(4, schema, (1,), (9,), "id > 0")
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(job)
    portable = job.portable()
    copy = pickle.loads(pickle.dumps(portable))
    assert copy == job
    assert (copy.window, copy.after, copy.upto, copy.condition) == (4, (1,), (9,), "id > 0")
    assert copy.schema.normalize_values(["id", "at"], [2, None]) == {"id": 2, "at": None}
    assert pickle.dumps(job.portable()), "the original job is left as it was, and still portable"


# ----------------------------------------------------------------------------- inline readers


def test_inline_readers_run_a_job_only_when_finished() -> None:
    readers = InlineChunkReaders(FakeReplica(), readers=3, eager=False)
    assert readers.size == 3
    readers.submit(ChunkJob(1, SCHEMA, None, (1,)))
    readers.submit(ChunkJob(2, SCHEMA, (1,), (3,)))
    assert readers.collect() == ([], False)
    readers.finish([2])
    reads, broken = readers.collect()
    assert not broken and [r.window for r in reads] == [2]
    assert [job.window for job in readers.queued] == [1]
    assert readers.collect() == ([], False), "collected once"
    readers.finish()
    reads, _ = readers.collect()
    assert [(r.window, r.keys, r.rows) for r in reads] == [(1, ((1,),), ({"id": 1, "at": None},))]
    assert readers.queued == []


def test_eager_inline_readers_run_every_job_on_collect() -> None:
    readers = InlineChunkReaders(FakeReplica())
    assert readers.eager and readers.size == 2
    readers.submit(ChunkJob(1, SCHEMA, None, (1,)))
    readers.submit(ChunkJob(2, SCHEMA, (1,), (3,)))
    reads, broken = readers.collect()
    assert not broken and [r.window for r in reads] == [1, 2]
    assert readers.collect() == ([], False)


def test_broken_inline_readers_lose_their_jobs_once() -> None:
    readers = InlineChunkReaders(FakeReplica(), eager=False)
    readers.submit(ChunkJob(1, SCHEMA, None, (1,)))
    readers.submit(ChunkJob(2, SCHEMA, (1,), (3,)))
    readers.finish([1])
    readers.broken = True
    assert readers.collect() == ([], True)
    assert readers.queued == [] and not readers.broken
    readers.finish()
    assert readers.collect() == ([], False), "the finished read was lost with the pool"
    readers.submit(ChunkJob(3, SCHEMA, None, (1,)))
    readers.close()
    assert readers.queued == []


# ----------------------------------------------------------------------------- a real pool


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_process_readers_send_a_refused_connection_back_as_the_jobs_failure() -> None:
    """A spawned reader process, started ahead of its first job (its warm-up connection refused
    quietly), a pickled job, the connection opened again for the job and its failure sent back as
    data: no server needed."""
    port = closed_port()
    settings = ConnectionSettings("127.0.0.1", port, "gtidsnap", Secret("pw"), connect_timeout=2)
    readers = ProcessChunkReaders(settings, readers=1)
    assert readers.size == 1
    schema = TableSchema(SCHEMA.table, SCHEMA.columns, SCHEMA.key)
    schema.normalize_values(["id", "at"], [1, None])  # the pool must send the portable job
    try:
        readers.start()
        readers.submit(ChunkJob(5, schema, None, (10,)))
        reads: list[ChunkRead] = []
        deadline = time.monotonic() + 20
        while not reads and time.monotonic() < deadline:
            reads, broken = readers.collect()
            assert not broken
            time.sleep(0.05)
        assert len(reads) == 1, "no read came back within 20 s"
        [read] = reads
        assert read.window == 5 and read.failed
        assert read.error_type == "SourceError"
        assert f"127.0.0.1:{port}" in read.error
        assert read.reader not in (0, os.getpid()), "read in another process"
        assert readers.collect() == ([], False)
    finally:
        readers.close()
    assert readers._pool is None


class _LateFuture(Future[ChunkRead]):
    """Not done when collect() first looks, done right after: a read finishing during a collection."""

    def __init__(self, read: ChunkRead) -> None:
        super().__init__()
        self.set_result(read)
        self.looks = 0

    def done(self) -> bool:
        self.looks += 1
        return self.looks > 1


def test_a_read_finishing_during_a_collection_is_collected_next_time_not_lost() -> None:
    settings = ConnectionSettings("127.0.0.1", 1, "u", Secret("p"))
    readers = ProcessChunkReaders(settings, readers=1)
    on_time: Future[ChunkRead] = Future()
    on_time.set_result(ChunkRead(1, executed=EXECUTED))
    late = _LateFuture(ChunkRead(2, executed=EXECUTED))
    readers._futures = [on_time, late]
    first, broken = readers.collect()
    assert [r.window for r in first] == [1] and not broken
    second, _ = readers.collect()
    assert [r.window for r in second] == [2], "the late read was dropped"


def test_a_reader_whose_engine_died_before_its_watchdog_started_ends_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine's pid comes from the engine: a reader handed to another parent while it started up
    (its engine killed meanwhile) must not take the new parent for its engine and wait forever."""
    codes: list[int] = []
    monkeypatch.setattr(chunk_readers.os, "_exit", codes.append)
    not_my_parent = os.getpid() + 10**7  # the engine's pid as the reader got it; its parent is another
    _worker_start(ConnectionSettings("127.0.0.1", 1, "u", Secret("p")), not_my_parent)
    deadline = time.monotonic() + 5
    while not codes and time.monotonic() < deadline:
        time.sleep(0.01)
    assert codes == [0]


def stopped_reader(readers: ProcessChunkReaders) -> Any:
    """Start ``readers`` (one process) and stop its process with SIGSTOP: it holds whatever it is
    handed, neither reading nor dying."""
    readers.start()
    assert readers._pool is not None
    deadline = time.monotonic() + 20
    while not readers._pool._processes and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.05)
    [process] = list(readers._pool._processes.values())  # type: ignore[attr-defined]
    os.kill(process.pid, signal.SIGSTOP)
    return process


def ended(process: Any, within_s: float = 5.0) -> bool:
    """Has ``process`` ended? The pool's own manager thread also waits on its readers: when it reaps
    one first, ``is_alive`` says True until that thread (waiting for the GIL) records the exit code,
    so a single look right after ``join`` can be wrong. Look again, sleeping between looks."""
    deadline = time.monotonic() + within_s
    process.join(within_s)
    while process.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not process.is_alive()


def test_a_stopped_reader_is_reported_killed_and_its_chunks_read_again() -> None:
    """A reader process stopped (SIGSTOP) with a job: no progress, no error. Past ``hung_after_s`` the
    pool says broken (the planner reads the chunks in flight again), the stopped process is killed,
    and the next job is read by a new reader; closing never waits on a reader."""
    settings = ConnectionSettings("127.0.0.1", closed_port(), "gtidsnap", Secret("pw"), connect_timeout=2)
    readers = ProcessChunkReaders(settings, readers=1, hung_after_s=1.0)
    schema = TableSchema(SCHEMA.table, SCHEMA.columns, SCHEMA.key)
    try:
        stopped = stopped_reader(readers)
        readers.submit(ChunkJob(1, schema, None, (10,)))
        started = time.monotonic()
        broken = False
        while not broken and time.monotonic() - started < 20:
            reads, broken = readers.collect()
            assert not reads
            time.sleep(0.05)
        assert broken, "a stopped reader was never noticed"
        assert 1.0 <= time.monotonic() - started < 10
        assert ended(stopped) and stopped.exitcode == -signal.SIGKILL
        readers.submit(ChunkJob(2, schema, None, (10,)))  # a new reader takes it
        reads = []
        while not reads and time.monotonic() - started < 40:
            reads, broken = readers.collect()
            assert not broken
            time.sleep(0.05)
        assert [r.window for r in reads] == [2] and reads[0].failed  # the refused connection, as data
    finally:
        closing = time.monotonic()
        readers.close()
        assert time.monotonic() - closing < 5


def test_closing_kills_a_reader_that_does_not_end() -> None:
    settings = ConnectionSettings("127.0.0.1", closed_port(), "gtidsnap", Secret("pw"), connect_timeout=2)
    readers = ProcessChunkReaders(settings, readers=1)
    stopped = stopped_reader(readers)
    closing = time.monotonic()
    readers.close()
    assert time.monotonic() - closing < 5
    assert ended(stopped)


@pytest.mark.parametrize("hung_after_s", [0.0, 0.999, -1.0, float("nan")])
def test_a_hung_after_too_short_to_tell_a_hung_reader_from_a_busy_one_is_refused(hung_after_s: float) -> None:
    settings = ConnectionSettings("127.0.0.1", closed_port(), "gtidsnap", Secret("pw"))
    with pytest.raises(ValueError, match="at least 1 s before its reader counts as hung"):
        ProcessChunkReaders(settings, readers=1, hung_after_s=hung_after_s)


def test_hung_after_defaults_to_twice_the_longest_read_and_a_margin() -> None:
    settings = ConnectionSettings("127.0.0.1", 1, "gtidsnap", Secret("pw"), statement_timeout=5)
    assert ProcessChunkReaders(settings, readers=1).hung_after_s == 2 * (5 + 30) + 10
    assert ProcessChunkReaders(settings, readers=1, hung_after_s=1.0).hung_after_s == 1.0


# ----------------------------------------------------------------------------- the compiled read


class ColumnsReplica(fakes.FakeReplica):
    """A replica whose compiled client serves every chunk (as an Arrow table of the chunk's keys)."""

    def select_chunk_columns(
        self, schema: TableSchema, after: Any, upto: Any, condition: str | None = None
    ) -> Any:
        import pyarrow as pa

        self.calls.append(("columns", after, upto, condition))
        keys = self._keys(after, upto)
        return pa.table(
            {"id": pa.array(keys, pa.int32()), "at": pa.array([None] * len(keys), pa.timestamp("us"))}
        )


def columns_replica(keys: Sequence[int] = (1, 2, 3, 4)) -> ColumnsReplica:
    world = fakes.World(keys=keys, start=12, schema=SCHEMA, row=lambda k: {"id": k, "at": None})
    return ColumnsReplica(world, None, (EXECUTED,))


def test_a_columns_renderer_gets_the_compiled_read_and_the_executed_set_after_it() -> None:
    from gtidsnap.sinks.arrow_columns import ArrowRenderer

    replica = columns_replica()
    read = read_chunk(replica, ChunkJob(7, SCHEMA, (1,), (3,), "id > 0", ArrowRenderer()))
    assert not read.failed and read.keys == ((2,), (3,))
    assert read.rows.batch.column("id").to_pylist() == [2, 3]  # type: ignore[union-attr]
    assert replica.calls == [("columns", (1,), (3,), "id > 0"), ("executed",)]


def test_compiled_reads_off_or_a_value_that_does_not_fit_read_by_the_python_path() -> None:
    from gtidsnap.core.ports import RowsOnly
    from gtidsnap.sinks.arrow_columns import ArrowRenderer

    replica = columns_replica()
    read = read_chunk(replica, ChunkJob(7, SCHEMA, (1,), (3,), None, RowsOnly(ArrowRenderer())))
    assert not read.failed and read.keys == ((2,), (3,))
    assert [c[0] for c in replica.calls] == ["select", "executed"]

    narrow = TableSchema(T, (Column("id", "tinyint", "tinyint", False), SCHEMA.columns[1]), ("id",))
    replica = columns_replica((1, 300))  # 300 does not fit a TINYINT's Delta column
    read = read_chunk(replica, ChunkJob(8, narrow, None, (300,), None, ArrowRenderer()))
    assert [c[0] for c in replica.calls] == ["columns", "select", "executed"]
    assert read.failed and "300" in read.error  # the Python path names the value
