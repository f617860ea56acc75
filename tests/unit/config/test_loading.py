"""The config's strict validation: every wrong value is refused with one line naming where it came
from, the value and what is expected; good values layer TOML < environment < flags; defaults exist
once, in the models; the password never shows."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pymysql
import pytest

from gtidsnap.config.cpus import MAX_DEFAULT_READERS, default_readers
from gtidsnap.config.loading import (
    DEFAULTS,
    SECTIONS,
    Config,
    SignalSettings,
    SinkSettings,
    SnapshotSection,
    SnapshotSettings,
    SourceSection,
    load_config,
    parse_table_name,
)
from gtidsnap.core.errors import ConfigError
from gtidsnap.core.model import SYSTEM_SCHEMAS, TableId
from gtidsnap.source.connection import ConnectionSettings, Secret, TlsMode

PASSWORD = "hunter2-Sup3r-s3cret"


def write(tmp_path: Path, text: str, name: str = "gtidsnap.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def refused(
    path: Path | None,
    env: dict[str, str] | None = None,
    flags: dict[str, Any] | None = None,
    password: bool = True,
) -> str:
    """The error's text, checked to be one line that never holds the password (set in the env)."""
    env = {**(env or {}), **({"GTIDSNAP_SOURCE_PASSWORD": PASSWORD} if password else {})}
    with pytest.raises(ConfigError) as err:
        load_config(path, env, flags)
    text = str(err.value)
    assert text and "\n" not in text and "\r" not in text
    assert PASSWORD not in text
    return text


# --------------------------------------------------------------------------- bad TOML values

