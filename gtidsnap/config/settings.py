"""Every setting of gtidsnap, defined once (pydantic, strict): the sections of the TOML file with each
key's type, default, constraint and description, and the table-name rules they use. How values are
layered (file < environment < flags) and told wrong is :mod:`gtidsnap.config.sources`; the validated
result the code uses is :class:`gtidsnap.config.loading.Config`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from gtidsnap.config.cpus import MAX_DEFAULT_READERS, default_readers, usable_cpus
from gtidsnap.config.values import (
    catalog_name,
    certificate_file,
    check_table_name,
    distinct_columns,
    distinct_hosts,
    listen_address,
    lower,
    name_template,
    readable_file,
    replica_address,
    thrift_uris,
)
from gtidsnap.source.connection import ConnectionSettings

"""Schemas gtidsnap never captures (compared in lower case): the server's own bookkeeping."""

ENV_PREFIX = "GTIDSNAP_"
PASSWORD_ENV = "GTIDSNAP_SOURCE_PASSWORD"  # the one setting that lives outside the models (a secret)

# Defaults a ConnectionSettings built in code gets too: read from it, so they are written once.
_CONNECTION_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(ConnectionSettings)}
MAX_READERS = 64  # most chunk reader processes (snapshot.readers)
# Server time settings gtidsnap sets, in seconds: below a millisecond MySQL's max_execution_time (and the
# binlog heartbeat period) round to 0, which means "no limit" ("no heartbeat"); above 2^32 ms they overflow.
MIN_SERVER_S = 0.001
MAX_SERVER_S = 4_294_967
MAX_CHUNK_DELAY_MS = 3_600_000  # an hour between chunks
MAX_CHUNK_SIZE = 10_000_000  # most rows a chunk (snapshot.chunk_size): far below what SQL's LIMIT carries
# Durations: every one has a floor (a loop that waits 1e-9 s spins) and a ceiling (a thread's wait past
# ~49 days raises OverflowError; nothing of gtidsnap's needs to wait longer than these).
HOUR_S, DAY_S = 3600, 86_400
MIN_LEASE_S = 3.0  # sink.owner_lease_s: renewed every third of it, so at most once a second


