"""One typed configuration: a TOML file, overridden by ``GTIDSNAP_*`` environment variables,
overridden by command-line flags.

Every setting is ``section.key`` in TOML and ``GTIDSNAP_SECTION_KEY`` in the environment, e.g.::

    [source]                          GTIDSNAP_SOURCE_HOST=127.0.0.1
    host = "127.0.0.1"                GTIDSNAP_SOURCE_PORT=3306
    port = 3306                       GTIDSNAP_SOURCE_PASSWORD=...   (or password_file)
    user = "gtidsnap"
    password_file = "/run/secrets/replica"
    tls = "disabled"                  # disabled | preferred | required (with ca)
    connect_timeout_s = 10.0
    statement_timeout_s = 30.0        # server-side limit of any one statement gtidsnap runs

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

Each setting is defined once, in the section models below (pydantic, strict): its type, default,
constraint and description. A value of the wrong type is refused, never coerced (``"false"`` is not
a boolean, ``33062.9`` not an integer), and the error is one line naming where the value came from
(the file and ``section.key``, the environment variable, or the flag), the value and what is expected.
Environment values are text, parsed by the field's type before the same strict validation.

The password is never read from the TOML file itself (files get committed): only from
``GTIDSNAP_SOURCE_PASSWORD`` or a ``password_file``. It is a :class:`Secret` and never printed.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from gtidsnap.connection import ConnectionSettings, Secret, TlsMode
from gtidsnap.errors import ConfigError
from gtidsnap.model import TableId

SYSTEM_SCHEMAS: frozenset[str] = frozenset({"mysql", "sys", "performance_schema", "information_schema"})
"""Schemas gtidsnap never captures (compared in lower case): the server's own bookkeeping."""

ENV_PREFIX = "GTIDSNAP_"
PASSWORD_ENV = "GTIDSNAP_SOURCE_PASSWORD"  # the one setting that lives outside the models (a secret)
_SHOW_MAX = 80  # longest value quoted in an error

# Defaults a ConnectionSettings built in code gets too: read from it, so they are written once.
_CONNECTION_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ConnectionSettings)}
# PyMySQL refuses a connect_timeout above a year (ValueError at connect time).
_PYMYSQL_MAX_CONNECT_TIMEOUT_S = 31_536_000


def _show(value: Any) -> str:
    """A value for an error message: its repr (one line), cut to ~80 characters."""
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else text[: _SHOW_MAX - 3] + "..."


def _plain(text: str) -> str:
    """A name as users write it, quoted only when it would not read as one short line."""
    return text if text.isprintable() and len(text) <= _SHOW_MAX else _show(text)


# --------------------------------------------------------------------------- table names


def _table_id(text: str) -> TableId:
    """``schema.table``, both parts non-empty and not a system schema; ValueError says what is wrong."""
    schema, dot, name = text.partition(".")
    if not dot or not schema or not name:
        raise ValueError(f"table {_show(text)} must be written schema.table")
    if schema.lower() in SYSTEM_SCHEMAS:
        raise ValueError(
            f"{_plain(text)} is in the system schema {_plain(schema)}, which gtidsnap does not capture"
        )
    return TableId(schema, name)