BAD_TOML = [
    # (toml, field, value as shown, what is expected)
    ('[sink]\nchangelog = "false"\n', "sink.changelog", "'false'", "is not a boolean: write true or false"),
    ("[sink]\nchangelog = 1\n", "sink.changelog", "= 1", "is not a boolean"),
    ("[source]\nport = 33062.9\n", "source.port", "33062.9", "is not an integer"),
    ("[source]\nport = true\n", "source.port", "True", "is not an integer"),
    ('[source]\nport = "3306"\n', "source.port", "'3306'", "is not an integer"),
    ("[source]\nport = 0\n", "source.port", "got 0", "from 1 to 65535"),
    ("[source]\nport = 65536\n", "source.port", "65536", "from 1 to 65535"),
    ("[source]\nhost = 5\n", "source.host", "5", "is not a string"),
    ('[source]\nhost = ""\n', "source.host", "''", "must not be empty"),
    ("[source]\nconnect_timeout_s = 0\n", "source.connect_timeout_s", "got 0", "from 0.1 to 3600"),
    ("[source]\nconnect_timeout_s = -1.5\n", "source.connect_timeout_s", "-1.5", "from 0.1 to 3600"),
    ("[source]\nconnect_timeout_s = 4e7\n", "source.connect_timeout_s", "40000000.0", "from 0.1 to 3600"),
    ("[source]\nstatement_timeout_s = 0\n", "source.statement_timeout_s", "got 0", "from 0.001 to 4294967"),
    # below a millisecond the server's limit would be 0, "no limit"; above 2^32 ms it overflows
    ("[source]\nstatement_timeout_s = 1e-9\n", "source.statement_timeout_s", "1e-09", "0.001 to 4294967"),
    ("[source]\nstatement_timeout_s = 1e12\n", "source.statement_timeout_s", "1000000000000", "to 4294967"),
    ('[source]\nstatement_timeout_s = "30"\n', "source.statement_timeout_s", "'30'", "is not a number"),
    (
        '[source]\ntls = "maybe"\n',
        "source.tls",
        "'maybe'",
        "must be disabled, preferred, required or verify_identity",
    ),
    ('[source]\ntls = "required"\n', "source.tls", "'required'", "needs source.ca"),
    ('[source]\nca = "/nonexistent/ca.pem"\n', "source.ca", "/nonexistent/ca.pem", "cannot be read"),
    ("[snapshot]\nchunk_size = true\n", "snapshot.chunk_size", "True", "is not an integer"),
    ("[snapshot]\nchunk_size = 0\n", "snapshot.chunk_size", "got 0", "must be from 1 to 10000000"),
    (
        "[snapshot]\nchunk_size = 9223372036854775807\n",
        "snapshot.chunk_size",
        "got 9223372036854775807",
        "from 1 to 10000000",
    ),
    ("[snapshot]\nchunk_size = 10.0\n", "snapshot.chunk_size", "10.0", "is not an integer"),
    ("[snapshot]\nchunk_delay_ms = -1\n", "snapshot.chunk_delay_ms", "-1", "from 0 to 3600000"),
    ("[snapshot]\nchunk_delay_ms = 1e300\n", "snapshot.chunk_delay_ms", "1e+300", "from 0 to 3600000"),
    ('[snapshot]\nchunk_delay_ms = "5"\n', "snapshot.chunk_delay_ms", "'5'", "is not a number"),
    ("[snapshot]\nreaders = -1\n", "snapshot.readers", "-1", "from 0 to 64"),
    ("[snapshot]\nreaders = 65\n", "snapshot.readers", "65", "from 0 to 64"),
    ("[snapshot]\nreaders = 2.5\n", "snapshot.readers", "2.5", "is not an integer: write a whole number"),
    ('[snapshot]\nreaders = "4"\n', "snapshot.readers", "'4'", "is not an integer: write it without quotes"),
    ("[snapshot]\nreaders = true\n", "snapshot.readers", "True", "is not an integer"),
    ("[binlog]\nheartbeat_s = 0\n", "binlog.heartbeat_s", "got 0", "from 0.001 to 4294967"),
    ("[binlog]\nheartbeat_s = 1e-9\n", "binlog.heartbeat_s", "1e-09", "from 0.001 to 4294967"),
    ("[binlog]\nheartbeat_s = true\n", "binlog.heartbeat_s", "True", "is not a number"),
    ("[binlog]\nheartbeat_s = inf\n", "binlog.heartbeat_s", "inf", "is not a finite number"),
    ("[binlog]\nserver_id = -1\n", "binlog.server_id", "-1", "from 0 to 4294967295"),
    ("[binlog]\nserver_id = 4294967296\n", "binlog.server_id", "4294967296", "from 0 to 4294967295"),
    ("[sink]\nbatch_rows = 0\n", "sink.batch_rows", "got 0", "positive"),
    ("[sink]\nbatch_ms = -1\n", "sink.batch_ms", "-1", "from 0 to 3600000"),
    ("[sink]\nbatch_ms = 1.5\n", "sink.batch_ms", "1.5", "is not an integer"),
    ('[sink]\ntype = "csv"\n', "sink.type", "'csv'", "must be jsonl or delta"),
    ("[sink]\npath = 5\n", "sink.path", "5", "is not a string: write it in quotes"),
    ("[checkpoint]\ninterval_s = 0\n", "checkpoint.interval_s", "got 0", "from 0.01 to 3600"),
    # a wait of 1e-9 s spins a thread; one past ~49 days raises OverflowError in it
    ('[sink]\ntype = "delta"\nowner_lease_s = 0.0001\n', "sink.owner_lease_s", "0.0001", "from 3.0 to 3600"),
    ("[metrics]\nprobe_interval_s = 1e-9\n", "metrics.probe_interval_s", "1e-09", "from 0.1 to 3600"),
    ("[metrics]\nstall_after_s = 1e300\n", "metrics.stall_after_s", "1e+300", "from 1 to 86400"),
    ("[source]\nretention_check_s = 1e-9\n", "source.retention_check_s", "1e-09", "from 1 to 86400"),
    ('[sink]\ntype = "delta"\nmerge_interval_s = 1e300\n', "sink.merge_interval_s", "1e+300", "to 86400"),
    ('[sink]\ntype = "delta"\nbatch_ms = 10000000000\n', "sink.batch_ms", "10000000000", "to 3600000"),
    ('[signals]\ntopic = ""\n', "signals.topic", "''", "must not be empty"),
    ('[capture]\ntables = "shop.orders"\n', "capture.tables", "'shop.orders'", "is not a list"),
    ('[capture]\ntables = ["orders"]\n', "capture.tables[0]", "'orders'", "must be written schema.table"),
    ('[capture]\ntables = [".orders"]\n', "capture.tables[0]", "'.orders'", "must be written schema.table"),
    ('[capture]\ntables = ["shop."]\n', "capture.tables[0]", "'shop.'", "must be written schema.table"),
    ("[capture]\ntables = [5]\n", "capture.tables[0]", "5", "is not a string"),
    ('[capture]\ntables = ["mysql.user"]\n', "capture.tables[0]", "mysql.user", "system schema mysql"),
    ('[capture]\ntables = ["SYS.x"]\n', "capture.tables[0]", "SYS.x", "system schema SYS"),
    (
        '[capture]\ntables = ["shop.a", "Performance_Schema.threads"]\n',
        "capture.tables[1]",
        "Performance_Schema.threads",
        "system schema",
    ),
    (
        '[capture]\ntables = ["information_schema.tables"]\n',
        "capture.tables[0]",
        "information_schema.tables",
        "system schema",
    ),
    (
        '[capture]\nsurrogate_keys = { "shop.log" = "id" }\n',
        "capture.surrogate_keys['shop.log']",
        "'id'",
        "is not a list",
    ),
    ('[capture]\nsurrogate_keys = { "t" = ["id"] }\n', "capture.surrogate_keys['t']", "'t'", "schema.table"),
    (
        '[capture]\nsurrogate_keys = { "shop.log" = [] }\n',
        "capture.surrogate_keys['shop.log']",
        "[]",
        "must not be empty",
    ),
    (
        '[capture]\nsurrogate_keys = { "shop.log" = ["ts", ""] }\n',
        "capture.surrogate_keys['shop.log'][1]",
        "''",
        "must not be empty",
    ),
    (
        '[capture]\nsurrogate_keys = { "shop.log" = ["id", "id"] }\n',
        "capture.surrogate_keys['shop.log']",
        "id",
        "twice",
    ),
    (
        '[capture]\nsurrogate_keys = { "mysql.user" = ["id"] }\n',
        "capture.surrogate_keys",
        "mysql.user",
        "system schema mysql",
    ),
    (
        '[capture]\nsurrogate_keys = ["shop.log"]\n',
        "capture.surrogate_keys",
        "['shop.log']",
        "is not a table",
    ),
]


@pytest.mark.parametrize(("toml", "name", "value", "expected"), BAD_TOML)
def test_bad_toml_value_is_named(tmp_path: Path, toml: str, name: str, value: str, expected: str) -> None:
    text = refused(write(tmp_path, toml))
    assert text.startswith(f"{tmp_path / 'gtidsnap.toml'}: ")
    assert name in text and value in text and expected in text


