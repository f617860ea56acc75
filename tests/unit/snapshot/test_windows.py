"""Several chunk windows in flight over a stream that never pauses (chunk_windows), in a random world:
a writer commits row changes and DDL, the stream lags behind, readers take their own watermarks and
deliver rows late and out of order. Whatever the interleaving: nothing is lost, nothing rewinds at
any transaction boundary, and each row change goes out exactly once."""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.core.gtid import GtidSet, MariadbGtid, MariadbGtidSet, MysqlGtid, MysqlGtidSet
from gtidsnap.core.model import BinlogEvent, Heartbeat, RowChange, SchemaChange, TableId, TxBegin, TxCommit
from gtidsnap.snapshot.windows import ChunkOut, ChunkWindows, Output, WindowDiscarded

T = TableId("shop", "orders")
OTHER = TableId("shop", "other")
U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
KEYS = 40
START = 10  # transactions 1-10 happened before the stream starts


def gtid_set(upto: int) -> GtidSet:
    return MysqlGtidSet.parse(f"{U}:1-{upto}")


@dataclass
class Reader:
    """One chunk reader: its window, its key range (lo, hi], and how far it got."""

    window: int
    lo: int
    hi: int
    lw: GtidSet
    floor: int  # transactions the stream had processed (or begun) when the window opened
    rows: dict[int, int] | None = None  # what its SELECT saw
    hw: GtidSet | None = None


