"""The window's rules, one case each, written out by hand."""

from __future__ import annotations

from gtidsnap.gtid import MariadbGtid, MariadbGtidSet, MysqlGtid, MysqlGtidSet
from gtidsnap.model import (
    ChunkDiscarded,
    ChunkEmitted,
    Heartbeat,
    RowChange,
    SchemaChange,
    TableId,
    TxBegin,
    TxCommit,
    WindowOutput,
)
from gtidsnap.window import ChunkWindow, WindowState

T = TableId("shop", "orders")
OTHER = TableId("shop", "audit")
A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "8a94f357-aab4-11df-86ab-c80aa9429562"


def g(source: str, n: int) -> MysqlGtid:
    return MysqlGtid(source, "", n)


def s(text: str) -> MysqlGtidSet:
    return MysqlGtidSet.parse(text)


ROWS = [((1,), {"id": 1, "v": "a"}), ((2,), {"id": 2, "v": "b"}), ((3,), {"id": 3, "v": "c"})]


def upd(gtid: MysqlGtid, key: int, table: TableId = T) -> RowChange:
    return RowChange(gtid, table, "u", (key,), {"id": key}, {"id": key, "v": "new"})


def tx(gtid: MysqlGtid, *changes: RowChange) -> list:  # type: ignore[type-arg]
    return [TxBegin(gtid), *changes, TxCommit(gtid)]


def run(window: ChunkWindow, events: list) -> list[WindowOutput]:  # type: ignore[type-arg]
    out = list(window.start())
    for ev in events:
        out.extend(window.feed(ev))
    return out


def chunk_at(out: list[WindowOutput]) -> tuple[int, ChunkEmitted]:
    found = [(i, o) for i, o in enumerate(out) if isinstance(o, ChunkEmitted)]
    assert len(found) == 1, out
    return found[0]


def test_empty_hw_and_caught_up_stream_emits_at_once() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(""), processed=s(f"{A}:1-5"))
    out = w.start()
    assert out == (ChunkEmitted(T, tuple(ROWS)),) and w.state is WindowState.EMITTED


def test_empty_hw_waits_for_the_stream_to_reach_lw_then_emits_after_that_commit() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-6"), hw=s(""), processed=s(f"{A}:1-5"))
    events = tx(g(A, 6), upd(g(A, 6), 1)) + tx(g(A, 7), upd(g(A, 7), 2))
    out = run(w, events)
    i, chunk = chunk_at(out)
    assert out[:i] == events[:3], "the lw transaction goes first and takes the key it changed"
    assert [k for k, _ in chunk.rows] == [(2,), (3,)]
    assert out[i + 1 :] == events[3:]


def test_changes_inside_the_window_remove_keys_and_chunk_goes_after_the_completing_commit() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(f"{A}:6-7"), processed=s(f"{A}:1-5"))
    events = (
        tx(g(A, 6), upd(g(A, 6), 2), upd(g(A, 6), 9))  # multi-row transaction, one GTID
        + tx(g(A, 7), upd(g(A, 7), 1, table=OTHER))  # another table: moves the window, keeps rows
        + tx(g(A, 8), upd(g(A, 8), 3))
    )
    out = run(w, events)
    i, chunk = chunk_at(out)
    assert out[:i] == events[:7]
    assert [k for k, _ in chunk.rows] == [(1,), (3,)]
    assert out[i + 1 :] == events[7:]


def test_first_event_past_hw_closes_before_itself() -> None:
    # hw names A:6 but the next thing the stream shows is B:1, committed after hw was read
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(f"{A}:6"), processed=s(f"{A}:1-5"))
    events = tx(g(B, 1), upd(g(B, 1), 1))
    out = run(w, events)
    i, chunk = chunk_at(out)
    assert i == 0 and [k for k, _ in chunk.rows] == [(1,), (2,), (3,)]
    assert out[1:] == events


def test_key_update_removes_old_and_new_key() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(f"{A}:6"), processed=s(f"{A}:1-5"))
    move = RowChange(g(A, 6), T, "u", (7,), {"id": 2}, {"id": 7}, old_key=(2,))
    out = run(w, tx(g(A, 6), move))
    assert [k for k, _ in chunk_at(out)[1].rows] == [(1,), (3,)]


def test_lw_changes_the_stream_meets_after_the_pause_remove_their_keys_too() -> None:
    """MariaDB names a transaction in gtid_binlog_pos before a read can see it: the chunk may lack
    transaction 6 of lw, so its copy of key 1 may be older than the change the stream emits."""
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-6"), hw=s(f"{A}:7"), processed=s(f"{A}:1-5"))
    out = run(w, tx(g(A, 6), upd(g(A, 6), 1)) + tx(g(A, 7), upd(g(A, 7), 3)))
    assert [k for k, _ in chunk_at(out)[1].rows] == [(2,)]