def test_surrogate_key_string_is_not_split_into_letters(tmp_path: Path) -> None:
    """The issue's case: "id" once became the columns i and d."""
    text = refused(write(tmp_path, '[capture]\nsurrogate_keys = { "t" = "id" }\n'))
    assert "schema.table" in text and "is not a list" in text and text.count("; ") == 1


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate and its key, and a second key that is not its (openssl, as the test
    harness makes its own)."""
    folder = tmp_path_factory.mktemp("pems")
    for name in ("cert", "other"):
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=t",
             "-keyout", str(folder / f"{name}-key.pem"), "-out", str(folder / f"{name}.pem")],
            check=True, capture_output=True,
        )  # fmt: skip
    return {
        "cert": folder / "cert.pem",
        "key": folder / "cert-key.pem",
        "other_key": folder / "other-key.pem",
    }


def test_tls_required_with_a_readable_ca_is_accepted(tmp_path: Path, pems: dict[str, Path]) -> None:
    ca = pems["cert"]
    cfg = load_config(write(tmp_path, f'[source]\ntls = "REQUIRED"\nca = "{ca}"\n'), {})
    assert cfg.source.tls is TlsMode.REQUIRED and cfg.source.ca == ca


@pytest.mark.parametrize("tls", ["required", "preferred", "disabled"])
def test_a_ca_that_is_not_a_certificate_is_refused_whatever_the_tls_mode(tmp_path: Path, tls: str) -> None:
    """The issue: "unexpected SSLError ... please report it" at the first connect, and with
    tls = "preferred" (which does not use it) the file passed check."""
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
    text = refused(write(tmp_path, f'[source]\ntls = "{tls}"\nca = "{ca}"\n'))
    assert "source.ca" in text and "holds no certificate" in text and "the file '" in text
    # the file is named (a long path shortened in the middle: its start is there)
    assert str(ca)[:12] in text


def test_a_client_certificate_and_a_key_that_are_not_a_pair_are_refused(
    tmp_path: Path, pems: dict[str, Path]
) -> None:
    toml = f'[source]\ntls = "required"\nca = "{pems["cert"]}"\ncert = "{pems["cert"]}"\n'
    text = refused(write(tmp_path, toml + f'key = "{pems["other_key"]}"\n'))
    assert "source.cert" in text and "source.key" in text and "private key" in text
    assert load_config(write(tmp_path, toml + f'key = "{pems["key"]}"\n'), {}).source.key == pems["key"]


def test_ca_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    text = refused(write(tmp_path, f'[source]\ntls = "required"\nca = "{tmp_path}"\n'))
    assert "source.ca" in text and str(tmp_path) in text and "cannot be read" in text


def test_long_values_are_cut(tmp_path: Path) -> None:
    text = refused(write(tmp_path, f'[capture]\ntables = ["{"x" * 500}"]\n'))
    assert "x" * 60 in text and "x" * 200 not in text and "..." in text


def test_several_problems_one_line_each_joined(tmp_path: Path) -> None:
    text = refused(write(tmp_path, '[source]\nport = 0\n[sink]\nchangelog = "no"\n'))
    first, second = text.split("; ")
    assert "source.port" in first and "sink.changelog" in second


# --------------------------------------------------------------------------- the file itself


@pytest.mark.parametrize(
    ("toml", "fragments"),
    [
        ('[sorce]\nhost = "x"\n', ["unknown section [sorce]", "known sections: [source], [capture]"]),
        ('[source]\nhots = "x"\n', ["unknown setting source.hots", "known: host, port"]),
        ("source = 5\n", ["source = 5", "is not a table", "[source]"]),
        ('host = "x"\n', ["host is outside any section", "known sections: [source]"]),
        ("[source\n", ["is not valid TOML"]),
        ('[source]\nhost = "a"\nhost = "b"\n', ["is not valid TOML"]),
    ],
)
def test_bad_file_shape_is_named(tmp_path: Path, toml: str, fragments: list[str]) -> None:
    text = refused(write(tmp_path, toml))
    assert all(f in text for f in fragments), text


def test_password_in_the_file_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, f'[source]\npassword = "{PASSWORD}"\n'), {})
    assert "not read from files" in str(err.value) and PASSWORD not in str(err.value)


def test_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('[source]\nuser = "jos\xe9"\n'.encode("latin-1"))
    assert "is not UTF-8" in refused(path)


def test_file_is_a_folder(tmp_path: Path) -> None:
    assert f"config file {tmp_path} is a folder" in refused(tmp_path)


def test_file_missing(tmp_path: Path) -> None:
    assert "does not exist" in refused(tmp_path / "absent.toml")


# --------------------------------------------------------------------------- bad environment values


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        ({"GTIDSNAP_SOURCE_PORT": "abc"}, ["GTIDSNAP_SOURCE_PORT='abc' is not a valid integer"]),
        ({"GTIDSNAP_SOURCE_PORT": "3306.0"}, ["GTIDSNAP_SOURCE_PORT='3306.0' is not a valid integer"]),
        ({"GTIDSNAP_SOURCE_PORT": ""}, ["GTIDSNAP_SOURCE_PORT='' is not a valid integer"]),
        ({"GTIDSNAP_SOURCE_PORT": "0"}, ["GTIDSNAP_SOURCE_PORT", "from 1 to 65535", "got 0"]),
        ({"GTIDSNAP_SINK_CHANGELOG": "maybe"}, ["GTIDSNAP_SINK_CHANGELOG='maybe' is not a boolean"]),
        ({"GTIDSNAP_SINK_CHANGELOG": "2"}, ["GTIDSNAP_SINK_CHANGELOG='2' is not a boolean"]),
        (
            {"GTIDSNAP_BINLOG_HEARTBEAT_S": "fast"},
            ["GTIDSNAP_BINLOG_HEARTBEAT_S='fast' is not a valid number"],
        ),
        ({"GTIDSNAP_BINLOG_HEARTBEAT_S": "nan"}, ["GTIDSNAP_BINLOG_HEARTBEAT_S=nan", "finite number"]),
        ({"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "0"}, ["GTIDSNAP_SNAPSHOT_CHUNK_SIZE", "1 to 10000000", "got 0"]),
        ({"GTIDSNAP_SNAPSHOT_READERS": "-1"}, ["GTIDSNAP_SNAPSHOT_READERS", "from 0 to 64", "got -1"]),
        ({"GTIDSNAP_SNAPSHOT_READERS": "two"}, ["GTIDSNAP_SNAPSHOT_READERS='two' is not a valid integer"]),
        ({"GTIDSNAP_SNAPSHOT_READERS": "1.5"}, ["GTIDSNAP_SNAPSHOT_READERS='1.5' is not a valid integer"]),
        ({"GTIDSNAP_SOURCE_CONNECT_TIMEOUT_S": "0"}, ["GTIDSNAP_SOURCE_CONNECT_TIMEOUT_S", "from 0.1"]),
        ({"GTIDSNAP_SINK_TYPE": "csv"}, ["GTIDSNAP_SINK_TYPE", "must be jsonl or delta", "'csv'"]),
        ({"GTIDSNAP_SOURCE_TLS": "required"}, ["GTIDSNAP_SOURCE_TLS='required'", "needs source.ca"]),
        (
            {"GTIDSNAP_CAPTURE_TABLES": "shop.a,mysql.user"},
            ["GTIDSNAP_CAPTURE_TABLES", "system schema mysql"],
        ),
        ({"GTIDSNAP_CAPTURE_TABLES": "[1"}, ["GTIDSNAP_CAPTURE_TABLES='[1' is not a valid JSON array"]),
        ({"GTIDSNAP_CAPTURE_TABLES": "[1]"}, ["GTIDSNAP_CAPTURE_TABLES=1 is not a string"]),
        (
            {"GTIDSNAP_CAPTURE_SURROGATE_KEYS": '{"shop.log": ["id"]}'},
            ["GTIDSNAP_CAPTURE_SURROGATE_KEYS cannot be set from the environment", "config file"],
        ),
        (
            {"GTIDSNAP_SOURCE_PASSWORD_FILE": "/nonexistent/pw"},
            ["GTIDSNAP_SOURCE_PASSWORD_FILE", "cannot read the password file", "/nonexistent/pw"],
        ),
    ],
)
def test_bad_environment_value_is_named(env: dict[str, str], fragments: list[str]) -> None:
    # with the password variable set the password file is not read, so leave it out for that case
    text = refused(None, env, password="GTIDSNAP_SOURCE_PASSWORD_FILE" not in env)
    assert all(f in text for f in fragments), text


# --------------------------------------------------------------------------- bad flag values


@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        ({"snapshot.chunk_size": 0}, ["flag snapshot.chunk_size", "from 1 to 10000000", "got 0"]),
        ({"snapshot.chunk_size": "10"}, ["flag snapshot.chunk_size = '10' is not an integer"]),
        ({"snapshot.readers": -1}, ["flag snapshot.readers must be from 0 to 64, got -1"]),
        ({"snapshot.readers": 2.0}, ["flag snapshot.readers = 2.0 is not an integer"]),
        ({"source.port": True}, ["flag source.port = True is not an integer"]),
        ({"sink.changelog": "false"}, ["flag sink.changelog = 'false' is not a boolean"]),
        ({"checkpoint.path": ""}, ["flag checkpoint.path", "must not be empty"]),
        ({"nope.x": 1}, ["unknown setting nope.x"]),
        ({"source.password": PASSWORD}, ["unknown setting source.password"]),
    ],
)
def test_bad_flag_value_is_named(flags: dict[str, Any], fragments: list[str]) -> None:
    text = refused(None, flags=flags)
    assert all(f in text for f in fragments), text


# --------------------------------------------------------------------------- good values, layered


def test_toml_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[source]\nhost = "10.0.0.5"\nport = 3307\nconnect_timeout_s = 3\n'
        "[snapshot]\nchunk_size = 10\nchunk_delay_ms = 5\n"
        '[sink]\ntype = "Delta"\nchangelog = false\npath = "from-file"\n'
        '[signals]\nbootstrap = "k:9092"\n',
    )
    env = {
        "GTIDSNAP_SOURCE_PORT": "3308",
        "GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20",
        "GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS": "2.5",
        "GTIDSNAP_SINK_CHANGELOG": "YES",
        "GTIDSNAP_SINK_TYPE": "delta",
        "GTIDSNAP_SIGNALS_BOOTSTRAP": "env:9092",
        "GTIDSNAP_SOURCE_STATEMENT_TIMEOUT_S": "7.5",
    }
    cfg = load_config(path, env, {"snapshot.chunk_size": 30, "sink.path": "from-flag", "source.port": None})
    assert cfg.source.host == "10.0.0.5" and cfg.source.port == 3308
    assert cfg.source.connect_timeout == 3.0 and cfg.source.statement_timeout == 7.5
    assert cfg.snapshot == SnapshotSettings(chunk_size=30, chunk_delay_s=0.0025)
    assert cfg.sink.type == "delta" and cfg.sink.changelog is True and cfg.sink.path == "from-flag"
    assert cfg.signals.bootstrap == "env:9092"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[("1", True), ("true", True), ("TRUE", True), ("Yes", True), (" on ", True)],
        *[("0", False), ("false", False), ("No", False), ("OFF", False)],
    ],
)
def test_environment_booleans(text: str, value: bool) -> None:
    env = {"GTIDSNAP_SINK_CHANGELOG": text, "GTIDSNAP_SINK_TYPE": "delta"}
    assert load_config(None, env).sink.changelog is value


@pytest.mark.parametrize("text", ["shop.a, shop.b,,shop.a", '["shop.a", "shop.b"]'])
def test_environment_lists(text: str) -> None:
    cfg = load_config(None, {"GTIDSNAP_CAPTURE_TABLES": text})
    assert cfg.tables == (TableId("shop", "a"), TableId("shop", "b"))


def test_unknown_gtidsnap_variables_are_not_ours() -> None:
    env = {"GTIDSNAP_STATE_DIR": "/x", "GTIDSNAP_DELTA_JARS": "a.jar", "GTIDSNAP_TEST_CRASH_AT": "x"}
    assert load_config(None, env) == load_config(None, {})


def test_surrogate_keys_and_tables(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            '[capture]\ntables = ["shop.orders", "shop.orders", "shop.log"]\n'
            'surrogate_keys = { "shop.log" = ["ts", "host"] }\n',
        ),
        {},
    )
    assert cfg.tables == (TableId("shop", "orders"), TableId("shop", "log"))
    assert cfg.surrogate_keys == {TableId("shop", "log"): ("ts", "host")}


def test_readers_from_toml_environment_and_flag(tmp_path: Path) -> None:
    path = write(tmp_path, "[snapshot]\nreaders = 3\n")
    assert load_config(path, {}).snapshot.readers == 3
    assert load_config(path, {"GTIDSNAP_SNAPSHOT_READERS": " 5 "}).snapshot.readers == 5
    assert (
        load_config(path, {"GTIDSNAP_SNAPSHOT_READERS": "5"}, {"snapshot.readers": 7}).snapshot.readers == 7
    )
    assert load_config(None, {"GTIDSNAP_SNAPSHOT_READERS": "64"}).snapshot.readers == 64


def test_zero_readers_is_the_engine_thread(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "[snapshot]\nreaders = 0\n"), {}).snapshot.readers == 0
    assert load_config(None, {"GTIDSNAP_SNAPSHOT_READERS": "0"}).snapshot.readers == 0
    assert load_config(None, {}, {"snapshot.readers": 0}).snapshot.readers == 0


def test_readers_default_to_one_per_cpu_but_one(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = len(os.sched_getaffinity(0))
    expected = min(MAX_DEFAULT_READERS, cpus - 1)
    assert load_config(None, {}).snapshot.readers == expected
    assert SnapshotSettings().readers == DEFAULTS["snapshot"]["readers"] == expected
    for cpus, readers in ((1, 0), (2, 1), (4, 3), (9, 8), (96, MAX_DEFAULT_READERS)):
        monkeypatch.setattr(os, "sched_getaffinity", lambda _pid, n=cpus: set(range(n)))
        assert default_readers() == readers, cpus
        assert load_config(None, {}).snapshot.readers == readers


def test_int_is_a_number_for_float_settings(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[binlog]\nheartbeat_s = 2\n[checkpoint]\ninterval_s = 3\n"), {})
    assert cfg.heartbeat_s == 2.0 and isinstance(cfg.heartbeat_s, float)
    assert cfg.checkpoint_interval_s == 3.0


# --------------------------------------------------------------------------- defaults live once


def test_defaults_are_the_models() -> None:
    cfg = load_config(None, {})
    src, snap = SourceSection(), SnapshotSection()
    assert (cfg.source.host, cfg.source.port, cfg.source.user) == (src.host, src.port, src.user)
    assert cfg.snapshot.chunk_size == snap.chunk_size == DEFAULTS["snapshot"]["chunk_size"]
    assert cfg.snapshot.chunk_delay_s == snap.chunk_delay_ms / 1000
    assert cfg.snapshot.readers == snap.readers == DEFAULTS["snapshot"]["readers"]
    assert cfg.heartbeat_s == DEFAULTS["binlog"]["heartbeat_s"]
    assert cfg.sink == SinkSettings() and cfg.signals == SignalSettings()
    assert cfg.checkpoint_path == Path(DEFAULTS["checkpoint"]["path"])
    # a Config built in code has the same defaults as a loaded one
    assert Config(source=cfg.source) == cfg


def test_defaults_mapping_is_derived() -> None:
    for section, model in SECTIONS.items():
        for key, info in model.model_fields.items():
            default = info.get_default(call_default_factory=True)
            assert DEFAULTS[section][key] == default, (section, key)
            assert info.description, f"{section}.{key} has no description"


def test_connection_defaults_agree() -> None:
    plain = ConnectionSettings("h", 1, "u", Secret(""))
    source = SourceSection()
    assert plain.connect_timeout == source.connect_timeout_s == 10.0
    assert plain.statement_timeout == source.statement_timeout_s == 30.0
    assert plain.tls.value == source.tls


def test_code_built_forms_still_work(tmp_path: Path) -> None:
    cfg = Config(
        source=ConnectionSettings("127.0.0.1", 3306, "u", Secret("p")),
        tables=(TableId("s", "t"),),
        snapshot=SnapshotSettings(chunk_size=100),
        heartbeat_s=0.5,
        sink=SinkSettings(type="jsonl", path="x"),
        checkpoint_path=tmp_path / "cp.json",
        checkpoint_interval_s=0.2,
    )
    delta = SinkSettings(type="delta", path=str(tmp_path), app_id="test-app", batch_ms=4000)
    changed = dataclasses.replace(
        cfg, sink=delta, snapshot=dataclasses.replace(cfg.snapshot, chunk_delay_s=0.1)
    )
    assert changed.sink.batch_ms == 4000 and changed.snapshot == SnapshotSettings(
        chunk_size=100, chunk_delay_s=0.1
    )
    assert SignalSettings(bootstrap="k:1", topic="t", connector="c").group == ""


# --------------------------------------------------------------------------- secrets


def test_password_never_printed(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    cfg = load_config(write(tmp_path, f'[source]\npassword_file = "{tmp_path / "pw"}"\n'), {})
    assert cfg.source.password.reveal() == PASSWORD
    for text in (repr(cfg), str(cfg), repr(cfg.source), str(cfg.source), cfg.source.describe()):
        assert PASSWORD not in text
    from_env = load_config(None, {"GTIDSNAP_SOURCE_PASSWORD": PASSWORD})
    assert from_env.source.password.reveal() == PASSWORD and PASSWORD not in repr(from_env)


def test_password_file_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "pw").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="is not UTF-8"):
        load_config(write(tmp_path, f'[source]\npassword_file = "{tmp_path / "pw"}"\n'), {})


# --------------------------------------------------------------------------- timeouts reach PyMySQL


def test_fractional_connect_timeout_reaches_pymysql(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[source]\nconnect_timeout_s = 0.5\n"), {})
    kwargs = cfg.source.pymysql_kwargs()
    assert kwargs["connect_timeout"] == 0.5
    with socket.socket() as probe:  # a port nobody listens on: bound, then released
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kwargs.update(host="127.0.0.1", port=port)
    with pytest.raises(pymysql.err.OperationalError):  # not the ValueError int(0.5) == 0 caused
        pymysql.connect(**kwargs)


# --------------------------------------------------------------------------- table names


@pytest.mark.parametrize("schema", [*sorted(SYSTEM_SCHEMAS), "MySQL", "PERFORMANCE_SCHEMA"])
def test_system_schemas_refused_by_name(schema: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_table_name(f"{schema}.t", "--snapshot")
    assert str(err.value) == (
        f"--snapshot: {schema}.t is in the system schema {schema}, which gtidsnap does not capture"
    )


def test_parse_table_name() -> None:
    assert parse_table_name("shop.orders", "x") == TableId("shop", "orders")
    assert parse_table_name("mysqlx.t", "x") == TableId("mysqlx", "t")
    with pytest.raises(ConfigError, match=r"^where: table 'orders' must be written schema\.table$"):
        parse_table_name("orders", "where")


def test_mirror_job_needs_every_record_in_the_changelogs(tmp_path: Path) -> None:
    job = '[sink]\ntype = "delta"\nmirror = "JOB"\n'
    assert load_config(write(tmp_path, job), {}).sink.mirror == "job"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, job + "changelog_snapshot_rows = false\n"), {})
    assert str(err.value).startswith(f"{tmp_path / 'gtidsnap.toml'}: sink.changelog_snapshot_rows = false")
    assert "sink.mirror = job" in str(err.value)
    with pytest.raises(ConfigError, match=r"^GTIDSNAP_SINK_CHANGELOG=false but sink\.mirror = job"):
        load_config(write(tmp_path, job), {"GTIDSNAP_SINK_CHANGELOG": "false"})
    with pytest.raises(ConfigError, match=r"sink\.mirror"):
        load_config(write(tmp_path, '[sink]\nmirror = "spark"\n'), {})


def test_spark_reader_pool_needs_readers(tmp_path: Path) -> None:
    spark = '[snapshot]\nreader_pool = "Spark"\nreaders = 3\n'
    snapshot = load_config(write(tmp_path, spark), {}).snapshot
    assert (snapshot.reader_pool, snapshot.readers) == ("spark", 3)
    assert load_config(write(tmp_path, ""), {}).snapshot.reader_pool == "processes"
    with pytest.raises(ConfigError, match=r"^GTIDSNAP_SNAPSHOT_READERS=0 but snapshot\.reader_pool = spark"):
        load_config(write(tmp_path, spark), {"GTIDSNAP_SNAPSHOT_READERS": "0"})
    with pytest.raises(ConfigError, match=r"snapshot\.reader_pool"):
        load_config(write(tmp_path, '[snapshot]\nreader_pool = "threads"\n'), {})


def test_source_hosts_are_the_replicas_in_order(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[source]\nhosts = ["10.0.0.2:3306", "[::1]:3307"]\nuser = "u"\ntls = "preferred"\n')
    cfg = load_config(path, env={})
    assert [(r.host, r.port) for r in cfg.replicas] == [("10.0.0.2", 3306), ("::1", 3307)]
    assert cfg.source == cfg.replicas[0] and all(
        r.user == "u" and r.tls is TlsMode.PREFERRED for r in cfg.replicas
    )
    assert cfg.retry_for_s == 30.0 and cfg.catch_up_timeout_s == 60.0


def test_source_hosts_from_the_environment() -> None:
    cfg = load_config(env={"GTIDSNAP_SOURCE_HOSTS": "127.0.0.1:33063, 127.0.0.1:33062"})
    assert [r.port for r in cfg.replicas] == [33063, 33062]


def test_one_host_is_the_only_replica() -> None:
    cfg = load_config(env={"GTIDSNAP_SOURCE_HOST": "10.0.0.9"})
    assert [(r.host, r.port) for r in cfg.replicas] == [("10.0.0.9", 3306)]


@pytest.mark.parametrize(
    ("env", "fragments"),
    [
        ({"GTIDSNAP_SOURCE_HOSTS": "127.0.0.1"}, ["GTIDSNAP_SOURCE_HOSTS", "'127.0.0.1' is not HOST:PORT"]),
        ({"GTIDSNAP_SOURCE_HOSTS": "127.0.0.1:0"}, ["is not HOST:PORT"]),
        ({"GTIDSNAP_SOURCE_HOSTS": "3306"}, ["'3306' is not HOST:PORT"]),
        (  # str.isdigit() and int() take fullwidth digits
            {"GTIDSNAP_SOURCE_HOSTS": "127.0.0.1:\uff13\uff13\uff10\uff16"},
            ["is not HOST:PORT", "ASCII digits"],
        ),
        ({"GTIDSNAP_SOURCE_HOSTS": "::1:3306"}, ["write an IPv6 address in brackets, e.g. [::1]:3306"]),
        (
            {"GTIDSNAP_SOURCE_HOSTS": "10.0.0.2:3306,127.0.0.1:1,10.0.0.2:3306"},
            ["GTIDSNAP_SOURCE_HOSTS", "'10.0.0.2:3306' names the replica '10.0.0.2:3306' again"],
        ),
        ({"GTIDSNAP_SOURCE_HOSTS": "DB:3306,db:3306"}, ["'db:3306' names the replica 'DB:3306' again"]),
        (
            {"GTIDSNAP_SOURCE_HOSTS": "127.0.0.1:3306", "GTIDSNAP_SOURCE_PORT": "3307"},
            ["GTIDSNAP_SOURCE_PORT and GTIDSNAP_SOURCE_HOSTS are both set"],
        ),
        ({"GTIDSNAP_SOURCE_RETRY_FOR_S": "0"}, ["GTIDSNAP_SOURCE_RETRY_FOR_S must be more than 0"]),
        ({"GTIDSNAP_SOURCE_CATCH_UP_TIMEOUT_S": "-1"}, ["GTIDSNAP_SOURCE_CATCH_UP_TIMEOUT_S must be from 0"]),
    ],
)
def test_bad_replica_settings_are_named(env: dict[str, str], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(env=env)
    assert all(f in str(raised.value) for f in fragments), str(raised.value)


@pytest.mark.parametrize(
    ("toml", "fragments"),
    [
        ('[source]\ntls = "verify_identity"\n', ["source.tls = 'verify_identity' needs source.ca"]),
        ('[source]\ntls = "preferred"\ncert = "{c}"\nkey = "{c}"\n', ["need source.tls = required or"]),
        ('[source]\ntls = "required"\nca = "{c}"\ncert = "{c}"\n', ["source.cert is set but source.key"]),
        ('[source]\ncert = "/nonexistent/c.pem"\n', ["source.cert", "cannot be read"]),
    ],
)
def test_tls_settings_that_do_not_go_together(
    tmp_path: Path, toml: str, fragments: list[str], pems: dict[str, Path]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml.replace("{c}", str(pems["cert"])))
    with pytest.raises(ConfigError) as raised:
        load_config(path, env={})
    assert all(f in str(raised.value) for f in fragments), str(raised.value)


def test_verify_identity_with_a_client_certificate(tmp_path: Path, pems: dict[str, Path]) -> None:
    pem, key = pems["cert"], pems["key"]
    path = tmp_path / "c.toml"
    path.write_text(f'[source]\ntls = "VERIFY_IDENTITY"\nca = "{pem}"\ncert = "{pem}"\nkey = "{key}"\n')
    source = load_config(path, env={}).source
    assert source.tls is TlsMode.VERIFY_IDENTITY and source.cert == pem and source.key == key


def test_a_metastore_server_is_named_by_its_thrift_uris(tmp_path: Path) -> None:
    """``sink.metastore_uris`` names a Hive metastore server for the tables' names: its Spark settings
    come with it (a hive catalog, the URIs, a warehouse beside the output); a URI that is not
    thrift://HOST:PORT, or a server named without ``metastore = "external"``, is refused by name."""
    from gtidsnap.sinks.delta.catalog_names import catalog_spark_conf

    text = '[sink]\ntype = "delta"\npath = "/data/cdc"\ndatabase = "{db}"\nmetastore = "external"\n'
    good = write(tmp_path, text + 'metastore_uris = "thrift://127.0.0.1:39083"\n')
    config = load_config(good, {"GTIDSNAP_SOURCE_PASSWORD": PASSWORD})
    conf, options = catalog_spark_conf(config.sink, "/data/cdc")
    assert conf == {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": "thrift://127.0.0.1:39083",
        "spark.sql.warehouse.dir": "/data/cdc/_gtidsnap_catalog/warehouse",
    }
    assert options == []
    bad = write(tmp_path, text + 'metastore_uris = "127.0.0.1:39083"\n', "bad.toml")
    assert "sink.metastore_uris" in refused(bad) and "thrift://HOST:PORT" in refused(bad)
    embedded = write(
        tmp_path, text.replace("external", "embedded") + 'metastore_uris = "thrift://h:1"\n', "e.toml"
    )
    assert 'set sink.metastore = "external"' in refused(embedded)