class World:
    def __init__(self, rnd: random.Random, readers: int) -> None:
        self.rnd = rnd
        self.table = {k: 0 for k in range(0, KEYS, 2)}
        self.states = [dict(self.table)]  # the table after each transaction past START
        self.events: list[BinlogEvent] = []  # the binlog past START, in commit order
        self.txs = 0
        self.position = 0  # events the stream has fed
        self.in_tx = False
        self.windows = ChunkWindows(gtid_set(START))
        bounds = sorted(rnd.sample(range(1, KEYS - 1), readers - 1))
        self.pending = list(zip([-1, *bounds], [*bounds, KEYS], strict=True))  # ranges still to read
        self.readers: dict[int, Reader] = {}
        self.covered: list[tuple[int, int]] = []  # ranges whose chunk went out
        self.mirror: dict[int, int] = {}
        self.changes_in = 0
        self.changes_out = 0
        self.waiting: dict[int, tuple[int, int]] = {}  # delivered windows waiting for the stream
        self.last_emitted = 0  # windows go out in the order they were opened

    # ----------------------------------------------------------------- the source
    def commit(self) -> None:
        self.txs += 1
        gtid = MysqlGtid(U, "", START + self.txs)
        events: list[BinlogEvent] = [TxBegin(gtid)]
        if self.rnd.random() < 0.04:
            events.append(SchemaChange(gtid, frozenset({self.rnd.choice([T, OTHER])}), "ALTER TABLE ..."))
        else:
            for _ in range(self.rnd.randint(1, 3)):
                events.append(self._row_change(gtid))
        events.append(TxCommit(gtid))
        self.events.extend(events)
        self.states.append(dict(self.table))

    def _row_change(self, gtid: MysqlGtid) -> RowChange:
        key = self.rnd.randrange(KEYS)
        value = self.rnd.randrange(1_000_000)
        if self.rnd.random() < 0.1:
            return RowChange(gtid, OTHER, "c", (key,), None, {"v": value})  # not the snapshotted table
        if key not in self.table:
            self.table[key] = value
            self.changes_in += 1
            return RowChange(gtid, T, "c", (key,), None, {"id": key, "v": value})
        old = {"id": key, "v": self.table[key]}
        roll = self.rnd.random()
        self.changes_in += 1
        if roll < 0.25:
            del self.table[key]
            return RowChange(gtid, T, "d", (key,), old, None)
        free = [k for k in range(KEYS) if k not in self.table]
        if roll < 0.4 and free:  # the primary key itself changes
            new = self.rnd.choice(free)
            del self.table[key]
            self.table[new] = value
            return RowChange(gtid, T, "u", (new,), old, {"id": new, "v": value}, old_key=(key,))
        self.table[key] = value
        return RowChange(gtid, T, "u", (key,), old, {"id": key, "v": value})

    def executed(self) -> GtidSet:
        return gtid_set(START + self.txs)

    # ----------------------------------------------------------------- the engine and its readers
    def open_window(self) -> None:
        lo, hi = self.pending.pop(self.rnd.randrange(len(self.pending)))
        # lw: the replica's executed set, or (between transactions, as the engine opens a reader's
        # window) the stream's own position, which the reader's SELECT then waits to see
        at_stream = not self.in_tx and self.rnd.random() < 0.5
        lw = gtid_set(START + self.processed_count()) if at_stream else self.executed()
        window = self.windows.open(T, lw)
        floor = self.processed_count() + self.in_tx
        self.readers[window] = Reader(window, lo, hi, lw, floor)

    def select(self, reader: Reader) -> None:
        """The SELECT sees every transaction the stream had processed, but maybe not all of ``lw``: a
        server names a transaction in its executed set before a read can see it (MariaDB)."""
        state = self.states[self.rnd.randint(reader.floor, self.txs)]
        reader.rows = {k: v for k, v in state.items() if reader.lo < k <= reader.hi}

    def read_hw(self, reader: Reader) -> None:
        reader.hw = self.executed() - reader.lw

    def deliver(self, reader: Reader) -> None:
        assert reader.rows is not None and reader.hw is not None
        del self.readers[reader.window]
        keys = [(k,) for k in reader.rows]
        rows = [{"id": k, "v": v} for k, v in reader.rows.items()]
        self.apply(self.windows.rows_read(reader.window, keys, rows, reader.hw), reader)

    def stream(self) -> None:
        event = self.events[self.position]
        self.position += 1
        if isinstance(event, TxBegin):
            self.in_tx = True
        elif isinstance(event, TxCommit):
            self.in_tx = False
        self.apply(self.windows.feed(event))

    def heartbeat(self) -> None:
        last = MysqlGtid(U, "", START + self.txs) if self.txs else None
        self.apply(self.windows.feed(Heartbeat(last)))

    # ----------------------------------------------------------------- the output
    def apply(self, outputs: tuple[Output, ...], delivered: Reader | None = None) -> None:
        for out in outputs:
            if isinstance(out, RowChange) and out.table == T:
                self.changes_out += 1
                if out.old_key is not None:
                    self.mirror.pop(out.old_key[0], None)
                if out.after is None:
                    self.mirror.pop(out.key[0], None)
                else:
                    self.mirror[out.key[0]] = out.after["v"]
            elif isinstance(out, ChunkOut):
                assert out.window > self.last_emitted, "windows go out in the order they were opened"
                self.last_emitted = out.window
                reader = delivered if delivered is not None and delivered.window == out.window else None
                bounds = (reader.lo, reader.hi) if reader else self.waiting.pop(out.window)
                for row in out.rows:
                    assert isinstance(row, dict)
                    assert bounds[0] < row["id"] <= bounds[1]
                    self.mirror[row["id"]] = row["v"]
                self.covered.append(bounds)
            elif isinstance(out, WindowDiscarded):
                bounds = self.waiting.pop(out.window, None)
                stale = self.readers.pop(out.window, None)
                if stale is not None:
                    bounds = (stale.lo, stale.hi)
                assert bounds is not None
                self.pending.append(bounds)
        if delivered is not None and not any(
            isinstance(o, ChunkOut | WindowDiscarded) and o.window == delivered.window for o in outputs
        ):
            self.waiting[delivered.window] = (delivered.lo, delivered.hi)  # it waits for the stream
        if not self.in_tx:
            self.check_no_rewind()

    def processed_count(self) -> int:
        return sum(1 for e in self.events[: self.position] if isinstance(e, TxCommit))

    def processed_state(self) -> dict[int, int]:
        return self.states[self.processed_count()]

    def check_no_rewind(self) -> None:
        """At a transaction boundary every key of an emitted range is exactly as of what was processed."""
        truth = self.processed_state()
        for lo, hi in self.covered:
            for key in range(lo + 1, hi + 1):
                assert self.mirror.get(key) == truth.get(key), (key, lo, hi)


def run(world: World, writes: int) -> None:
    rnd = world.rnd
    while True:
        moves = []
        if world.txs < writes:
            moves += ["commit"] * 3
        if world.position < len(world.events):
            moves += ["stream"] * 4
        if world.pending:
            moves.append("open")
        for reader in list(world.readers.values()):
            if reader.rows is None:
                moves.append(("select", reader))
            elif reader.hw is None:
                moves.append(("hw", reader))
            else:
                moves.append(("deliver", reader))
        if world.windows.open_windows and world.position == len(world.events):
            moves.append("heartbeat")
        if not moves:
            return
        move = rnd.choice(moves)
        if move == "commit":
            world.commit()
        elif move == "stream":
            world.stream()
        elif move == "open":
            world.open_window()
        elif move == "heartbeat":
            world.heartbeat()
        elif isinstance(move, tuple):
            kind, reader = move
            {"select": world.select, "hw": world.read_hw, "deliver": world.deliver}[kind](reader)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(0, 60))
