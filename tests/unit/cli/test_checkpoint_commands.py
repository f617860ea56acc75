"""``gtidsnap checkpoint show|set`` without servers: the checkpoint shown as it is on disk, a deliberate
edit digested again and recorded with when and by whom, and every refusal one line."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest

from gtidsnap.cli import app as cli
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.checkpoint_edits import Digest, digest_of
from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.core.source_identity import TransactionStamp
from gtidsnap.engine.checkpoint_store import CheckpointStore

STAMP = TransactionStamp("0-1-286", 1, 1_700_000_000, "0-1-285")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        cli.main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def path(tmp_path: Path) -> Path:
    cp = Checkpoint("mariadb", parse_gtid_set("mariadb", "0-1-286"), 101, 12_345, last_transaction=STAMP)
    CheckpointStore(tmp_path / "cp.json").save(cp)
    return tmp_path / "cp.json"


def test_show_prints_the_checkpoint_and_its_digests_verdict(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "checkpoint", "show", "--checkpoint", str(path))
    assert code == 0 and "its content matches its digest" in out and "processed: 0-1-286" in out
    assert "last transaction: 0-1-286 (server id 1, written 2023-11-14T22:13:20+00:00)" in out
    assert "output position: 12345" in out and "no deliberate edit" in out
    code, out, _ = run(capsys, "checkpoint", "show", "--json", "--checkpoint", str(path))
    shown = json.loads(out)
    assert code == 0 and shown["digest"] == "matches" and shown["last_transaction"]["gtid"] == "0-1-286"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "sink_position": 6}))
    code, out, _ = run(capsys, "checkpoint", "show", "--checkpoint", str(path))
    assert code == 0 and "CHANGED BY HAND" in out and "output position: 6" in out
    code, out, _ = run(capsys, "checkpoint", "show", "--checkpoint", str(path.with_name("none.json")))
    assert code == 0 and "no checkpoint at" in out


def test_set_skips_a_transaction_and_forgets_the_source_recording_who_and_when(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    code, _, err = run(
        capsys, "checkpoint", "set", "--checkpoint", str(path), "--skip", "0-1-287", "--forget-source"
    )
    assert code == 0 and "skipped 0-1-287" in err and "forgot 0-1-286" in err and "(by alice" in err
    data = json.loads(path.read_text())
    assert (
        digest_of(data) is Digest.MATCHES
        and data["processed"] == "0-1-287"
        and "last_transaction" not in data
    )
    assert [e["by"] for e in data["history"]] == ["alice", "alice"] and data["history"][0]["at"]


@pytest.mark.parametrize(
    ("args", "code", "problem"),
    [
        ((), 2, "nothing to set"),
        (("--skip", "0-1-290"), 1, "not changed: 0-1-290 is not the next transaction of domain 0"),
        (("--skip", "x"), 1, "not changed"),
    ],
)
def test_set_refuses_with_one_line_and_changes_nothing(
    path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...], code: int, problem: str
) -> None:
    before = path.read_bytes()
    got, _, err = run(capsys, "checkpoint", "set", "--checkpoint", str(path), *args)
    assert got == code and err.count("error:") == 1 and problem in err, err
    assert path.read_bytes() == before


def test_set_never_blesses_an_edit_by_hand_nor_races_a_run(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "next_seq": 3}))
    code, _, err = run(capsys, "checkpoint", "set", "--checkpoint", str(path), "--forget-source")
    assert code == 1 and "does not match its digest" in err and "gtidsnap checkpoint set" in err
    path.write_text(json.dumps(data))
    with path.with_name("cp.json.lock").open("w") as held:  # a run holds the checkpoint
        fcntl.flock(held, fcntl.LOCK_EX)
        code, _, err = run(capsys, "checkpoint", "set", "--checkpoint", str(path), "--forget-source")
    assert code == 1 and "cp.json" in err and json.loads(path.read_text()) == data


def test_each_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for args, words in (
        (["checkpoint", "--help"], "deliberate edit"),
        (["checkpoint", "show", "--help"], "digest"),
        (["checkpoint", "set", "--help"], "--forget-source"),
        (["--help"], "checkpoint"),
    ):
        code, out, _ = run(capsys, *args)
        assert code == 0 and words in out, (args, out)
