"""What recovery would undo of a Delta output, checked against the checkpoint's ``next_seq`` before
anything is undone (commit histories as plain rows; the undo itself runs on Spark in the integration
tests)."""

from __future__ import annotations

import json
from typing import Any

from gtidsnap.sinks.delta.recovery import cut_problem, undo_target

LOG = ("changelog", "/out/shop/orders/_changelog")
MIRROR = ("mirror", "/out/shop/orders")


def commit(version: int, **meta: Any) -> dict[str, Any]:
    return {
        "version": version,
        "operation": "WRITE",
        "userMetadata": json.dumps(meta),
        "operationParameters": {},
    }


def history() -> list[dict[str, Any]]:
    """Batches 1-4 appended to the changelog, each from the seq its checkpoint's next_seq had then."""
    return [commit(v, gtidsnap_batch=v, gtidsnap_first_seq=100 * v) for v in range(1, 5)]


def test_what_a_checkpoint_of_the_last_batch_undoes_is_nothing() -> None:
    assert undo_target(history(), 4) is None
    assert cut_problem({LOG: history()}, 4, 500) is None


def test_batches_after_the_checkpoints_written_from_its_next_seq_on_may_be_undone() -> None:
    """A crash between the batch's commit and its checkpoint (or a checkpoint restored with its output)."""
    assert undo_target(history(), 2) == 2
    assert cut_problem({LOG: history()}, 2, 300) is None


def test_a_lowered_batch_would_undo_records_below_next_seq_and_is_refused() -> None:
    problem = cut_problem({LOG: history()}, 2, 500)
    assert problem is not None
    assert "version 3 (batch 3) holds records from seq 300 on, below the checkpoint's next_seq 500" in problem


def test_a_background_mirror_update_is_never_undone() -> None:
    mirror = [commit(1, gtidsnap_batch=1), commit(2, gtidsnap_mirror=3, gtidsnap_merged_seq=250)]
    problem = cut_problem({MIRROR: mirror}, 2, 300)
    assert problem is not None and "holds the checkpointed data of batch 3" in problem
    assert cut_problem({MIRROR: mirror}, 3, 400) is None


def test_commits_that_do_not_say_their_lowest_seq_are_not_checked() -> None:
    old = [commit(1, gtidsnap_batch=1), commit(2, gtidsnap_batch=2)]
    assert cut_problem({LOG: old}, 1, 500) is None


def test_an_undo_already_done_is_not_undone_again() -> None:
    undone = [*history(), {"version": 5, "operation": "RESTORE", "userMetadata": None,
                           "operationParameters": {"version": "2"}}]  # fmt: skip
    assert undo_target(undone, 2) is None
    assert cut_problem({LOG: undone}, 2, 500) is None