def test_any_interleaving_loses_nothing_rewinds_nothing_and_emits_each_change_once(
    seed: int, readers: int, writes: int
) -> None:
    world = World(random.Random(seed), readers)
    run(world, writes)
    assert not world.pending and not world.readers and world.windows.open_windows == 0
    assert world.position == len(world.events)
    assert world.mirror == world.table, "the mirror is the table"
    assert world.changes_out == world.changes_in, "each change once"
    covered = sorted(world.covered)
    assert covered[0][0] == -1 and covered[-1][1] == KEYS
    assert all(a[1] == b[0] for a, b in pairwise(covered)), "each range once"


def test_a_window_must_open_before_the_stream_passes_its_low_watermark() -> None:
    windows = ChunkWindows(gtid_set(12))
    with pytest.raises(ValueError, match="misses transactions the stream processed"):
        windows.open(T, gtid_set(11))


def test_rows_of_a_chunk_changed_after_its_low_watermark_are_dropped_even_past_hw() -> None:
    windows = ChunkWindows(gtid_set(10))
    w = windows.open(T, gtid_set(10))
    g11, g12 = MysqlGtid(U, "", 11), MysqlGtid(U, "", 12)
    fed = [
        *windows.feed(TxBegin(g11)),
        *windows.feed(RowChange(g11, T, "u", (1,), {"v": 0}, {"v": 1})),
        *windows.feed(TxCommit(g11)),
    ]
    assert not any(isinstance(o, ChunkOut) for o in fed), "rows not read yet: nothing to emit"
    # The SELECT ran before g11 (hw empty) and saw key 1 at 0: the stream already emitted its newer image.
    rows = [{"id": 1, "v": 0}, {"id": 2, "v": 0}]
    out = windows.rows_read(w, [(1,), (2,)], rows, gtid_set(10) - gtid_set(10))
    assert out == (ChunkOut(w, T, ({"id": 2, "v": 0},)),)
    assert windows.open_windows == 0
    assert windows.feed(TxBegin(g12)) == (TxBegin(g12),)


def test_a_window_waits_for_hw_then_closes_on_the_completing_commit_or_the_first_event_past_it() -> None:
    windows = ChunkWindows(gtid_set(10))
    a, b = windows.open(T, gtid_set(10)), windows.open(T, gtid_set(10))
    assert windows.rows_read(a, [(5,)], [{"v": 0}], gtid_set(11) - gtid_set(10)) == ()
    assert windows.rows_read(b, [(6,)], [{"v": 0}], gtid_set(12) - gtid_set(10)) == ()
    g11, g13 = MysqlGtid(U, "", 11), MysqlGtid(U, "", 13)
    assert windows.feed(TxBegin(g11)) == (TxBegin(g11),)
    assert windows.feed(TxCommit(g11)) == (TxCommit(g11), ChunkOut(a, T, ({"v": 0},)))
    # g12 never reaches the binlog (hw member filtered out); g13 was committed after hw was read.
    assert windows.feed(TxBegin(g13)) == (ChunkOut(b, T, ({"v": 0},)), TxBegin(g13))


def test_a_ddl_discards_the_windows_of_its_table_and_late_rows_are_ignored() -> None:
    windows = ChunkWindows(gtid_set(10))
    t_window, other = windows.open(T, gtid_set(10)), windows.open(OTHER, gtid_set(10))
    g11 = MysqlGtid(U, "", 11)
    out = windows.feed(SchemaChange(g11, frozenset({T}), "ALTER TABLE orders ADD c INT"))
    assert [type(o).__name__ for o in out] == ["SchemaChange", "WindowDiscarded"]
    assert isinstance(out[1], WindowDiscarded) and out[1].window == t_window
    assert windows.rows_read(t_window, [(1,)], [{"v": 0}], gtid_set(11) - gtid_set(10)) == ()
    assert windows.open_windows == 1
    assert windows.abandon(other) == ()
    assert windows.open_windows == 0