def parse_table_name(text: str, where: str) -> TableId:
    """A configured table name, refused (ConfigError prefixed by ``where``) when malformed or system."""
    try:
        return _table_id(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _check_table_name(text: str) -> str:
    _table_id(text)
    return text


def _distinct_columns(columns: list[str]) -> list[str]:
    """A key that names a column twice is a typo, not a key."""
    for i, column in enumerate(columns):
        if column in columns[:i]:
            raise ValueError(f"the key names column {_plain(column)} twice")
    return columns


def _readable_ca(value: str) -> str:
    """An unreadable CA file would otherwise surface as an SSL traceback at the first connect."""
    if value:
        try:
            with open(value, "rb"):
                pass
        except OSError as exc:
            raise ValueError(f"the CA file {_show(value)} cannot be read: {exc.strerror}") from None
    return value


def _lower(value: Any) -> Any:
    """Choices are case-insensitive; other types pass through to be refused by strict validation."""
    return value.lower() if isinstance(value, str) else value


TableName = Annotated[str, AfterValidator(_check_table_name)]
ColumnName = Annotated[str, Field(min_length=1)]
SurrogateKey = Annotated[list[ColumnName], Field(min_length=1), AfterValidator(_distinct_columns)]
TlsName = Literal["disabled", "preferred", "required"]
SinkType = Literal["jsonl", "delta"]
MirrorKeeper = Literal["gtidsnap", "job"]


# --------------------------------------------------------------------------- the settings, once


class _Section(BaseModel):
    """Strict: a value of the wrong type is refused, never coerced; unknown keys are refused."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


class SourceSection(_Section):
    """``[source]``: the replica gtidsnap reads (the password comes from the environment or a file)."""

    host: str = Field(default="127.0.0.1", min_length=1, description="the replica's host name or address")
    port: int = Field(default=3306, ge=1, le=65535, description="the replica's TCP port")
    user: str = Field(default="gtidsnap", description="the read-only user gtidsnap logs in as")
    password_file: str = Field(
        default="",
        description=f"a file holding the password ({PASSWORD_ENV} wins; empty: no file)",
    )
    tls: Annotated[TlsName, BeforeValidator(_lower)] = Field(
        default=_CONNECTION_DEFAULTS["tls"].value,
        description="disabled: plain TCP; preferred: TLS if offered, unverified; required: verified by ca",
    )
    ca: Annotated[str, AfterValidator(_readable_ca)] = Field(
        default="",
        description="the CA certificate file that signed the server's certificate (needed by tls=required)",
    )
    connect_timeout_s: float = Field(
        default=_CONNECTION_DEFAULTS["connect_timeout"],
        gt=0,
        le=_PYMYSQL_MAX_CONNECT_TIMEOUT_S,
        description="seconds to wait for a connection to the replica",
    )
    statement_timeout_s: float = Field(
        default=_CONNECTION_DEFAULTS["statement_timeout"],
        gt=0,
        description="the longest any statement gtidsnap runs on the replica may take (server-side limit); "
        "a snapshot whose chunk SELECT takes longer fails, streaming goes on",
    )


class CaptureSection(_Section):
    """``[capture]``: which tables are streamed, and keys for tables without a primary key."""

    tables: list[TableName] = Field(
        default_factory=list, description="tables streamed even without a snapshot, each schema.table"
    )
    surrogate_keys: dict[TableName, SurrogateKey] = Field(
        default_factory=dict,
        description='key columns of tables without a primary key: { "schema.table" = ["col", ...] }',
    )


class SnapshotSection(_Section):
    """``[snapshot]``: how snapshots read a table."""

    chunk_size: int = Field(default=1024, ge=1, description="rows per chunk SELECT")
    chunk_delay_ms: float = Field(
        default=0.0, ge=0, description="pause between chunks, to spare a busy replica (milliseconds)"
    )


class BinlogSection(_Section):
    """``[binlog]``: the binlog connection."""

    heartbeat_s: float = Field(
        default=1.0, gt=0, description="heartbeat period; an idle source's window closes within it"
    )
    server_id: int = Field(
        default=0, ge=0, le=4_294_967_295, description="replication server id (0: a random id per run)"
    )


class SinkSettings(_Section):
    """``[sink]``: where records go (also the settings object the sinks receive)."""

    type: Annotated[SinkType, BeforeValidator(_lower)] = Field(
        default="jsonl", description="jsonl: one JSON object per line; delta: Delta Lake tables"
    )
    path: str = Field(
        default="gtidsnap-out/changes.jsonl",
        min_length=1,
        description="the JSON-lines file, or the root folder/URI of the Delta tables",
    )
    batch_rows: int = Field(default=100_000, ge=1, description="delta: most records per commit")
    batch_ms: int = Field(default=1000, ge=0, description="delta: a batch commits after this many ms")
    spark_master: str = Field(default="local[2]", min_length=1, description="delta: any Spark master URL")
    changelog: bool = Field(
        default=True, description="delta: also append every record to a changelog table per source table"
    )
    app_id: str = Field(
        default="", description="delta: txnAppId of this instance's idempotent writes (empty: from the path)"
    )
    changelog_snapshot_rows: bool = Field(
        default=True,
        description="delta: snapshot rows go to the changelog too (false: the mirror only, about half "
        "the cost of a snapshot)",
    )
    merge_interval_s: float = Field(
        default=15.0,
        ge=0,
        description="delta: longest wait of changes for the mirror's MERGE, the changelog holding them "
        "meanwhile (0, or no changelog: every batch)",
    )
    merge_rows: int = Field(
        default=100_000, ge=1, description="delta: the mirror MERGEs as soon as this many changes wait"
    )
    mirror: Annotated[MirrorKeeper, BeforeValidator(_lower)] = Field(
        default="gtidsnap",
        description="delta: who writes the mirror tables: gtidsnap, or job (spark/mirror_job.py on any "
        "Spark cluster merges them from the changelogs; gtidsnap writes the changelogs only)",
    )


class CheckpointSection(_Section):
    """``[checkpoint]``: where progress is kept, and how often it is saved."""

    path: str = Field(default="gtidsnap-out/checkpoint.json", min_length=1, description="the checkpoint file")
    interval_s: float = Field(default=1.0, gt=0, description="seconds between checkpoints")


class SignalSettings(_Section):
    """``[signals]``: the Kafka signal topic; ``bootstrap`` empty means no signal consumer."""

    bootstrap: str = Field(default="", description="Kafka HOST:PORT list (empty: no signals)")
    topic: str = Field(default="gtidsnap-signals", min_length=1, description="the signal topic")
    connector: str = Field(
        default="gtidsnap", min_length=1, description="only messages whose key equals this are for us"
    )
    group: str = Field(default="", description="consumer group id (empty: gtidsnap-<connector>)")


class Settings(_Section):
    """The whole file: one field per section."""

    source: SourceSection = Field(default_factory=SourceSection, description="the replica")
    capture: CaptureSection = Field(default_factory=CaptureSection, description="captured tables")
    snapshot: SnapshotSection = Field(default_factory=SnapshotSection, description="snapshot reads")
    binlog: BinlogSection = Field(default_factory=BinlogSection, description="the binlog connection")
    sink: SinkSettings = Field(default_factory=SinkSettings, description="the output")
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection, description="progress")
    signals: SignalSettings = Field(default_factory=SignalSettings, description="Kafka signals")


def _sections() -> dict[str, type[_Section]]:
    """The sections by name, read off Settings so that adding one there is all it takes."""
    found: dict[str, type[_Section]] = {}
    for name, info in Settings.model_fields.items():
        model = info.annotation
        if not (isinstance(model, type) and issubclass(model, _Section)):
            raise TypeError(f"Settings.{name} must be a section model")
        found[name] = model
    return found


SECTIONS: Mapping[str, type[_Section]] = _sections()
"""Section name -> its model, in the file's order."""
_DEFAULT = Settings()
DEFAULTS: Mapping[str, Mapping[str, Any]] = _DEFAULT.model_dump()
"""Every default, ``DEFAULTS[section][key]``: derived from the models, never a second copy."""


# --------------------------------------------------------------------------- what the code uses


@dataclass(frozen=True)
class SnapshotSettings:
    """The ``[snapshot]`` section in the engine's units (the delay in seconds); defaults from the model."""

    chunk_size: int = _DEFAULT.snapshot.chunk_size
    chunk_delay_s: float = _DEFAULT.snapshot.chunk_delay_ms / 1000


@dataclass(frozen=True)
class Config:
    """Everything a run needs, validated; the defaults are the models'."""

    source: ConnectionSettings
    tables: tuple[TableId, ...] = ()
    surrogate_keys: Mapping[TableId, tuple[str, ...]] = field(default_factory=dict)
    snapshot: SnapshotSettings = SnapshotSettings()
    heartbeat_s: float = _DEFAULT.binlog.heartbeat_s
    server_id: int = _DEFAULT.binlog.server_id
    sink: SinkSettings = _DEFAULT.sink
    checkpoint_path: Path = Path(_DEFAULT.checkpoint.path)
    checkpoint_interval_s: float = _DEFAULT.checkpoint.interval_s
    signals: SignalSettings = _DEFAULT.signals


# --------------------------------------------------------------------------- layering


@dataclass(frozen=True)
class _Origin:
    """Where a value came from, so its error sends the reader to the line to fix."""

    kind: Literal["file", "env", "flag", "default"]
    name: str = ""  # the file path or the environment variable

    def where(self, dotted: str) -> str:
        if self.kind == "file":
            return f"{self.name}: {dotted}"
        if self.kind == "env":
            return self.name
        if self.kind == "flag":
            return f"flag {dotted}"
        return dotted

    def assigned(self, dotted: str, value: Any) -> str:
        if self.kind == "env":
            return f"{self.name}={_show(value)}"
        return f"{self.where(dotted)} = {_show(value)}"


_Layer = dict[str, dict[str, Any]]
_Origins = dict[tuple[str, str], _Origin]


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """TOML < environment < ``overrides`` (``{"section.key": value}``, from flags; None = not given)."""
    env = os.environ if env is None else env
    merged: _Layer = {section: {} for section in SECTIONS}
    origins: _Origins = {}
    layers = [_file_layer(path)] if path is not None else []
    layers += [_env_layer(env), _flag_layer(overrides or {})]
    for values, origin_of in layers:  # later layers win, and so does their origin
        for section, keys in values.items():
            merged[section].update(keys)
        origins.update(origin_of)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError("; ".join(_problem(e, origins) for e in exc.errors())) from None
    return _build(settings, origins, env)


def _file_layer(path: Path) -> tuple[_Layer, _Origins]:
    """The TOML file's values, with unknown sections and settings refused by name."""
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (invalid byte at offset {exc.start})"
        ) from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"config file {path} is not valid TOML: {reason}") from None
    known_sections = ", ".join(f"[{s}]" for s in SECTIONS)
    layer: _Layer = {}
    for section, values in document.items():
        if section not in SECTIONS:
            if not isinstance(values, dict):
                raise ConfigError(
                    f"{path}: {_plain(section)} is outside any section; known sections: {known_sections}"
                )
            raise ConfigError(
                f"{path}: unknown section [{_plain(section)}]{_did_you_mean(section, SECTIONS)}; "
                f"known sections: {known_sections}"
            )
        if not isinstance(values, dict):
            raise ConfigError(
                f"{path}: {section} = {_show(values)} is not a table: "
                f"write [{section}] and its settings on the lines below"
            )
        fields = SECTIONS[section].model_fields
        for key, value in values.items():
            if section == "source" and key == "password":
                raise ConfigError(
                    f"{path}: [source] password is not read from files that get committed; "
                    f"use {PASSWORD_ENV} or password_file"
                )
            if key not in fields:
                raise ConfigError(
                    f"{path}: unknown setting {section}.{_plain(key)}{_did_you_mean(key, fields)}; "
                    f"known: {', '.join(fields)}"
                )
            layer.setdefault(section, {})[key] = value
    origin = _Origin("file", str(path))
    return layer, {(section, key): origin for section, keys in layer.items() for key in keys}


