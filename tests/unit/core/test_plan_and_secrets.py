"""Config precedence and validation, secrets that never print, and the plan's typed-JSON keys."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.config.loading import load_config
from gtidsnap.core.errors import ConfigError
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext, TableProgress, decode_key, encode_key
from gtidsnap.source.connection import Secret, TlsMode


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gtidsnap.toml"
    path.write_text(text)
    return path


def test_toml_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[source]\nhost = "10.0.0.5"\nport = 3307\n[snapshot]\nchunk_size = 10\n'
        '[capture]\ntables = ["shop.orders", "shop.orders"]\n',
    )
    env = {
        "GTIDSNAP_SOURCE_PORT": "3308",
        "GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20",
        "GTIDSNAP_SOURCE_PASSWORD": "pw",
    }
    cfg = load_config(path, env, {"snapshot.chunk_size": 30, "source.user": None})
    assert cfg.source.host == "10.0.0.5" and cfg.source.port == 3308 and cfg.snapshot.chunk_size == 30
    assert cfg.source.user == "gtidsnap" and cfg.source.password.reveal() == "pw"
    assert cfg.tables == (TableId("shop", "orders"),)
    assert cfg.source.tls is TlsMode.DISABLED


def test_password_file_and_never_printed(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("s3cret-value\n")
    cfg = load_config(write(tmp_path, f'[source]\npassword_file = "{tmp_path / "pw"}"\n'), {})
    assert cfg.source.password.reveal() == "s3cret-value"
    for text in (repr(cfg), str(cfg), repr(cfg.source), cfg.source.describe()):
        assert "s3cret-value" not in text
    assert repr(Secret("x")) == "Secret('********')"


@pytest.mark.parametrize(
    ("toml", "env", "fragment"),
    [
        ('[source]\npassword = "x"\n', {}, "not read from files"),
        ("[nope]\na = 1\n", {}, "unknown section [nope]"),
        ("[source]\nhots = 1\n", {}, "unknown setting source.hots"),
        ("[source\n", {}, "not valid TOML"),
        ('[source]\ntls = "maybe"\n', {}, "source.tls must be"),
        ('[source]\ntls = "required"\n', {}, "needs source.ca"),
        ("", {"GTIDSNAP_SOURCE_PORT": "abc"}, "GTIDSNAP_SOURCE_PORT='abc' is not a valid int"),
        ("[snapshot]\nchunk_size = 0\n", {}, "snapshot.chunk_size must be from 1 to 10000000"),
        ('[capture]\ntables = ["orders"]\n', {}, "must be written schema.table"),
        ('[sink]\ntype = "csv"\n', {}, "sink.type must be jsonl or delta"),
        ('[source]\npassword_file = "/nonexistent/pw"\n', {}, "cannot read the password file"),
    ],
)
def test_bad_config_is_named(tmp_path: Path, toml: str, env: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, toml), env)
    assert fragment in str(err.value)


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.toml", {})


key_values = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.text(max_size=20),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.datetimes(),
    st.dates(),
    st.binary(max_size=16),
    st.none(),
    st.timedeltas(min_value=dt.timedelta(hours=-838), max_value=dt.timedelta(hours=838)).map(
        lambda d: dt.timedelta(seconds=round(d.total_seconds(), 6))
    ),
)


@given(st.lists(key_values, min_size=1, max_size=4).map(tuple))
def test_typed_keys_survive_json(key: tuple[object, ...]) -> None:
    back = decode_key(json.loads(json.dumps(encode_key(key))))
    assert back == key
    assert [type(v) for v in back or ()] == [type(v) for v in key]


def test_context_queue_stop_and_json_round_trip() -> None:
    a, b, c = TableId("s", "a"), TableId("s", "b"), TableId("s", "c")
    ctx = SnapshotContext().enqueue([a, b]).enqueue([b, c], condition="x = 1")
    assert [t.table for t in ctx.tables] == [a, b, c]
    ctx = ctx.update(
        TableProgress(a, max_key=(Decimal("9.5"),), last_key=(Decimal("1.5"),), started=True, rows=3)
    )
    assert ctx.current() is not None and ctx.current().rows == 3  # type: ignore[union-attr]
    assert SnapshotContext.from_json(json.loads(json.dumps(ctx.to_json()))) == ctx
    assert [t.table for t in ctx.stop([b]).tables] == [a, c]
    assert ctx.stop().tables == ()
