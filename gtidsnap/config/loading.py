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
    readers = 2                       # chunk reader processes; default one a CPU; 0 = on the engine's thread
    reader_pool = "processes"         # processes | spark (chunks read by Spark's executors)

    [binlog]
    heartbeat_s = 1.0
    server_id = 0                     # 0: a random id per run
    decoders = 1                      # row decoder processes; default one a CPU but one, at most 2

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
    notifications_topic = ""          # answers to each signal, with its id (empty: none)

    [metrics]                         # optional: /metrics, /healthz, /readyz over HTTP
    listen = "127.0.0.1:9108"         # empty (the default): no endpoint

Each setting is defined once, in the section models of :mod:`gtidsnap.config.settings` (pydantic, strict):
its type, default, constraint and description. A value of the wrong type is refused, never coerced
(``"false"`` is not a boolean, ``33062.9`` not an integer), and the error is one line naming where the
value came from (the file and ``section.key``, the environment variable, or the flag), the value and
what is expected (:mod:`gtidsnap.config.sources`). Environment values are text, parsed by the field's
type before the same strict validation.

The password is never read from the TOML file itself (files get committed): only from
``GTIDSNAP_SOURCE_PASSWORD`` or a ``password_file``. It is a :class:`Secret` and never printed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gtidsnap.config.settings import (
    DEFAULT_SETTINGS,
    DEFAULTS,
    PASSWORD_ENV,
    SECTIONS,
    CaptureSection,
    MetricsSection,
    Settings,
    SignalSettings,
    SinkSettings,
    SnapshotSection,
    SourceSection,
)
from gtidsnap.config.sources import Layer, Origin, Origins, env_layer, file_layer, flag_layer, problem_line
from gtidsnap.config.spark_conf import spark_conf_problem
from gtidsnap.config.values import parse_table_name, show_value, split_address, table_id_of
from gtidsnap.core.errors import ConfigError
from gtidsnap.core.model import TableId
from gtidsnap.source.connection import ConnectionSettings, Secret, TlsMode

__all__ = [  # the settings' models are defined in gtidsnap.config.settings; code reads them from here
    "DEFAULTS",
    "SECTIONS",
    "CaptureSection",
    "Config",
    "SignalSettings",
    "SinkSettings",
    "SnapshotSection",
    "SnapshotSettings",
    "SourceSection",
    "load_config",
    "parse_table_name",
]

# --------------------------------------------------------------------------- what the code uses


@dataclass(frozen=True)
class SnapshotSettings:
    """The ``[snapshot]`` section in the engine's units (the delay in seconds); defaults from the model
    (``readers``: one per CPU but one, see :func:`gtidsnap.config.cpus.default_readers`)."""

    chunk_size: int = DEFAULT_SETTINGS.snapshot.chunk_size
    chunk_delay_s: float = DEFAULT_SETTINGS.snapshot.chunk_delay_ms / 1000
    readers: int = DEFAULT_SETTINGS.snapshot.readers
    reader_pool: str = DEFAULT_SETTINGS.snapshot.reader_pool
    compiled_reads: bool = DEFAULT_SETTINGS.snapshot.compiled_reads
    # Not a [snapshot] key (for tests and programs that build a Config): seconds a chunk read may stay
    # with a reader process before it counts as stopped or hung and the readers are started again
    # (:class:`gtidsnap.snapshot.readers.ProcessChunkReaders`, at least ``MIN_HUNG_AFTER_S``); None: twice
    # the longest a read may take (source.statement_timeout_s and the socket's margin) plus 10 s.
    hung_after_s: float | None = None


@dataclass(frozen=True)
class Config:
    """Everything a run needs, validated; the defaults are the models'."""

    source: ConnectionSettings  # the preferred replica: the first of ``replicas``
    tables: tuple[TableId, ...] = ()
    surrogate_keys: Mapping[TableId, tuple[str, ...]] = field(default_factory=dict)
    snapshot: SnapshotSettings = SnapshotSettings()
    heartbeat_s: float = DEFAULT_SETTINGS.binlog.heartbeat_s
    server_id: int = DEFAULT_SETTINGS.binlog.server_id
    decoders: int = DEFAULT_SETTINGS.binlog.decoders  # binlog row decoder processes
    # Not a [binlog] key (for tests and programs that build a Config): seconds a decoder process may hold
    # a batch before it counts as stopped or hung and is replaced (None: the default, 20 s; from 1 s).
    decoder_hung_after_s: float | None = None
    sink: SinkSettings = DEFAULT_SETTINGS.sink
    checkpoint_path: Path = Path(DEFAULT_SETTINGS.checkpoint.path)
    checkpoint_interval_s: float = DEFAULT_SETTINGS.checkpoint.interval_s
    signals: SignalSettings = DEFAULT_SETTINGS.signals
    metrics: MetricsSection = DEFAULT_SETTINGS.metrics
    # source.hosts: every replica a run may use, in order of preference (empty: ``source`` alone)
    other_replicas: tuple[ConnectionSettings, ...] = ()
    retry_for_s: float = DEFAULT_SETTINGS.source.retry_for_s
    catch_up_timeout_s: float = DEFAULT_SETTINGS.source.catch_up_timeout_s
    retention_warn_s: float = DEFAULT_SETTINGS.source.retention_warn_s
    retention_check_s: float = DEFAULT_SETTINGS.source.retention_check_s

    @property
    def replicas(self) -> tuple[ConnectionSettings, ...]:
        """The replicas a run may read, the preferred first."""
        return (self.source, *self.other_replicas)


