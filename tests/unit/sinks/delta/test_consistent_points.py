"""Which version of a mirror a recorded point reads, from the mirror's commits alone: the newest one
written from batches up to the point's, never one an undo took back, with its watermarks."""

from __future__ import annotations

import json
from typing import Any

from gtidsnap.sinks.delta.consistent_points import _kept, _mirror_at


def commit(
    version: int, meta: dict[str, Any] | None = None, operation: str = "WRITE", **params: str
) -> dict[str, Any]:
    return {
        "version": version,
        "operation": operation,
        "userMetadata": json.dumps(meta) if meta is not None else None,
        "operationParameters": {"version": params["to"]} if "to" in params else {},
    }


def at(commits: list[dict[str, Any]], batch: int) -> tuple[int, int | None, int]:
    found = _mirror_at(list(_kept(sorted(commits, key=lambda c: -c["version"]))), batch)
    return found.version, found.merged, found.staged


def test_the_newest_version_written_up_to_the_batch() -> None:
    commits = [
        commit(0),  # created empty
        commit(1, {"gtidsnap_mirror": 3, "gtidsnap_merged_seq": 40, "gtidsnap_staged_seq": 25}),
        commit(2, {"gtidsnap_mirror": 5, "gtidsnap_merged_seq": 90, "gtidsnap_staged_seq": 25}),
        commit(3, {"gtidsnap_mirror": 8, "gtidsnap_merged_seq": 150, "gtidsnap_staged_seq": 140}),
    ]
    assert at(commits, 2) == (0, None, -1), "nothing written up to batch 2: the empty first version"
    assert at(commits, 3) == (1, 40, 25)
    assert at(commits, 7) == (2, 90, 25)
    assert at(commits, 9) == (3, 150, 140)


def test_a_version_an_undo_took_back_is_never_read() -> None:
    """Inline mirrors: batch 6 written, the run killed before its checkpoint, undone at the next open,
    written again (as batch 7): a point of batch 6 or 7 never reads the undone version."""
    commits = [
        commit(0),
        commit(1, {"gtidsnap_batch": 5, "gtidsnap_merged_seq": 50}),
        commit(2, {"gtidsnap_batch": 6, "gtidsnap_merged_seq": 60}),
        commit(3, {"gtidsnap_undo": {"to_version": 1}}),
        commit(4, {"gtidsnap_batch": 7, "gtidsnap_merged_seq": 61}),
    ]
    assert at(commits, 6) == (1, 50, -1)
    assert at(commits, 7) == (4, 61, -1)
    restored = [*commits[:3], commit(3, None, "RESTORE", to="1")]
    assert at(restored, 6) == (1, 50, -1), "Delta's RESTORE takes versions back too"


def test_the_watermarks_come_from_the_version_read_or_older() -> None:
    """The staged watermark from the newest commit carrying one at or below the version read; a
    tagged commit without a merge watermark (written before merges were deferred) merged everything
    (NOTHING_WAITS); commits of others (an OPTIMIZE) are not read."""
    commits = [
        commit(0),
        commit(1, {"gtidsnap_mirror": 2, "gtidsnap_merged_seq": 10, "gtidsnap_staged_seq": 5}),
        commit(2, {"gtidsnap_mirror": 4, "gtidsnap_merged_seq": 20}),
        commit(3, {"gtidsnap_batch": 6}),
        commit(4, {"something": "else"}, "OPTIMIZE"),
    ]
    assert at(commits, 5) == (2, 20, 5)
    assert at(commits, 6) == (3, -1, 5)
