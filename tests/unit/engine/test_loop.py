"""The engine loop against an in-memory replica and binlog (:mod:`tests.fakes`): writers commit while
chunks are read,
the process "crashes" at random points and restarts from its checkpoint. The JSON-lines output must
replay to the table, with no change lost or doubled, sequence numbers strictly increasing, and no
key ever going back to an older version."""

from __future__ import annotations

import itertools
import json
import queue
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.core.checkpoint import Checkpoint, Edit
from gtidsnap.core.checkpoint_edits import recorded
from gtidsnap.core.commands import SetChunkSize, SignalReceived, StartSnapshot
from gtidsnap.core.errors import CheckpointError, QueryError, SchemaError, SourceError
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.model import BinlogEvent, RowChange, TableId, TxBegin, TxCommit
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.ports import ChunkRead, HeldSeq
from gtidsnap.core.schema import TableSchema
from gtidsnap.core.signal_ledger import SignalLedger
from gtidsnap.engine.checkpoint_store import CheckpointStore, open_at
from gtidsnap.engine.loop import Engine
from gtidsnap.engine.loop_step import COMMANDS_PER_TURN, EngineSettings, take_commands
from gtidsnap.sinks.jsonl import JsonlSink
from gtidsnap.snapshot.readers import InlineChunkReaders
from tests.fakes import STAMPED_AT, FakeChunk, FakeReplica, FakeStream, SealingJsonl, T, U, World, resealed


class Crash(Exception):
    """Stands for kill -9: the engine stops wherever it is."""


class RandomReaders(InlineChunkReaders):
    """Chunk readers that finish a random few of their jobs at each collection (so reads come back
    late and out of order, the world writing meanwhile), and now and then die all at once."""

    def __init__(self, replica: FakeReplica, rnd: random.Random, readers: int) -> None:
        super().__init__(replica, readers, eager=False)
        self.rnd = rnd

    def collect(self) -> tuple[list[ChunkRead], bool]:
        if self.queued and self.rnd.random() < 0.01:
            self.broken = True
        self.finish([j.window for j in self.queued if self.rnd.random() < 0.4])
        return super().collect()


def run_until_done(
    tmp: Path,
    world: World,
    rnd: random.Random,
    crash_p: float,
    chunk: int,
    sealing: bool = False,
    readers: int = 0,
) -> list[dict[str, Any]]:
    out = tmp / "changes.jsonl"
    store = CheckpointStore(tmp / "checkpoint.json")
    crashes = 0

    def maybe_crash() -> None:
        # Crashes stop after 50: a background commit rolls one each time, and on a loaded machine a run
        # commits so often that a constant probability would crash every run and none would finish.
        if crashes < 50 and rnd.random() < crash_p:
            raise Crash

    for _ in range(200):
        engine = Engine(
            FakeReplica(world),
            lambda start, schema_of: FakeStream(world, start, maybe_crash),
            SealingJsonl(out, maybe_crash) if sealing else JsonlSink(out),
            store,
            EngineSettings(chunk_size=chunk, checkpoint_interval_s=0.0),
            captured=[T],
            readers=RandomReaders(FakeReplica(world), rnd, readers) if readers else None,
        )
        try:
            engine.run(snapshot=[T], until_caught_up=True)
            break
        except Crash:
            crashes += 1
    else:
        pytest.fail("the engine never finished")
    while world.writes_left:  # let late writes happen, then catch up once more
        world.write()
    while world.unseen:
        world.see()
    Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        JsonlSink(out),
        store,
        EngineSettings(chunk_size=chunk),
        captured=[T],
    ).run(until_caught_up=True)
    return [json.loads(line) for line in out.read_text().splitlines()]


