"""Chunk windows: where snapshot chunks go into the binlog stream (the pure core of the snapshot).

The algorithm: DBLog's watermarks in the read-only GTID form, which needs no signal table and no
write to the source. Any number of chunks are read while the stream goes on, each by its own reader
with its own watermarks:

1. The engine opens a window (:meth:`ChunkWindows.open`) between two transactions, at the stream's
   own position: ``lw`` is the set the stream has processed (:attr:`ChunkWindows.processed`, the
   checkpoint's set at the start, minus other replicas' errant transactions the run excuses, plus
   every commit fed since), read from no server. So every transaction the stream has processed is in
   ``lw`` (checked), and every one it processes from now on is seen here. The engine hands the range
   to a reader (:mod:`gtidsnap.snapshot.planner`) and streams on.
2. From then on, every row change of the window's table that the stream delivers records the keys it
   touches (old and new, for a key update). Nothing waits: the change goes out as usual.
3. The reader waits until its connection sees all of ``lw``: a server hands a transaction to binlog
   readers before a new read sees it, so it polls the replica's visible set until it covers ``lw``
   (:meth:`gtidsnap.source.low_watermark.LowWatermark.ensure_visible`; the visible set read with its
   previous chunk usually does, with no round trip). Then it SELECTs the range by keyset and reads the
   executed set: ``hw`` is what that adds to ``lw`` (the engine subtracts). It covers every transaction
   the SELECT saw, and may name some it did not (MariaDB's ``gtid_binlog_pos`` grows before the engine
   commit): their changes are recorded in 2 all the same. The rows and ``hw`` reach the window later,
   in any order with the other windows (:meth:`ChunkWindows.rows_read`). A source whose visible set
   never covers the stream (a MariaDB that is not a replica) is waited for 5 s once, then read without
   waiting, with a warning: the SELECT may then miss a transaction of ``lw``.
4. The window closes once its rows are known and the stream has passed ``hw``: it processed all of
   ``lw`` and ``hw`` (an empty ``hw``: at once), or it met a transaction in neither (committed after
   ``hw`` was read, so every ``hw`` member that will ever reach the binlog came before it), or a
   heartbeat after the stream saw, past ``lw``, a transaction at or beyond ``hw``'s highest number for
   every source. The chunk goes out right there, without every key recorded since ``lw``.

Why removing every key changed since ``lw`` (more than the single-window rule removes) is safe: each
such change was already emitted with the row's full image (or its delete), so the chunk's copy adds
nothing; and a surviving row was changed by no transaction from the window's opening to the point it
goes out, while the SELECT saw every transaction emitted before the opening (3): it is the row as of
that point. Nothing rewinds, nothing is lost (a row never changed since ``lw`` is in the chunk; one
changed since is in the stream), and each change goes out once, whatever the number of windows.

Windows go out in the order they were opened: one that is ready (its rows known, the stream past its
``hw``) waits for every earlier window, and keeps recording the keys changed meanwhile (removing more
is safe, above). So a table's chunks reach the output in key order, and its progress is one "last key
emitted" however many readers there are: a crash re-reads only chunks that never went out.

A DDL on a window's table that the stream delivers before the window goes out discards that window
(its rows may have the old shape); the engine reads the range again with fresh watermarks.

Keys are recorded whole per table, not by range: the ranges are in the server's key order, which
folded keys (collations) do not keep. Memory is the keys changed on a table while its windows are
open. This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gtidsnap.core.gtid import Gtid, GtidSet
from gtidsnap.core.model import (
    BinlogEvent,
    ChunkRow,
    ColumnarRows,
    Heartbeat,
    Key,
    ReadRows,
    RowChange,
    RowChanges,
    SchemaChange,
    TableId,
    TxCommit,
)
from gtidsnap.core.plan import RawKey


@dataclass(frozen=True)
class ChunkOut:
    """Window ``window``'s surviving rows, to go out at exactly this point of the stream; the range it
    was opened on ends at ``upto`` (the table's next lower bound), ``last`` says it was the table's
    last, ``key_columns`` is the key of the shape its rows were read with (not the cache's now)."""

    window: int
    table: TableId
    rows: ReadRows
    upto: RawKey = ()
    last: bool = False
    key_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class WindowDiscarded:
    """Window ``window`` must be read again: its table's shape changed while it was open."""

    window: int
    table: TableId
    reason: str


Output = BinlogEvent | ChunkOut | WindowDiscarded


@dataclass
class _Window:
    id: int
    table: TableId
    lw: GtidSet
    seen: GtidSet  # commits past lw the stream processed
    upto: RawKey
    last: bool
    key_columns: tuple[str, ...]
    changed: set[Key] = field(default_factory=set)  # keys touched past lw
    seen_max: dict[object, int] = field(default_factory=dict)  # per source, the highest number seen past lw
    keys: tuple[Key, ...] = ()  # of ``rows``, in order
    rows: ReadRows | None = None  # None until the reader's rows arrive
    hw: GtidSet | None = None
    fence: GtidSet | None = None  # lw | hw, once hw is known: the stream must process all of it
    ready: bool = False  # rows known and the stream past hw: it goes out once every earlier window has


class ChunkWindows:
    """The windows in flight; feed every binlog event in order and emit what comes back, in order.
    Windows go out in the order they were opened (see the module docstring)."""

    def __init__(self, processed: GtidSet) -> None:
        self.processed = processed  # what the stream has fully processed
        self._windows: dict[int, _Window] = {}
        self._next_id = 1

    @property
    def open_windows(self) -> int:
        return len(self._windows)

    def open(
        self,
        table: TableId,
        lw: GtidSet,
        upto: RawKey = (),
        last: bool = False,
        key_columns: tuple[str, ...] = (),
    ) -> int:
        """A window from ``lw`` on, for the range ending at ``upto`` (``last``: the table's last),
        read with the key ``key_columns``; its id names it in :meth:`rows_read` and the outputs."""
        if not self.processed <= lw:
            raise ValueError(
                f"the low watermark {lw} misses transactions the stream processed ({self.processed - lw}): "
                "read it and open the window before the stream goes on"
            )
        seen = lw - lw  # an empty set of lw's flavour
        window = _Window(self._next_id, table, lw, seen, upto, last, key_columns)
        self._windows[window.id] = window
        self._next_id += 1
        return window.id

    def low_watermark(self, window_id: int) -> GtidSet | None:
        """The ``lw`` window ``window_id`` opened at (None once it went out or was dropped)."""
        window = self._windows.get(window_id)
        return None if window is None else window.lw

    def rows_read(
        self, window_id: int, keys: Sequence[Key], rows: Sequence[ChunkRow] | ColumnarRows, hw: GtidSet
    ) -> tuple[Output, ...]:
        """The reader's rows, their keys (``keys[i]`` is ``rows[i]``'s, each key once) and ``hw``
        (executed after the SELECT, minus ``lw``). The window is ready at once when the stream has
        already passed ``hw``, and goes out when every earlier one has."""
        window = self._windows.get(window_id)
        if window is None:
            return ()  # discarded meanwhile: the rows are stale
        if len(keys) != len(rows):
            raise ValueError(f"{len(keys)} keys for {len(rows)} rows")
        kept = rows if isinstance(rows, ColumnarRows) else tuple(rows)
        window.keys, window.rows, window.hw, window.fence = tuple(keys), kept, hw, window.lw | hw
        if window.fence <= self.processed or window.seen - hw:  # caught up, or a commit past hw seen
            window.ready = True
        return self._release()

    def abandon(self, *window_ids: int) -> tuple[Output, ...]:
        """Forget windows (their snapshot was stopped or a read failed); nothing of them goes out. The
        ready windows that waited only for them go out now: so forget a table's windows in one call,
        or a later chunk of it would go out with an earlier one missing."""
        for window_id in window_ids:
            self._windows.pop(window_id, None)
        return self._release()

    def feed(self, event: BinlogEvent) -> tuple[Output, ...]:
        """The outputs for one event, in order: the event itself, with the chunks where they belong."""
        if not self._windows:
            if isinstance(event, TxCommit):
                self.processed = self.processed.add(event.gtid)
            return (event,)
        if isinstance(event, Heartbeat):
            self._on_heartbeat(event)
            return (*self._release(), event)
        if isinstance(event, RowChange | RowChanges):  # most events: only its table's windows record keys
            for window in self._windows.values():  # waiting ones too: they go out after this event
                if window.table == event.table:
                    window.changed.update(event.touched_keys())  # every change past the opening
            # Its transaction's TxBegin was checked for "past hw" already; a window whose rows came
            # since is checked at the transaction's commit (going out later removes more: safe).
            return (event,)
        gtid = event.gtid
        for window in self._windows.values():
            if not window.ready and window.hw is not None and gtid not in window.lw and gtid not in window.hw:
                window.ready = True  # the first event past hw
        before = self._release()
        after: list[Output] = []
        if isinstance(event, SchemaChange):
            for window in self._of_table(event.tables):
                after.append(self._discard(window, event))
        if isinstance(event, TxCommit):
            for window in self._windows.values():  # waiting ones too: they go out after this event
                if gtid not in window.lw:
                    self._note_seen(window, gtid)
            self.processed = self.processed.add(gtid)
            for window in self._windows.values():
                if window.fence is not None and not window.ready and window.fence <= self.processed:
                    window.ready = True
        after.extend(self._release())
        return (*before, event, *after)

    def _of_table(self, tables: Iterable[TableId]) -> list[_Window]:
        wanted = set(tables)
        return [w for w in self._windows.values() if w.table in wanted]

    def _discard(self, window: _Window, event: SchemaChange) -> WindowDiscarded:
        del self._windows[window.id]
        reason = (
            f"schema of {window.table} changed before the window closed ({event.gtid}): {event.statement}"
        )
        return WindowDiscarded(window.id, window.table, reason)

    def _note_seen(self, window: _Window, gtid: Gtid) -> None:
        # Minus lw: a MariaDB set adds a GTID as a server position does (every seq up to it), which
        # would put lw's own transactions into ``seen``, so ``seen - hw`` was never empty and a window
        # went out before the stream had passed its high watermark (a rewind, seen under a writer).
        window.seen = window.seen.add(gtid) - window.lw
        _note_max(window, gtid)

    def _on_heartbeat(self, event: Heartbeat) -> None:
        for window in self._windows.values():
            if event.last_gtid is not None and event.last_gtid not in window.lw:
                _note_max(window, event.last_gtid)
            if window.ready or window.hw is None or not window.lw <= self.processed:
                continue
            hw_max: Mapping[object, int] = window.hw.max_per_source()
            if all(window.seen_max.get(src, 0) >= top for src, top in hw_max.items()):
                window.ready = True

    def _release(self) -> tuple[Output, ...]:
        """The ready windows at the head of the open order go out, in that order."""
        out: list[Output] = []
        for window in list(self._windows.values()):
            if not window.ready:
                break
            out.extend(self._close(window))
        return tuple(out)

    def _close(self, window: _Window) -> tuple[Output, ...]:
        del self._windows[window.id]
        assert window.rows is not None
        rows = window.rows
        if window.changed:  # most chunks meet no change: their rows go out as they came
            changed = window.changed
            kept = [i for i, k in enumerate(window.keys) if k not in changed]
            if len(kept) < len(rows):  # columns are taken whole by position, values one by one
                rows = rows.taken(kept) if isinstance(rows, ColumnarRows) else tuple(rows[i] for i in kept)
        return (ChunkOut(window.id, window.table, rows, window.upto, window.last, window.key_columns),)


def _note_max(window: _Window, gtid: Gtid) -> None:
    if gtid.number > window.seen_max.get(gtid.source, 0):
        window.seen_max[gtid.source] = gtid.number
