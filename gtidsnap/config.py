"""One typed configuration: a TOML file, overridden by ``GTIDSNAP_*`` environment variables,
overridden by command-line flags.

Every setting is ``section.key`` in TOML and ``GTIDSNAP_SECTION_KEY`` in the environment, e.g.::

    [source]                          GTIDSNAP_SOURCE_HOST=127.0.0.1
    host = "127.0.0.1"                GTIDSNAP_SOURCE_PORT=3306
    port = 3306                       GTIDSNAP_SOURCE_PASSWORD=...   (or password_file)
    user = "gtidsnap"
    password_file = "/run/secrets/replica"
    tls = "disabled"                  # disabled | preferred | required (with ca)

    [capture]
    tables = ["shop.orders", "shop.customers"]
    surrogate_keys = { "shop.log" = ["ts", "host"] }

    [snapshot]
    chunk_size = 1024
    chunk_delay_ms = 0

    [binlog]
    heartbeat_s = 1.0
    server_id = 0                     # 0: a random id per run

    [sink]
    type = "jsonl"                    # jsonl | delta
    path = "gtidsnap-out/changes.jsonl"

    [checkpoint]
    path = "gtidsnap-out/checkpoint.json"
    interval_s = 1.0

    [signals]                         # optional: steer snapshots through a Kafka topic
    bootstrap = "127.0.0.1:9092"
    topic = "gtidsnap-signals"
    connector = "gtidsnap"            # the message key this instance answers to

The password is never read from the TOML file itself (files get committed): only from
``GTIDSNAP_SOURCE_PASSWORD`` or a ``password_file``. It is a :class:`Secret` and never printed.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gtidsnap.connection import ConnectionSettings, Secret, TlsMode
from gtidsnap.errors import ConfigError
from gtidsnap.model import TableId

DEFAULTS: dict[str, dict[str, Any]] = {
    "source": {
        "host": "127.0.0.1",
        "port": 3306,
        "user": "gtidsnap",
        "password_file": "",
        "tls": "disabled",
        "ca": "",
        "connect_timeout_s": 10.0,
    },
    "capture": {"tables": [], "surrogate_keys": {}},
    "snapshot": {"chunk_size": 1024, "chunk_delay_ms": 0},
    "binlog": {"heartbeat_s": 1.0, "server_id": 0},
    "sink": {
        "type": "jsonl",
        "path": "gtidsnap-out/changes.jsonl",
        "batch_rows": 200_000,
        "batch_ms": 1000,
        "spark_master": "local[2]",
        "changelog": True,
        "app_id": "",
    },
    "checkpoint": {"path": "gtidsnap-out/checkpoint.json", "interval_s": 1.0},
    "signals": {"bootstrap": "", "topic": "gtidsnap-signals", "connector": "gtidsnap", "group": ""},
}


@dataclass(frozen=True)
class SnapshotSettings:
    chunk_size: int = 1024
    chunk_delay_s: float = 0.0


@dataclass(frozen=True)
class SinkSettings:
    type: str = "jsonl"
    path: str = "gtidsnap-out/changes.jsonl"
    batch_rows: int = 200_000
    batch_ms: int = 1000
    spark_master: str = "local[2]"  # any Spark master URL
    changelog: bool = True  # delta: also append every record to a changelog table per source table
    app_id: str = ""  # delta: txnAppId of this instance's idempotent writes ("" = derived from the path)


@dataclass(frozen=True)
class SignalSettings:
    """The Kafka signal topic; ``bootstrap`` empty means no signal consumer."""

    bootstrap: str = ""
    topic: str = "gtidsnap-signals"
    connector: str = "gtidsnap"  # only messages whose key equals this are for this instance
    group: str = ""  # consumer group id ("" = gtidsnap-<connector>)


@dataclass(frozen=True)
class Config:
    """Everything a run needs, validated."""

    source: ConnectionSettings
    tables: tuple[TableId, ...] = ()
    surrogate_keys: Mapping[TableId, tuple[str, ...]] = field(default_factory=dict)
    snapshot: SnapshotSettings = SnapshotSettings()
    heartbeat_s: float = 1.0
    server_id: int = 0
    sink: SinkSettings = SinkSettings()
    checkpoint_path: Path = Path("gtidsnap-out/checkpoint.json")
    checkpoint_interval_s: float = 1.0
    signals: SignalSettings = SignalSettings()


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """TOML < environment < ``overrides`` (``{"section.key": value}``, from flags; None = not given)."""
    env = os.environ if env is None else env
    raw: dict[str, dict[str, Any]] = {s: dict(v) for s, v in DEFAULTS.items()}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        for section, values in data.items():
            if section not in raw or not isinstance(values, dict):
                raise ConfigError(f"{path}: unknown section [{section}]; known: {', '.join(raw)}")
            for key, value in values.items():
                if key == "password":
                    raise ConfigError(
                        f"{path}: [source] password is not read from files that get committed; "
                        "use GTIDSNAP_SOURCE_PASSWORD or password_file"
                    )
                if key not in raw[section]:
                    raise ConfigError(
                        f"{path}: unknown setting {section}.{key}; known: {', '.join(raw[section])}"
                    )
                raw[section][key] = value
    for section, values in raw.items():
        for key, default in values.items():
            name = f"GTIDSNAP_{section.upper()}_{key.upper()}"
            if name in env:
                values[key] = _from_env(name, env[name], default)
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        if section not in raw or key not in raw[section]:
            raise ConfigError(f"unknown setting {dotted}")
        raw[section][key] = value
    return _build(raw, env)


def _from_env(name: str, text: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            return text.lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
        if isinstance(default, list):
            return [t.strip() for t in text.split(",") if t.strip()]
        if isinstance(default, dict):
            raise ConfigError(f"{name} cannot be set from the environment; use the config file")
    except ValueError as exc:
        raise ConfigError(f"{name}={text!r} is not a valid {type(default).__name__}") from exc
    return text


def _password(source: Mapping[str, Any], env: Mapping[str, str]) -> Secret:
    if "GTIDSNAP_SOURCE_PASSWORD" in env:
        return Secret(env["GTIDSNAP_SOURCE_PASSWORD"])
    file = str(source.get("password_file") or "")
    if file:
        try:
            return Secret(Path(file).read_text(encoding="utf-8").rstrip("\r\n"))
        except OSError as exc:
            raise ConfigError(f"cannot read the password file {file}: {exc.strerror}") from exc
    return Secret("")


def _positive(name: str, value: Any, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} must be a number, got {value!r}") from exc
    if number < 0 or (kind is int and name.endswith("chunk_size") and number < 1):
        raise ConfigError(f"{name} must be positive, got {value!r}")
    return number


def _table(text: Any, where: str) -> TableId:
    try:
        return TableId.parse(str(text))
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _build(raw: Mapping[str, Mapping[str, Any]], env: Mapping[str, str]) -> Config:
    src = raw["source"]
    try:
        tls = TlsMode(str(src["tls"]).lower())
    except ValueError as exc:
        raise ConfigError(f"source.tls must be disabled, preferred or required, got {src['tls']!r}") from exc
    ca = Path(src["ca"]) if src["ca"] else None
    if tls is TlsMode.REQUIRED and ca is None:
        raise ConfigError(
            "source.tls = required needs source.ca, the CA certificate that signed the server's"
        )
    source = ConnectionSettings(
        host=str(src["host"]),
        port=_positive("source.port", src["port"], int),
        user=str(src["user"]),
        password=_password(src, env),
        tls=tls,
        ca=ca,
        connect_timeout=_positive("source.connect_timeout_s", src["connect_timeout_s"], float),
    )
    cap = raw["capture"]
    tables = tuple(dict.fromkeys(_table(t, "capture.tables") for t in cap["tables"]))
    surrogates = {
        _table(t, "capture.surrogate_keys"): tuple(cols) for t, cols in dict(cap["surrogate_keys"]).items()
    }
    sink_type = str(raw["sink"]["type"]).lower()
    if sink_type not in ("jsonl", "delta"):
        raise ConfigError(f"sink.type must be jsonl or delta, got {sink_type!r}")
    return Config(
        source=source,
        tables=tables,
        surrogate_keys=surrogates,
        snapshot=SnapshotSettings(
            chunk_size=_positive("snapshot.chunk_size", raw["snapshot"]["chunk_size"], int),
            chunk_delay_s=_positive("snapshot.chunk_delay_ms", raw["snapshot"]["chunk_delay_ms"], float)
            / 1000,
        ),
        heartbeat_s=_positive("binlog.heartbeat_s", raw["binlog"]["heartbeat_s"], float),
        server_id=_positive("binlog.server_id", raw["binlog"]["server_id"], int),
        sink=SinkSettings(
            type=sink_type,
            path=str(raw["sink"]["path"]),
            batch_rows=_positive("sink.batch_rows", raw["sink"]["batch_rows"], int),
            batch_ms=_positive("sink.batch_ms", raw["sink"]["batch_ms"], int),
            spark_master=str(raw["sink"]["spark_master"]),
            changelog=bool(raw["sink"]["changelog"]),
            app_id=str(raw["sink"]["app_id"]),
        ),
        signals=SignalSettings(
            bootstrap=str(raw["signals"]["bootstrap"]),
            topic=str(raw["signals"]["topic"]),
            connector=str(raw["signals"]["connector"]),
            group=str(raw["signals"]["group"]),
        ),
        checkpoint_path=Path(str(raw["checkpoint"]["path"])),
        checkpoint_interval_s=_positive("checkpoint.interval_s", raw["checkpoint"]["interval_s"], float),
    )
