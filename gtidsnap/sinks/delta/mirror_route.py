"""Which changes of a batch a Delta mirror takes as a plain APPEND, and which need its MERGE.

A mirror is merged by key with "newest ``seq`` wins": a source row whose key the mirror lacks is
inserted unless it is a delete. So appending a row gives exactly what the MERGE would give when

1. the mirror holds no row with the row's key, and
2. no earlier change of that key waits for a deferred merge (a later one is merged over the appended
   row by the usual rule: it is newer).

Condition 1 is known without reading the mirror for the rows of a table's *first* snapshot into the
output (``Record.fresh``, set by the engine): the mirror then holds only (a) that snapshot's own rows,
whose keys come from keyset chunks over disjoint key ranges and so never repeat, and (b) rows written
by merges of other changes (streamed ones, or snapshot rows that took the merge). ``held`` is a
superset of the keys of (b): the keys of mirror rows whose ``_op`` is not ``r`` when the table is first
seen (a row last written by a snapshot row is of (a), or its key is behind the snapshot's cursor), and
every key routed to the merge since, which covers condition 2 as a batch is routed in ``seq`` order. A
key in ``held`` whose row is gone (deleted) only costs a merge.

Plain data in and out, no Spark: :func:`route` is property-tested against a mirror that merges
everything (tests/unit/sinks/delta/test_mirror_route.py).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

Key = Hashable


class Routable(Protocol):
    """What routing needs of a change: its key (hashable), its op, and whether it is fresh."""

    @property
    def route_key(self) -> Key: ...

    @property
    def op(self) -> str: ...

    @property
    def fresh(self) -> bool: ...


@dataclass(frozen=True)
class Route:
    """Positions (into the batch given to :func:`route`) of the changes to append and to merge."""

    append: tuple[int, ...]
    merge: tuple[int, ...]


def route(changes: Sequence[Routable], held: set[Key] | None) -> Route:
    """Split one table's batch (in ``seq`` order); add the keys routed to the merge to ``held``.

    ``held`` is None when the mirror's keys are not known (no fresh rows have been seen for the table,
    or too many keys to keep): then everything is merged."""
    if held is None:
        return Route((), tuple(range(len(changes))))
    append: list[int] = []
    merge: list[int] = []
    for position, change in enumerate(changes):
        key = change.route_key
        if change.fresh and change.op == "r" and key not in held:
            append.append(position)
        else:
            merge.append(position)
            held.add(key)
    return Route(tuple(append), tuple(merge))


@dataclass(frozen=True)
class MergePolicy:
    """When the mirror MERGEs the changes that wait for it (the changelog holds them meanwhile)."""

    interval_s: float  # at most this long after the first waiting change; 0: every batch
    max_rows: int  # or as soon as this many changes wait

    def due(self, waiting_rows: int, waiting_since_s: float | None, now_s: float) -> bool:
        if waiting_rows == 0:
            return False
        if self.interval_s <= 0 or waiting_rows >= self.max_rows:
            return True
        return waiting_since_s is not None and now_s - waiting_since_s >= self.interval_s
