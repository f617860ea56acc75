"""The one set of fakes the unit tests share: a table and its binlog (:class:`World`), the replica and
the stream that serve it (:class:`FakeReplica`, :class:`FakeStream`), and sinks that keep what they
were given (:class:`RecordingSink`) or commit in the background (:class:`SealingJsonl`).

The world is a table of integer keys whose transactions are kept in binlog order. A writer commits
random transactions when asked (``maybe_write``, ``write``) or exactly the one a test wants (``put``,
``alter``). ``lag`` models when a SELECT sees a transaction the binlog already holds: "none" at once;
"mysql" later, the executed set growing with it; "mariadb" later, the executed set
(gtid_binlog_pos) having grown with the binlog and only the visible set (gtid_current_pos) with it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gtidsnap.core.checkpoint_edits import DIGEST_KEY, content_digest
from gtidsnap.core.errors import SchemaError
from gtidsnap.core.gtid import GtidSet, MysqlGtid, MysqlGtidSet
from gtidsnap.core.model import (
    BinlogEvent,
    Heartbeat,
    Key,
    RowChange,
    SchemaChange,
    TableId,
    TxBegin,
    TxCommit,
)
from gtidsnap.core.records import Emitted, Record
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.engine.loop import Engine
from gtidsnap.sinks.jsonl import JsonlSink

T = TableId("shop", "orders")
OTHER = TableId("shop", "other")
U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
KEY = ("id",)
SCHEMA = TableSchema(T, (Column("id", "int", "int"), Column("v", "int", "int")), KEY)
START = 10  # transactions 1-10 happened before the world's stream starts
STAMPED_AT = 1_700_000_000  # transaction n was written at this time + n (its GTID event's header)


def resealed(data: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint's JSON changed by a test, with the digest of its new content, as a checkpoint of
    another output (or one restored from another time) has: the checks past the digest see it."""
    body = {k: v for k, v in data.items() if k != DIGEST_KEY}
    return body | {DIGEST_KEY: content_digest(body)}


def gtids(upto: int) -> GtidSet:
    """This world's executed set after transaction ``upto``."""
    return MysqlGtidSet.parse(f"{U}:1-{upto}")


