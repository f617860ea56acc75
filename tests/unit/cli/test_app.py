"""The command line's own behaviour, without servers: one line per error, markup never interpreted."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import gtidsnap.run as run_package
from gtidsnap.cli import app as cli
from gtidsnap.cli import failures
from gtidsnap.config.loading import Config
from gtidsnap.core.commands import PauseSnapshots, ResumeSnapshots, SignalReceived
from gtidsnap.core.errors import (
    ConfigError,
    FatalSourceError,
    GtidsnapError,
    OutputRefusedError,
    QueryError,
    SinkError,
    SourceError,
)
from gtidsnap.core.run_stats import RunStats
from gtidsnap.source import replica
from tests.fakes import T, World, jsonl_engine


def boom(args: list[str]) -> None:
    raise RuntimeError("a [bold]bug[/] in\nthree\nlines")


def test_an_unexpected_exception_is_one_line_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "app", lambda args: boom(args))
    with pytest.raises(SystemExit) as stopped:
        cli.main(["status"])
    err = capsys.readouterr().err
    assert stopped.value.code == 1
    assert err.count("\n") == 1 and err.startswith("error: unexpected RuntimeError: a [bold]bug[/] in three")
    assert "--verbose" in err and "Traceback" not in err


def test_verbose_shows_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "app", lambda args: boom(args))
    with pytest.raises(RuntimeError, match="bug"):
        cli.main(["run", "--verbose"])


def test_user_text_is_printed_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    cli.error_line("table db.[/x] and [sorce] and [bold red]")
    assert capsys.readouterr().err == "error: table db.[/x] and [sorce] and [bold red]\n"


@pytest.mark.parametrize(
    ("error", "hinted"),
    [
        (SourceError("cannot connect to the replica a@127.0.0.1:1: refused"), True),
        (SinkError("the Delta commit failed: disk full"), True),
        (FatalSourceError("the binlog stream was refused: purged"), False),
        (QueryError("the replica refused a chunk: 1054"), False),
        (ConfigError("unknown section [sorce]"), False),
        (
            OutputRefusedError("the checkpoint says batch 3 was committed to x, but no Delta table is there"),
            False,
        ),
    ],
)
def test_an_error_says_whether_the_same_command_again_may_pass(
    error: GtidsnapError, hinted: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as stopped:
        failures.fail(error)
    err = capsys.readouterr().err
    assert stopped.value.exit_code == 1 and err.startswith(f"error: {error}\n")
    assert (failures.RETRY_HINT in err) is hinted and err.count("error:") == 1


class _NoReplica:
    def __init__(self, *args: Any) -> None:
        pass

    def __enter__(self) -> _NoReplica:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


@pytest.mark.parametrize(
    ("args", "readers", "pool"),
    [
        (["--readers", "3"], 3, "processes"),
        (["--readers", "0"], 0, "processes"),
        (["--readers", "4", "--reader-pool", "spark"], 4, "spark"),
    ],
)
def test_run_readers_flag_reaches_the_config(
    args: list[str], readers: int, pool: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    seen: list[Config] = []

    def run_engine(cfg: Config, *rest: Any) -> RunStats:
        seen.append(cfg)
        return RunStats()

    monkeypatch.setenv("GTIDSNAP_SNAPSHOT_READERS", "5")  # the flag wins over the environment
    monkeypatch.setattr(replica, "Replica", _NoReplica)
    monkeypatch.setattr(run_package, "run_engine", run_engine)
    monkeypatch.setattr(cli, "_setup_logging", lambda verbose: None)
    result = CliRunner().invoke(cli.app, ["run", "--checkpoint", str(tmp_path / "cp.json"), *args])
    assert result.exit_code == 0, result.output
    assert [(c.snapshot.readers, c.snapshot.reader_pool) for c in seen] == [(readers, pool)]


def test_run_readers_flag_refuses_a_negative_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_setup_logging", lambda verbose: None)
    result = CliRunner().invoke(cli.app, ["run", "--readers", "-1"])
    assert result.exit_code == 1
    assert "flag snapshot.readers must be from 0 to 64, got -1" in result.output


def test_a_run_whose_snapshot_failed_ends_with_exit_3_naming_the_tables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A pipeline keyed on the exit status must not take a run that lacks a table's rows for success."""

    def run_engine(cfg: Config, *rest: Any) -> RunStats:
        stats = RunStats(records=7)
        stats.failed["shop.b"] = "selecting a chunk of shop.b failed on the replica: error 1690"
        stats.failed["shop.a"] = "the chunk ends of shop.a: statement over the time limit"
        return stats

    monkeypatch.setattr(replica, "Replica", _NoReplica)
    monkeypatch.setattr(run_package, "run_engine", run_engine)
    monkeypatch.setattr(cli, "_setup_logging", lambda verbose: None)
    args = ["run", "--checkpoint", str(tmp_path / "cp.json"), "--until-caught-up"]
    result = CliRunner().invoke(cli.app, [*args, "--snapshot", "shop.a", "--snapshot", "shop.b"])
    assert result.exit_code == cli.SNAPSHOT_FAILED == 3, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("done: 7 records")
    assert lines[1:3] == [
        "snapshot of shop.a failed: the chunk ends of shop.a: statement over the time limit",
        "snapshot of shop.b failed: selecting a chunk of shop.b failed on the replica: error 1690",
    ]
    assert lines[3].startswith(
        "error: 2 snapshot(s) failed: shop.a, shop.b; their rows are not in the output"
    )
    assert len(lines) == 4


def test_a_run_without_failures_ends_with_exit_0(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setattr(replica, "Replica", _NoReplica)
    monkeypatch.setattr(run_package, "run_engine", lambda cfg, *rest: RunStats())
    monkeypatch.setattr(cli, "_setup_logging", lambda verbose: None)
    result = CliRunner().invoke(
        cli.app, ["run", "--checkpoint", str(tmp_path / "cp.json"), "--until-caught-up"]
    )
    assert result.exit_code == 0 and "error" not in result.output, result.output


def test_status_json_has_the_facts_of_the_tables(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    world = World(random.Random(5), rows=12, writes=4)
    engine = jsonl_engine(world, tmp_path)
    engine.commands.put(SignalReceived(0, 0, "p1", "pause-snapshot", PauseSnapshots()))
    engine.commands.put(SignalReceived(0, 1, "r1", "resume-snapshot", ResumeSnapshots()))
    engine.run(snapshot=[T], until_caught_up=True)
    with pytest.raises(SystemExit) as done:
        cli.main(["status", "--json", "--checkpoint", str(tmp_path / "checkpoint.json")])
    assert done.value.code == 0
    status = json.loads(capsys.readouterr().out)
    assert status["exists"] is True and status["flavor"] == "mysql" and status["paused"] is False
    assert status["records_emitted"] == engine.seq - 1 and status["processed"] == str(engine.processed)
    assert status["snapshots"] == [
        {"table": str(T), "state": "done", "chunks": engine.stats.chunks, "rows": 12,
         "last_key": status["snapshots"][0]["last_key"], "condition": None, "error": None}
    ]  # fmt: skip
    assert [(s["id"], s["outcome"]) for s in status["signals"]] == [("p1", "done"), ("r1", "done")]
    assert status["notifications_waiting"] == 0, "without a notifications topic nothing waits"
    with pytest.raises(SystemExit):
        cli.main(["status", "--json", "--checkpoint", str(tmp_path / "none.json")])
    assert json.loads(capsys.readouterr().out) == {"checkpoint": str(tmp_path / "none.json"), "exists": False}
