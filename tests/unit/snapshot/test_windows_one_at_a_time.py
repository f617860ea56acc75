"""Chunk windows, one chunk at a time, against a simulated world: a table, writers on several
sources, a binlog and chunk SELECTs that may see any state between the low and the high watermark.

Everything the window emits is replayed; the checks are the DBLog guarantees:
the replayed table equals the simulated one, no key ever goes back to an older version, and every
binlog change is emitted exactly once. Schema changes are modelled too: a chunk is selected with the
columns the engine knows (read at some point between the last DDL the stream delivered and the low
watermark), and every chunk must come out with the columns of the output's current schema.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from gtidsnap.core.gtid import Gtid, GtidSet, MariadbGtid, MariadbGtidSet, MysqlGtid, MysqlGtidSet
from gtidsnap.core.model import BinlogEvent, Heartbeat, RowChange, SchemaChange, TableId, TxBegin, TxCommit
from gtidsnap.snapshot.windows import ChunkOut, ChunkWindows, Output, WindowDiscarded

CAPTURED = TableId("shop", "orders")
OTHER = TableId("shop", "audit")
KEYS = 12
U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"


class WindowWorld(RuleBasedStateMachine):
    """Subclasses pick the GTID flavour through :meth:`new_gtid` and :meth:`empty`."""

    sources: ClassVar[list[Any]] = []

    def empty(self) -> GtidSet:
        raise NotImplementedError

    def new_gtid(self, source: Any, number: int) -> Gtid:
        raise NotImplementedError

    # ------------------------------------------------------------------ world state
    @initialize(initial=st.sets(st.integers(0, KEYS - 1), max_size=KEYS), chunk_size=st.integers(1, 5))
    def setup(self, initial: set[int], chunk_size: int) -> None:
        self.table: dict[int, dict[str, int]] = {k: {"v": 0, "p": k} for k in initial}
        self.counters: Counter[Any] = Counter()
        self.executed = self.empty()
        for source in self.sources:  # some history before the stream starts
            self.counters[source] = 3
            for n in range(1, 4):
                self.executed = self.executed.add(self.new_gtid(source, n))
        self.processed = self.executed
        self.windows = ChunkWindows(self.processed)
        self.history = [dict(self.table)]  # the table after each transaction of the stream
        self.delivered_tx = 0  # the transaction of the last event the stream delivered
        self.events: list[BinlogEvent] = []
        self.version_of: dict[int, int] = {}  # id(event) -> tx index
        self.stream_at = 0
        self.tx_count = 0
        self.last_gtid: Gtid | None = None
        self.replay: dict[int, dict[str, int]] = {}
        self.emitted_version: dict[int, int] = {}
        self.emit_count: Counter[int] = Counter()
        self.chunk_size = chunk_size
        self.snapshot_started = False
        self.snapshot_done = False
        self.cursor: int | None = None
        self.max_key: int | None = None
        self.window: int | None = None
        self.window_last_key: int | None = None
        self.windows_closed = 0
        self.world_ddls = 0  # DDLs on CAPTURED committed at the source
        self.delivered_ddls = 0  # ... that the stream delivered (the engine then reads the shape anew)
        self.emitted_ddls = 0  # ... that the output holds: its rows must have their columns
        self.chunk_schema = 0  # the schema version the open window's chunk was selected with

    # ------------------------------------------------------------------ writers
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        self._commit(data)

    def _commit(self, data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(self.sources), label="source")
        self.counters[source] += 1
        gtid = self.new_gtid(source, self.counters[source])
        self.tx_count += 1
        tx = self.tx_count
        events: list[BinlogEvent] = [TxBegin(gtid)]
        kind = data.draw(st.sampled_from(["rows", "rows", "rows", "other", "ddl"]), label="kind")
        if kind == "ddl":
            target = data.draw(st.sampled_from([CAPTURED, OTHER]), label="ddl table")
            ddl = f"ALTER TABLE {target} ADD COLUMN c{tx} INT"
            events.append(SchemaChange(gtid, frozenset({target}), ddl))
            self.world_ddls += target == CAPTURED
        elif kind == "other":
            events.append(RowChange(gtid, OTHER, "c", (tx,), None, {"x": tx}))
        else:
            for _ in range(data.draw(st.integers(1, 4), label="changes")):
                events.append(self._change(data, gtid, tx))
        events.append(TxCommit(gtid))
        for ev in events:
            self.version_of[id(ev)] = tx
        self.events.extend(events)
        self.executed = self.executed.add(gtid)
        self.history.append({k: dict(v) for k, v in self.table.items()})

    def _change(self, data: st.DataObject, gtid: Gtid, tx: int) -> RowChange:
        key = data.draw(st.integers(0, KEYS - 1), label="key")
        new = {"v": tx, "p": data.draw(st.integers(0, 10**6), label="payload")}
        if key not in self.table:
            self.table[key] = new
            return RowChange(gtid, CAPTURED, "c", (key,), None, new)
        old = self.table[key]
        action = data.draw(st.sampled_from(["update", "delete", "move"]), label="action")
        if action == "delete":
            del self.table[key]
            return RowChange(gtid, CAPTURED, "d", (key,), old, None)
        free = [k for k in range(KEYS) if k not in self.table]
        if action == "move" and free:  # an update of the primary key itself
            to = data.draw(st.sampled_from(free), label="new key")
            del self.table[key]
            self.table[to] = new
            return RowChange(gtid, CAPTURED, "u", (to,), old, new, old_key=(key,))
        self.table[key] = new
        return RowChange(gtid, CAPTURED, "u", (key,), old, new)

    # ------------------------------------------------------------------ the stream
    @rule(n=st.integers(1, 8))
    def stream(self, n: int) -> None:
        for _ in range(n):
            if self.stream_at >= len(self.events):
                return
            ev = self.events[self.stream_at]
            self.stream_at += 1
            self._deliver(ev)

    @precondition(lambda self: self.stream_at == len(self.events))
    @rule()
    def heartbeat(self) -> None:
        self._deliver(Heartbeat(self.last_gtid))

    def _deliver(self, ev: BinlogEvent) -> None:
        outs = self.windows.feed(ev)
        assert sum(1 for o in outs if o is ev) == 1, f"{ev} must be emitted exactly once, got {outs}"
        if not isinstance(ev, Heartbeat):
            self.delivered_tx = self.version_of[id(ev)]
        if isinstance(ev, TxCommit):
            self.processed = self.processed.add(ev.gtid)
            self.last_gtid = ev.gtid
        if isinstance(ev, SchemaChange) and CAPTURED in ev.tables:
            self.delivered_ddls += 1
        self._apply(outs)

    def _apply(self, outs: tuple[Output, ...]) -> None:
        for out in outs:
            if isinstance(out, RowChange) and out.table == CAPTURED:
                self.emit_count[id(out)] += 1
                version = self.version_of[id(out)]
                for key in out.touched_keys():
                    self._check_order(key[0], version)
                if out.old_key is not None:
                    self.replay.pop(out.old_key[0], None)
                if out.op == "d":
                    self.replay.pop(out.key[0], None)
                else:
                    assert out.after is not None
                    self.replay[out.key[0]] = dict(out.after)
            elif isinstance(out, SchemaChange) and CAPTURED in out.tables:
                self.emitted_ddls += 1
            elif isinstance(out, ChunkOut):
                assert out.window == self.window
                assert self.chunk_schema == self.emitted_ddls, (
                    f"a chunk selected with schema version {self.chunk_schema} came out after "
                    f"{self.emitted_ddls} DDLs of its table: its rows lack columns"
                )
                for row in out.rows:
                    assert isinstance(row, dict)
                    key = row.pop("key")
                    self._check_order(key, row["v"])
                    self.replay[key] = row
                self.cursor = self.window_last_key
                if self.cursor is not None and self.max_key is not None and self.cursor >= self.max_key:
                    self.snapshot_done = True
                self.window = None
                self.windows_closed += 1
            elif isinstance(out, WindowDiscarded):
                assert out.window == self.window
                self.window = None  # select the same chunk again

    def _check_order(self, key: int, version: int) -> None:
        before = self.emitted_version.get(key, -1)
        assert version >= before, f"key {key} went back from version {before} to {version}"
        self.emitted_version[key] = version

    # ------------------------------------------------------------------ the snapshot
    @precondition(lambda self: not self.snapshot_started)
    @rule()
    def begin_snapshot(self) -> None:
        self.snapshot_started = True
        self.max_key = max(self.table, default=None)
        self.snapshot_done = self.max_key is None

    @precondition(lambda self: self.snapshot_started and not self.snapshot_done and self.window is None)
    @rule(data=st.data())
    def chunk(self, data: st.DataObject) -> None:
        self._chunk(data, data.draw(st.integers(0, 3), label="before"), data.draw(st.integers(0, 3)))

    def _chunk(self, data: st.DataObject | None, before_select: int, after_select: int) -> None:
        lw = self.executed
        # The engine's cached shape: read anew after the last DDL the stream delivered, at any time up to
        # the low watermark (the stalest possible cache when no choice is drawn).
        self.chunk_schema = (
            data.draw(st.integers(self.delivered_ddls, self.world_ddls), label="cached schema")
            if data
            else self.delivered_ddls
        )
        for _ in range(before_select if data else 0):
            assert data is not None
            self._commit(data)
        assert self.max_key is not None
        # The SELECT sees everything the stream delivered (the engine waits for that), but maybe not all
        # of lw: MariaDB names a transaction in gtid_binlog_pos before a read can see it.
        seen = (
            data.draw(st.integers(self.delivered_tx, self.tx_count), label="seen") if data else self.tx_count
        )
        state = self.history[seen]
        keys = sorted(k for k in state if (self.cursor is None or k > self.cursor) and k <= self.max_key)
        selected = keys[: self.chunk_size]
        rows = [dict(state[k], key=k) for k in selected]
        last = selected[-1] if len(selected) == self.chunk_size else self.max_key
        for _ in range(after_select if data else 0):
            assert data is not None
            self._commit(data)
        hw = self.executed - lw
        self.window = window = self.windows.open(CAPTURED, lw)
        self.window_last_key = last
        self._apply(self.windows.rows_read(window, [(k,) for k in selected], rows, hw))

    # ------------------------------------------------------------------ checks
    @invariant()
    def emitted_at_most_once(self) -> None:
        if hasattr(self, "emit_count"):
            assert all(c == 1 for c in self.emit_count.values())

    def teardown(self) -> None:
        if not hasattr(self, "table"):
            return
        if not self.snapshot_started:
            self.begin_snapshot()
        for _ in range(10 * KEYS + 20):
            if self.snapshot_done and self.window is None:
                break
            if self.window is None:
                self._chunk(None, 0, 0)
            self.stream(len(self.events))
            if self.window is not None:
                self.heartbeat()
        self.stream(len(self.events))
        assert self.snapshot_done and self.window is None, "the snapshot never finished"
        assert self.replay == self.table
        changes = [e for e in self.events if isinstance(e, RowChange) and e.table == CAPTURED]
        assert all(self.emit_count[id(e)] == 1 for e in changes)


class MysqlWorld(WindowWorld):
    sources: ClassVar[list[Any]] = [(U1, ""), (U2, ""), (U1, "batch")]

    def empty(self) -> GtidSet:
        return MysqlGtidSet()

    def new_gtid(self, source: Any, number: int) -> Gtid:
        return MysqlGtid(source[0], source[1], number)


class MariadbWorld(WindowWorld):
    sources: ClassVar[list[Any]] = [0, 1]

    def empty(self) -> GtidSet:
        return MariadbGtidSet()

    def new_gtid(self, source: Any, number: int) -> Gtid:
        return MariadbGtid(source, 10 + source, number)


SIM = settings(max_examples=200, stateful_step_count=40, deadline=None)
TestMysqlWindowWorld = MysqlWorld.TestCase
TestMysqlWindowWorld.settings = SIM
TestMariadbWindowWorld = MariadbWorld.TestCase
TestMariadbWindowWorld.settings = SIM
