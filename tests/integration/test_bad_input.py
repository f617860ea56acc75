"""Bad input, as a careless or hostile user gives it, against the real MariaDB replica (and MySQL where
the flavour matters): config files, environment variables, flags, checkpoints and command lines.

Every case asserts what a user sees: the exit status, exactly one ``error:`` line that names the
problem, no traceback, and user text printed as itself (never read as rich markup). And that nothing was
lost: the output and checkpoint of an earlier run are byte for byte what they were, and the last test
writes a row after all of the bad input and checks that the same command then streams it. Bad signals
sent to a running gtidsnap are in test_bad_signals.py.

The CLI runs in this process (``gtidsnap.cli.app.main``, the console script's own entry point) so that the
~60 cases cost milliseconds each; a few run as real subprocesses to cover ``python -m gtidsnap``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gtidsnap.cli.app import main
from gtidsnap.core.gtid import parse_gtid_set
from tests.fakes import resealed
from tests.integration.cdc import (
    REPO,
    check_invariants,
    cli_env,
    execute,
    gtidsnap_cmd,
    read_records,
    source_rows,
)
from tests.integration.fixtures.db_servers import ReplicaPair, fresh_database

pytestmark = pytest.mark.integration

KEPT_ENV = ("GTIDSNAP_STATE_DIR", "GTIDSNAP_DELTA_JARS")


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error:")]


@dataclass
class Stage:
    """A database on the MariaDB pair, and the output of one good run of ``gtidsnap run`` over it."""

    pair: ReplicaPair
    db: str
    base: Path  # checkpoint.json and changes.jsonl of the good run
    env: dict[str, str | None]  # GTIDSNAP_* settings that reach the replica as the read-only user

    def good_args(self, out: Path | None = None) -> list[str]:
        out = out or self.base
        return [
            "run",
            "--until-caught-up",
            "--snapshot",
            f"{self.db}.t",
            "--sink-path",
            str(out / "changes.jsonl"),
            "--checkpoint",
            str(out / "checkpoint.json"),
        ]

    def unused_domain(self) -> int:
        """A MariaDB GTID domain the replica has never executed (the harness's servers keep their
        history across runs and tests, so no fixed domain is sure to be unused)."""
        with self.pair.replica_reader() as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos, @@gtid_slave_pos, @@gtid_current_pos")
            row = cur.fetchone()
        positions = ",".join(str(p) for p in (row or ()) if p)
        used = {int(gtid.split("-", 1)[0]) for gtid in positions.split(",") if gtid.strip()}
        return max(used | {76}) + 1

    def copy(self, to: Path) -> Path:
        """The good run's output and checkpoint, copied, for a case that spoils one of them."""
        shutil.copytree(self.base, to)
        return to