def _did_you_mean(name: str, known: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _env_name(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section.upper()}_{key.upper()}"


def _env_layer(env: Mapping[str, str]) -> tuple[_Layer, _Origins]:
    """``GTIDSNAP_SECTION_KEY`` values parsed by their field's type; other GTIDSNAP_* names are not ours."""
    layer: _Layer = {}
    origins: _Origins = {}
    for section, model in SECTIONS.items():
        for key, info in model.model_fields.items():
            name = _env_name(section, key)
            if name in env:
                layer.setdefault(section, {})[key] = _from_env(name, env[name], f"{section}.{key}", info)
                origins[(section, key)] = _Origin("env", name)
    return layer, origins


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _from_env(name: str, text: str, dotted: str, info: FieldInfo) -> Any:
    """Environment values are text: read each as its field's type, refusing what does not parse."""
    kind = info.annotation
    origin = get_origin(kind)
    if kind is bool:
        word = text.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ConfigError(f"{name}={_show(text)} is not a boolean: write 1/0, true/false, yes/no or on/off")
    if kind is int:
        if not _INTEGER.fullmatch(text.strip()):
            raise ConfigError(f"{name}={_show(text)} is not a valid integer")
        return int(text)
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"{name}={_show(text)} is not a valid number") from None
    if origin is dict:
        raise ConfigError(
            f"{name} cannot be set from the environment: {dotted} is a table keyed by schema.table; "
            "set it in the config file"
        )
    if origin is list:
        if text.lstrip().startswith("["):
            try:
                items = json.loads(text)
            except ValueError:
                items = None
            if not isinstance(items, list):
                raise ConfigError(f"{name}={_show(text)} is not a valid JSON array") from None
            return items
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def _flag_layer(overrides: Mapping[str, Any]) -> tuple[_Layer, _Origins]:
    layer: _Layer = {}
    for dotted, value in overrides.items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        if section not in SECTIONS or key not in SECTIONS[section].model_fields:
            raise ConfigError(f"unknown setting {_plain(dotted)} given as a flag")
        layer.setdefault(section, {})[key] = value
    origin = _Origin("flag")
    return layer, {(section, key): origin for section, keys in layer.items() for key in keys}