# ------------------------------------------------------------------ issue 56: what passed and should not


def test_every_duration_has_a_floor_and_a_ceiling() -> None:
    """A wait of 1e-9 s spins its thread (owner_lease_s = 0.0001: 5.7 CPU-s in 10 idle seconds); one past
    ~49 days raises OverflowError in it (1e400 is refused as not finite already)."""
    for section, model in SECTIONS.items():
        for key, info in model.model_fields.items():
            if not key.endswith(("_s", "_ms")):
                continue
            bounds = {
                name
                for item in info.metadata
                for name in ("gt", "ge", "le", "lt")
                if getattr(item, name, None) is not None
            }
            assert bounds & {"gt", "ge"} and bounds & {"le", "lt"}, (
                f"{section}.{key} is not bounded: {bounds}"
            )


@pytest.mark.parametrize(
    ("toml", "fragments"),
    [
        ('[sink]\ntype = "delta"\ndatabase = "my db"\n', ["sink.database", "'my db'", "no spaces, dots"]),
        ('[sink]\ntype = "delta"\ndatabase = "cdc;drop"\n', ["sink.database", "is not a name"]),
        ('[sink]\ntype = "delta"\ndatabase = "a..b"\n', ["sink.database", "is not a name"]),
        ('[sink]\ntype = "delta"\ndatabase = "a.b"\n', ["sink.database", "is not a name"]),
        ('[sink]\ntype = "delta"\ndatabase = "{db}.x"\n', ["sink.database", "is not a name"]),
        ('[sink]\ntype = "delta"\ndatabase = "{schema}"\n', ["sink.database", "not a name template"]),
        ('[sink]\ntype = "delta"\ndatabase = "cdc"\ntable_name = "{table} x"\n', ["sink.table_name"]),
        ('[sink]\ntype = "delta"\ncatalog = "spark catalog"\n', ["sink.catalog", "is not a catalog name"]),
        ('[sink]\ntype = "delta"\ncatalog = "a.b"\n', ["sink.catalog", "is not a catalog name"]),
    ],
)
def test_catalog_names_a_metastore_would_refuse_are_refused(
    tmp_path: Path, toml: str, fragments: list[str]
) -> None:
    text = refused(write(tmp_path, toml))
    assert all(f in text for f in fragments), text


