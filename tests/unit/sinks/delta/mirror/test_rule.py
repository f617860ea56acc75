"""A mirror updated by staged snapshot rows (appended or merged, folded with newer changes) and deferred
merges of waiting changes ends exactly where merging every record in ``_seq`` order ends, on random
worlds: inserts, updates, deletes and key moves, inside and outside a snapshot's chunks, updates at any
time. An APPEND never meets a key the mirror holds."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.sinks.delta.mirror.rule import Key, MergePolicy, Row, plan

Mirror = dict[Key, tuple[int, object]]  # key -> (_seq, image)


def merge_into(mirror: Mirror, rows: list[Row]) -> None:
    """The mirror's MERGE: one row a key, newest ``_seq`` wins, a delete removes."""
    assert len({r.key for r in rows}) == len(rows), "a MERGE source holds one row a key"
    for row in rows:
        held = mirror.get(row.key)
        if held is not None and row.seq <= held[0]:
            continue
        if row.op == "d":
            mirror.pop(row.key, None)
        else:
            mirror[row.key] = (row.seq, row.image)


def reference(records: list[Row]) -> Mirror:
    mirror: Mirror = {}
    for row in sorted(records, key=lambda r: r.seq):
        merge_into(mirror, [row])
    return mirror


def world(rnd: random.Random, steps: int, unknown_held: bool) -> None:
    table: dict[int, int] = {k: 0 for k in range(0, 30, 3)}
    seq = 0
    records: list[Row] = []
    waiting: list[Row] = []
    staged: list[Row] = []
    mirror: Mirror = {}
    held: set[Key] | None = None if unknown_held else set()
    held_is_all = held is not None and rnd.random() < 0.7  # a mirror this run created
    fresh = rnd.random() < 0.8  # the table's first snapshot into this output (else merged)
    cursor = -1  # the snapshot's progress: keys <= cursor were read

    def emit(row: Row, to: list[Row]) -> None:
        records.append(row)
        to.append(row)

    def update(merge_due: bool) -> None:
        nonlocal staged, waiting, held_is_all
        if held is not None and held_is_all:
            assert set(mirror) <= held | {r.key for r in staged}, "held names every key of the mirror"
        append_due = not merge_due and rnd.random() < 0.5
        done = plan(staged, waiting, held, merge_due, held_is_all, append_due)
        held_is_all = done.held_is_all
        for row in done.append:
            assert row.key not in mirror, f"an APPEND met key {row.key} in the mirror"
            if row.op != "d":
                mirror[row.key] = (row.seq, row.image)
        merge_into(mirror, list(done.merge))
        staged, waiting = [], list(done.waiting)

    for _ in range(steps):
        move = rnd.random()
        seq += 1
        if move < 0.35 and cursor < 40:  # the snapshot reads the next existing key, as of now
            ahead = sorted(k for k in table if k > cursor)
            if ahead:
                key = ahead[0]
                cursor = key
                emit(Row(key, seq, "r", table[key], fresh=fresh), staged)
                continue
            cursor = 40
        if move < 0.6 and table:
            key = rnd.choice(sorted(table))
            table[key] = seq
            emit(Row(key, seq, "u", seq), waiting)
        elif move < 0.7 and table:
            key = rnd.choice(sorted(table))
            del table[key]
            emit(Row(key, seq, "d"), waiting)
        elif move < 0.8 and table:  # the primary key moves: a delete and an insert, one _seq
            key = rnd.choice(sorted(table))
            free = [k for k in range(45) if k not in table]
            to = rnd.choice(free)
            value = table.pop(key)
            table[to] = value
            emit(Row(key, seq, "d"), waiting)
            emit(Row(to, seq, "c", value), waiting)
        else:
            key = rnd.choice([k for k in range(45) if k not in table])
            table[key] = seq
            emit(Row(key, seq, "c", seq), waiting)
        if rnd.random() < 0.2:
            update(merge_due=rnd.random() < 0.5)
    update(merge_due=True)
    assert mirror == reference(records)
    if cursor >= 40:  # the snapshot read every key: the mirror is the table
        assert {k: v[1] for k, v in mirror.items()} == table


@settings(max_examples=400)
@given(st.integers(0, 2**32 - 1), st.integers(1, 120), st.booleans())
def test_updates_end_where_merging_every_record_in_order_ends(seed: int, steps: int, unknown: bool) -> None:
    world(random.Random(seed), steps, unknown)