# --------------------------------------------------------------------------- errors, one line each

_NOT_A = {
    "bool_type": "a boolean",
    "int_type": "an integer",
    "float_type": "a number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a table",
    "model_type": "a table",
}
_BOUNDS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})
_LIST_HINT = {"tables": '["schema.table", ...]', "surrogate_keys": '["column", ...]'}


def _problem(error: ErrorDetails, origins: _Origins) -> str:
    """One pydantic error as one line: where the value came from, the value, what is expected."""
    loc = error["loc"]
    section, key = str(loc[0]), str(loc[1]) if len(loc) > 1 else ""
    sub = "".join(f"[{p}]" if isinstance(p, int) else f"[{p!r}]" for p in loc[2:] if p != "[key]")
    dotted = f"{section}.{key}{sub}" if key else section
    origin = origins.get((section, key), _Origin("default"))
    value, kind = error["input"], error["type"]
    if kind in _NOT_A:
        return f"{origin.assigned(dotted, value)} is not {_NOT_A[kind]}{_hint(kind, key, value, origin)}"
    if kind in _BOUNDS:
        info = SECTIONS[section].model_fields[key]
        return f"{origin.where(dotted)} must be {_bounds(info)}, got {_show(value)}"
    if kind == "literal_error":
        expected = str(error.get("ctx", {}).get("expected", "")).replace("'", "")
        return f"{origin.where(dotted)} must be {expected}, got {_show(value)}"
    if kind in ("too_short", "string_too_short"):
        return f"{origin.where(dotted)} must not be empty, got {_show(value)}"
    if kind == "value_error":
        return f"{origin.where(dotted)}: {error.get('ctx', {}).get('error', error['msg'])}"
    if kind == "extra_forbidden":
        return f"unknown setting {dotted}"
    return f"{origin.assigned(dotted, value)} is refused: {error['msg']}"


