"""The append fast path of a Delta mirror, against a mirror that merges everything.

A small world: a source table whose rows are inserted, updated (also their keys), and deleted by a
stream, while snapshots read it in keyset chunks: the first one fresh, a later one not. The records
are cut into batches; the sink routes each batch (append or merge), defers merges, and crashes now
and then (losing what it holds in memory; the mirror goes back to its last checkpoint, the deferred
changes are caught up from the changelog). After every batch, the mirror with the waiting changes
merged must equal the mirror of the reference, which merges every record at once, and no key may
occur twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.sinks.delta.mirror_route import MergePolicy, Route, route


@dataclass(frozen=True)
class Change:
    op: str
    route_key: int
    seq: int
    value: int | None
    fresh: bool = False


MirrorRow = tuple[int, str, int, int | None]  # key, op, seq, value


def merge(mirror: list[MirrorRow], changes: Sequence[Change]) -> list[MirrorRow]:
    """The mirror's MERGE: the newest change per key; applied when newer than the row; a delete removes."""
    last: dict[int, Change] = {}
    for c in changes:
        if c.route_key not in last or c.seq >= last[c.route_key].seq:
            last[c.route_key] = c
    out: list[MirrorRow] = []
    matched: set[int] = set()
    for row in mirror:
        c = last.get(row[0])
        if c is None:
            out.append(row)
            continue
        matched.add(row[0])
        if c.seq <= row[2]:
            out.append(row)
        elif c.op != "d":
            out.append((row[0], c.op, c.seq, c.value))
    for key, c in last.items():
        if key not in matched and c.op != "d":
            out.append((key, c.op, c.seq, c.value))
    return out


def as_state(mirror: list[MirrorRow]) -> dict[int, tuple[int, int | None]]:
    keys = [row[0] for row in mirror]
    assert len(keys) == len(set(keys)), f"duplicate keys in the mirror: {sorted(keys)}"
    return {row[0]: (row[2], row[3]) for row in mirror}


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Change], list[int], list[int], list[bool]]:
    """Records in emission order, batch sizes, crash points (batch numbers) and merge decisions."""
    keys = draw(st.integers(min_value=1, max_value=12))
    source: dict[int, int] = {k: 0 for k in draw(st.sets(st.integers(0, keys - 1)))}
    records: list[Change] = []
    seq = 0
    value = 0

    def next_seq() -> int:
        nonlocal seq
        seq += 1
        return seq

    for fresh in (True, False):  # the first snapshot, then a second one (not fresh)
        cursor = -1
        while cursor < keys - 1:
            for _ in range(draw(st.integers(0, 3))):  # streamed changes between chunks
                value += 1
                key = draw(st.integers(0, keys - 1))
                if key not in source:
                    source[key] = value
                    records.append(Change("c", key, next_seq(), value))
                elif draw(st.booleans()):
                    moved = draw(st.integers(0, keys - 1))
                    if moved != key and moved not in source and draw(st.booleans()):
                        del source[key]
                        source[moved] = value
                        s = next_seq()  # a key update: the delete of the old key, the new one, one seq
                        records += [Change("d", key, s, None), Change("c", moved, s, value)]
                    else:
                        source[key] = value
                        records.append(Change("u", key, next_seq(), value))
                else:
                    del source[key]
                    records.append(Change("d", key, next_seq(), None))
            upper = min(keys - 1, cursor + draw(st.integers(1, 4)))
            for key in range(cursor + 1, upper + 1):  # the chunk as the source holds it when emitted
                if key in source:
                    records.append(Change("r", key, next_seq(), source[key], fresh))
            cursor = upper
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=60))
    crashes = draw(st.lists(st.integers(0, 40), max_size=3))
    merges = draw(st.lists(st.booleans(), min_size=1, max_size=60))
    return records, sizes, crashes, merges


def batches_of(records: list[Change], sizes: list[int]) -> list[list[Change]]:
    out: list[list[Change]] = []
    i = 0
    while i < len(records):
        size = sizes[len(out) % len(sizes)]
        out.append(records[i : i + size])
        i += size
    return out


class SinkModel:
    """The sink's routing state around a mirror: held keys, waiting changes, the watermark."""

    def __init__(self, mirror: list[MirrorRow], changelog: list[Change], watermark: int) -> None:
        # Opening: changes after the watermark are caught up from the changelog, held keys unknown.
        self.mirror = merge(mirror, [c for c in changelog if c.seq > watermark])
        self.watermark = max([watermark, *(c.seq for c in changelog)])
        self.held: set[int] | None = None
        self.waiting: list[Change] = []

    def write(self, batch: list[Change], merge_now: bool) -> None:
        if self.held is None and any(c.fresh for c in batch):
            self.held = {row[0] for row in self.mirror if row[1] != "r"} | {c.route_key for c in self.waiting}
        routed: Route = route(batch, self.held)
        for position in routed.append:
            self.mirror.append((batch[position].route_key, "r", batch[position].seq, batch[position].value))
        self.waiting += [batch[p] for p in routed.merge]
        if merge_now:
            self.mirror = merge(self.mirror, self.waiting)
            self.waiting = []
        if self.waiting:
            self.watermark = min(c.seq for c in self.waiting) - 1
        elif batch:
            self.watermark = max(self.watermark, *(c.seq for c in batch))


@settings(max_examples=600)
@given(worlds())
def test_appends_and_deferred_merges_give_the_mirror_of_merging_everything(
    world: tuple[list[Change], list[int], list[int], list[bool]],
) -> None:
    records, sizes, crashes, merges = world
    batches = batches_of(records, sizes)
    reference: list[MirrorRow] = []
    changelog: list[Change] = []
    sink = SinkModel([], [], 0)
    checkpoint = (list(sink.mirror), 0, 0)  # mirror, changelog length, watermark
    for number, batch in enumerate(batches):
        if number in crashes:
            # A crash inside this batch's commit: Delta undoes what the batch wrote; memory is lost.
            mirror, logged, watermark = checkpoint
            del changelog[logged:]
            sink = SinkModel(list(mirror), changelog, watermark)
        reference = merge(reference, batch)
        changelog += batch
        sink.write(batch, merges[number % len(merges)])
        checkpoint = (list(sink.mirror), len(changelog), sink.watermark)
        assert as_state(merge(sink.mirror, sink.waiting)) == as_state(reference)
    sink.mirror = merge(sink.mirror, sink.waiting)
    assert as_state(sink.mirror) == as_state(reference)


def test_a_fresh_row_is_appended_only_when_its_key_is_not_held_nor_repeated() -> None:
    batch = [
        Change("r", 1, 1, 10, fresh=True),
        Change("r", 2, 2, 20, fresh=True),
        Change("u", 3, 3, 30),
        Change("r", 3, 4, 31, fresh=True),
        Change("r", 4, 5, 40, fresh=False),
        Change("r", 5, 6, 50, fresh=True),
    ]
    held = {2}
    assert route(batch, held) == Route(append=(0, 5), merge=(1, 2, 3, 4))
    assert held == {2, 3, 4}
    assert route(batch, None) == Route(append=(), merge=(0, 1, 2, 3, 4, 5))


def test_merge_policy() -> None:
    policy = MergePolicy(interval_s=10, max_rows=100)
    assert not policy.due(0, None, 50.0)
    assert not policy.due(5, 45.0, 50.0)
    assert policy.due(5, 40.0, 50.0)
    assert policy.due(100, 49.0, 50.0)
    assert MergePolicy(interval_s=0, max_rows=100).due(1, 50.0, 50.0)
