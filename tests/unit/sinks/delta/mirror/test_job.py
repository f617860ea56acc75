"""Which version of a changelog the mirror job may read (sinks.delta.mirror_job.readable_version)."""

from __future__ import annotations

import json
from typing import Any

from gtidsnap.sinks.delta.mirror.job import readable_version


def commit(version: int, batch: int | None = None, **meta: Any) -> dict[str, Any]:
    data = {**({"gtidsnap_batch": batch} if batch is not None else {}), **meta}
    return {"version": version, "userMetadata": json.dumps(data) if data else None}


CREATED = commit(0)


def test_up_to_the_checkpointed_batch() -> None:
    history = [CREATED, commit(1, 1), commit(2, 2), commit(3, 3)]
    assert readable_version(history, 3) == 3
    assert readable_version(history, 2) == 2
    assert readable_version(history, 0) == 0, "only the creation: an empty changelog"
    assert readable_version(list(reversed(history)), 1) == 1, "any order"


def test_an_uncheckpointed_batch_stops_the_read_even_when_later_commits_are_not_batches() -> None:
    undo = commit(4, gtidsnap_undo={"to_version": 2, "checkpoint_batch": 2})
    history = [CREATED, commit(1, 1), commit(2, 2), commit(3, 3), undo, commit(5, 4)]
    assert readable_version(history, 2) == 2, "batch 3 may still be undone: not past it"
    assert readable_version(history, 4) == 5, "the undo and the replayed batch 4 are final"
    widened = [CREATED, commit(1, 1), commit(2), commit(3, 2)]  # an ALTER before batch 2's append
    assert readable_version(widened, 1) == 2
    assert readable_version(widened, 2) == 3


def test_nothing_readable_without_a_version() -> None:
    assert readable_version([], 5) is None
    assert readable_version([commit(7, 9)], 5) is None, "history cut: the oldest kept is above it"