def invoke(args: list[str], env: dict[str, str | None]) -> int:
    """``gtidsnap <args>`` in this process with exactly ``env``'s GTIDSNAP_* variables (None: unset)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("GTIDSNAP_") and name not in KEPT_ENV:
                mp.delenv(name)
        for name, value in env.items():
            if value is not None:
                mp.setenv(name, value)
        try:
            main(args)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
    return 0


def run_cli(args: list[str], env: dict[str, str | None], capsys: pytest.CaptureFixture[str]) -> Result:
    capsys.readouterr()
    code = invoke(args, env)
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file's digest but the run locks' (``<checkpoint>.lock``: who ran last, not output)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix != ".lock"
    }


ESCAPE_NAME = "e\x1b[2Jx"  # ESC [ 2 J clears a terminal's screen


@pytest.fixture(scope="module")
def stage(mariadb_pair: ReplicaPair, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    pair = mariadb_pair
    with fresh_database(pair) as db:
        execute(
            pair,
            db,
            "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, payload VARCHAR(64))",
            "CREATE VIEW vw AS SELECT id, v FROM t",
            "CREATE TABLE nokey (a INT)",
            "CREATE TABLE `[red]x` (id INT PRIMARY KEY)",
            "INSERT INTO `[red]x` VALUES (1), (2)",
            f"CREATE TABLE `{ESCAPE_NAME}` (id INT PRIMARY KEY)",  # a quoted identifier may hold ESC
            f"INSERT INTO `{ESCAPE_NAME}` VALUES (1)",
            many=[("INSERT INTO t VALUES (%s, 0, %s)", [(i, f"p{i}") for i in range(30)])],
        )
        stage = Stage(pair, db, tmp_path_factory.mktemp("bad-input-base"), reader_env(pair))
        assert invoke(stage.good_args(), stage.env) == 0, "the good run before the bad input failed"
        yield stage


def reader_env(pair: ReplicaPair) -> dict[str, str | None]:
    """The GTIDSNAP_* settings of ``cdc.cli_env``: the replica as the read-only user; a replica behind
    a checkpoint is waited for 1 s (a checkpoint edited far ahead reads as lag)."""
    env: dict[str, str | None] = {k: v for k, v in cli_env(pair).items() if k.startswith("GTIDSNAP_")}
    return env | {"GTIDSNAP_SOURCE_CATCH_UP_TIMEOUT_S": "1"}


# ----------------------------------------------------------------------------- the cases

# (name, files to write {name: text or bytes}, extra env, args with {db} {dir} {base} placeholders,
#  expected exit status, what the one error line must contain)
Case = tuple[str, dict[str, str | bytes], dict[str, str | None], list[str], int, list[str]]

RUN = [
    "run",
    "--until-caught-up",
    "--sink-path",
    "{dir}/changes.jsonl",
    "--checkpoint",
    "{dir}/checkpoint.json",
]
RUN_T = [*RUN, "--snapshot", "{db}.t"]

CONFIG_CASES: list[Case] = [
    (
        "unknown section",
        {"c.toml": "[sorce]\nhost = 'x'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["[sorce]"],
    ),
    (
        "unknown setting",
        {"c.toml": "[source]\nhots = 'x'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["source.hots"],
    ),
    (
        "bool as text",
        {"c.toml": '[sink]\nchangelog = "false"\n'},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["sink.changelog", "'false'", "boolean"],
    ),
    (
        "fractional port",
        {"c.toml": "[source]\nport = 33062.9\n"},
        {"GTIDSNAP_SOURCE_PORT": None},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["source.port", "33062.9", "integer"],
    ),
    (
        "bool chunk size",
        {"c.toml": "[snapshot]\nchunk_size = true\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["snapshot.chunk_size", "True", "integer"],
    ),
    (
        "surrogate key as text",
        {"c.toml": '[capture]\nsurrogate_keys = { "db.t" = "id" }\n'},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["surrogate_keys", "'id'", "list"],
    ),
    (
        "password in file",
        {"c.toml": "[source]\npassword = 'hunter2'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["password is not read from files"],
    ),
    (
        "tls required without ca",
        {"c.toml": "[source]\ntls = 'required'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["source.tls", "needs source.ca"],
    ),
    (
        "tls ca missing",
        {"c.toml": "[source]\ntls = 'required'\nca = '/nonexistent/ca.pem'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["source.ca", "/nonexistent/ca.pem", "cannot be read"],
    ),
    (
        "tls unknown",
        {"c.toml": "[source]\ntls = 'maybe'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["source.tls", "maybe"],
    ),
    (
        "zero connect timeout",
        {"c.toml": "[source]\nconnect_timeout_s = 0\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["connect_timeout_s", "from 0.1 to 3600"],
    ),
    (
        "negative heartbeat",
        {"c.toml": "[binlog]\nheartbeat_s = -1\n"},
        {"GTIDSNAP_BINLOG_HEARTBEAT_S": None},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["binlog.heartbeat_s", "-1"],
    ),
    (
        "statement timeout as text",
        {"c.toml": "[source]\nstatement_timeout_s = '30'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["statement_timeout_s", "'30'", "number"],
    ),
    (
        "sink type unknown",
        {"c.toml": "[sink]\ntype = 'parquet'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["sink.type", "parquet", "jsonl"],
    ),
    (
        "system table captured",
        {"c.toml": "[capture]\ntables = ['mysql.user']\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["mysql.user", "system schema"],
    ),
    (
        "table without schema",
        {"c.toml": "[capture]\ntables = ['orders']\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["orders", "schema.table"],
    ),
    (
        "tables as text",
        {"c.toml": "[capture]\ntables = 'db.t'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["capture.tables", "list"],
    ),
    (
        "section not a table",
        {"c.toml": "source = 5\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["source", "not a table"],
    ),
    (
        "setting outside a section",
        {"c.toml": "host = 'x'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["host", "outside any section"],
    ),
    (
        "invalid toml",
        {"c.toml": "[source\nhost = \n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["not valid TOML"],
    ),
    (
        "config not utf-8",
        {"c.toml": b"[source]\nhost = '\xff\xfe'\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["not UTF-8"],
    ),
    ("config is a folder", {"folder/x": ""}, {}, [*RUN, "-c", "{dir}/folder"], 1, ["is a folder"]),
    (  # each answer was read as a signal, refused and answered: the topic grew without end
        "notifications on the signal topic",
        {"c.toml": "[signals]\nbootstrap = '127.0.0.1:1'\nnotifications_topic = 'gtidsnap-signals'\n"},
        {},
        ["check", "-c", "{dir}/c.toml"],
        1,
        ["signals.notifications_topic = 'gtidsnap-signals' is the signal topic"],
    ),
    (
        "notifications without brokers",
        {"c.toml": "[signals]\nnotifications_topic = 'answers'\n"},
        {},
        ["check", "-c", "{dir}/c.toml"],
        1,
        ["needs signals.bootstrap"],
    ),
    (
        "catalog names on a json-lines output",
        {"c.toml": "[sink]\ndatabase = 'cdc'\n"},
        {},
        [*RUN_T, "-c", "{dir}/c.toml"],
        1,
        ["sink.database = 'cdc' is a setting of a Delta output", "sink.type = jsonl"],
    ),
    (
        "catalog name with a space",
        {"c.toml": "[sink]\ntype = 'delta'\ndatabase = 'my db'\n"},
        {},
        ["check", "-c", "{dir}/c.toml"],
        1,
        ["sink.database", "'my db'", "no spaces, dots"],
    ),
    (
        "duplicate hosts",
        {},
        {"GTIDSNAP_SOURCE_HOST": None, "GTIDSNAP_SOURCE_PORT": None, "GTIDSNAP_SOURCE_HOSTS": "h:1,h:1"},
        ["check"],
        1,
        ["GTIDSNAP_SOURCE_HOSTS", "names the replica 'h:1' again"],
    ),
    ("config missing", {}, {}, [*RUN, "-c", "{dir}/absent.toml"], 1, ["does not exist"]),
    (
        "markup in a section name",
        {"c.toml": "[bold]\nx = 1\n"},
        {},
        ["status", "-c", "{dir}/c.toml"],
        1,
        ["[bold]"],
    ),
    (
        "duplicate key",
        {"c.toml": "[source]\nport = 1\nport = 2\n"},
        {},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["not valid TOML"],
    ),
    (
        "password file missing",
        {"c.toml": "[source]\npassword_file = '/nonexistent/pw'\n"},
        {"GTIDSNAP_SOURCE_PASSWORD": None},
        [*RUN, "-c", "{dir}/c.toml"],
        1,
        ["password"],
    ),
]
ENV_CASES: list[Case] = [
    (
        "env port not a number",
        {},
        {"GTIDSNAP_SOURCE_PORT": "abc"},
        RUN_T,
        1,
        ["GTIDSNAP_SOURCE_PORT", "'abc'", "integer"],
    ),
    (
        "env bool not a bool",
        {},
        {"GTIDSNAP_SINK_CHANGELOG": "maybe"},
        RUN_T,
        1,
        ["GTIDSNAP_SINK_CHANGELOG", "'maybe'", "boolean"],
    ),
    (
        "env mapping",
        {},
        {"GTIDSNAP_CAPTURE_SURROGATE_KEYS": "x"},
        RUN_T,
        1,
        ["GTIDSNAP_CAPTURE_SURROGATE_KEYS", "environment"],
    ),
    ("env chunk size zero", {}, {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "0"}, RUN_T, 1, ["chunk_size", "10000000"]),
    (  # the server would take it as 0: no limit at all
        "env statement timeout under a millisecond",
        {},
        {"GTIDSNAP_SOURCE_STATEMENT_TIMEOUT_S": "1e-9"},
        RUN_T,
        1,
        ["GTIDSNAP_SOURCE_STATEMENT_TIMEOUT_S", "from 0.001 to 4294967"],
    ),
    (
        "env statement timeout past the server's range",
        {},
        {"GTIDSNAP_SOURCE_STATEMENT_TIMEOUT_S": "1e12"},
        RUN_T,
        1,
        ["GTIDSNAP_SOURCE_STATEMENT_TIMEOUT_S", "from 0.001 to 4294967"],
    ),
    (  # the server would take it as 0: no heartbeat, so an idle source's windows would never close
        "env heartbeat under a millisecond",
        {},
        {"GTIDSNAP_BINLOG_HEARTBEAT_S": "1e-9"},
        RUN_T,
        1,
        ["GTIDSNAP_BINLOG_HEARTBEAT_S", "from 0.001 to 4294967"],
    ),
    (
        "env float interval",
        {},
        {"GTIDSNAP_CHECKPOINT_INTERVAL_S": "soon"},
        RUN_T,
        1,
        ["GTIDSNAP_CHECKPOINT_INTERVAL_S", "number"],
    ),
    ("env system table", {}, {"GTIDSNAP_CAPTURE_TABLES": "sys.x"}, RUN_T, 1, ["sys.x", "system schema"]),
    ("wrong password", {}, {"GTIDSNAP_SOURCE_PASSWORD": "wrong"}, RUN_T, 1, ["refused the login"]),
    (
        "nothing listens",
        {},
        {"GTIDSNAP_SOURCE_PORT": "1"},
        RUN_T,
        1,
        ["cannot connect to the replica", "127.0.0.1:1"],
    ),
]
FLAG_CASES: list[Case] = [
    ("markup in a missing table", {}, {}, [*RUN, "--snapshot", "{db}.[/x]"], 1, ["[/x]", "does not exist"]),
    ("system table snapshot", {}, {}, [*RUN, "--snapshot", "mysql.user"], 2, ["mysql.user", "system schema"]),
    ("snapshot without schema", {}, {}, [*RUN, "--snapshot", "nodot"], 2, ["nodot", "schema.table"]),
    ("snapshot of a view", {}, {}, [*RUN, "--snapshot", "{db}.vw"], 1, ["vw", "is a view"]),
    ("snapshot without a key", {}, {}, [*RUN, "--snapshot", "{db}.nokey"], 1, ["nokey", "no primary key"]),
    ("chunk size zero", {}, {}, [*RUN_T, "--chunk-size", "0"], 1, ["chunk_size", "1 to 10000000"]),
    ("port out of range", {}, {}, [*RUN_T, "--port", "70000"], 1, ["source.port", "65535"]),
    ("check a system table", {}, {}, ["check", "-t", "performance_schema.threads"], 2, ["system schema"]),
    ("check a view", {}, {}, ["check", "-t", "{db}.vw"], 1, ["a view"]),
    (
        "filter for a table not asked for",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--filter", "{db}.u=v > 1", "--print"],
        2,
        ["{db}.u", "not in the request"],
    ),
    (
        "filter sleeps",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--filter", "{db}.t=SLEEP(1) = 0", "--print"],
        2,
        ["SLEEP"],
    ),
    (
        "filter reads another table",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--filter", "{db}.t=id IN (SELECT 1 FROM mysql.user)", "--print"],
        2,
        ["subquer"],
    ),
    (
        "filter with a comment",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--filter", "{db}.t=id > 1 /* x */", "--print"],
        2,
        ["comment"],
    ),
    (
        "filter with a variable",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--filter", "{db}.t=id > @@port", "--print"],
        2,
        ["variable"],
    ),
    (
        "filter not table=condition",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--filter", "justtext", "--print"],
        2,
        ["TABLE=CONDITION"],
    ),
    (
        "filter twice",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--filter", "{db}.t=v > 1", "--filter", "{db}.t=v < 5", "--print"],
        2,
        ["twice"],
    ),
    ("pattern not RE2", {}, {}, ["snapshot", "start", "{db}\\.(a)\\1", "--print"], 2, ["RE2"]),
    (
        "pattern broken",
        {},
        {},
        ["snapshot", "start", "{db}.(", "--print"],
        2,
        ["not a valid regular expression"],
    ),
    ("pattern too long", {}, {}, ["snapshot", "start", "{db}." + "x" * 600, "--print"], 2, ["at most 512"]),
    (
        "id too long",
        {},
        {},
        ["snapshot", "start", "{db}.t", "--id", "i" * 200, "--print"],
        2,
        ["at most 128"],
    ),
    ("stop by pattern", {}, {}, ["snapshot", "stop", "{db}\\.t.*", "--print"], 2, ["not patterns"]),
    (
        "pause with a table",
        {},
        {},
        ["snapshot", "pause", "{db}.t", "--print"],
        2,
        ["unexpected extra argument"],
    ),
    ("no broker configured", {}, {}, ["snapshot", "pause"], 1, ["no signal topic configured"]),
    ("no broker listening", {}, {}, ["snapshot", "pause", "--bootstrap", "127.0.0.1:1"], 1, ["127.0.0.1:1"]),
    (  # it sent the signal, then exited 1: refused before anything is sent now
        "wait negative",
        {},
        {},
        ["snapshot", "pause", "--bootstrap", "127.0.0.1:1", "--wait", "-1"],
        2,
        ["--wait -1.0 must be more than 0", "nothing was sent"],
    ),
    (
        "wait nan",
        {},
        {},
        ["snapshot", "pause", "--bootstrap", "127.0.0.1:1", "--wait", "nan"],
        2,
        ["--wait nan"],
    ),
    ("chunk size not a number", {}, {}, [*RUN_T, "--chunk-size", "abc"], 2, []),
]
CHECKPOINT_CASES: list[Case] = [
    ("checkpoint is a folder", {"checkpoint.json/x": ""}, {}, RUN_T, 1, ["is a folder"]),
    (
        "checkpoint is an array",
        {"checkpoint.json": "[1, 2]"},
        {},
        RUN_T,
        1,
        ["not a gtidsnap checkpoint", "list"],
    ),
    ("checkpoint not json", {"checkpoint.json": "{oops"}, {}, RUN_T, 1, ["not a gtidsnap checkpoint"]),
    ("checkpoint empty", {"checkpoint.json": ""}, {}, RUN_T, 1, ["not a gtidsnap checkpoint"]),
    ("checkpoint not utf-8", {"checkpoint.json": b"\xff\xfe{}"}, {}, RUN_T, 1, ["not a gtidsnap checkpoint"]),
]
# Checkpoints edited by hand: (name, fields replaced, what the error line must contain)
MYSQL_SET = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"
EDITED_PROGRESS = {"table": "x.t", "max_key": None, "last_key": None, "started": True, "done": False}
EDITED_PROGRESS |= {"chunks": 0, "rows": 0}
CHECKPOINT_EDITS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("seq as text", {"next_seq": "x"}, ["next_seq"]),
    ("seq zero", {"next_seq": 0}, ["next_seq"]),
    ("seq a boolean", {"next_seq": True}, ["next_seq"]),
    ("seq past a 64-bit long", {"next_seq": 2**63}, ["'next_seq' is 9223372036854775808"]),
    ("format from the future", {"format": 2}, ["format 2"]),
    ("unknown flavour", {"flavor": "postgres"}, ["postgres"]),
    ("mysql checkpoint on mariadb", {"flavor": "mysql", "processed": MYSQL_SET}, ["mysql source", "mariadb"]),
    ("processed not gtids", {"processed": "garbage"}, ["garbage"]),
    ("processed missing", {"processed": None}, ["processed"]),
    ("a checkpoint far ahead (lag)", {"processed": "0-1-999999999"}, ["has not executed", "0-1-", "lags"]),
    ("another domain", {"processed": "{domain}-1-5"}, ["has not executed", "{domain}-"]),
    ("sink position of delta", {"sink_position": {"delta_batch": 3}}, ["sink position", "JSON-lines"]),
    ("sink position negative", {"sink_position": -5}, ["sink position"]),
    ("output shorter than recorded", {"sink_position": 10**9}, ["truncated"]),
    ("context not an object", {"context": []}, ["context"]),
    ("tables not a list", {"context": {"tables": 5}}, ["context"]),
    ("table progress without a name", {"context": {"tables": [{"rows": 1}]}}, ["context"]),
    (  # read by truthiness, "false" marked the snapshot done with none of its rows
        "table progress done as text",
        {"context": {"tables": [{**EDITED_PROGRESS, "done": "false"}]}},
        ["'done' is str, not bool"],
    ),
    ("table progress rows as text", {"context": {"tables": [{**EDITED_PROGRESS, "rows": "12"}]}}, ["'rows'"]),
    ("table error a number", {"context": {"tables": [{**EDITED_PROGRESS, "error": 5}]}}, ["'error'"]),
    ("signals not an object", {"signals": "x"}, ["signals"]),
]
ALL_CASES = CONFIG_CASES + ENV_CASES + FLAG_CASES + CHECKPOINT_CASES


def fill(text: str, stage: Stage, where: Path) -> str:
    return text.replace("{db}", stage.db).replace("{dir}", str(where)).replace("{base}", str(stage.base))


MAY_PASS = {
    "nothing listens",
    "a checkpoint far ahead (lag)",
}  # the only cases whose error may pass by itself: "the same command again"
RETRY_HINT = "this may pass: the same command again is safe"


def check_refused(result: Result, code: int, expected: list[str], stage: Stage, case: str) -> None:
    """Exit status, no traceback, no password, and exactly one ``error:`` line naming the problem; the
    hint that the same command again is safe only where the error may pass by itself.

    ``check`` lists its problems under that line; the command line parser's own usage errors (typer)
    print a box instead, in which the expected words are looked for."""
    shown = result.err + result.out
    assert "Traceback" not in shown, f"{case}: a traceback\n{result.err}"
    assert "gtidsnap-test-pw" not in shown, f"{case}: the password was printed"
    assert result.code == code, f"{case}: exit {result.code}, not {code}\n{result.err}"
    assert (RETRY_HINT in shown) is (case in MAY_PASS), f"{case}: the retry hint is wrong\n{result.err}"
    lines = result.error_lines()
    usage_error = code == 2 and not lines
    if not usage_error:
        assert len(lines) == 1, f"{case}: {len(lines)} error lines\n{result.err}"
    where = result.err if usage_error or result.err.count("\n  - ") else lines[0]
    for text in expected:
        assert fill(text, stage, stage.base).lower() in where.lower(), f"{case}: {text!r} not in {where!r}"


@pytest.mark.parametrize("case", ALL_CASES, ids=[c[0] for c in ALL_CASES])
def test_bad_input_is_refused_with_one_line(
    case: Case, stage: Stage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, files, env, args, code, expected = case
    work = stage.copy(tmp_path / "work")
    for file, content in files.items():
        path = work / file
        for spot in (path, path.parent):
            if spot.is_file():
                spot.unlink()  # a file the case replaces, or turns into a folder
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    before, base_before = fingerprint(work), fingerprint(stage.base)
    result = run_cli([fill(a, stage, work) for a in args], {**stage.env, **env}, capsys)
    check_refused(result, code, expected, stage, name)
    assert fingerprint(work) == before, f"{name}: the refused run changed its output or checkpoint"
    assert fingerprint(stage.base) == base_before


@pytest.mark.parametrize("edit", CHECKPOINT_EDITS, ids=[e[0] for e in CHECKPOINT_EDITS])
def test_edited_checkpoint_is_refused_and_the_output_kept(
    edit: tuple[str, dict[str, Any], list[str]],
    stage: Stage,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name, fields, expected = edit
    work = stage.copy(tmp_path / "work")
    data = json.loads((work / "checkpoint.json").read_text(encoding="utf-8"))
    domain = str(stage.unused_domain()) if any("{domain}" in str(v) for v in fields.values()) else ""
    expected = [text.replace("{domain}", domain) for text in expected]
    for field, value in fields.items():
        if value is None:
            del data[field]
        else:
            data[field] = value.replace("{domain}", domain) if isinstance(value, str) else value
    # re-digested, as a checkpoint of another output or version would be: the checks past the digest
    (work / "checkpoint.json").write_text(json.dumps(resealed(data)), encoding="utf-8")
    before = fingerprint(work)
    result = run_cli(stage.good_args(work), stage.env, capsys)
    check_refused(result, 1, expected, stage, name)
    assert fingerprint(work) == before, f"{name}: the refused run changed its output or checkpoint"


@pytest.mark.parametrize("below", [1, 30])
def test_a_lowered_next_seq_is_refused_and_the_output_kept(
    below: int, stage: Stage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """next_seq lowered (by one: the last line's own seq, or by many; in a checkpoint whose digest
    matches, as another output's) would number the next records like ones the output holds: refused
    before the output is cut, naming what differs and what to do; the output and the checkpoint stay as
    they were, and the checkpoint put back runs."""
    work = stage.copy(tmp_path / "work")
    data = json.loads((work / "checkpoint.json").read_text(encoding="utf-8"))
    output = work / "changes.jsonl"
    last = json.loads(output.read_bytes().splitlines()[-1])["seq"]
    assert data["next_seq"] == last + 1 and last >= below
    lowered = last + 1 - below
    edited = resealed({**data, "next_seq": lowered})
    (work / "checkpoint.json").write_text(json.dumps(edited), encoding="utf-8")
    before = fingerprint(work)
    result = run_cli(stage.good_args(work), stage.env, capsys)
    expected = [
        f"checkpoint {work / 'checkpoint.json'} does not match its output",
        f"the record before {output} at the checkpoint's position",
        f"is seq {last}, not next_seq - 1 = {lowered - 1}",
        "use the checkpoint that belongs to this output",
        "to start over",
    ]
    check_refused(result, 1, expected, stage, f"next_seq {lowered}")
    assert fingerprint(work) == before, "the refused run changed its output or checkpoint"
    (work / "checkpoint.json").write_text(json.dumps(data), encoding="utf-8")
    assert run_cli(stage.good_args(work), stage.env, capsys).code == 0


def test_markup_in_table_names_prints_as_itself(
    stage: Stage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table called ``[red]x`` is snapshotted, and ``status`` shows its name as written."""
    args = [*stage.good_args(tmp_path), "--snapshot", f"{stage.db}.[red]x"]
    result = run_cli(args, stage.env, capsys)
    assert result.code == 0, result.err
    status = run_cli(["status", "--checkpoint", str(tmp_path / "checkpoint.json")], stage.env, capsys)
    assert status.code == 0 and f"{stage.db}.[red]x" in status.out, status.out + status.err
    assert "Traceback" not in status.err


def test_control_characters_in_a_table_name_are_escaped_everywhere(
    stage: Stage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A table whose name holds ESC is snapshotted; its name reaches ``status`` and an error with the
    escape shown as ``\\x1b``, and nothing the runs print holds it raw (it would clear the screen)."""
    table = f"{stage.db}.{ESCAPE_NAME}"
    result = run_cli([*stage.good_args(tmp_path), "--snapshot", table], stage.env, capsys)
    assert result.code == 0, result.err
    status = run_cli(["status", "--checkpoint", str(tmp_path / "checkpoint.json")], stage.env, capsys)
    assert status.code == 0 and f"{stage.db}.e\\x1b[2Jx" in status.out, status.out + status.err
    forged = f"{table}\nerror: forged"  # a missing table: named in the one error line
    missing = run_cli([*stage.good_args(tmp_path), "--snapshot", forged], stage.env, capsys)
    assert missing.code == 1 and len(missing.error_lines()) == 1, missing.err
    assert "\\x1b[2Jx\\nerror: forged" in missing.error_lines()[0], missing.err
    for shown in (result, status, missing):
        assert "\x1b" not in shown.out + shown.err, repr(shown.out + shown.err)


def test_real_entry_point_prints_one_line_and_no_traceback(stage: Stage, tmp_path: Path) -> None:
    """``python -m gtidsnap`` as a user runs it: a bad config file, a checkpoint that is a folder."""
    (tmp_path / "c.toml").write_text("[sorce]\n", encoding="utf-8")
    (tmp_path / "cp").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTIDSNAP_") or k in KEPT_ENV}
    env.update({k: v for k, v in stage.env.items() if v is not None})
    for args, text in (
        (["status", "-c", str(tmp_path / "c.toml")], "unknown section [sorce]"),
        ([*stage.good_args(tmp_path), "--checkpoint", str(tmp_path / "cp")], "is a folder"),
        (["run", "--snapshot", "db.[/x", "--port", "1"], "cannot connect"),
    ):
        proc = subprocess.run(
            gtidsnap_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=120
        )
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert len(errors) == 1 and text in errors[0], proc.stderr


def test_after_all_bad_input_nothing_was_lost(stage: Stage, capsys: pytest.CaptureFixture[str]) -> None:
    """Runs last in this module: a row written after all the bad input is streamed by the same command,
    and the output replays to the source table, nothing lost, nothing twice, nothing rewound."""
    execute(stage.pair, stage.db, "INSERT INTO t VALUES (1000, 7, 'after the bad input')")
    result = run_cli(stage.good_args(), stage.env, capsys)
    assert result.code == 0, result.err
    records = read_records(stage.base)
    assert any(r["key"] == [1000] and not r["snapshot"] for r in records), "the row after the bad input"
    check_invariants(records, {f"{stage.db}.t": source_rows(stage.pair, stage.db, "t")})


# ----------------------------------------------------------------------------- checkpoints, both flavours


def test_checkpoint_of_purged_transactions_is_refused(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint whose next transactions the replica's binlog no longer holds stops the run with what
    happened and what to do, and leaves the output alone (binlogs purged on the replica, as an admin
    with binlog_expire_logs_seconds would); the run does not say the same command again may pass (it
    would fail the same way), and ``check`` says the replica is not ready and exits 1 (it said ok)."""
    execute(pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY, v INT NOT NULL, payload VARCHAR(64))")
    env = reader_env(pair)
    args = stream_args(tmp_path)
    assert run_cli(args, env, capsys).code == 0
    execute(pair, fresh_db, "INSERT INTO t VALUES (1, 1, 'gone before it was streamed')")
    purge_binlogs(pair)
    before = fingerprint(tmp_path)
    result = run_cli(args, env, capsys)
    check_refused_line(result, ["purged", "snapshot the tables again"])
    assert RETRY_HINT not in result.err, result.err
    checked = run_cli(["check", "--checkpoint", str(tmp_path / "checkpoint.json")], env, capsys)
    assert checked.code == 1 and "ready for gtidsnap" not in checked.out, checked.out + checked.err
    check_refused_line(checked, ["not ready: checkpoint", "cannot be continued on", "purged"])
    assert fingerprint(tmp_path) == before


def purge_binlogs(pair: ReplicaPair) -> None:
    """Start a new binlog on the replica and purge every older one (as admin). MariaDB keeps a binlog
    until its binlog checkpoint has moved on, so the purge is repeated until the old files are gone."""
    deadline = time.monotonic() + 60
    with pair.connect(pair.replica_port) as admin, admin.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        newest = str(cur.fetchall()[-1][0])
        while True:
            cur.execute("PURGE BINARY LOGS TO %s", (newest,))
            cur.execute("SHOW BINARY LOGS")
            logs = [str(r[0]) for r in cur.fetchall()]
            if logs[0] == newest:
                return
            assert time.monotonic() < deadline, f"the replica kept its binlogs {logs} for 60 s"
            time.sleep(0.2)


def test_checkpoint_of_another_server_is_refused(
    pair: ReplicaPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint written against another server (its processed set is not within this replica's
    executed set) was accepted and later changes never appeared; now it is refused."""
    env = reader_env(pair)
    args = stream_args(tmp_path)
    assert run_cli(args, env, capsys).code == 0
    data = json.loads((tmp_path / "checkpoint.json").read_text(encoding="utf-8"))
    other = "9-9-9" if pair.flavor == "mariadb" else "11111111-2222-3333-4444-555555555555:1-9"
    processed = parse_gtid_set(pair.flavor, data["processed"]) | parse_gtid_set(pair.flavor, other)
    data["processed"] = str(processed)
    (tmp_path / "checkpoint.json").write_text(json.dumps(resealed(data)), encoding="utf-8")
    before = fingerprint(tmp_path)
    result = run_cli(args, env, capsys)
    check_refused_line(result, ["has not executed", "another server"])
    assert fingerprint(tmp_path) == before


def stream_args(out: Path) -> list[str]:
    return [
        "run",
        "--until-caught-up",
        "--sink-path",
        str(out / "changes.jsonl"),
        "--checkpoint",
        str(out / "checkpoint.json"),
    ]


def check_refused_line(result: Result, expected: list[str]) -> None:
    assert result.code == 1 and "Traceback" not in result.err, result.err
    lines = result.error_lines()
    assert len(lines) == 1 and all(t in lines[0] for t in expected), result.err


def test_statement_over_the_time_limit_is_stopped_by_the_server(pair: ReplicaPair, fresh_db: str) -> None:
    """Every statement gtidsnap runs is bounded on the server (source.statement_timeout_s): a SELECT
    that would take ~3 s is stopped and becomes a QueryError naming the limit, on both flavours."""
    from gtidsnap.core.errors import QueryError
    from gtidsnap.source.connection import ConnectionSettings, Secret
    from gtidsnap.source.replica import Replica
    from tests.integration.fixtures.db_servers import READER

    execute(pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2), (3)")
    settings = ConnectionSettings(
        pair.host, pair.replica_port, READER[0], Secret(READER[1]), statement_timeout=0.5
    )
    with Replica(settings) as replica:
        with pytest.raises(QueryError, match="statement_timeout_s") as stopped:
            replica._query(f"SELECT id FROM `{fresh_db}`.t WHERE SLEEP(1) = 0", [], "a slow read")
        assert "\n" not in str(stopped.value)
        assert replica.executed(), "the session is still usable after the stopped statement"


# ----------------------------------------------------------------------------- source.hosts

SILENT_TIMEOUT_S = 2.0


@contextmanager
def silent_listener() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a socket that listens and never accepts: the kernel completes each TCP
    handshake into its backlog, and nothing ever answers (a hung server, a proxy without a backend)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def test_a_silent_first_host_costs_connect_timeout_then_the_next_is_tried(
    stage: Stage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hosts = [silent listener, replica]``, ``connect_timeout_s = 2``: the run held 60-72 s on the first
    host whatever connect_timeout_s said, and check gave up after 62 s without trying the second. Now the
    handshake and the first statements answer within connect_timeout_s: the run continues on the replica
    and check says the silent host does not answer, the replica is ready, within a few timeouts."""
    with silent_listener() as silent:
        env = stage.env | {
            "GTIDSNAP_SOURCE_HOST": None,
            "GTIDSNAP_SOURCE_PORT": None,
            "GTIDSNAP_SOURCE_HOSTS": f"{silent},{stage.pair.host}:{stage.pair.replica_port}",
            "GTIDSNAP_SOURCE_CONNECT_TIMEOUT_S": str(SILENT_TIMEOUT_S),
        }
        started = time.monotonic()
        ran = run_cli(stream_args(tmp_path), env, capsys)  # a first run: no checkpoint an earlier test spoilt
        ran_s = time.monotonic() - started
        assert ran.code == 0, ran.err
        started = time.monotonic()
        checked = run_cli(["check", "--checkpoint", str(tmp_path / "checkpoint.json")], env, capsys)
        checked_s = time.monotonic() - started
    assert ran_s < 30 and checked_s < 20, f"run {ran_s:.0f} s, check {checked_s:.0f} s"
    assert checked.code == 0, checked.out + checked.err
    said = checked.err.replace("\n", " ")  # the console wraps long lines
    assert f"gtidsnap@{silent} does not answer" in said, checked.err
    assert "no answer within source.connect_timeout_s" in said, checked.err
    assert "ready for gtidsnap" in checked.out and str(stage.pair.replica_port) in checked.out, checked.out


def test_check_refuses_hosts_of_two_flavours(
    stage: Stage, mysql_pair: ReplicaPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Replicas of one run must be of one primary: a MariaDB and a MySQL replica in one list passed."""
    hosts = f"{stage.pair.host}:{stage.pair.replica_port},{mysql_pair.host}:{mysql_pair.replica_port}"
    env = stage.env | {
        "GTIDSNAP_SOURCE_HOST": None,
        "GTIDSNAP_SOURCE_PORT": None,
        "GTIDSNAP_SOURCE_HOSTS": hosts,
    }
    checked = run_cli(["check", "--checkpoint", str(tmp_path / "checkpoint.json")], env, capsys)
    assert checked.code == 1 and "Traceback" not in checked.err, checked.err
    lines = checked.error_lines()
    assert len(lines) == 1 and "source.hosts mixes servers of different flavours (mariadb at" in lines[0], (
        lines
    )
    assert "mysql at" in lines[0] and "of one primary" in lines[0]
