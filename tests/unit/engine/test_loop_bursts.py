"""The loop reads a stream of small transactions in bursts, without a turn between them, only while a
turn would do nothing but read the stream again: each transaction's records are written before the next
is read, and a command, a due commit or the end of an ``until_caught_up`` run ends a burst at the next
transaction boundary."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.commands import Shutdown
from gtidsnap.core.gtid import GtidSet
from gtidsnap.core.model import BinlogEvent, RowChange, TxCommit
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.engine.loop import Engine
from gtidsnap.engine.loop_step import EngineSettings
from tests.fakes import START, FakeReplica, FakeStream, RecordingSink, T, World, gtids

TXS = 40


class WatchedStream(FakeStream):
    """The world's binlog, calling ``before_read`` ahead of each read and ``after`` with each event."""

    def __init__(
        self,
        world: World,
        start: GtidSet,
        before_read: Callable[[], None] = lambda: None,
        after: Callable[[BinlogEvent], None] = lambda e: None,
    ) -> None:
        super().__init__(world, start)
        self.before_read, self.after = before_read, after
        self.handed: list[BinlogEvent] = []

    def next(self) -> BinlogEvent | None:
        self.before_read()
        event = super().next()
        if event is not None:
            self.handed.append(event)
            self.after(event)
        return event


class ScriptedReplica(FakeReplica):
    """A replica whose executed set is read as ``sets`` in turn (the last from then on): the run starts
    before the world's transactions, and may be told to catch up to fewer than the stream holds."""

    def __init__(self, world: World, *sets: GtidSet) -> None:
        super().__init__(world)
        self.sets = list(sets)

    def executed(self) -> GtidSet:
        return self.sets.pop(0) if len(self.sets) > 1 else self.sets[0]


class CountingStore(CheckpointStore):
    saves = 0

    def save(self, checkpoint: Checkpoint) -> None:
        self.saves += 1
        super().save(checkpoint)


def _world() -> World:
    world = World(rows=0)
    world.stream_writes = False
    for n in range(TXS):
        world.put(n, n)
    return world


def _processed(store: CheckpointStore) -> str:
    return str(json.loads(store.path.read_text())["processed"])


def test_each_transaction_is_written_before_the_next_is_read(tmp_path: Path) -> None:
    """A read between transactions may wait for the source: what came before it is out already."""
    world, sink = _world(), RecordingSink(tmp_path / "o.jsonl")
    streams: list[WatchedStream] = []
    unwritten: list[int] = []

    def before_read() -> None:
        handed = streams[0].handed
        if handed and isinstance(handed[-1], TxCommit):
            changes = sum(isinstance(e, RowChange) for e in handed)
            unwritten.append(changes - len(sink.records))

    def stream(start: GtidSet, schema_of: Any) -> WatchedStream:
        streams.append(WatchedStream(world, start, before_read))
        return streams[-1]

    Engine(
        ScriptedReplica(world, gtids(START), gtids(START + TXS)),
        stream,
        sink,
        CheckpointStore(tmp_path / "c.json"),
        captured=[T],
    ).run(until_caught_up=True)
    assert len(sink.records) == TXS
    assert len(unwritten) >= TXS - 1 and set(unwritten) == {0}


def test_a_command_ends_the_burst_at_the_transactions_end(tmp_path: Path) -> None:
    """A shutdown sent while the fifth transaction is read stops the run right after its commit."""
    world, store = _world(), CheckpointStore(tmp_path / "c.json")
    engines: list[Engine] = []
    commits: list[TxCommit] = []

    def after(event: BinlogEvent) -> None:
        if isinstance(event, TxCommit):
            commits.append(event)
        elif isinstance(event, RowChange) and len(commits) == 4:
            engines[0].commands.put(Shutdown())

    engine = Engine(
        ScriptedReplica(world, gtids(START), gtids(START + TXS)),
        lambda start, schema_of: WatchedStream(world, start, after=after),
        RecordingSink(tmp_path / "o.jsonl"),
        store,
        captured=[T],
    )
    engines.append(engine)
    engine.run()
    assert len(commits) == 5
    assert _processed(store) == str(gtids(START + 5))


def test_an_until_caught_up_run_ends_at_the_set_it_read(tmp_path: Path) -> None:
    world, store = _world(), CheckpointStore(tmp_path / "c.json")
    target = gtids(START + 7)
    Engine(
        ScriptedReplica(world, gtids(START), target),
        lambda start, schema_of: WatchedStream(world, start),
        RecordingSink(tmp_path / "o.jsonl"),
        store,
        captured=[T],
    ).run(until_caught_up=True)
    assert _processed(store) == str(target)


def test_a_due_commit_ends_the_burst(tmp_path: Path) -> None:
    """Records per commit stay bounded by ``batch_rows`` (here 4 one-row transactions)."""
    world, store = _world(), CountingStore(tmp_path / "c.json")
    Engine(
        ScriptedReplica(world, gtids(START), gtids(START + TXS)),
        lambda start, schema_of: WatchedStream(world, start),
        RecordingSink(tmp_path / "o.jsonl"),
        store,
        EngineSettings(batch_rows=4, checkpoint_interval_s=3600.0),
        captured=[T],
    ).run(until_caught_up=True)
    assert store.saves >= TXS // 4
