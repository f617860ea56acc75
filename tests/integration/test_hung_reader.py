"""A chunk reader process stopped (SIGSTOP) mid-snapshot on the real MariaDB replica: neither reading nor
dying, it holds its chunk. Past ``snapshot.hung_after_s`` the run warns, kills the readers, starts new
ones and reads the chunks in flight again; the output is exact. A reader stopped when the snapshot is
done does not hold up the end of an ``--until-caught-up`` run. And a binlog decoder process stopped
while changes stream: past ``decoder_hung_after_s`` it is reported, killed and replaced, the stream goes
on, /healthz and /readyz stay or come back to 200, and the output is exact."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gtidsnap.config.settings import MetricsSection
from gtidsnap.core.commands import Shutdown
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.run_stats import RunStats
from gtidsnap.engine.loop import Engine
from gtidsnap.observe.monitoring import Monitoring
from gtidsnap.run import build_engine
from gtidsnap.source.binlog.stream import BinlogStream
from gtidsnap.source.replica import Replica
from tests.integration.cdc import (
    Writer,
    check_invariants,
    create_table,
    make_config,
    read_records,
    run_engine,
    source_rows,
    wait_for,
)
from tests.integration.fixtures.db_servers import READER, ReplicaPair
from tests.integration.test_monitoring import free_port, get

pytestmark = pytest.mark.integration

HUNG_AFTER_S = 3.0
# The run must end well within this; with the default hung_after_s (twice the longest a read may take,
# 130 s here) or a close that waits on a stopped reader, it would not, and the test fails.
RUN_LIMIT_S = 90.0
END_LIMIT_S = 20.0  # from a reader stopped after the snapshot to the run's return (closing waits 2 s)
HUNG_WARNING = "has not come back from its reader"


def reader_pids(engine: Engine) -> list[int]:
    """The engine's reader processes now (CPython's pool internals, read only)."""
    pool = getattr(engine.readers, "_pool", None)
    return list((getattr(pool, "_processes", None) or {}).keys())


def pid_of_client_port(pids: list[int], port: int) -> int | None:
    """Which of ``pids`` holds the local TCP socket of ``port`` (its connection to the replica)."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port:
            inode = fields[9]
    for pid in pids if inode is not None else ():
        with contextlib.suppress(OSError):  # the process or one of its descriptors went meanwhile
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) == f"socket:[{inode}]":
                        return pid
    return None


def stop_a_reader_inside_a_select(pair: ReplicaPair, db: str, engine: Engine) -> int:
    """SIGSTOP a reader process that is inside a chunk SELECT, so it surely holds a chunk (a reader
    stopped while idle may never take one: the other reader then reads every chunk and nothing hangs).
    The table is write-locked on the replica, where a reader's SELECT then waits; the waiting session's
    client port names its process; that one is stopped, and the table unlocked."""
    with pair.connect(pair.replica_port) as admin, admin.cursor() as cur:
        for _ in range(10):
            cur.execute(f"LOCK TABLES `{db}`.`t` WRITE")
            try:
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:
                    cur.execute(
                        "SELECT HOST FROM information_schema.PROCESSLIST WHERE USER = %s "
                        "AND INFO LIKE %s AND STATE LIKE %s",
                        (READER[0], "SELECT %`payload` FROM%", "%metadata lock%"),
                    )
                    for (host,) in cur.fetchall():
                        pid = pid_of_client_port(reader_pids(engine), int(str(host).rsplit(":", 1)[1]))
                        if pid is not None:
                            os.kill(pid, signal.SIGSTOP)
                            return pid
                    time.sleep(0.02)
            finally:
                cur.execute("UNLOCK TABLES")
            time.sleep(0.3)
    pytest.fail("no reader process was seen inside a chunk SELECT: nothing was stopped")


