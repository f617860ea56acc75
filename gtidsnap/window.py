"""The read-only watermark window: where one snapshot chunk goes into the binlog stream.

The algorithm (DBLog's watermarks, in the read-only GTID form that needs no signal table)
--------------------------------------------------------------------------------------
The engine pauses binlog processing and reads the replica's executed GTID set: the low watermark
``lw``. It SELECTs the next chunk of the table by primary key and keeps the rows in memory. It reads
the executed set again and subtracts ``lw``: the high watermark ``hw``, every transaction that may
or may not be visible in the chunk. It resumes the stream and hands this window every event.

* Before ``lw`` is read, every transaction the stream has processed is visible to a new read
  (:mod:`gtidsnap.low_watermark` waits for it: servers send a transaction to binlog readers before
  a SELECT can see it). So the chunk holds the effect of everything emitted before it.
* Every row change on the chunk's table the window meets removes the changed keys (old and new, for
  a key update) from the chunk: the change itself carries that row's full image, so the chunk's copy
  is not needed and may be stale. That holds for a change in ``lw`` too: MariaDB names a transaction
  in ``gtid_binlog_pos`` before a read can see it (measured: a SELECT right after missed one in ~1,000
  reads under a busy writer), so a transaction of ``lw`` may be missing from the chunk.
* The first event not in ``lw`` opens the window (the state; an ``lw`` event does not).
* The window closes when the stream has processed all of ``lw`` and ``hw``: right after the commit
  that completes them, or at a heartbeat once the stream has seen, inside the window, a transaction
  at or beyond ``hw``'s highest number for every source (so a ``hw`` member that never reaches the
  binlog cannot hold the window open), or at the first event past ``hw`` (a transaction in neither
  ``lw`` nor ``hw`` committed after ``hw`` was read). The remaining chunk rows are emitted right
  there, before anything that comes after ``hw``. Closing on the completing commit puts the rows at
  the same place in the output as closing on the next event would, without waiting for one.
* An empty ``hw`` closes the window as soon as the stream has processed ``lw``.
* A DDL on the chunk's table that the stream delivers before the window closes discards the chunk,
  whether it is in ``hw`` (it ran while the chunk was selected) or in the part of ``lw`` the stream has
  not processed yet (the replica applied it before the SELECT, but the engine may have selected with
  the columns it knew from before it: a row read with a stale column list would come out after the
  DDL without the new column). The engine reads the table's shape again and selects the same chunk
  with fresh watermarks once the stream is past the DDL, so the same DDL cannot discard it twice.

Why this never rewinds a row: the SELECT saw every transaction emitted before the window, a
surviving chunk row was not changed by any transaction the window met before emitting it, and every
transaction emitted after it is past ``hw``, so it is newer than the SELECT.

Several sources (uuids, tags, MariaDB domains) may commit inside one window. The rule is by set,
not by order of arrival: the window waits only for the members of ``hw``; a transaction of any
source that is in neither ``lw`` nor ``hw`` was committed after ``hw`` was read (the replica logs in
commit order, which preflight checks), so it closes the window instead of making it wait. A window
therefore never waits on a source outside ``hw`` and the chunk is never re-read for that reason.

Keys are compared as given: the engine normalises them (collation, types) before both the chunk
and the row changes reach this module. This module does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum

from gtidsnap.gtid import Gtid, GtidSet
from gtidsnap.model import (
    BinlogEvent,
    ChunkDiscarded,
    ChunkEmitted,
    Heartbeat,
    Key,
    Row,
    RowChange,
    SchemaChange,
    TableId,
    TxCommit,
    WindowOutput,
)


class WindowState(Enum):
    WAITING = "waiting"  # no event past lw yet
    OPEN = "open"
    EMITTED = "emitted"
    DISCARDED = "discarded"


class ChunkWindow:
    """One chunk's window; feed it every binlog event in order and emit what it returns."""

    def __init__(
        self,
        table: TableId,
        rows: Iterable[tuple[Key, Row]],
        lw: GtidSet,
        hw: GtidSet,
        processed: GtidSet,
    ) -> None:
        """``processed`` is what the stream had fully processed when binlog processing paused."""
        self.table = table
        self.lw = lw
        self.hw = hw
        self._rows: dict[Key, Row] = dict(rows)
        self._target = lw | hw
        self._hw_max: Mapping[object, int] = hw.max_per_source()
        self._processed = processed
        self._seen_max: dict[object, int] = {}
        self.state = WindowState.WAITING

    @property
    def done(self) -> bool:
        return self.state in (WindowState.EMITTED, WindowState.DISCARDED)

    @property
    def pending_rows(self) -> int:
        return len(self._rows)

    def start(self) -> tuple[WindowOutput, ...]:
        """Call once before feeding: with an empty ``hw`` and a caught-up stream it closes at once."""
        return self._close() if self._target <= self._processed else ()

    def feed(self, event: BinlogEvent) -> tuple[WindowOutput, ...]:
        """The outputs for one event, in order: the event itself, with the chunk where it belongs."""
        if self.done:
            return (event,)
        if isinstance(event, Heartbeat):
            return self._on_heartbeat(event)
        if isinstance(event, SchemaChange) and self.table in event.tables:
            return self._discard(event)
        gtid = event.gtid
        if gtid in self.lw:
            if isinstance(event, RowChange) and event.table == self.table:
                self._drop(event)  # lw may name a transaction the SELECT did not see yet (module docstring)
            elif isinstance(event, TxCommit):
                self._processed = self._processed.add(gtid)
                if self._target <= self._processed:
                    return (event, *self._close())
            return (event,)
        if gtid not in self.hw:
            return (*self._close(), event)  # the first event past hw
        self.state = WindowState.OPEN
        if isinstance(event, RowChange) and event.table == self.table:
            self._drop(event)
        elif isinstance(event, TxCommit):
            self._note_seen(gtid)
            self._processed = self._processed.add(gtid)
            if self._target <= self._processed:
                return (event, *self._close())
        return (event,)

    def _drop(self, event: RowChange) -> None:
        for key in event.touched_keys():
            self._rows.pop(key, None)

    def _discard(self, event: SchemaChange) -> tuple[WindowOutput, ...]:
        self.state = WindowState.DISCARDED
        self._rows.clear()
        reason = f"schema of {self.table} changed before the window closed ({event.gtid}): {event.statement}"
        return (event, ChunkDiscarded(self.table, reason))

    def _on_heartbeat(self, event: Heartbeat) -> tuple[WindowOutput, ...]:
        if event.last_gtid is not None and event.last_gtid not in self.lw:
            self._note_seen(event.last_gtid)
        lw_reached = self.lw <= self._processed
        hw_reached = all(self._seen_max.get(src, 0) >= top for src, top in self._hw_max.items())
        if lw_reached and hw_reached:
            return (*self._close(), event)
        return (event,)

    def _note_seen(self, gtid: Gtid) -> None:
        if gtid.number > self._seen_max.get(gtid.source, 0):
            self._seen_max[gtid.source] = gtid.number

    def _close(self) -> tuple[WindowOutput, ...]:
        self.state = WindowState.EMITTED
        rows = tuple(self._rows.items())
        self._rows.clear()
        return (ChunkEmitted(self.table, rows),)
