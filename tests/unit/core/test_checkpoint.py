"""The checkpoint file: what a restart may continue, and a clear error for everything else (no server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gtidsnap.core.checkpoint import Checkpoint, resume_problem
from gtidsnap.core.errors import CheckpointError
from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.signal_ledger import SignalLedger
from gtidsnap.engine.checkpoint_store import CheckpointStore

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"


def mysql(text: str) -> Any:
    return parse_gtid_set("mysql", text)


def maria(text: str) -> Any:
    return parse_gtid_set("mariadb", text)


def checkpoint(flavor: str, processed: str) -> Checkpoint:
    return Checkpoint(flavor, parse_gtid_set(flavor, processed), 1, 0, SnapshotContext(), SignalLedger())


@pytest.mark.parametrize(
    ("cp", "flavor", "executed", "purged", "problem"),
    [
        (checkpoint("mysql", f"{U1}:1-5"), "mysql", mysql(f"{U1}:1-9"), mysql(""), None),
        (checkpoint("mysql", f"{U1}:1-5"), "mysql", mysql(f"{U1}:1-9"), mysql(f"{U1}:1-5"), None),
        (checkpoint("mysql", f"{U1}:1-5"), "mysql", mysql(f"{U1}:1-9"), mysql(f"{U1}:1-6"), f"{U1}:6"),
        (checkpoint("mysql", f"{U1}:1-5"), "mysql", mysql(f"{U1}:1-3"), mysql(""), f"{U1}:4-5"),
        (checkpoint("mysql", f"{U1}:1-5,{U2}:1"), "mysql", mysql(f"{U1}:1-9"), mysql(""), f"{U2}:1"),
        (
            checkpoint("mysql", f"{U1}:1-5"),
            "mariadb",
            maria("0-1-5"),
            maria(""),
            "written for a mysql source",
        ),
        (checkpoint("mariadb", "0-1-5"), "mariadb", maria("0-1-9"), maria("0-1-5"), None),
        (checkpoint("mariadb", "0-1-5"), "mariadb", maria("0-1-9"), maria("0-1-7"), "purged binlogs"),
        (checkpoint("mariadb", "0-1-5"), "mariadb", maria("0-1-4"), maria(""), "has not executed"),
        (checkpoint("mariadb", "0-1-5,3-1-2"), "mariadb", maria("0-1-9"), maria(""), "3-1-"),
        (checkpoint("mariadb", ""), "mariadb", maria("0-1-9"), maria("0-1-2"), "purged binlogs"),
        (checkpoint("mariadb", "0-1-9"), "mariadb", maria("0-1-9,1-1-4"), maria("1-1-4"), "purged binlogs"),
    ],
)
def test_resume_problem(cp: Checkpoint, flavor: str, executed: Any, purged: Any, problem: str | None) -> None:
    found = resume_problem(cp, flavor, executed, purged, "the replica r")
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found and "\n" not in found
        lags = "lags behind" in found  # a lagging replica is waited for: never advice to start over
        assert ("wait for it to catch up" if lags else "snapshot the tables again") in found, (
            "says what to do"
        )


GOOD = {
    "format": 1,
    "flavor": "mariadb",
    "processed": "0-1-5",
    "next_seq": 3,
    "sink_position": 10,
    "context": {"tables": [], "paused": False},
    "signals": {},
}


PROGRESS = {  # one table's progress as TableProgress.to_json writes it
    "table": "shop.orders",
    "max_key": None,
    "last_key": None,
    "started": True,
    "done": False,
    "chunks": 2,
    "rows": 40,
    "condition": None,
    "error": None,
    "fresh": True,
}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "Expecting value"),
        (b"{", "Expecting"),
        (b"[1]", "holds list"),
        (b"null", "holds null"),
        (b"\xff", "utf-8"),
        (json.dumps({**GOOD, "format": 7}).encode(), "format 7"),
        (json.dumps({**GOOD, "flavor": 3}).encode(), "'flavor' is int"),
        (json.dumps({**GOOD, "flavor": "oracle"}).encode(), "oracle"),
        (json.dumps({**GOOD, "next_seq": "3"}).encode(), "'next_seq' is str"),
        (json.dumps({**GOOD, "next_seq": False}).encode(), "'next_seq' is bool"),
        (json.dumps({**GOOD, "next_seq": -1}).encode(), "next_seq -1"),
        # Delta's _seq is a LONG: a seq past it would fail in the middle of a batch, not at start
        (json.dumps({**GOOD, "next_seq": 2**63}).encode(), "'next_seq' is 9223372036854775808, past"),
        (json.dumps({**GOOD, "processed": 5}).encode(), "'processed' is int"),
        (json.dumps({**GOOD, "processed": "x-y"}).encode(), "x-y"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "context"}).encode(), "'context' is missing"),
        (json.dumps({**GOOD, "context": {"tables": [{"table": "nodot"}]}}).encode(), "context"),
        (json.dumps({**GOOD, "signals": []}).encode(), "'signals' is list"),
        # a table's progress as written, or refused: read by truthiness, "false" marked it done
        *(
            (json.dumps({**GOOD, "context": {"tables": [{**PROGRESS, **bad}]}}).encode(), why)
            for bad, why in (
                ({"done": "false"}, "'done' is str, not bool"),
                ({"started": 1}, "'started' is int, not bool"),
                ({"rows": "12"}, "'rows' is str, not int"),
                ({"rows": True}, "'rows' is bool, not int"),
                ({"chunks": -3}, "'chunks' is -3, not 0 or more"),
                ({"condition": ["a = 1"]}, "'condition' is list, not str or null"),
                ({"error": 5}, "'error' is int, not str or null"),
                ({"fresh": None}, "'fresh' is null, not bool"),
                ({"last_key": "7"}, "'last_key' is str, not list or null"),
            )
        ),
        (json.dumps({**GOOD, "context": {"tables": [5]}}).encode(), "'tables[0]' is int, not dict"),
        (json.dumps({**GOOD, "context": {"tables": [], "paused": "no"}}).encode(), "'paused' is str"),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_one_clear_error(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as refused:
        CheckpointStore(path).load()
    message = str(refused.value)
    assert str(path) in message and reason in message and "\n" not in message


def test_a_folder_is_no_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is a folder"):
        CheckpointStore(tmp_path).load()


def test_a_checkpoint_that_cannot_be_written_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    store = CheckpointStore(tmp_path / "file" / "checkpoint.json")
    with pytest.raises(CheckpointError, match="cannot write the checkpoint"):
        store.save(checkpoint("mariadb", "0-1-5"))


def test_a_good_checkpoint_round_trips(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "c.json")
    store.save(checkpoint("mysql", f"{U1}:1-5"))
    loaded = store.load()
    assert loaded is not None and loaded.processed == mysql(f"{U1}:1-5") and loaded.flavor == "mysql"


def test_next_seq_up_to_the_greatest_long_is_read(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps({**GOOD, "next_seq": 2**63 - 1}))
    loaded = CheckpointStore(path).load()
    assert loaded is not None and loaded.next_seq == 2**63 - 1


def test_a_table_progress_as_written_is_read_back() -> None:
    context = SnapshotContext.from_json({"tables": [PROGRESS, {**PROGRESS, "done": True, "error": "x"}]})
    assert [t.to_json() for t in context.tables] == [PROGRESS, {**PROGRESS, "done": True, "error": "x"}]