def gone(pid: int, within_s: float = 10.0) -> bool:
    """Has ``pid`` ended (no process, or a zombie not reaped yet)?"""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_a_stopped_reader_is_replaced_its_chunks_read_again_and_the_end_never_waits_on_one(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "t", 8000)
    table = TableId(db, "t")
    config = make_config(pair, tmp_path, [table], chunk_size=20, readers=2)
    config = replace(config, snapshot=replace(config.snapshot, hung_after_s=HUNG_AFTER_S))
    stopped: list[int] = []
    first_pool: list[int] = []
    stopped_at_end: list[float] = []
    outcome: list[RunStats | BaseException] = []

    def on_progress(context: SnapshotContext, stats: RunStats) -> None:
        """Once the snapshot is done (after the hung reader): stop a reader of the new pool, idle now."""
        done = bool(context.tables) and all(t.done for t in context.tables)
        if done and len(stopped) == 1 and not stopped_at_end:
            pids = [p for p in reader_pids(engine) if p not in first_pool]
            if pids:
                os.kill(pids[0], signal.SIGSTOP)
                stopped.append(pids[0])
                stopped_at_end.append(time.monotonic())

    def run() -> None:
        try:
            outcome.append(engine.run(snapshot=[table], until_caught_up=True))
        except BaseException as exc:  # raised in the test's thread below
            outcome.append(exc)

    writer = Writer(pair, db, ["t"], seed=31, transactions=600, pause_s=0.01).start()
    with caplog.at_level(logging.INFO), Replica(config.source) as replica:
        engine = build_engine(config, replica, on_progress=on_progress)
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            changes = tmp_path / "changes.jsonl"
            deadline = time.monotonic() + 60
            while not (changes.exists() and changes.stat().st_size) and time.monotonic() < deadline:
                time.sleep(0.01)
            first_pool.extend(reader_pids(engine))
            stopped.append(stop_a_reader_inside_a_select(pair, db, engine))
            thread.join(RUN_LIMIT_S)
            ended_at = time.monotonic()
            assert not thread.is_alive(), f"the run did not end in {RUN_LIMIT_S:.0f} s with a stopped reader"
            survivors = [pid for pid in stopped if not gone(pid)]
        finally:
            for pid in stopped:  # whatever happened, nothing stays stopped, and the run can end
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if thread.is_alive():
                engine.commands.put(Shutdown())
                thread.join(30)
    writer.join()
    [result] = outcome
    if isinstance(result, BaseException):
        raise result
    hung = [r for r in caplog.records if HUNG_WARNING in r.getMessage()]
    assert [r.levelno for r in hung] == [logging.WARNING], [r.getMessage() for r in hung]
    assert set(result.readers) - set(first_pool), "no new reader read a chunk after the stopped one"
    assert stopped_at_end, "no reader was stopped once the snapshot was done"
    assert ended_at - stopped_at_end[0] < END_LIMIT_S, "the run's end waited on a stopped reader"
    assert not survivors, f"stopped readers outlived the run: {survivors}"
    assert not result.failed
    run_engine(pair, tmp_path, [], tables=[table])  # the writer's last changes
    check_invariants(read_records(tmp_path), {f"{db}.t": source_rows(pair, db, "t")})


DECODER_HUNG_AFTER_S = 3.0
DECODER_WARNING = "has not answered its batch"


def test_a_stopped_decoder_is_replaced_the_stream_goes_on_and_health_recovers(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The run of the issue (``readers = 0``, ``decoders = 1``), a writer streaming changes: the decoder is
    stopped with SIGSTOP. Within ``decoder_hung_after_s`` it is reported once, killed and replaced, the
    changes keep coming, /healthz and /readyz answer 200, and the output replays to the table. Without
    the watch no change came again and /healthz turned 503 for good (the issue: 120 s, only kill -9)."""
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "t", 200)
    table = TableId(db, "t")
    address = f"127.0.0.1:{free_port()}"
    config = replace(
        make_config(pair, tmp_path, [table], readers=0),
        decoders=1,
        decoder_hung_after_s=DECODER_HUNG_AFTER_S,
        metrics=MetricsSection(listen=address, stall_after_s=10.0, probe_interval_s=0.5),
    )
    changes = tmp_path / "changes.jsonl"
    streams: list[BinlogStream] = []
    stopped: list[int] = []
    errors: list[BaseException] = []

    def healthy() -> bool:
        return get(address, "/healthz")[0] == get(address, "/readyz")[0] == 200

    writer = Writer(pair, db, ["t"], seed=56, transactions=100_000, pause_s=0.01)
    with caplog.at_level(logging.INFO), Replica(config.source) as replica:
        engine = build_engine(config, replica, opened=streams)
        monitoring = Monitoring(config, replica, engine)

        def run() -> None:
            try:
                engine.run(snapshot=[table])  # its rows, then the writer's changes streamed
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            writer.start()
            wait_for("/healthz and /readyz", healthy, 60)

            def decoder_pid() -> int | None:
                """The decoder's pid once it has decoded rows (not one still starting up)."""
                decoders = streams[-1].decoders if streams else None
                working = decoders is not None and decoders.pids() and decoders.rows[0] > 0
                return decoders.pids()[0] if working and decoders is not None else None

            pid = wait_for("a decoder process at work", decoder_pid, 60)
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
            at_stop = changes.stat().st_size
            wait_for(  # the bound, a restart of the decoders and the stream's reconnect, and slack
                "changes streamed after the decoder was stopped",
                lambda: changes.stat().st_size > at_stop + 2000,
                DECODER_HUNG_AFTER_S + 20,
            )
            wait_for("/healthz and /readyz after the stopped decoder", healthy, 30)
            assert gone(pid), "the stopped decoder was not killed"
            writer.stop()
            writer.join()
        finally:
            for pid in stopped:  # whatever happened, nothing stays stopped
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            writer.stop()
            engine.commands.put(Shutdown())
            thread.join(60)
            monitoring.stop()
    assert not errors, errors
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    hung = [w for w in warned if DECODER_WARNING in w]
    assert len(hung) == 1 and f"gtidsnap-decoder-0 (pid {stopped[0]})" in hung[0], warned
    run_engine(pair, tmp_path, [], tables=[table])  # the writer's last changes
    check_invariants(read_records(tmp_path), {f"{db}.t": source_rows(pair, db, "t")})
