"""Which snapshot rows the engine marks fresh (a Delta mirror may append them, see sinks.delta.mirror_update):
those of a table's first snapshot into the output, through restarts, and none after a DDL of the
table or in a snapshot that follows another one."""

from __future__ import annotations

import random
from pathlib import Path

from gtidsnap.core.commands import StartSnapshot
from gtidsnap.core.gtid import MysqlGtid
from gtidsnap.core.model import BinlogEvent, SchemaChange, TxBegin, TxCommit
from gtidsnap.core.plan import SnapshotContext, TableProgress
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.engine.loop import Engine
from gtidsnap.engine.loop_step import EngineSettings
from tests.fakes import FakeReplica, FakeStream, RecordingSink, T, U, World


def engine(world: World, tmp: Path, sink: RecordingSink, chunk: int = 3) -> Engine:
    return Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start, lambda: None),
        sink,
        CheckpointStore(tmp / "checkpoint.json"),
        EngineSettings(chunk_size=chunk, checkpoint_interval_s=0.0),
        captured=[T],
    )


def ddl(world: World) -> None:
    """An ALTER of the table, as its own transaction in the binlog (the rows stay as they are)."""
    world.gno += 1
    gtid = MysqlGtid(U, "", world.gno)
    events: list[BinlogEvent] = [
        TxBegin(gtid),
        SchemaChange(gtid, frozenset({T}), "ALTER TABLE orders COMMENT 'x'"),
        TxCommit(gtid),
    ]
    world.txs.append((gtid, events))
    world.executed = world.executed.add(gtid)


def test_the_first_snapshot_is_fresh_through_a_restart_and_the_next_one_is_not(tmp_path: Path) -> None:
    world = World(random.Random(3), rows=20, writes=12)
    sink = RecordingSink(tmp_path / "out.jsonl")
    first = engine(world, tmp_path, sink)
    first.on_progress = lambda context, stats: setattr(first, "_stop", stats.chunks >= 2)
    first.run(snapshot=[T], until_caught_up=True)  # stopped after two chunks, as by a shutdown
    again = engine(world, tmp_path, RecordingSink(tmp_path / "out.jsonl"))
    again.run(until_caught_up=True)  # resumes the snapshot from the checkpoint
    records = sink.records + again.sink.records  # type: ignore[attr-defined]
    assert any(r.snapshot for r in sink.records) and any(r.snapshot for r in again.sink.records)  # type: ignore[attr-defined]
    assert all(r.fresh for r in records if r.snapshot)
    assert not any(r.fresh for r in records if not r.snapshot)

    later = engine(world, tmp_path, RecordingSink(tmp_path / "out.jsonl"))
    later.commands.put(StartSnapshot((T,)))
    later.run(until_caught_up=True)
    rows = [r for r in later.sink.records if r.snapshot]  # type: ignore[attr-defined]
    assert rows and not any(r.fresh for r in rows)


def test_a_ddl_of_the_table_ends_freshness_for_the_rest_of_its_snapshot(tmp_path: Path) -> None:
    world = World(random.Random(5), rows=20, writes=0)
    sink = RecordingSink(tmp_path / "out.jsonl")
    run = engine(world, tmp_path, sink, chunk=4)

    def after_a_chunk(context: SnapshotContext, stats: object) -> None:
        if getattr(stats, "chunks", 0) == 2 and len(world.txs) == 0:
            ddl(world)

    run.on_progress = after_a_chunk
    run.run(snapshot=[T], until_caught_up=True)
    rows = [r for r in sink.records if r.snapshot]
    assert len(rows) == 20
    marks = [r.fresh for r in rows]
    assert marks[:8] == [True] * 8 and not any(marks[12:]), marks


def test_what_the_context_knows_of_earlier_snapshots() -> None:
    context = SnapshotContext().enqueue([T])
    assert context.first_snapshot(T)
    emitted = context.emitted(T)
    assert not emitted.first_snapshot(T)
    assert SnapshotContext.from_json(emitted.to_json()) == emitted
    progress = TableProgress(T, started=True, fresh=True)
    assert TableProgress.from_json(progress.to_json()) == progress
    legacy = emitted.to_json()
    del legacy["snapshotted"]  # a checkpoint from before: nothing counts as a first snapshot
    assert not SnapshotContext.from_json(legacy).first_snapshot(T)