def check_output(records: list[dict[str, Any]], world: World) -> None:
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1, "sequence numbers strictly increase from 1"
    emitted: dict[str, list[tuple[str, int]]] = {}
    for r in records:
        if not r["snapshot"]:
            emitted.setdefault(r["gtid"], []).append((r["op"], r["key"][0]))
    assert world.stream_start is not None
    for gtid, events in world.txs:
        if gtid in world.stream_start:
            continue  # before the stream started: the snapshot carries its effect
        expected = [(e.op, e.key[0]) for e in events if isinstance(e, RowChange)]
        assert emitted.pop(str(gtid), []) == expected, f"{gtid} not emitted exactly once"
    assert not emitted, f"changes of unknown transactions: {emitted}"
    replay: dict[int, dict[str, int]] = {}
    version: dict[int, int] = {}
    for r in records:
        key = r["key"][0]
        v = r["after"]["v"] if r["after"] else int(r["gtid"].rsplit(":", 1)[1])
        assert v >= version.get(key, -1), f"key {key} went back from version {version.get(key)} to {v}"
        version[key] = v
        if r["op"] == "d":
            replay.pop(key, None)
        else:
            replay[key] = r["after"]
    assert replay == world.table


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(0, 40),
    chunk=st.integers(1, 9),
    sealing=st.booleans(),
    readers=st.sampled_from([0, 1, 3]),
    lag=st.sampled_from(["none", "mysql", "mariadb"]),
)
def test_snapshot_and_stream_with_crashes_replays_to_the_table(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    rows: int,
    chunk: int,
    sealing: bool,
    readers: int,
    lag: str,
) -> None:
    """Inline commits, and background commits of sealed batches (the Delta sink's way); chunks taken on
    the engine's thread (readers 0) or by readers that deliver late, out of order, and die; a SELECT
    that sees a transaction later than the binlog holds it, as MySQL and MariaDB servers do."""
    rnd = random.Random(seed)
    world = World(rnd, rows, writes=30, lag=lag)
    tmp = tmp_path_factory.mktemp("run")
    records = run_until_done(tmp, world, rnd, crash_p=0.03, chunk=chunk, sealing=sealing, readers=readers)
    check_output(records, world)
    (table,) = json.loads((tmp / "checkpoint.json").read_text())["context"]["tables"]
    assert table["done"] and table["rows"] == sum(1 for r in records if r["snapshot"])


def test_readers_select_only_once_the_stream_they_opened_at_is_visible(tmp_path: Path) -> None:
    """A reader's window opens at the stream's position, which can hold transactions a SELECT does not
    see yet (MariaDB-ordered: the binlog and gtid_binlog_pos have them before the engine commit): each
    reader waits until it sees them, or the stale row of a key such a transaction changed would follow
    its change. Fixed seeds; without the wait 10 of these 40 runs rewind a key."""
    for seed in range(40):
        rnd = random.Random(seed)
        world = World(rnd, rnd.randint(5, 40), writes=30, lag="mariadb")
        run = tmp_path / str(seed)
        run.mkdir()
        records = run_until_done(run, world, rnd, crash_p=0.03, chunk=rnd.randint(1, 9), readers=2)
        check_output(records, world)


def test_no_crash_every_initial_row_is_read_once(tmp_path: Path) -> None:
    rnd = random.Random(7)
    world = World(rnd, rows=25, writes=0)
    records = run_until_done(tmp_path, world, rnd, crash_p=0.0, chunk=4)
    assert [r["key"][0] for r in records if r["snapshot"]] == list(range(0, 50, 2))
    status = json.loads((tmp_path / "checkpoint.json").read_text())
    (table,) = status["context"]["tables"]
    assert table["done"] and table["rows"] == 25 and table["chunks"] == 7


def inline_engine(world: World, tmp: Path, chunk_size: int, sink: JsonlSink | None = None) -> Engine:
    """An engine on ``world`` (``T`` captured) with one reader on its own thread, writing JSON lines
    (``sink``, default ``o.jsonl``) and its checkpoint in ``tmp``."""
    return Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        sink or JsonlSink(tmp / "o.jsonl"),
        CheckpointStore(tmp / "c.json"),
        EngineSettings(chunk_size=chunk_size),
        captured=[T],
    )