def test_several_sources_in_hw_close_on_the_set_not_the_order() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5,{B}:1-2"), hw=s(f"{A}:6,{B}:3"), processed=s(f"{A}:1-5,{B}:1-2"))
    first = tx(g(B, 3), upd(g(B, 3), 1))
    second = tx(g(A, 6), upd(g(A, 6), 2))
    out = run(w, first + second)
    i, chunk = chunk_at(out)
    assert i == len(first + second), "waits for both sources of hw"
    assert [k for k, _ in chunk.rows] == [(3,)]


def test_heartbeat_closes_when_a_hw_member_never_reaches_the_binlog() -> None:
    # A:6 is in the executed set but is never streamed; A:7 (the highest of hw) is.
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(f"{A}:6-7"), processed=s(f"{A}:1-5"))
    events = tx(g(A, 7), upd(g(A, 7), 1))
    out = run(w, events)
    assert not any(isinstance(o, ChunkEmitted) for o in out), "A:6 is still missing"
    hb = Heartbeat(g(A, 7))
    closing = w.feed(hb)
    assert isinstance(closing[0], ChunkEmitted) and closing[1] == hb
    assert [k for k, _ in closing[0].rows] == [(2,), (3,)]


def test_heartbeat_before_hw_is_seen_does_not_close() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(f"{A}:6"), processed=s(f"{A}:1-5"))
    assert w.start() == ()
    hb = Heartbeat(g(A, 5))  # sent before A:6 reached the binlog, read after hw
    assert w.feed(hb) == (hb,)
    out = run(w, tx(g(A, 6), upd(g(A, 6), 1)))
    assert [k for k, _ in chunk_at(out)[1].rows] == [(2,), (3,)]


def test_heartbeat_on_idle_source_closes_once_lw_is_reached() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(""), processed=s(f"{A}:1-4"))
    assert w.start() == () and w.feed(Heartbeat(g(A, 4)))[0] == Heartbeat(g(A, 4))
    out = run(w, tx(g(A, 5)))
    assert chunk_at(out)[0] == 2


def test_ddl_on_the_table_inside_the_window_discards_the_chunk() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(f"{A}:6-7"), processed=s(f"{A}:1-5"))
    ddl = SchemaChange(g(A, 6), frozenset({T}), "ALTER TABLE shop.orders ADD COLUMN c INT")
    out = run(w, [TxBegin(g(A, 6)), ddl])
    assert out[-2] == ddl and isinstance(out[-1], ChunkDiscarded) and w.state is WindowState.DISCARDED
    assert "shop.orders" in out[-1].reason
    later = TxCommit(g(A, 6))
    assert w.feed(later) == (later,), "a discarded window passes everything through"


def test_ddl_on_another_table_keeps_the_chunk() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-6"), hw=s(f"{A}:7"), processed=s(f"{A}:1-5"))
    old = SchemaChange(g(A, 6), frozenset({OTHER}), "ALTER TABLE shop.audit ADD COLUMN c INT")
    other = SchemaChange(g(A, 7), frozenset({OTHER}), "ALTER TABLE shop.audit ADD COLUMN d INT")
    out = run(w, [TxBegin(g(A, 6)), old, TxCommit(g(A, 6)), TxBegin(g(A, 7)), other, TxCommit(g(A, 7))])
    assert len(chunk_at(out)[1].rows) == 3


def test_ddl_on_the_table_in_lw_not_yet_streamed_discards_the_chunk() -> None:
    """The replica applied the DDL before the SELECT, but the stream had not reached it: the engine may
    have selected with the old column list, so the rows would come out after the DDL without the new
    column (the race seen as an UPDATE after ADD COLUMN losing the column)."""
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-6"), hw=s(f"{A}:7"), processed=s(f"{A}:1-5"))
    ddl = SchemaChange(g(A, 6), frozenset({T}), "ALTER TABLE shop.orders ADD COLUMN c INT")
    out = run(w, [TxBegin(g(A, 6)), ddl])
    assert out[-2] == ddl and isinstance(out[-1], ChunkDiscarded) and w.state is WindowState.DISCARDED


def test_mariadb_positions_close_on_the_domain_maximum_despite_seq_gaps() -> None:
    lw = MariadbGtidSet.parse("0-1-100")
    hw = MariadbGtidSet.parse("0-1-150") - lw  # 101..150, but seqs 101..149 were never logged
    w = ChunkWindow(T, ROWS, lw=lw, hw=hw, processed=lw)
    gt = MariadbGtid(0, 1, 150)
    events = [TxBegin(gt), RowChange(gt, T, "d", (1,), {"id": 1}, None), TxCommit(gt)]
    out = run(w, events)
    i, chunk = chunk_at(out)
    assert i == 3 and [k for k, _ in chunk.rows] == [(2,), (3,)]


def test_events_after_the_window_pass_through_untouched() -> None:
    w = ChunkWindow(T, ROWS, lw=s(f"{A}:1-5"), hw=s(""), processed=s(f"{A}:1-5"))
    w.start()
    events = tx(g(A, 6), upd(g(A, 6), 1))
    assert [o for ev in events for o in w.feed(ev)] == events
    assert w.pending_rows == 0