@pytest.mark.parametrize("database", ["{db}", "cdc", "cdc_{db}", "CDC2"])
def test_catalog_names_that_a_metastore_takes(tmp_path: Path, database: str) -> None:
    sink = load_config(write(tmp_path, f'[sink]\ntype = "delta"\ndatabase = "{database}"\n'), {}).sink
    assert sink.database == database


@pytest.mark.parametrize(
    ("toml", "env", "fragments"),
    [
        (
            '[sink]\ndatabase = "{db}"\n',
            {},
            ["sink.database = '{db}' is a setting of a Delta output", "jsonl"],
        ),
        (
            "",
            {"GTIDSNAP_SINK_BATCH_MS": "500"},
            ["GTIDSNAP_SINK_BATCH_MS=500 is a setting of a Delta output"],
        ),
        ("[sink]\nowner_lease_s = 60.0\n", {}, ["sink.owner_lease_s"]),
        ('[sink]\nspark_master = "local[4]"\n', {}, ["sink.spark_master", 'set sink.type = "delta"']),
    ],
)
def test_a_delta_setting_on_a_json_lines_output_is_refused(
    tmp_path: Path, toml: str, env: dict[str, str], fragments: list[str]
) -> None:
    text = refused(write(tmp_path, toml), env)
    assert all(f in text for f in fragments), text