TableName = Annotated[str, AfterValidator(check_table_name)]
ColumnName = Annotated[str, Field(min_length=1)]
SurrogateKey = Annotated[list[ColumnName], Field(min_length=1), AfterValidator(distinct_columns)]
TlsName = Literal["disabled", "preferred", "required", "verify_identity"]
SinkType = Literal["jsonl", "delta"]
MirrorKeeper = Literal["gtidsnap", "job"]
Metastore = Literal["embedded", "external"]
ReaderPool = Literal["processes", "spark"]


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
    tls: Annotated[TlsName, BeforeValidator(lower)] = Field(
        default=_CONNECTION_DEFAULTS["tls"].value,
        description="disabled: plain TCP; preferred: TLS if offered, unverified; required: verified by ca; "
        "verify_identity: required, and the certificate must name the host",
    )
    ca: Annotated[str, AfterValidator(certificate_file)] = Field(
        default="",
        description="the CA certificate file that signed the server's certificate (needed by tls=required "
        "and verify_identity)",
    )
    cert: Annotated[str, AfterValidator(certificate_file)] = Field(
        default="", description="a client certificate file, for an account that REQUIRE X509 (with key)"
    )
    key: Annotated[str, AfterValidator(readable_file)] = Field(
        default="", description="the client certificate's private key file (with cert)"
    )
    connect_timeout_s: float = Field(
        default=_CONNECTION_DEFAULTS["connect_timeout"],
        ge=0.1,
        le=HOUR_S,
        description="seconds a connection to the replica may take, its handshake and first statements "
        "included (a host that accepts and never answers costs this much, then the next of hosts is tried)",
    )
    hosts: Annotated[
        list[Annotated[str, AfterValidator(replica_address)]], AfterValidator(distinct_hosts)
    ] = Field(
        default_factory=list,
        description="replicas of one primary as HOST:PORT, the first preferred; a run moves to the next "
        "that can serve its checkpoint when one is lost (empty: host and port)",
    )
    retry_for_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="seconds a lost replica is tried again before the next of hosts is (with one host: "
        "before the run fails)",
    )
    catch_up_timeout_s: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="seconds to wait for a replica behind the checkpoint to catch up before the next of "
        "hosts is tried",
    )
    retention_warn_s: float = Field(
        default=21_600.0,
        ge=0,
        le=MAX_SERVER_S,
        description="warn when the oldest binlog the checkpoint needs expires sooner than this (seconds)",
    )
    retention_check_s: float = Field(
        default=300.0,
        ge=1,
        le=DAY_S,
        description="how often a run measures its binlog retention headroom (seconds)",
    )
    statement_timeout_s: float = Field(
        default=_CONNECTION_DEFAULTS["statement_timeout"],
        ge=MIN_SERVER_S,
        le=MAX_SERVER_S,
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

    chunk_size: int = Field(
        default=1024,
        ge=1,
        le=MAX_CHUNK_SIZE,
        description="rows per chunk SELECT (a chunk's rows are held at once; the chunk-ends query "
        "asks for 8 chunks' keys)",
    )
    chunk_delay_ms: float = Field(
        default=0.0,
        ge=0,
        le=MAX_CHUNK_DELAY_MS,
        description="pause between chunks, to spare a busy replica (milliseconds)",
    )
    readers: int = Field(
        default_factory=default_readers,
        ge=0,
        le=MAX_READERS,
        description="chunk reader processes, each with its own connection (0: one reader on the "
        "engine's thread, pausing the stream one chunk at a time); default: one per CPU but one "
        "(0 on one), at most "
        f"{MAX_DEFAULT_READERS}; "
        "with reader_pool = spark: splits read at once by Spark's executors",
    )
    reader_pool: Annotated[ReaderPool, BeforeValidator(lower)] = Field(
        default="processes",
        description="where chunks are read: processes (local reader processes) or spark (each chunk "
        "a Spark task on sink.spark_master's executors; make chunk_size large, e.g. 100000)",
    )
    compiled_reads: bool = Field(
        default=True,
        description="read a Delta output's chunks into Arrow with a compiled client (connectorx) where "
        "it reads every column exactly; false: always the Python driver",
    )


class BinlogSection(_Section):
    """``[binlog]``: the binlog connection."""

    heartbeat_s: float = Field(
        default=1.0,
        ge=MIN_SERVER_S,
        le=MAX_SERVER_S,
        description="heartbeat period; an idle source's window closes within it",
    )
    server_id: int = Field(
        default=0, ge=0, le=4_294_967_295, description="replication server id (0: a random id per run)"
    )
    decoders: int = Field(
        default_factory=lambda: min(2, usable_cpus() - 1),
        ge=0,
        le=MAX_READERS,
        description="processes that decode the binlog's rows off the engine's thread (and, for jsonl, write "
        "their JSON; delta gets the values back); default: one per CPU but one (0 on one CPU), at most 2",
    )


class SinkSettings(_Section):
    """``[sink]``: where records go (also the settings object the sinks receive)."""

    type: Annotated[SinkType, BeforeValidator(lower)] = Field(
        default="jsonl", description="jsonl: one JSON object per line; delta: Delta Lake tables"
    )
    path: str = Field(
        default="gtidsnap-out/changes.jsonl",
        min_length=1,
        description="the JSON-lines file, or the root folder/URI of the Delta tables",
    )
    owner_lease_s: float = Field(
        default=30.0,
        ge=MIN_LEASE_S,
        le=HOUR_S,
        description="an output at a URI (s3a://...) is held by a lease renewed every third of this; a run "
        "that died is taken over once it runs out (a local output is locked by the OS instead)",
    )
    batch_rows: int = Field(default=100_000, ge=1, description="delta: most records per commit")
    batch_ms: int = Field(
        default=1000, ge=0, le=HOUR_S * 1000, description="delta: a batch commits after this many ms"
    )
    snapshot_batch_rows: int = Field(
        default=100_000,
        ge=1,
        description="delta: most snapshot rows in a batch (held as Arrow columns until it, ~100 B a "
        "row, then staged as one Parquet file a table): sized apart from batch_rows, which bounds the "
        "other records (Python objects, ~1 KB each); 100,000 read as fast as 300,000, the engine ~35 MB "
        "smaller",
    )
    snapshot_batch_ms: int = Field(
        default=5000,
        ge=0,
        le=HOUR_S * 1000,
        description="delta: while a snapshot is read, a batch commits after this many ms (or batch_rows): "
        "each commit costs the JVM about 0.5 CPU-s that the reading needs; streamed changes reach the "
        "changelog up to this much later meanwhile (never less than batch_ms)",
    )
    spark_master: str = Field(
        default="local[2]",
        min_length=1,
        description="any Spark master URL: the Delta sink's, and the executors of "
        "snapshot.reader_pool = spark",
    )
    changelog: bool = Field(
        default=True, description="delta: also append every record to a changelog table per source table"
    )
    app_id: str = Field(
        default="", description="delta: txnAppId of this instance's idempotent writes (empty: from the path)"
    )
    changelog_snapshot_rows: bool = Field(
        default=False,
        description="delta: snapshot rows go to the changelog too, with their batch (default: the mirror "
        "only, in large appends; with mirror = job always)",
    )
    snapshot_rows: int = Field(
        default=1_000_000,
        ge=1,
        description="delta: a table's staged snapshot rows go into its mirror in one append once this "
        "many wait (or none came for a few seconds, or at the end of the run)",
    )
    merge_interval_s: float = Field(
        default=15.0,
        ge=0,
        le=DAY_S,
        description="delta: longest wait of changes for the mirror's MERGE, the changelog holding them "
        "meanwhile; mirrors are updated in the background (0, or no changelog: by every batch itself, "
        "before its checkpoint)",
    )
    merge_rows: int = Field(
        default=100_000,
        ge=1,
        description="delta: the mirror MERGEs as soon as this many keys have changes waiting (the newest "
        "change of each key is kept)",
    )
    deletion_vectors: bool = Field(
        default=False,
        description="delta: mirrors are created with deletion vectors: a MERGE of changes spread over a "
        "large mirror then costs what it changes, not the files it touches (a JVM's first such MERGE "
        "costs seconds more; readers need Delta's deletionVectors feature: Delta 2.3+, delta-rs, Trino)",
    )
    cluster_by: list[str] = Field(
        default_factory=list,
        description='delta: liquid clustering of the mirrors gtidsnap creates ("key": the primary key, '
        "or column names); OPTIMIZE (spark/maintenance.py) clusters their files",
    )
    changelog_cluster_by: list[str] = Field(
        default_factory=list,
        description="delta: liquid clustering of the changelogs gtidsnap creates, e.g. _source_ts (by "
        "time: a reader of a day skips the other days' files once OPTIMIZE has clustered them)",
    )
    stats_columns: list[str] = Field(
        default_factory=list,
        description="delta: more columns with file statistics (beside the key, _seq and the mirror's "
        "_op), for readers that filter by them; tables created from then on",
    )
    history: bool = Field(
        default=False,
        description="delta: keep an SCD type 2 history table per source table (<table>.history) from its "
        "changelog, every merge_interval_s (the changelog then takes the snapshot rows too)",
    )
    database: Annotated[str, AfterValidator(name_template)] = Field(
        default="",
        description="delta: register the tables by name in this database of sink.catalog ({db}: the "
        "source's schema name, a database each); empty: by path only",
    )
    table_name: Annotated[str, AfterValidator(name_template)] = Field(
        default="",
        description="delta: the mirror's name ({db}, {table}; the changelog's and history's add "
        "__changelog, __history); empty: {table} when the database names {db}, else {db}__{table}",
    )
    catalog: Annotated[str, AfterValidator(catalog_name)] = Field(
        default="spark_catalog", min_length=1, description="delta: the Spark catalog of the names"
    )
    metastore: Annotated[Metastore, BeforeValidator(lower)] = Field(
        default="embedded",
        description="delta: embedded: Spark's own metastore kept beside a local output (one Spark "
        "application at a time); external: the metastore or catalog plugin sink.spark_conf configures",
    )
    metastore_uris: Annotated[str, AfterValidator(thrift_uris)] = Field(
        default="",
        description="delta: with metastore = external, the Hive metastore server(s) the names go to "
        "(thrift://HOST:PORT, comma-separated); empty: sink.spark_conf configures the catalog",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="delta: more Spark settings (a catalog plugin such as Unity Catalog's), for "
        "gtidsnap's Spark and its jobs",
    )
    mirror: Annotated[MirrorKeeper, BeforeValidator(lower)] = Field(
        default="gtidsnap",
        description="delta: who writes the mirror tables: gtidsnap, or job (spark/mirror_job.py on any "
        "Spark cluster merges them from the changelogs; gtidsnap writes the changelogs only)",
    )


class CheckpointSection(_Section):
    """``[checkpoint]``: where progress is kept, and how often it is saved."""

    path: str = Field(default="gtidsnap-out/checkpoint.json", min_length=1, description="the checkpoint file")
    interval_s: float = Field(default=1.0, ge=0.01, le=HOUR_S, description="seconds between checkpoints")


class SignalSettings(_Section):
    """``[signals]``: the Kafka signal topic; ``bootstrap`` empty means no signal consumer."""

    bootstrap: str = Field(default="", description="Kafka HOST:PORT list (empty: no signals)")
    topic: str = Field(default="gtidsnap-signals", min_length=1, description="the signal topic")
    connector: str = Field(
        default="gtidsnap", min_length=1, description="only messages whose key equals this are for us"
    )
    group: str = Field(default="", description="consumer group id (empty: gtidsnap-<connector>)")
    notifications_topic: str = Field(
        default="",
        description="topic answering each signal (STARTED, IN_PROGRESS, ..., with its id; empty: none)",
    )


class MetricsSection(_Section):
    """``[metrics]``: the HTTP endpoint with /metrics (Prometheus), /healthz and /readyz; off by default."""

    listen: Annotated[str, AfterValidator(listen_address)] = Field(
        default="", description="HOST:PORT to serve on, e.g. 127.0.0.1:9108 (empty: no endpoint)"
    )
    stall_after_s: float = Field(
        default=60.0,
        ge=1,
        le=DAY_S,
        description="/healthz fails when the engine's loop has not turned this long",
    )
    probe_interval_s: float = Field(
        default=5.0,
        ge=0.1,
        le=HOUR_S,
        description="seconds between the replica probes behind lag and /readyz",
    )


class Settings(_Section):
    """The whole file: one field per section."""

    source: SourceSection = Field(default_factory=SourceSection, description="the replica")
    capture: CaptureSection = Field(default_factory=CaptureSection, description="captured tables")
    snapshot: SnapshotSection = Field(default_factory=SnapshotSection, description="snapshot reads")
    binlog: BinlogSection = Field(default_factory=BinlogSection, description="the binlog connection")
    sink: SinkSettings = Field(default_factory=SinkSettings, description="the output")
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection, description="progress")
    signals: SignalSettings = Field(default_factory=SignalSettings, description="Kafka signals")
    metrics: MetricsSection = Field(default_factory=MetricsSection, description="monitoring endpoint")


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
DEFAULT_SETTINGS = Settings()
DEFAULTS: Mapping[str, Mapping[str, Any]] = DEFAULT_SETTINGS.model_dump()
"""Every default, ``DEFAULTS[section][key]``: derived from the models, never a second copy."""