def _hint(kind: str, key: str, value: Any, origin: _Origin) -> str:
    """How to write it in TOML, where the mistake is a TOML spelling one."""
    if origin.kind != "file":
        return ""
    if kind == "bool_type":
        return ": write true or false (no quotes)"
    if kind in ("int_type", "float_type") and isinstance(value, bool):
        return ": write a number, not true or false"
    if kind in ("int_type", "float_type") and isinstance(value, str):
        return ": write it without quotes"
    if kind == "int_type" and isinstance(value, float):
        return ": write a whole number"
    if kind == "string_type":
        return ": write it in quotes"
    if kind == "list_type" and key in _LIST_HINT:
        return f": write {_LIST_HINT[key]}"
    if kind == "dict_type" and key == "surrogate_keys":
        return ': write { "schema.table" = ["column", ...] }'
    return ""


def _bounds(info: FieldInfo) -> str:
    """The accepted range in words, read from the field's own constraints."""
    found: dict[str, Any] = {}
    for item in info.metadata:
        for name in ("gt", "ge", "lt", "le"):
            if getattr(item, name, None) is not None:
                found[name] = getattr(item, name)
    ge, gt, le = found.get("ge"), found.get("gt"), found.get("le")
    if ge is not None and le is not None:
        return f"from {ge} to {le}"
    if gt is not None and le is not None:
        return f"more than {gt} and at most {le}"
    if gt == 0:
        return "positive (more than 0)"
    if ge == 1:
        return "positive (1 or more)"
    if ge is not None:
        return f"{ge} or more"
    if gt is not None:
        return f"more than {gt}"
    return f"at most {le}"