def test_spark_settings_serve_spark_chunk_readers_on_a_json_lines_output(tmp_path: Path) -> None:
    toml = '[snapshot]\nreader_pool = "spark"\nreaders = 2\n[sink]\nspark_master = "local[4]"\n'
    assert load_config(write(tmp_path, toml), {}).sink.spark_master == "local[4]"


@pytest.mark.parametrize(
    ("toml", "fragments"),
    [
        (
            '[signals]\nnotifications_topic = "answers"\n',
            ["notifications_topic = 'answers' needs signals.bootstrap"],
        ),
        (
            '[signals]\nbootstrap = "k:9092"\nnotifications_topic = "gtidsnap-signals"\n',
            ["is the signal topic (signals.topic)", "its own answers as signals"],
        ),
        (
            '[signals]\nbootstrap = "k:9092"\ntopic = "s"\nnotifications_topic = "s"\n',
            ["notifications_topic = 's' is the signal topic"],
        ),
    ],
)
def test_notifications_need_brokers_and_a_topic_of_their_own(
    tmp_path: Path, toml: str, fragments: list[str]
) -> None:
    text = refused(write(tmp_path, toml))
    assert all(f in text for f in fragments), text


@pytest.mark.parametrize(
    ("conf", "metastore", "fragments"),
    [
        ({"spark.master": "local[8]"}, "embedded", ["spark.master", "sink.spark_master instead"]),
        ({"spark.sql.extensions": "x.Y"}, "embedded", ["Delta's SQL extension", "io.delta.sql."]),
        (
            {"spark.sql.catalog.spark_catalog": "x.Cat"},
            "external",
            ["replaces Delta's catalog", "sink.catalog"],
        ),
        ({"spark.sql.session.timeZone": "Europe/Paris"}, "embedded", ["UTC"]),
        ({"spark.jars.packages": "a:b:1"}, "external", ["download jars"]),
        (
            {"spark.sql.warehouse.dir": "/etc/x"},
            "embedded",
            ["spark.sql.warehouse.dir", 'metastore = "external"'],
        ),
        ({"spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:x"}, "embedded", ["embedded metastore"]),
    ],
)
def test_spark_conf_that_breaks_gtidsnaps_session_is_refused(
    tmp_path: Path, conf: dict[str, str], metastore: str, fragments: list[str]
) -> None:
    items = ", ".join(f'"{k}" = "{v}"' for k, v in conf.items())
    toml = f'[sink]\ntype = "delta"\nmetastore = "{metastore}"\nspark_conf = {{ {items} }}\n'
    text = refused(write(tmp_path, toml))
    assert all(f in text for f in fragments) and text.startswith(
        f"{tmp_path / 'gtidsnap.toml'}: sink.spark_conf"
    ), text