def test_without_reader_processes_the_loop_reads_one_chunk_a_turn_and_streams_between(tmp_path: Path) -> None:
    """``snapshot.readers = 0``: one reader on the loop's thread, one range in flight. The stream is
    paused for one chunk's read at most (each pause counted), and between two reads the loop
    processes the stream: a transaction committed during each read is streamed before the next."""
    world = World(random.Random(5), rows=30, writes=0)
    engine = inline_engine(world, tmp_path, chunk_size=3)
    pool = engine.readers
    assert isinstance(pool, InlineChunkReaders) and pool.in_flight == 1
    reads: list[tuple[int, GtidSet]] = []
    finish = pool.finish

    def read_and_write(windows: Any = None) -> None:
        if pool.queued:
            reads.append((len(pool.queued), engine.processed))
            world.write()  # a transaction commits while the chunk is read
        finish(windows)

    pool.finish = read_and_write  # type: ignore[method-assign]
    stats = engine.run(snapshot=[T], until_caught_up=True)
    assert stats.chunks == len(stats.chunk_pause_s) == len(reads) >= 10
    assert all(queued == 1 for queued, _ in reads), "one chunk read per turn"
    for (_, before), (_, after) in itertools.pairwise(reads):
        assert before <= after and before != after, "the stream went on between two reads"


def test_snapshot_rows_carry_the_source_time_the_stream_reached(tmp_path: Path) -> None:
    """A chunk's rows are stamped with the source commit time of the last change streamed before they
    went out, not the time they were written (a key's next change may have been committed earlier
    than that); before any change is streamed, with the wall clock."""
    world = World(random.Random(5), rows=12, writes=0)
    engine = inline_engine(world, tmp_path, chunk_size=4)
    pool = engine.readers
    assert isinstance(pool, InlineChunkReaders)
    finish, stamps = pool.finish, iter(range(1_600_000_000, 1_600_000_100, 10))

    def read_and_write(windows: Any = None) -> None:
        if pool.queued:
            events = world.put(1000 + len(world.txs), 1)  # committed while the chunk is read
            change = events[1]
            assert isinstance(change, RowChange)
            change.source_ts = next(stamps)
        finish(windows)

    pool.finish = read_and_write  # type: ignore[method-assign]
    engine.run(snapshot=[T], until_caught_up=True)
    lines = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    last_change = 0
    for line in lines:
        if not line["snapshot"]:
            last_change = line["source_ts"]
        else:
            assert last_change, "each chunk is read while a change commits: it streams first"
            assert line["source_ts"] == last_change, line
    assert sum(line["snapshot"] for line in lines) == 12