def test_a_ready_window_waits_for_the_earlier_ones_and_keeps_removing_changed_keys() -> None:
    windows = ChunkWindows(gtid_set(10))
    first, second = windows.open(T, gtid_set(10)), windows.open(T, gtid_set(10))
    empty = gtid_set(10) - gtid_set(10)
    assert windows.rows_read(second, [(6,), (7,)], [{"id": 6, "v": 0}, {"id": 7, "v": 0}], empty) == ()
    g11 = MysqlGtid(U, "", 11)
    out = windows.feed(TxBegin(g11))
    assert out == (TxBegin(g11),), "the second is ready but the first has not gone out"
    windows.feed(RowChange(g11, T, "u", (7,), {"v": 0}, {"v": 1}))
    windows.feed(TxCommit(g11))
    out = windows.rows_read(first, [(1,)], [{"v": 0}], empty)
    assert out == (
        ChunkOut(first, T, ({"v": 0},)),
        ChunkOut(second, T, ({"id": 6, "v": 0},)),
    )


def test_abandoning_the_first_window_lets_the_ready_ones_behind_it_go_out() -> None:
    windows = ChunkWindows(gtid_set(10))
    first, second = windows.open(T, gtid_set(10)), windows.open(T, gtid_set(10))
    assert windows.rows_read(second, [(6,)], [{"v": 0}], gtid_set(10) - gtid_set(10)) == ()
    assert windows.abandon(first) == (ChunkOut(second, T, ({"v": 0},)),)


def test_a_mariadb_window_waits_for_its_high_watermark_after_commits_past_lw() -> None:
    """MariaDB sets add a GTID as a position (every seq up to it): ``seen`` once held lw's own
    transactions, so a window was ready as soon as its rows came and went out before the stream
    passed hw; the stream's later changes of its rows then rewound them (a CI-seen rewind)."""
    table = TableId("d", "t")
    windows = ChunkWindows(MariadbGtidSet.parse("0-1-100"))
    window = windows.open(table, MariadbGtidSet.parse("0-1-100"))
    g101, g102, g150 = (MariadbGtid(0, 1, n) for n in (101, 102, 150))
    for g in (g101, g102):
        assert windows.feed(TxBegin(g)) == (TxBegin(g),)
        assert windows.feed(TxCommit(g)) == (TxCommit(g),)
    hw = MariadbGtidSet.parse("0-1-150") - MariadbGtidSet.parse("0-1-100")
    row = {"id": 7, "v": 150}
    assert windows.rows_read(window, [(7,)], [row], hw) == (), "the stream is at 102, hw reaches 150"
    change = RowChange(g150, table, "u", (7,), {"id": 7, "v": 1}, row, key_columns=("id",))
    assert windows.feed(TxBegin(g150)) == (TxBegin(g150),)
    assert windows.feed(change) == (change,)
    assert windows.feed(TxCommit(g150)) == (TxCommit(g150), ChunkOut(window, table, ()))


# ----------------------------------------------------------------------------- one rule per case
A, B = U, "8a94f357-aab4-11df-86ab-c80aa9429562"
ROWS = [{"id": 1}, {"id": 2}, {"id": 3}]


def mysql_set(text: str) -> MysqlGtidSet:
    return MysqlGtidSet.parse(text)


def read_window(processed: str, lw: str, hw: str) -> tuple[ChunkWindows, int, tuple[Output, ...]]:
    """Windows at ``processed``, one opened at ``lw`` whose rows 1-3 came with ``hw`` (minus lw)."""
    windows = ChunkWindows(mysql_set(processed))
    window = windows.open(T, mysql_set(lw))
    out = windows.rows_read(window, [(1,), (2,), (3,)], ROWS, mysql_set(hw) - mysql_set(lw))
    return windows, window, out


def fed(windows: ChunkWindows, events: list[BinlogEvent]) -> list[Output]:
    return [o for e in events for o in windows.feed(e)]


def tx(gtid: MysqlGtid, *changes: RowChange) -> list[BinlogEvent]:
    return [TxBegin(gtid), *changes, TxCommit(gtid)]


def upd(gtid: MysqlGtid, key: int) -> RowChange:
    return RowChange(gtid, T, "u", (key,), {"id": key}, {"id": key, "v": "new"})


def chunk_keys(out: list[Output]) -> tuple[int, list[int]]:
    """Where the one chunk went out, and its rows' ids."""
    found = [(i, o) for i, o in enumerate(out) if isinstance(o, ChunkOut)]
    assert len(found) == 1, out
    i, chunk = found[0]
    return i, [r["id"] for r in chunk.rows]  # type: ignore[index]


