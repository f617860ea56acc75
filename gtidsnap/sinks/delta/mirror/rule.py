"""One update of a table's mirror: its staged snapshot rows and the changes waiting for it, in one
APPEND and one MERGE at most.

The rule (``plan`` below, plain data, property-tested against a mirror that merges every record in
``_seq`` order, tests/unit/sinks/delta/mirror/test_rule.py; the sink runs the same steps in Spark):

1. ``C*``: the newest waiting change of each key.
2. Staged rows are applied before any change of their table is merged (so a change newer than a
   staged row never reaches the mirror first: a staged row inserted after a merged delete would bring
   the row back). Each staged row is *folded* with its key's newest change: a newer change replaces
   it (a newer delete drops it); those changes are then done. A staged row of a table's first snapshot
   into this output (``fresh``) whose key the mirror cannot hold is APPENDed (or, folded into a delete,
   dropped): the mirror holds no row of it when no change of the key was ever merged since the
   table's first staged rows (``held``, the keys of merged changes; None when not known: after a
   restart over a mirror with streamed rows, or too many keys); the others are MERGEd, newest ``_seq``
   winning, a folded delete included.
3. When the merge is due, the other waiting changes (newest per key) are MERGEd too; their keys join
   ``held``. While ``held`` names every key the mirror holds (``held_is_all``: a mirror created by
   this run, before any staged rows went in), the due changes of keys ``held`` does not name are
   APPENDed instead (a delete: dropped), since the mirror cannot hold them: the rows inserted behind
   a snapshot's chunks go in with its staged rows, and a mirror that only streams takes its new keys
   by APPEND. Such an update may also come before the merge is due (``append_due``): the changes of
   keys ``held`` does not name are then APPENDed and leave the waiting ones, the others keep waiting
   for the MERGE: new rows reach the mirror at the pace of its appends, not of its MERGEs.

Appending a row is what the MERGE would do with it (an insert), which is what makes it safe; it spares
reading and rewriting the mirror's files, so a snapshot goes in at the speed of Spark's append, and
the changes made during it whose keys its chunks had passed go in with it rather than by a MERGE.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Key = Hashable


@dataclass(frozen=True)
class Row:
    """A row to write: its key, ``_seq``, ``_op`` (c/u/d/r) and image (None for a delete)."""

    key: Key
    seq: int
    op: str
    image: object = None
    fresh: bool = False


@dataclass(frozen=True)
class Update:
    """What one update writes: rows to APPEND, rows to MERGE (one a key), the waiting changes left for
    a later merge, and whether ``held`` still names every key of the mirror afterwards."""

    append: tuple[Row, ...]
    merge: tuple[Row, ...]
    waiting: tuple[Row, ...]
    held_is_all: bool = False


def newest(changes: Sequence[Row]) -> dict[Key, Row]:
    """The change of each key with the highest ``_seq``."""
    out: dict[Key, Row] = {}
    for change in changes:
        held = out.get(change.key)
        if held is None or change.seq >= held.seq:
            out[change.key] = change
    return out


def plan(
    staged: Sequence[Row],
    waiting: Sequence[Row],
    held: set[Key] | None,
    merge_due: bool,
    held_is_all: bool = False,
    append_due: bool = False,
) -> Update:
    """The update of one mirror (see the module docstring); ``held`` gains the keys merged or appended
    from the changes."""
    latest = newest(waiting)
    staged_keys = {row.key for row in staged}
    append: list[Row] = []
    merge: list[Row] = []
    for row in staged:
        change = latest.get(row.key)
        if change is not None and change.seq > row.seq:
            row = Row(row.key, change.seq, change.op, change.image, row.fresh)
        if held is not None and row.fresh and row.key not in held:
            if row.op != "d":  # a newer delete of a key the mirror lacks: nothing to write
                append.append(row)
        else:
            merge.append(row)
    merge = sorted(newest(merge).values(), key=lambda r: r.seq)  # two snapshots' rows of one key
    left = [c for c in waiting if c.key not in staged_keys]
    all_held = held is not None and held_is_all
    if merge_due:
        due = sorted(newest(left).values(), key=lambda c: c.seq)
        if held is not None:
            if all_held:  # a key it cannot hold: appended (a delete: nothing)
                append += [c for c in due if c.key not in held and c.op != "d"]
                merge += [c for c in due if c.key in held]
            else:
                merge += due
            held.update(c.key for c in due)
        else:
            merge += due
        left = []
    elif append_due and all_held and held is not None:  # new keys now, the others at the MERGE
        new = [c for c in sorted(newest(left).values(), key=lambda c: c.seq) if c.key not in held]
        append += [c for c in new if c.op != "d"]
        held.update(c.key for c in new)
        gone = {c.key for c in new}
        left = [c for c in left if c.key not in gone]
    return Update(tuple(append), tuple(merge), tuple(left), all_held and not staged)


@dataclass(frozen=True)
class MergePolicy:
    """When a mirror MERGEs the changes that wait for it (the changelog holds them meanwhile)."""

    interval_s: float  # at most this long after the first waiting change; 0: every batch
    max_rows: int  # or as soon as this many changes wait

    def due(self, waiting_rows: int, waiting_since_s: float | None, now_s: float) -> bool:
        if waiting_rows == 0:
            return False
        if self.interval_s <= 0 or waiting_rows >= self.max_rows:
            return True
        return waiting_since_s is not None and now_s - waiting_since_s >= self.interval_s
