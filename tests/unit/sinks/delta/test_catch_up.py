"""How far a mirror holds its changelog, read from its Delta history (sinks.delta.catch_up)."""

from __future__ import annotations

import json
from typing import Any

from gtidsnap.sinks.delta.catch_up import NOTHING_WAITS, merged_watermark


def commit(
    version: int, meta: dict[str, Any] | None = None, operation: str = "MERGE", **params: str
) -> dict[str, Any]:
    return {
        "version": version,
        "operation": operation,
        "userMetadata": json.dumps(meta) if meta is not None else None,
        "operationParameters": params,
    }


def test_the_newest_batch_commit_says_it() -> None:
    created = commit(0, None, "CREATE TABLE")
    assert merged_watermark([created]) is None
    history = [
        created,
        commit(1, {"gtidsnap_batch": 1, "gtidsnap_merged_seq": 40}),
        commit(2, {"gtidsnap_batch": 3, "gtidsnap_merged_seq": 75}),
    ]
    assert merged_watermark(history) == 75
    assert merged_watermark(list(reversed(history))) == 75


def test_undone_commits_do_not_count() -> None:
    history = [
        commit(0, None, "CREATE TABLE"),
        commit(1, {"gtidsnap_batch": 1, "gtidsnap_merged_seq": 40}),
        commit(2, {"gtidsnap_batch": 2, "gtidsnap_merged_seq": 90}),
        commit(3, {"gtidsnap_undo": {"to_version": 1, "checkpoint_batch": 1}}),
    ]
    assert merged_watermark(history) == 40
    restored = [*history[:3], {**commit(3, None, "RESTORE"), "operationParameters": {"version": "0"}}]
    assert merged_watermark(restored) is None
    after = [*history, commit(4, {"gtidsnap_batch": 4, "gtidsnap_merged_seq": 120})]
    assert merged_watermark(after) == 120


def test_a_mirror_from_before_deferred_merges_has_nothing_waiting() -> None:
    history = [commit(0, None, "CREATE TABLE"), commit(1, {"gtidsnap_batch": 7, "app_id": "x"})]
    assert merged_watermark(history) == NOTHING_WAITS


def test_the_mirror_jobs_commits_say_it_too() -> None:
    history = [
        commit(0, None, "CREATE TABLE"),
        commit(1, {"gtidsnap_mirror_job": {"changelog_version": 3}, "gtidsnap_merged_seq": 12}, "WRITE"),
        commit(2, {"gtidsnap_mirror_job": {"changelog_version": 5}, "gtidsnap_merged_seq": 30}),
        commit(3, None, "OPTIMIZE"),
    ]
    assert merged_watermark(history) == 30
    assert merged_watermark(history[:2]) == 12