class World:
    """A table, its binlog and a writer (see the module docstring). ``keys`` default to ``rows`` even
    numbers from 0; ``row`` makes a key's first row (default ``{"id": k, "v": 0}``)."""

    def __init__(
        self,
        rnd: random.Random | None = None,
        rows: int = 0,
        writes: int = 0,
        lag: str = "none",
        keys: Iterable[int] | None = None,
        start: int = START,
        schema: TableSchema = SCHEMA,
        row: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        self.rnd = rnd or random.Random(0)
        self.lag = lag
        self.schema = schema
        make = row or (lambda k: {"id": k, "v": 0})
        keys = range(0, rows * 2, 2) if keys is None else keys
        self.table: dict[int, dict[str, Any]] = {k: make(k) for k in keys}
        self.seen = {k: dict(v) for k, v in self.table.items()}  # what a SELECT sees
        self.unseen: list[tuple[MysqlGtid, list[BinlogEvent]]] = []  # in the binlog, not yet seen
        self.txs: list[tuple[MysqlGtid, list[BinlogEvent]]] = []
        self.executed: GtidSet = gtids(start)
        self.visible: GtidSet = self.executed
        self.gno = start
        self.writes_left = writes
        self.stream_start: GtidSet | None = None  # the executed set the first run starts streaming at
        # The stream writes too as it is read (False: only the replica's reads of the executed set do,
        # so nothing is written once a run has read the set it catches up to).
        self.stream_writes = True
        # With chunk readers the stream is read on the pump's thread: the world is shared, so locked.
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ random writes
    def maybe_write(self, p: float = 0.3) -> None:
        with self.lock:
            if self.writes_left > 0 and self.rnd.random() < p:
                self.write()
            if self.unseen and self.rnd.random() < 0.1:
                self.see()

    def see(self) -> None:
        """The oldest transaction not yet seen by a SELECT commits in the engine."""
        gtid, events = self.unseen.pop(0)
        for e in events:
            if isinstance(e, RowChange) and e.table != T:
                continue
            if isinstance(e, RowChange) and e.after is None:
                self.seen.pop(e.key[0], None)
            elif isinstance(e, RowChange):
                self.seen[e.key[0]] = dict(e.after)
        self.visible = self.visible.add(gtid)
        if self.lag == "mysql":
            self.executed = self.executed.add(gtid)

    def write(self) -> None:
        """A random transaction of 1-3 inserts, updates or deletes of the table."""
        with self.lock:
            self.writes_left -= 1
            gtid = self._next_gtid()
            events: list[BinlogEvent] = [TxBegin(gtid)]
            for _ in range(self.rnd.randint(1, 3)):
                key = self.rnd.randrange(0, len(self.table) * 2 + 10)
                new = {"id": key, "v": self.gno}
                if key in self.table and self.rnd.random() < 0.3:
                    events.append(RowChange(gtid, T, "d", (key,), self.table.pop(key), None, key_columns=KEY))
                elif key in self.table:
                    events.append(RowChange(gtid, T, "u", (key,), self.table[key], new, key_columns=KEY))
                    self.table[key] = new
                else:
                    events.append(RowChange(gtid, T, "c", (key,), None, new, key_columns=KEY))
                    self.table[key] = new
            events.append(TxCommit(gtid, 1, STAMPED_AT + gtid.gno))
            self._commit(gtid, events)

    # ------------------------------------------------------------------ the writes a test asks for
    def put(self, key: int, value: int, table: TableId = T) -> list[BinlogEvent]:
        """Commit an insert or update of ``key``: the transaction's events, for the stream."""
        with self.lock:
            gtid = self._next_gtid()
            after = {"id": key, "v": value}
            before = self.table.get(key) if table == T else None
            if table == T:
                self.table[key] = after
            change = RowChange(gtid, table, "c" if before is None else "u", (key,), before, after)
            events: list[BinlogEvent] = [TxBegin(gtid), change, TxCommit(gtid, 1, STAMPED_AT + gtid.gno)]
            self._commit(gtid, events)
            return events

    def alter(self, table: TableId = T) -> list[BinlogEvent]:
        """Commit an ALTER of ``table`` (its rows stay as they are): the transaction's events."""
        with self.lock:
            gtid = self._next_gtid()
            ddl = SchemaChange(gtid, frozenset({table}), f"ALTER TABLE {table} ADD c INT")
            events: list[BinlogEvent] = [TxBegin(gtid), ddl, TxCommit(gtid, 1, STAMPED_AT + gtid.gno)]
            self._commit(gtid, events)
            return events

    def _next_gtid(self) -> MysqlGtid:
        self.gno += 1
        return MysqlGtid(U, "", self.gno)

    def _commit(self, gtid: MysqlGtid, events: list[BinlogEvent]) -> None:
        self.txs.append((gtid, events))
        self.unseen.append((gtid, events))
        if self.lag != "mysql":
            self.executed = self.executed.add(gtid)
        if self.lag == "none":
            self.see()


@dataclass(frozen=True)
class FakeChunk:
    rows: tuple[tuple[Key, dict[str, Any]], ...]
    last_raw_key: tuple[Any, ...] | None
    count: int


class FakeReplica:
    """The world's replica, as :class:`gtidsnap.core.ports.ReplicaPort` asks. ``failure``: what a chunk
    SELECT raises; ``visible``: the visible sets its reads return in turn (the last one from then on;
    None: the world's). It notes its chunk SELECTs and executed-set reads in ``calls``, each SELECT's
    limit in ``limits`` and its chunk-ends queries in ``end_queries``; ``row_length`` is its estimate of
    a row's bytes, read ``row_length_reads`` times."""

    flavor = "mysql"

    def __init__(
        self,
        world: World | None = None,
        failure: BaseException | None = None,
        visible: Sequence[str] | None = None,
    ) -> None:
        self.world = world if world is not None else World()
        self.failure = failure
        self.visible = list(visible) if visible is not None else None
        self.calls: list[tuple[Any, ...]] = []
        self.limits: list[int | None] = []
        self.end_queries = 0
        self.row_length: int | None = None  # what avg_row_length says
        self.row_length_reads = 0

    def describe(self) -> str:
        return "the fake replica"

    def purged(self) -> GtidSet:
        return MysqlGtidSet()

    def applied(self) -> GtidSet:
        return self.executed()

    def identity(self) -> str:
        return "fake-replica"

    def executed(self) -> GtidSet:
        with self.world.lock:
            self.world.maybe_write()
            if self.world.stream_start is None:
                self.world.stream_start = self.world.executed
            return self.world.executed

    def executed_and_visible(self) -> tuple[GtidSet, GtidSet]:
        self.calls.append(("executed",))
        if self.visible is not None:
            visible = self.visible.pop(0) if len(self.visible) > 1 else self.visible[0]
            return self.world.executed, MysqlGtidSet.parse(visible)
        with self.world.lock:
            if self.world.unseen and self.world.rnd.random() < 0.5:
                self.world.see()  # time passes while the engine waits: the server commits
            executed = self.executed()
            return executed, self.world.visible

    def tables(self) -> list[TableId]:
        return [T]

    def schema(self, table: TableId, surrogate_key: tuple[str, ...] | None = None) -> TableSchema:
        if table != T:
            raise SchemaError(f"table {table} does not exist")
        return self.world.schema

    def avg_row_length(self, table: TableId) -> int | None:
        self.row_length_reads += 1
        return self.row_length

    def max_key(self, schema: TableSchema, condition: str | None = None) -> tuple[Any, ...] | None:
        with self.world.lock:
            return (max(self.world.seen),) if self.world.seen else None

    def _keys(self, after: Any, upto: Any) -> list[int]:
        with self.world.lock:
            return sorted(k for k in self.world.seen if (after is None or k > after[0]) and k <= upto[0])

    def select_chunk_columns(
        self, schema: TableSchema, after: Any, upto: Any, condition: str | None = None
    ) -> Any | None:
        """No compiled client here: every chunk by :meth:`select_chunk`."""
        return None

    def select_chunk(
        self, schema: TableSchema, after: Any, upto: Any, limit: int | None, condition: str | None = None
    ) -> FakeChunk:
        self.calls.append(("select", schema, after, upto, limit, condition))
        self.limits.append(limit)
        if self.failure is not None:
            raise self.failure
        with self.world.lock:
            keys = self._keys(after, upto)[:limit]
            rows = tuple(((k,), dict(self.world.seen[k])) for k in keys)
        return FakeChunk(rows, (keys[-1],) if keys else None, len(keys))

    def chunk_ends(
        self, schema: TableSchema, after: Any, upto: Any, size: int, count: int, condition: str | None = None
    ) -> list[tuple[Any, ...]]:
        self.end_queries += 1
        keys = self._keys(after, upto)[: size * count]
        return [(k,) for k in keys[size - 1 :: size]]

    # the world's writes, for tests that only hold the replica
    def write(self, key: int, value: int, table: TableId = T) -> list[BinlogEvent]:
        return self.world.put(key, value, table)

    def ddl(self) -> list[BinlogEvent]:
        return self.world.alter()

    @property
    def gno(self) -> int:
        return self.world.gno

    @gno.setter
    def gno(self, value: int) -> None:
        self.world.gno = value


class FakeStream:
    """The world's binlog from ``start`` on, one event per ``next``; ``crash`` is rolled per event."""

    def __init__(self, world: World, start: GtidSet, crash: Callable[[], None] = lambda: None) -> None:
        self.world, self.crash = world, crash
        self.queue: list[BinlogEvent] = []
        self.tx_at = next((i for i, (g, _) in enumerate(world.txs) if g not in start), len(world.txs))
        self.last: MysqlGtid | None = None

    def next(self) -> BinlogEvent | None:
        with self.world.lock:
            if self.world.stream_writes:
                self.world.maybe_write(0.2)
            if not self.queue and self.tx_at < len(self.world.txs):
                self.queue = list(self.world.txs[self.tx_at][1])
                self.tx_at += 1
        if not self.queue:
            # A real idle read blocks until the next heartbeat. Crashes are rolled per event, not per
            # idle read: polls that return at once would otherwise roll hundreds of times while a
            # background commit waits for its fsync, and under load no run would ever get one saved.
            time.sleep(0.001)
            return Heartbeat(self.last)
        self.crash()
        event = self.queue.pop(0)
        if isinstance(event, TxCommit):
            self.last = event.gtid  # type: ignore[assignment]
        return event

    def close(self) -> None:
        pass


class RecordingSink(JsonlSink):
    """JSON lines that also keep the records (with their ``fresh`` mark) in memory."""

    def chunk_renderer(self, remote: bool) -> None:
        return None  # records, not lines the readers encoded: their marks are read here

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.records: list[Record] = []

    def write(self, records: Sequence[Emitted]) -> None:
        self.records.extend(r for r in records if isinstance(r, Record))
        super().write(records)


class SealingJsonl(JsonlSink):
    """JSON lines committed in the background: records wait in memory until sealed, and the commit
    job may "crash" before writing, or after writing but before its position reaches the checkpoint."""

    def __init__(self, path: Path, crash: Callable[[], None]) -> None:
        super().__init__(path)
        self.crash = crash
        self.buffer: list[Emitted] = []

    def write(self, records: Sequence[Emitted]) -> None:
        self.buffer.extend(records)

    def seal(self) -> Callable[[], Any]:
        batch, self.buffer = self.buffer, []

        def job() -> int:
            self.crash()
            JsonlSink.write(self, batch)
            position = JsonlSink.commit(self)
            self.crash()
            return position

        return job


def jsonl_engine(world: World, out: Path, **kwargs: Any) -> Engine:
    """An engine on ``world`` (table ``T`` captured) writing JSON lines and its checkpoint into ``out``."""
    return Engine(
        FakeReplica(world),
        lambda start, schema_of: FakeStream(world, start),
        JsonlSink(out / "out.jsonl"),
        CheckpointStore(out / "checkpoint.json"),
        captured=[T],
        **kwargs,
    )