def test_a_staged_row_is_folded_with_a_newer_change_and_dropped_by_a_newer_delete() -> None:
    staged = [
        Row(1, 5, "r", "a", fresh=True),
        Row(2, 6, "r", "b", fresh=True),
        Row(3, 7, "r", "c", fresh=True),
    ]
    waiting = [Row(1, 8, "u", "A"), Row(2, 9, "d"), Row(3, 4, "u", "old"), Row(9, 10, "c", "z")]
    held: set[Key] = set()
    done = plan(staged, waiting, held, merge_due=False)
    assert done.append == (Row(1, 8, "u", "A", True), Row(3, 7, "r", "c", True))
    assert done.merge == () and done.waiting == (Row(9, 10, "c", "z"),) and held == set()
    later = plan([], list(done.waiting), held, merge_due=True)
    assert later.merge == (Row(9, 10, "c", "z"),) and held == {9}
    # a key the mirror may hold: the newer delete is merged, not dropped
    done = plan([Row(2, 6, "r", "b", fresh=True)], [Row(2, 9, "d")], {2}, merge_due=False)
    assert done.append == () and done.merge == (Row(2, 9, "d", None, True),)


def test_a_staged_row_whose_key_was_merged_is_merged_and_unknown_keys_merge_everything() -> None:
    done = plan(
        [Row(9, 11, "r", "s", fresh=True), Row(4, 12, "r", "t", fresh=True)], [], {9}, merge_due=False
    )
    assert [r.key for r in done.append] == [4] and [r.key for r in done.merge] == [9]
    assert not done.held_is_all, "not said: staged rows appended before may hold any key"
    done = plan([Row(4, 12, "r", "t", fresh=True)], [], None, merge_due=False)
    assert done.append == () and [r.key for r in done.merge] == [4]
    done = plan([Row(4, 12, "r", "t", fresh=False)], [], set(), merge_due=False)
    assert done.append == () and [r.key for r in done.merge] == [4]


def test_while_held_names_every_key_changes_of_other_keys_are_appended() -> None:
    held: set[Key] = {5}
    waiting = [
        Row(5, 3, "u", "e"),
        Row(6, 4, "c", "f"),
        Row(6, 5, "u", "F"),
        Row(7, 6, "d"),
        Row(1, 7, "u", "x"),
    ]
    done = plan([Row(1, 2, "r", "a", fresh=True)], waiting, held, merge_due=True, held_is_all=True)
    assert done.append == (Row(1, 7, "u", "x", True), Row(6, 5, "u", "F")), "folded; a new key appended"
    assert done.merge == (Row(5, 3, "u", "e"),), "a key the mirror may hold is merged; 7's delete dropped"
    assert held == {5, 6, 7} and not done.held_is_all, "staged rows went in: their keys are not kept"
    done = plan([], [Row(8, 9, "c", "h")], held, merge_due=True, held_is_all=True)
    assert done.append == (Row(8, 9, "c", "h"),) and done.merge == (), "no staged rows: a new key appended"
    assert done.held_is_all and 8 in held
    done = plan([], [Row(9, 10, "c", "i")], held, merge_due=True, held_is_all=False)
    assert done.append == () and done.merge == (Row(9, 10, "c", "i"),)


def test_before_the_merge_is_due_new_keys_are_appended_and_the_others_wait() -> None:
    held: set[Key] = {5}
    waiting = [
        Row(5, 3, "u", "e"),
        Row(6, 4, "c", "f"),
        Row(6, 5, "u", "F"),
        Row(7, 6, "c", "g"),
        Row(7, 7, "d"),
    ]
    done = plan([], waiting, held, merge_due=False, held_is_all=True, append_due=True)
    assert done.append == (Row(6, 5, "u", "F"),), (
        "a new key's newest change; 7 inserted then deleted: nothing"
    )
    assert done.merge == () and done.waiting == (Row(5, 3, "u", "e"),), "a held key waits for the MERGE"
    assert held == {5, 6, 7} and done.held_is_all
    done = plan([], list(waiting), {5}, merge_due=False, held_is_all=False, append_due=True)
    assert done.append == () and done.waiting == tuple(waiting), "keys not all known: everything waits"


def test_merge_policy() -> None:
    policy = MergePolicy(interval_s=10, max_rows=100)
    assert not policy.due(0, None, 50.0)
    assert not policy.due(5, 45.0, 50.0)
    assert policy.due(5, 40.0, 50.0)
    assert policy.due(100, 49.0, 50.0)
    assert MergePolicy(interval_s=0, max_rows=100).due(1, 50.0, 50.0)