@pytest.mark.parametrize(
    "conf",
    [
        {"spark.hadoop.hive.metastore.uris": "thrift://10.0.0.5:9083"},  # an external metastore's address
        {"spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension,x.Y"},
        {"spark.sql.shuffle.partitions": "16", "spark.jars": "/opt/hadoop-aws.jar"},
    ],
)
def test_spark_conf_gtidsnap_can_work_with_passes(tmp_path: Path, conf: dict[str, str]) -> None:
    items = ", ".join(f'"{k}" = "{v}"' for k, v in conf.items())
    toml = f'[sink]\ntype = "delta"\nspark_conf = {{ {items} }}\n'
    assert load_config(write(tmp_path, toml), {}).sink.spark_conf == conf
    external = toml.replace("spark_conf", 'metastore = "external"\nspark_conf', 1)
    assert load_config(write(tmp_path, external + ""), {}).sink.spark_conf == conf


@pytest.mark.parametrize(
    ("listen", "ok"),
    [
        ("[::1]:9108", True),
        ("127.0.0.1:0", True),
        ("::1:9108", False),
        ("127.0.0.1:\uff19\uff11\uff10\uff18", False),
        ("9108", False),
    ],
)
def test_metrics_listen_addresses(listen: str, ok: bool) -> None:
    env = {"GTIDSNAP_METRICS_LISTEN": listen}
    if ok:
        assert load_config(None, env).metrics.listen == listen
    else:
        assert "GTIDSNAP_METRICS_LISTEN" in refused(None, env)