# --------------------------------------------------------------------------- building the Config


def _build(settings: Settings, origins: _Origins, env: Mapping[str, str]) -> Config:
    src = settings.source
    tls = TlsMode(src.tls)
    if tls is TlsMode.REQUIRED and not src.ca:
        origin = origins.get(("source", "tls"), _Origin("default"))
        raise ConfigError(
            f"{origin.assigned('source.tls', src.tls)} needs source.ca, "
            "the CA certificate file that signed the server's certificate"
        )
    source = ConnectionSettings(
        host=src.host,
        port=src.port,
        user=src.user,
        password=_password(src, env, origins),
        tls=tls,
        ca=Path(src.ca) if src.ca else None,
        connect_timeout=src.connect_timeout_s,
        statement_timeout=src.statement_timeout_s,
    )
    sink = settings.sink
    if sink.type == "delta" and sink.mirror == "job":
        for name, value in (
            ("changelog", sink.changelog),
            ("changelog_snapshot_rows", sink.changelog_snapshot_rows),
        ):
            if not value:
                origin = origins.get(("sink", name), _Origin("default"))
                said = origin.where("sink." + name) + ("=" if origin.kind == "env" else " = ")
                raise ConfigError(
                    f"{said}false but sink.mirror = job: the mirror job "
                    "builds the mirrors from the changelogs, which must then hold every record"
                )
    capture = settings.capture
    return Config(
        source=source,
        tables=tuple(dict.fromkeys(_table_id(t) for t in capture.tables)),
        surrogate_keys={_table_id(t): tuple(cols) for t, cols in capture.surrogate_keys.items()},
        snapshot=SnapshotSettings(
            chunk_size=settings.snapshot.chunk_size, chunk_delay_s=settings.snapshot.chunk_delay_ms / 1000
        ),
        heartbeat_s=settings.binlog.heartbeat_s,
        server_id=settings.binlog.server_id,
        sink=settings.sink,
        checkpoint_path=Path(settings.checkpoint.path),
        checkpoint_interval_s=settings.checkpoint.interval_s,
        signals=settings.signals,
    )


def _password(src: SourceSection, env: Mapping[str, str], origins: _Origins) -> Secret:
    """The environment's password, else the password file's first line; never shown in an error."""
    if PASSWORD_ENV in env:
        return Secret(env[PASSWORD_ENV])
    if not src.password_file:
        return Secret("")
    where = origins.get(("source", "password_file"), _Origin("default")).where("source.password_file")
    try:
        text = Path(src.password_file).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{where}: cannot read the password file {_show(src.password_file)}: {exc.strerror}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{where}: the password file {_show(src.password_file)} is not UTF-8 text"
        ) from None
    return Secret(text.rstrip("\r\n"))