def test_a_key_update_removes_the_old_and_the_new_key() -> None:
    windows, _, out = read_window(f"{A}:1-5", f"{A}:1-5", f"{A}:1-6")
    assert out == ()
    move = RowChange(MysqlGtid(A, "", 6), T, "u", (7,), {"id": 2}, {"id": 7}, old_key=(2,))
    assert chunk_keys(fed(windows, tx(MysqlGtid(A, "", 6), move)))[1] == [1, 3]


def test_several_sources_in_hw_close_on_the_set_not_the_order() -> None:
    windows, _, _ = read_window(f"{A}:1-5,{B}:1-2", f"{A}:1-5,{B}:1-2", f"{A}:1-6,{B}:1-3")
    first = tx(MysqlGtid(B, "", 3), upd(MysqlGtid(B, "", 3), 1))
    second = tx(MysqlGtid(A, "", 6), upd(MysqlGtid(A, "", 6), 2))
    got = fed(windows, first + second)
    i, keys = chunk_keys(got)
    assert i == len(first + second), "waits for both sources of hw"
    assert keys == [3]


def test_a_heartbeat_closes_a_window_whose_hw_member_never_reaches_the_binlog() -> None:
    # A:6 is in the executed set but is never streamed; A:7 (the highest of hw) is.
    windows, _, _ = read_window(f"{A}:1-5", f"{A}:1-5", f"{A}:1-7")
    got = fed(windows, tx(MysqlGtid(A, "", 7), upd(MysqlGtid(A, "", 7), 1)))
    assert not any(isinstance(o, ChunkOut) for o in got), "A:6 is still missing"
    beat = Heartbeat(MysqlGtid(A, "", 7))
    closing = windows.feed(beat)
    assert isinstance(closing[0], ChunkOut) and closing[1] == beat
    assert [r["id"] for r in closing[0].rows] == [2, 3]  # type: ignore[index]


def test_a_heartbeat_sent_before_hw_reached_the_binlog_does_not_close() -> None:
    windows, _, _ = read_window(f"{A}:1-5", f"{A}:1-5", f"{A}:1-6")
    beat = Heartbeat(MysqlGtid(A, "", 5))
    assert windows.feed(beat) == (beat,)
    assert chunk_keys(fed(windows, tx(MysqlGtid(A, "", 6), upd(MysqlGtid(A, "", 6), 1))))[1] == [2, 3]


def test_an_empty_hw_goes_out_once_the_stream_reached_lw_on_an_idle_source() -> None:
    windows, _, out = read_window(f"{A}:1-4", f"{A}:1-5", f"{A}:1-5")
    assert out == ()
    beat = Heartbeat(MysqlGtid(A, "", 4))
    assert windows.feed(beat) == (beat,), "lw is not reached yet"
    assert chunk_keys(fed(windows, tx(MysqlGtid(A, "", 5))))[0] == 2, "right after lw's commit"


def test_a_ddl_of_the_table_in_lw_the_stream_had_not_reached_discards_the_window() -> None:
    """The replica applied the DDL before the SELECT, but the stream had not reached it: the rows may
    have been read with the old column list, and would go out after the DDL without the new column."""
    windows, window, _ = read_window(f"{A}:1-5", f"{A}:1-6", f"{A}:1-7")
    ddl = SchemaChange(MysqlGtid(A, "", 6), frozenset({T}), "ALTER TABLE shop.orders ADD COLUMN c INT")
    got = fed(windows, [TxBegin(MysqlGtid(A, "", 6)), ddl])
    assert got[-2] == ddl and isinstance(got[-1], WindowDiscarded) and got[-1].window == window
    assert "shop.orders" in got[-1].reason


def test_mariadb_positions_close_on_the_domain_maximum_despite_seq_gaps() -> None:
    lw = MariadbGtidSet.parse("0-1-100")
    windows = ChunkWindows(lw)
    window = windows.open(T, lw)
    hw = MariadbGtidSet.parse("0-1-150") - lw  # 101..150, but seqs 101..149 were never logged
    assert windows.rows_read(window, [(1,), (2,), (3,)], ROWS, hw) == ()
    g150 = MariadbGtid(0, 1, 150)
    events: list[BinlogEvent] = [
        TxBegin(g150),
        RowChange(g150, T, "d", (1,), {"id": 1}, None),
        TxCommit(g150),
    ]
    i, keys = chunk_keys(fed(windows, events))
    assert i == 3 and keys == [2, 3]
