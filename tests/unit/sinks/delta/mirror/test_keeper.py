"""When the mirror keeper updates a mirror (sinks.delta.mirror_keeper ``_due``): while a table's snapshot
rows still come, only APPENDs of them, in pieces of ``snapshot_rows``; MERGEs wait for the snapshot's
end unless ``merge_rows`` changes wait."""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from gtidsnap.config.settings import SinkSettings
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.mirror.keeper import MirrorEntry, MirrorKeeper
from gtidsnap.sinks.delta.mirror.update import MirrorState
from gtidsnap.sinks.delta.staging import StagedFile

TABLE = TableId("shop", "orders")


def keeper(**settings: Any) -> MirrorKeeper:
    sink = SinkSettings(type="delta", path="/tmp/out", merge_interval_s=15, **settings)
    return MirrorKeeper(None, None, "/tmp/out", sink, background=True)  # type: ignore[arg-type]


def entry(staged_rows: int, waiting: int, waited_s: float, staged_ago_s: float | None) -> MirrorEntry:
    state = MirrorState()
    if staged_rows:
        state.staged.append(StagedFile(TABLE, "/tmp/f.parquet", staged_rows, 1, staged_rows, True))
    if waiting:
        state.wait(pa.table({"id": list(range(waiting)), "_seq": list(range(waiting))}))
        state.waiting_since = time.monotonic() - waited_s
    now = time.monotonic()
    at = None if staged_ago_s is None else now - staged_ago_s
    return MirrorEntry(state, None, None, last_staged_at=at, staged_gap_s=1.0)  # type: ignore[arg-type]


def test_while_snapshot_rows_come_only_large_appends() -> None:
    k = keeper(snapshot_rows=1000, merge_rows=500)
    assert k._due(entry(999, 10, 60, staged_ago_s=0.5)) == (False, False), "below snapshot_rows: wait"
    assert k._due(entry(1000, 10, 60, staged_ago_s=0.5)) == (False, True), "an APPEND, no MERGE"
    assert k._due(entry(0, 10, 60, staged_ago_s=0.5)) == (False, False), "just appended: no MERGE"
    assert k._due(entry(0, 500, 1, staged_ago_s=0.5)) == (True, False), "too many changes held"
    assert k._due(entry(10, 500, 1, staged_ago_s=0.5)) == (True, True), "they fold into the staged rows"
    assert k._due(entry(10, 10, 60, staged_ago_s=5)) == (False, False), "snapshot batches come every 5 s"


def test_after_the_snapshot_the_merge_policy_rules() -> None:
    k = keeper(snapshot_rows=1000, merge_rows=500)
    assert k._due(entry(10, 10, 60, staged_ago_s=30)) == (True, True), "quiet: everything goes in"
    assert k._due(entry(10, 10, 1, staged_ago_s=30)) == (False, True), "staged rows go in at once"
    assert k._due(entry(0, 10, 1, staged_ago_s=None)) == (False, False), "the changes wait 15 s"
    assert k._due(entry(0, 10, 16, staged_ago_s=None)) == (True, False)
    k._draining = True
    assert k._due(entry(5, 10, 0, staged_ago_s=0.1)) == (True, True), "the run drains: all at once"


def test_a_commit_with_nothing_waiting_holds_the_changelog_up_to_its_staged_rows() -> None:
    """The watermark a mirror commit records: below the first change still waiting; with none, up to
    the newest change given or the newest staged row taken in, whichever is later (the changelog's
    snapshot rows are the staged ones: a restart must not MERGE them again)."""
    from gtidsnap.sinks.delta.catch_up import MERGED_SEQ
    from gtidsnap.sinks.delta.mirror.update import MirrorWriter

    writer = MirrorWriter(None, None, "app")  # type: ignore[arg-type]
    state = MirrorState(top_seq=10, staged_seq=20)
    assert writer._meta(3, state, None, "", False)[MERGED_SEQ] == 20
    state = MirrorState(top_seq=30, staged_seq=20)
    assert writer._meta(3, state, None, "", False)[MERGED_SEQ] == 30
    state.wait(pa.table({"id": [1, 2], "_seq": pa.array([25, 31], pa.int64())}))
    assert writer._meta(3, state, None, "", False)[MERGED_SEQ] == 24, "below what still waits"


def test_compact_keeps_the_newest_waiting_change_of_each_key() -> None:
    state = MirrorState()
    state.wait(pa.table({"id": [1, 2, 1], "_seq": [1, 2, 3], "name": ["a", "b", "c"]}))
    state.wait(pa.table({"id": [2, 3], "_seq": [4, 5], "name": ["d", "e"]}))
    state.compact(["id"])
    assert state.waiting_rows == 3 and len(state.waiting) == 1
    assert state.waiting[0].to_pylist() == [
        {"id": 1, "_seq": 3, "name": "c"},
        {"id": 2, "_seq": 4, "name": "d"},
        {"id": 3, "_seq": 5, "name": "e"},
    ], "in _seq order"
    assert state.top_seq == 5
