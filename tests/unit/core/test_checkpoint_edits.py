"""A checkpoint's digest, its history and the deliberate edits of ``gtidsnap checkpoint set`` (pure), and
the store that refuses a checkpoint edited by hand and accepts one of an earlier version."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gtidsnap.core.checkpoint import Checkpoint, Edit
from gtidsnap.core.checkpoint_edits import (
    CHECKPOINT_COMMAND,
    DIGEST_KEY,
    HISTORY_KEPT,
    Digest,
    digest_of,
    forget_source,
    recorded,
    sealed,
    skip_transactions,
)
from gtidsnap.core.errors import CheckpointError
from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.core.source_identity import TransactionStamp
from gtidsnap.engine.checkpoint_store import CheckpointStore

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
STAMP = TransactionStamp("0-1-286", 1, 1_700_000_000, "0-1-285")


def maria(processed: str = "0-1-286,3-1-4") -> Checkpoint:
    return Checkpoint("mariadb", parse_gtid_set("mariadb", processed), 101, 12_345, last_transaction=STAMP)


def same(a: Checkpoint | None, b: Checkpoint) -> bool:
    """Equal but for the signal ledger (a fresh one gets a new lineage each time it is read)."""
    return a is not None and {**a.to_json(), "signals": 0} == {**b.to_json(), "signals": 0}


def test_a_sealed_checkpoint_matches_its_digest_until_a_field_changes() -> None:
    cp = maria()
    data = sealed(cp)
    assert digest_of(data) is Digest.MATCHES
    assert digest_of(json.loads(json.dumps(data, indent=4))) is Digest.MATCHES, "re-indented, unchanged"
    for field, value in (("sink_position", 6_000), ("processed", "0-1-283,3-1-4"), ("next_seq", 3)):
        assert digest_of({**data, field: value}) is Digest.DIFFERS, field
    assert digest_of({k: v for k, v in data.items() if k != DIGEST_KEY}) is Digest.MISSING
    assert same(Checkpoint.from_json(data), cp), "the digest is no field of the value"


def test_the_last_transaction_and_the_history_read_back() -> None:
    cp = recorded(maria(), "processed: skipped 0-1-287", "alice", "2026-01-01T00:00:00+00:00")
    back = Checkpoint.from_json(json.loads(json.dumps(cp.to_json())))
    assert same(back, cp) and back.history == (
        Edit("2026-01-01T00:00:00+00:00", "alice", "processed: skipped 0-1-287"),
    )
    with pytest.raises(ValueError, match="server id"):
        Checkpoint.from_json({**cp.to_json(), "last_transaction": {**STAMP.to_json(), "gtid": "0-x-1"}})


def test_the_history_keeps_the_last_edits() -> None:
    cp = maria()
    for n in range(HISTORY_KEPT + 5):
        cp = recorded(cp, f"edit {n}", "bob", "t")
    assert len(cp.history) == HISTORY_KEPT and cp.history[-1].change == f"edit {HISTORY_KEPT + 4}"


def test_skipping_the_next_mariadb_transaction_moves_its_domain_on_and_is_recorded() -> None:
    cp = skip_transactions(maria(), ["0-1-287"], "alice", "2026-01-01T00:00:00+00:00")
    assert str(cp.processed) == "0-1-287,3-1-4"
    assert cp.last_transaction == STAMP, "the stamp stays: its transaction is still processed"
    assert cp.history[-1] == Edit(
        "2026-01-01T00:00:00+00:00", "alice", "processed: skipped 0-1-287 (was 0-1-286,3-1-4)"
    )
    new_domain = skip_transactions(maria(), ["9-2-1"], "a", "t")
    assert "9-2-1" in str(new_domain.processed)


@pytest.mark.parametrize(
    ("gtid", "problem"),
    [
        ("0-1-286", "processed already"),
        ("0-1-289", "would skip 2 more"),
        ("3-1-9", "not the next transaction of domain 3"),
        ("garbage", "domain-server-seq"),
        (f"{U}:5", "domain-server-seq"),
    ],
)
def test_a_mariadb_skip_that_would_lose_more_is_refused(gtid: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        skip_transactions(maria(), [gtid], "a", "t")


def test_a_mysql_skip_adds_the_transaction_and_refuses_one_processed() -> None:
    cp = Checkpoint("mysql", parse_gtid_set("mysql", f"{U}:1-5"), 7, 0)
    assert str(skip_transactions(cp, [f"{U}:6", f"{U}:8"], "a", "t").processed) == f"{U}:1-6:8"
    with pytest.raises(ValueError, match="processed already"):
        skip_transactions(cp, [f"{U}:3"], "a", "t")


def test_forgetting_the_source_drops_the_stamp_and_says_what_it_was() -> None:
    cp = forget_source(maria(), "carol", "t")
    assert cp.last_transaction is None and "forgot 0-1-286" in cp.history[-1].change
    with pytest.raises(ValueError, match="nothing to forget"):
        forget_source(cp, "carol", "t")


def test_the_store_refuses_an_edit_by_hand_and_accepts_a_checkpoint_of_an_earlier_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, cp = CheckpointStore(tmp_path / "cp.json"), maria()
    store.save(cp)
    data = json.loads(store.path.read_text())
    assert digest_of(data) is Digest.MATCHES
    store.path.write_text(json.dumps({**data, "sink_position": 6_000}))
    with pytest.raises(CheckpointError) as refused:
        store.load()
    assert f"`{CHECKPOINT_COMMAND} set`" in str(refused.value) and str(store.path) in str(refused.value)
    found = store.load_as_written()
    assert found is not None and found[1] is Digest.DIFFERS and found[0].sink_position == 6_000
    store.path.write_text(
        json.dumps({k: v for k, v in data.items() if k != DIGEST_KEY})
    )  # an earlier version
    with caplog.at_level(logging.INFO, "gtidsnap.engine.checkpoint_store"):
        assert same(store.load(), cp) and same(store.load(), cp)
    said = [r for r in caplog.records if "has no digest" in r.getMessage()]
    assert len(said) == 1 and "the next checkpoint saved carries one" in said[0].getMessage()
    store.save(cp)
    assert digest_of(json.loads(store.path.read_text())) is Digest.MATCHES