def load_config(
    path: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """TOML < environment < ``overrides`` (``{"section.key": value}``, from flags; None = not given)."""
    env = os.environ if env is None else env
    merged: Layer = {section: {} for section in SECTIONS}
    origins: Origins = {}
    layers = [file_layer(path)] if path is not None else []
    layers += [env_layer(env), flag_layer(overrides or {})]
    for values, origin_of in layers:  # later layers win, and so does their origin
        for section, keys in values.items():
            merged[section].update(keys)
        origins.update(origin_of)
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError("; ".join(problem_line(e, origins) for e in exc.errors())) from None
    return _build(settings, origins, env)


# --------------------------------------------------------------------------- building the Config


def _build(settings: Settings, origins: Origins, env: Mapping[str, str]) -> Config:
    src = settings.source
    tls = TlsMode(src.tls)
    origin = origins.get(("source", "tls"), Origin("default"))
    if tls.verifies and not src.ca:
        raise ConfigError(
            f"{origin.assigned('source.tls', src.tls)} needs source.ca, "
            "the CA certificate file that signed the server's certificate"
        )
    if (src.cert or src.key) and not tls.verifies:
        raise ConfigError(
            f"source.cert and source.key (a client certificate) need source.tls = required or "
            f"verify_identity, not {origin.assigned('source.tls', src.tls)}"
        )
    if bool(src.cert) != bool(src.key):
        given, missing = ("cert", "key") if src.cert else ("key", "cert")
        raise ConfigError(
            f"source.{given} is set but source.{missing} is not: a client certificate needs both"
        )
    if src.cert and src.key:
        _client_certificate(src.cert, src.key)
    source = ConnectionSettings(
        host=src.host,
        port=src.port,
        user=src.user,
        password=_password(src, env, origins),
        tls=tls,
        ca=Path(src.ca) if src.ca else None,
        cert=Path(src.cert) if src.cert else None,
        key=Path(src.key) if src.key else None,
        connect_timeout=src.connect_timeout_s,
        statement_timeout=src.statement_timeout_s,
    )
    replicas = _replicas(source, src, origins)
    sink = settings.sink
    _sink_keys(settings, origins)
    topic = origins.get(("signals", "notifications_topic"), Origin("default"))
    told = topic.assigned("signals.notifications_topic", settings.signals.notifications_topic)
    problem = notifications_problem(settings.signals, told)
    if problem is not None:
        raise ConfigError(problem)
    if sink.type == "delta" and sink.mirror == "job":
        for name, value in (
            ("changelog", sink.changelog),
            ("changelog_snapshot_rows", sink.changelog_snapshot_rows),
        ):
            origin = origins.get(("sink", name), Origin("default"))
            if name == "changelog_snapshot_rows" and origin.kind == "default":
                continue  # the mirror job's changelogs take snapshot rows unless told otherwise
            if not value:
                said = origin.where("sink." + name) + ("=" if origin.kind == "env" else " = ")
                raise ConfigError(
                    f"{said}false but sink.mirror = job: the mirror job "
                    "builds the mirrors from the changelogs, which must then hold every record"
                )
    if sink.metastore_uris and sink.metastore != "external":
        origin = origins.get(("sink", "metastore"), Origin("default"))
        said = origin.assigned("sink.metastore", sink.metastore)
        raise ConfigError(
            f'sink.metastore_uris names a metastore server but {said}: set sink.metastore = "external"'
        )
    if sink.type == "delta" and sink.history and not sink.changelog:
        said = origins.get(("sink", "changelog"), Origin("default")).where("sink.changelog")
        raise ConfigError(f"sink.history is on but {said} is false: the history is kept from the changelog")
    if settings.snapshot.reader_pool == "spark" and settings.snapshot.readers == 0:
        origin = origins.get(("snapshot", "readers"), Origin("default"))
        said = origin.where("snapshot.readers") + ("=" if origin.kind == "env" else " = ")
        raise ConfigError(
            f"{said}0 but snapshot.reader_pool = spark: readers is how many splits Spark's executors "
            "read at once; set it to 1 or more, or use reader_pool = processes"
        )
    capture = settings.capture
    return Config(
        source=replicas[0],
        other_replicas=replicas[1:],
        retry_for_s=src.retry_for_s,
        catch_up_timeout_s=src.catch_up_timeout_s,
        retention_warn_s=src.retention_warn_s,
        retention_check_s=src.retention_check_s,
        tables=tuple(dict.fromkeys(table_id_of(t) for t in capture.tables)),
        surrogate_keys={table_id_of(t): tuple(cols) for t, cols in capture.surrogate_keys.items()},
        snapshot=SnapshotSettings(
            chunk_size=settings.snapshot.chunk_size,
            chunk_delay_s=settings.snapshot.chunk_delay_ms / 1000,
            readers=settings.snapshot.readers,
            reader_pool=settings.snapshot.reader_pool,
            compiled_reads=settings.snapshot.compiled_reads,
        ),
        heartbeat_s=settings.binlog.heartbeat_s,
        server_id=settings.binlog.server_id,
        decoders=settings.binlog.decoders,
        sink=settings.sink,
        checkpoint_path=Path(settings.checkpoint.path),
        checkpoint_interval_s=settings.checkpoint.interval_s,
        signals=settings.signals,
        metrics=settings.metrics,
    )


def _replicas(
    source: ConnectionSettings, src: SourceSection, origins: Origins
) -> tuple[ConnectionSettings, ...]:
    """``source.hosts`` as connection settings (same account and TLS), or ``source`` alone; hosts given
    beside an explicit host or port are refused: which one wins would be a guess."""
    if not src.hosts:
        return (source,)
    for key in ("host", "port"):
        origin = origins.get(("source", key))
        if origin is not None:
            hosts = origins[("source", "hosts")].where("source.hosts")
            raise ConfigError(
                f"{origin.where('source.' + key)} and {hosts} are both set: give the replicas as "
                "source.hosts alone (HOST:PORT each, the first preferred), or one replica as host and port"
            )
    addresses = [split_address(h) for h in src.hosts]  # each one once (refused by the settings otherwise)
    return tuple(replace(source, host=host, port=port) for host, port in addresses)


def _client_certificate(cert: str, key: str) -> None:
    """The client certificate and its key, loaded as the first connect would load them."""
    import ssl

    try:
        ssl.create_default_context().load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(
            f"source.cert {show_value(cert)} and source.key {show_value(key)} are not a certificate and its "
            f"private key ({reason}): give the client certificate's PEM file and its unencrypted key"
        ) from None


# Settings of a Delta output (their descriptions start with "delta:"): a JSON-lines output has no use for
# them, so one set for it is a mistake (a config meant for another output, a wrong sink.type) to say.
DELTA_SETTINGS = tuple(
    name for name, info in SinkSettings.model_fields.items() if (info.description or "").startswith("delta:")
)
SPARK_SETTINGS = ("spark_master", "spark_conf")  # a Delta output's Spark, or the Spark chunk readers'


def _sink_keys(settings: Settings, origins: Origins) -> None:
    """Refuse a setting the configured output does not use, and ``sink.spark_conf`` keys that would
    break gtidsnap's own Spark session (:mod:`gtidsnap.config.spark_conf`)."""
    sink = settings.sink
    if sink.type != "delta":
        spark_readers = settings.snapshot.reader_pool == "spark"
        for name in (*DELTA_SETTINGS, "owner_lease_s", *SPARK_SETTINGS):
            origin = origins.get(("sink", name))
            if origin is None or (spark_readers and name in SPARK_SETTINGS):
                continue
            value = getattr(sink, name)
            raise ConfigError(
                f"{origin.assigned('sink.' + name, value)} is a setting of a Delta output, but sink.type = "
                f'{sink.type}: remove it, or set sink.type = "delta"'
            )
    where = origins.get(("sink", "spark_conf"), Origin("default")).where("sink.spark_conf")
    problem = spark_conf_problem(sink.spark_conf, sink.metastore, where)
    if problem is not None:
        raise ConfigError(problem)


def notifications_problem(signals: SignalSettings, said: str | None = None) -> str | None:
    """Why ``signals.notifications_topic`` cannot be used (None: it can, or is not set): notifications
    need the brokers, and a topic of their own (on the signal topic every answer would be read as a
    signal, refused and answered again, without end). ``said``: where it was set, and its value."""
    topic = signals.notifications_topic
    said = said or f"signals.notifications_topic = {show_value(topic)}"
    if topic and not signals.bootstrap:
        return f"{said} needs signals.bootstrap (the Kafka brokers it is on)"
    if topic and topic == signals.topic:
        return (
            f"{said} is the signal topic (signals.topic): gtidsnap would read its own answers as signals; "
            "give the notifications a topic of their own"
        )
    return None


def _password(src: SourceSection, env: Mapping[str, str], origins: Origins) -> Secret:
    """The environment's password, else the password file's first line; never shown in an error."""
    if PASSWORD_ENV in env:
        return Secret(env[PASSWORD_ENV])
    if not src.password_file:
        return Secret("")
    where = origins.get(("source", "password_file"), Origin("default")).where("source.password_file")
    try:
        text = Path(src.password_file).read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{where}: cannot read the password file {show_value(src.password_file)}: {exc.strerror}"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"{where}: the password file {show_value(src.password_file)} is not UTF-8 text"
        ) from None
    return Secret(text.rstrip("\r\n"))