class PreparingJsonl(JsonlSink):
    """JSON lines that record what :meth:`prepare` was told, and which records were written before."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.prepared: list[tuple[list[TableId], int]] = []
        self.written = 0

    def prepare(self, shapes: Any) -> None:
        self.prepared.append((sorted(shapes), self.written))

    def write(self, records: Any) -> None:
        self.written += len(records)
        super().write(records)


def test_captured_tables_are_told_to_the_sink_before_any_record_and_once(tmp_path: Path) -> None:
    """A sink whose consumers read its tables (Delta) is told of each captured table with its shape
    at the first commit after the table is captured, before any record of it, and only once."""
    world = World(random.Random(4), rows=6, writes=0)
    sink = PreparingJsonl(tmp_path / "o.jsonl")
    inline_engine(world, tmp_path, chunk_size=2, sink=sink).run(snapshot=[T], until_caught_up=True)
    assert sink.prepared == [([T], 0)]
    # resumed: a captured table is told again (its tables may be gone)
    inline_engine(world, tmp_path, chunk_size=2, sink=sink).run(until_caught_up=True)
    assert [tables for tables, _ in sink.prepared] == [[T], [T]]


def test_chunk_size_changes_while_running(tmp_path: Path) -> None:
    world = World(random.Random(1), rows=30, writes=0)
    engine = Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        JsonlSink(tmp_path / "o.jsonl"),
        CheckpointStore(tmp_path / "c.json"),
        EngineSettings(chunk_size=2),
        captured=[T],
    )
    engine.commands.put(SetChunkSize(10))
    stats = engine.run(snapshot=[T], until_caught_up=True)
    assert stats.chunks == 3 and stats.snapshot_rows == 30


def test_unknown_table_is_refused_with_its_name(tmp_path: Path) -> None:
    world = World(random.Random(1), rows=3, writes=0)
    engine = Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        JsonlSink(tmp_path / "o.jsonl"),
        CheckpointStore(tmp_path / "c.json"),
    )
    with pytest.raises(SchemaError, match=r"shop\.nope"):
        engine.run(snapshot=[TableId("shop", "nope")], until_caught_up=True)


class WatchedReaders(InlineChunkReaders):
    """Inline readers that note when they were started and closed."""

    def __init__(self, replica: FakeReplica) -> None:
        super().__init__(replica)
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def close(self) -> None:
        self.calls.append("close")
        super().close()


def test_readers_start_with_the_engine_and_close_when_it_cannot_start(tmp_path: Path) -> None:
    """The reader processes start up while the engine does (imports, a connection each); a run that
    fails before its loop (an unknown table here) closes them, or they would outlive it."""
    world = World(random.Random(1), rows=3, writes=0)
    readers = WatchedReaders(FakeReplica(world))
    engine = Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        JsonlSink(tmp_path / "o.jsonl"),
        CheckpointStore(tmp_path / "c.json"),
        readers=readers,
    )
    with pytest.raises(SchemaError, match=r"shop\.nope"):
        engine.run(snapshot=[TableId("shop", "nope")], until_caught_up=True)
    assert readers.calls == ["start", "close"]
    readers.calls.clear()
    engine.run(snapshot=[T], until_caught_up=True)
    assert readers.calls == ["start", "close"]


class RefusingReplica(FakeReplica):
    """The server answers the chunk SELECT with an error (a filter it rejects, a statement over the
    time limit), as :class:`gtidsnap.source.replica.Replica` reports it."""

    def select_chunk(
        self, schema: TableSchema, after: Any, upto: Any, limit: int, condition: str | None = None
    ) -> FakeChunk:
        raise QueryError("selecting a chunk of shop.orders failed on the replica: error 1690: out of range")


def test_a_statement_the_server_refuses_fails_only_that_snapshot(tmp_path: Path) -> None:
    """The table's snapshot ends with the server's message; the stream still carries every change."""
    world = World(random.Random(3), rows=10, writes=5)
    world.stream_writes = False  # the stream is read ahead on the pump's thread: no write after the run
    out = tmp_path / "o.jsonl"

    def engine(replica: FakeReplica) -> Engine:
        return Engine(
            replica,
            lambda start, schema_of: FakeStream(world, start, lambda: None),
            JsonlSink(out),
            CheckpointStore(tmp_path / "c.json"),
            EngineSettings(chunk_size=3, checkpoint_interval_s=0.0),
            captured=[T],
        )

    stats = engine(RefusingReplica(world)).run(snapshot=[T], until_caught_up=True)
    assert list(stats.failed) == [str(T)] and "error 1690: out of range" in stats.failed[str(T)]
    (table,) = json.loads((tmp_path / "c.json").read_text())["context"]["tables"]
    assert table["done"] and "error 1690: out of range" in table["error"] and table["rows"] == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert not any(r["snapshot"] for r in records)
    assert world.stream_start is not None
    changes = [e for gtid, events in world.txs if gtid not in world.stream_start for e in events]
    assert len(records) == sum(isinstance(e, RowChange) for e in changes)

    # the same command once the server takes the SELECT: the failed snapshot is read again, in full
    assert engine(FakeReplica(world)).run(snapshot=[T], until_caught_up=True).failed == {}
    failed, redone = json.loads((tmp_path / "c.json").read_text())["context"]["tables"]
    assert failed["error"] and redone["done"] and not redone["error"] and redone["rows"] == len(world.table)
    # and a table whose snapshot finished is not read again
    assert engine(FakeReplica(world)).run(snapshot=[T], until_caught_up=True).snapshot_rows == 0


class RenamedAwayReplica(FakeReplica):
    """The captured table was renamed away after the changes the stream is about to deliver."""

    def schema(self, table: TableId, surrogate_key: tuple[str, ...] | None = None) -> TableSchema:
        raise SchemaError(f"table {table} does not exist")

    def executed(self) -> GtidSet:
        with self.world.lock:
            while self.world.stream_start is not None and self.world.writes_left > 0:
                self.world.write()  # after the stream's start, before the run's caught-up target
            return super().executed()


def test_a_change_goes_out_with_the_key_it_was_decoded_with(tmp_path: Path) -> None:
    """The stream's pump decodes (and forgets shapes at a DDL) ahead of the engine: a change's record
    takes its key columns from the change, never from a shape read again when the engine meets it."""
    world = World(random.Random(6), rows=4, writes=6)
    out = tmp_path / "o.jsonl"
    engine = Engine(
        RenamedAwayReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        JsonlSink(out),
        CheckpointStore(tmp_path / "c.json"),
        captured=[T],
    )
    engine.run(until_caught_up=True)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and all(r["key"] == [(r["after"] or r["before"])["id"]] for r in records), records


class LosingStream(FakeStream):
    """The world's binlog with the events before the first transaction's commit lost (what a pump
    stopped mid-transaction once did)."""

    lost: TxBegin | None = None

    def next(self) -> BinlogEvent | None:
        event = super().next()
        if isinstance(event, TxBegin) and self.lost is None:
            self.lost = event
            while not isinstance(event, TxCommit):
                event = super().next()
        return event


def test_a_commit_without_its_start_stops_the_run_before_it_goes_out(tmp_path: Path) -> None:
    """Lost events are never passed over silently: the checkpoint stays before the transaction, so
    the run that follows reads it again from the binlog."""
    world = World(random.Random(3), rows=4, writes=6)
    store = CheckpointStore(tmp_path / "c.json")
    streams: list[LosingStream] = []

    def stream(start: GtidSet, schema_of: Any) -> LosingStream:
        streams.append(LosingStream(world, start))
        return streams[-1]

    engine = Engine(
        FakeReplica(world),
        stream,
        JsonlSink(tmp_path / "o.jsonl"),
        store,
        captured=[T],
    )
    with pytest.raises(SourceError, match="without its start"):
        engine.run(until_caught_up=True)
    lost = streams[0].lost
    assert lost is not None
    assert lost.gtid not in parse_gtid_set("mysql", json.loads(store.path.read_text())["processed"])


def test_a_checkpoint_the_replica_cannot_continue_is_refused_before_any_output(tmp_path: Path) -> None:
    world = World(random.Random(4), rows=5, writes=0)
    out, store = tmp_path / "o.jsonl", CheckpointStore(tmp_path / "c.json")

    def engine() -> Engine:
        stream = lambda start, schema_of: FakeStream(world, start, lambda: None)  # noqa: E731
        return Engine(FakeReplica(world), stream, JsonlSink(out), store, captured=[T])

    engine().run(snapshot=[T], until_caught_up=True)
    data = json.loads(store.path.read_text())
    data["processed"] += ",8a94f357-aab4-11df-86ab-c80aa9429562:1-3"  # another server's transactions
    store.path.write_text(json.dumps(resealed(data)))
    before = out.read_bytes()
    with pytest.raises(CheckpointError, match=r"has not executed .*8a94f357"):
        engine().run(until_caught_up=True)
    assert out.read_bytes() == before


def test_a_checkpoint_whose_next_seq_the_output_used_is_refused_and_the_output_kept(tmp_path: Path) -> None:
    """A next_seq lowered (in a checkpoint whose digest says nothing, as another output's) would number
    new records like ones the output holds: the run stops before the output is cut, naming what differs,
    the checkpoint and the output; put back, it resumes."""
    world = World(random.Random(6), rows=5, writes=0)
    out, store = tmp_path / "o.jsonl", CheckpointStore(tmp_path / "c.json")
    sinks: list[JsonlSink] = []

    def engine() -> Engine:
        stream = lambda start, schema_of: FakeStream(world, start, lambda: None)  # noqa: E731
        sinks.append(JsonlSink(out))
        return Engine(FakeReplica(world), stream, sinks[-1], store, captured=[T])

    engine().run(snapshot=[T], until_caught_up=True)
    data = json.loads(store.path.read_text())
    last = json.loads(out.read_text().splitlines()[-1])["seq"]
    assert data["next_seq"] == last + 1
    before = out.read_bytes()
    for lowered in (last, 1):
        store.path.write_text(json.dumps(resealed({**data, "next_seq": lowered})))
        with pytest.raises(CheckpointError) as refused:
            engine().run(until_caught_up=True)
        message = str(refused.value)
        assert f"is seq {last}, not next_seq - 1 = {lowered - 1}" in message
        assert str(store.path) in message and str(out) in message and "nothing was changed" in message
        assert "use the checkpoint that belongs to this output" in message and "start over" in message
        assert out.read_bytes() == before
        assert sinks[-1]._file is None, "the refused run never opened the output"
    store.path.write_text(json.dumps(data))
    engine().run(until_caught_up=True)
    assert out.read_bytes() == before


def test_each_checkpoint_stamps_the_last_transaction_and_keeps_the_history(tmp_path: Path) -> None:
    """The stamp that tells this primary's history from another's (:mod:`gtidsnap.core.source_identity`)
    is the last transaction processed, as its stream said; a run that streams nothing keeps it, and
    the history of deliberate edits goes from checkpoint to checkpoint."""
    world = World(random.Random(8), rows=5, writes=0)
    out, store = tmp_path / "o.jsonl", CheckpointStore(tmp_path / "c.json")

    def run() -> Checkpoint:
        stream = lambda start, schema_of: FakeStream(world, start, lambda: None)  # noqa: E731
        Engine(FakeReplica(world), stream, JsonlSink(out), store, captured=[T]).run(until_caught_up=True)
        cp = store.load()
        assert cp is not None
        return cp

    assert run().last_transaction is None, "a first run that streamed nothing has none"
    world.put(1, 7)
    world.put(2, 8)
    cp = run()
    stamp = cp.last_transaction
    assert (
        stamp is not None and stamp.gtid == f"{U}:{world.gno}" and stamp.timestamp == STAMPED_AT + world.gno
    )
    assert (stamp.server_id, stamp.before) == (1, "")
    store.save(recorded(cp, "processed: skipped x", "alice", "t"))
    again = run()
    assert again.last_transaction == stamp and again.history == (Edit("t", "alice", "processed: skipped x"),)


class HeldSink(JsonlSink):
    """JSON lines whose greatest seq is told by the test (None: nothing cheap tells)."""

    def __init__(self, path: Path, held: HeldSeq | None) -> None:
        super().__init__(path)
        self.held = held

    def greatest_seq(self) -> HeldSeq | None:
        return self.held


@pytest.mark.parametrize(
    ("held", "refused"),
    [(None, False), (HeldSeq(9, "x"), False), (HeldSeq(10, "x"), True), (HeldSeq(2**62, "x"), True)],
)
def test_the_next_seq_check_refuses_only_a_seq_the_output_holds(
    tmp_path: Path, held: HeldSeq | None, refused: bool
) -> None:
    checkpoint = Checkpoint("mysql", parse_gtid_set("mysql", ""), 10, None)
    sink = HeldSink(tmp_path / "o.jsonl", held)
    if not refused:
        open_at(sink, checkpoint, tmp_path / "c.json")
        assert sink._file is not None
        sink.close()
        return
    assert held is not None
    with pytest.raises(CheckpointError, match=rf"x already holds records up to seq {held.seq} but"):
        open_at(sink, checkpoint, tmp_path / "c.json")
    assert sink._file is None


def test_a_sink_that_cannot_tell_its_seqs_is_not_checked(tmp_path: Path) -> None:
    class Plain:  # the Sink protocol alone
        opened: object = "no"

        def open(self, committed: object) -> None:
            self.opened = committed

        def write(self, records: object) -> None: ...
        def commit(self) -> None: ...
        def close(self) -> None: ...

    sink = Plain()
    open_at(sink, Checkpoint("mysql", parse_gtid_set("mysql", ""), 1, 42), tmp_path / "c.json")
    assert sink.opened == 42


def test_a_refused_signal_id_may_be_sent_again() -> None:
    """Only a signal acted on reserves its id; a refused one can be corrected and resent."""
    world = World(random.Random(5), rows=2, writes=0)
    engine = Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        JsonlSink(Path("/dev/null")),
        CheckpointStore(Path("/nonexistent/c.json")),
    )
    engine.signals, engine.context = SignalLedger(), SnapshotContext()
    engine._apply(SignalReceived(0, 0, "a", "execute-snapshot", StartSnapshot(selectors=("shop.nope",))))
    engine._apply(SignalReceived(0, 1, "a", "execute-snapshot", StartSnapshot(selectors=("shop.orders",))))
    engine._apply(SignalReceived(0, 2, "a", "execute-snapshot", StartSnapshot(selectors=("shop.orders",))))
    outcomes = [h.outcome for h in engine.signals.history]
    assert outcomes[0].startswith("refused: ") and outcomes[1:] == ["done", "ignored: duplicate id"]


class CountingCatalog(FakeReplica):
    """Counts the catalog reads that requests with table patterns cost."""

    catalog_reads = 0

    def tables(self) -> list[TableId]:
        self.catalog_reads += 1
        return super().tables()


def test_a_flood_of_requests_is_taken_a_bounded_number_a_turn_with_one_catalog_read_each(
    tmp_path: Path,
) -> None:
    """10,000 signals drained in one turn stalled the stream ~15 s with no checkpoint: a turn now takes
    at most COMMANDS_PER_TURN of them, and reads the catalog once for all it takes."""
    world = World(random.Random(8), rows=6)
    replica = CountingCatalog(world)
    engine = Engine(
        replica,
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        JsonlSink(tmp_path / "o.jsonl"),
        CheckpointStore(tmp_path / "c.json"),
        EngineSettings(chunk_size=3, checkpoint_interval_s=0.0),
    )
    flood = 2 * COMMANDS_PER_TURN + 7
    for _ in range(flood):
        engine.commands.put(StartSnapshot(selectors=(r"shop\.ord.*",)))
    stats = engine.run(until_caught_up=True)
    # three turns took them (all in one turn would be one read; one read a request, 107)
    assert engine.commands.empty() and replica.catalog_reads == 3
    assert stats.snapshot_rows == len(world.table)  # the table's snapshot once, not once a request


def test_take_commands_takes_at_most_its_bound_oldest_first() -> None:
    commands: queue.Queue[Any] = queue.Queue()
    for i in range(7):
        commands.put(SetChunkSize(i + 1))
    assert take_commands(commands, 3) == [SetChunkSize(1), SetChunkSize(2), SetChunkSize(3)]
    assert take_commands(commands, 3) == [SetChunkSize(4), SetChunkSize(5), SetChunkSize(6)]
    assert take_commands(commands, 3) == [SetChunkSize(7)] and take_commands(commands) == []
