"""The Delta writes of the sink, each idempotent per batch (Delta's txnAppId/txnVersion) and tagged
with its batch: tables created empty as their own first version and their column types widened, the
mirror's MERGE (newest ``_seq`` wins) and APPEND, the changelog's APPEND."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import types as T

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import OutputRefusedError, SinkError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.delta.columns import ColumnPlan, plan_columns
from gtidsnap.sinks.delta.file_commits import commit_files, holds_plan, write_data_file
from gtidsnap.sinks.delta.jvm_delta import delta_gate
from gtidsnap.sinks.delta.layout import KEY_PROPERTY, SOURCE_PROPERTY, clear_uncommitted_log, recorded_key
from gtidsnap.sinks.delta.util import MATERIALIZE_SOURCE, TXN_APP_ID, TXN_VERSION, USER_METADATA
from gtidsnap.sinks.delta.writes import evolved_schema, retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CHECKPOINT_INTERVAL = 50  # commits between Delta checkpoints (Delta's default, 10, costs 4-8 CPU-s each)


@dataclass(frozen=True)
class TableLayout:
    """How the tables are laid out for their readers (``sink.deletion_vectors``, ``sink.cluster_by``,
    ``sink.changelog_cluster_by``, ``sink.stats_columns``): applied to the tables gtidsnap creates."""

    deletion_vectors: bool = False
    cluster_by: tuple[str, ...] = ()  # the mirrors' liquid clustering ("key": the primary key)
    changelog_cluster_by: tuple[str, ...] = ()  # the changelogs' (e.g. _source_ts)
    stats_columns: tuple[str, ...] = ()  # more columns with file statistics

    @classmethod
    def of(cls, settings: Any) -> TableLayout:
        return cls(
            settings.deletion_vectors,
            tuple(settings.cluster_by),
            tuple(settings.changelog_cluster_by),
            tuple(settings.stats_columns),
        )

    def clustering(self, key: Sequence[str], mirror: bool, columns: Sequence[str]) -> list[str]:
        """The clustering columns of a new mirror (``mirror``) or changelog with ``columns``; a name
        the table does not have is refused by name."""
        wanted = self.cluster_by if mirror else self.changelog_cluster_by
        chosen = [c for name in wanted for c in (key if name == "key" else [name])]
        known = {c.casefold(): c for c in columns}
        missing = [c for c in chosen if c.casefold() not in known]
        if missing:
            setting = "sink.cluster_by" if mirror else "sink.changelog_cluster_by"
            raise OutputRefusedError(f"{setting} names {', '.join(missing)}, which the table does not have")
        return list(dict.fromkeys(known[c.casefold()] for c in chosen))


def table_properties(
    key: Sequence[str], mirror: bool, deletion_vectors: bool = False, more_stats: Sequence[str] = ()
) -> dict[str, str]:
    """Properties a table is created with: file statistics on the columns writes and reads filter by
    (the key, ``_seq``, the mirror's ``_op``, ``more_stats``) instead of the first 32 (text and JSON
    included), fewer Delta checkpoints, the mirror's Change Data Feed, and its deletion vectors (a MERGE
    then marks the rows it replaces instead of rewriting every file they are in: its cost follows the
    changed rows, not the mirror's size)."""
    properties = {"delta.checkpointInterval": str(CHECKPOINT_INTERVAL)}
    if mirror:
        properties["delta.enableChangeDataFeed"] = "true"
        properties["delta.enableDeletionVectors"] = "true" if deletion_vectors else "false"
    stats = list(dict.fromkeys([*stats_columns(key, mirror), *more_stats]))
    if all(_PLAIN_NAME.fullmatch(name) for name in stats):  # other names: Delta's default statistics
        properties["delta.dataSkippingStatsColumns"] = ",".join(stats)
    return properties


def stats_columns(key: Sequence[str], mirror: bool) -> list[str]:
    """The columns a table keeps file statistics on: its key, ``_seq``, and a mirror's ``_op``."""
    return [*key, "_seq", *(["_op"] if mirror else [])]


def merge_newest(spark: SparkSession, path: str, source: DataFrame, condition: SparkColumn) -> None:
    """The mirror's MERGE (target ``t``, source ``s``): a change applies to a key only over an older
    ``_seq``, so merging a change twice, or an older one after a newer, changes nothing."""
    from delta.tables import DeltaTable

    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(source.alias("s"), condition)
        .whenMatchedDelete(condition="s._op = 'd' AND s._seq > t._seq")
        .whenMatchedUpdateAll(condition="s._op <> 'd' AND s._seq > t._seq")
        .whenNotMatchedInsertAll(condition="s._op <> 'd'")
        .withSchemaEvolution()
        .execute()
    )


def append_by_spark(
    path: str, frame: DataFrame, meta: dict[str, Any], txn: tuple[str, int] | None = None
) -> None:
    """Spark's own APPEND of ``frame`` (columns the table lacks added: ``mergeSchema``), tagged with
    ``meta``; with ``txn`` (an app id and a version), idempotent for them."""
    writer = frame.write.format("delta").mode("append").option("mergeSchema", "true")
    if txn is not None:
        writer = writer.option("txnAppId", txn[0]).option("txnVersion", str(txn[1]))
    writer = writer.option("userMetadata", json.dumps(meta))
    retry_conflicts(lambda: writer.save(path), path)


_WARMED: set[str] = set()  # Spark applications whose JVM made its first Delta writes already


def warm_up(spark: SparkSession, path: str) -> None:
    """One small Delta table created and appended to at ``path``: a JVM's first Delta writes cost it
    seconds of class loading and compiling, paid here when the sink opens rather than by the first
    batch, which the snapshot would wait for. Once per JVM: a sink opened again in the same process
    (after a replica was lost, say) does not pay it again."""
    application = spark.sparkContext.applicationId
    if application in _WARMED:
        return
    _WARMED.add(application)
    frame = spark.range(16).selectExpr("id", "CAST(id AS STRING) AS s", "CAST(id AS TIMESTAMP) AS ts")
    frame.write.format("delta").option("delta.enableChangeDataFeed", "true").save(path)
    frame.write.format("delta").mode("append").option("userMetadata", "{}").save(path)


@dataclass
class Shape:
    """A source table's shape for a write: the engine's current one, and every column seen with the
    rows written (a dropped column still has values in the earlier ones)."""

    schema: TableSchema
    seen: dict[str, Column]


class DeltaTables:
    """The Delta tables of one sink: its SparkSession, its app id, what it knows of their schemas, and
    whether rows may go in as data files committed through Delta's transaction API (``by_files``:
    default, when this JVM's Delta is the tested version, :func:`.jvm_delta.delta_gate`)."""

    def __init__(
        self,
        spark: SparkSession,
        app_id: str,
        layout: TableLayout | None = None,
        by_files: bool | None = None,
    ) -> None:
        self.spark = spark
        self.app_id = app_id
        self.layout = layout or TableLayout()  # of the tables it creates
        self.by_files = delta_gate(spark).fast_paths if by_files is None else by_files
        self._delta_schemas: dict[str, T.StructType] = {}
        self._delta_keys: dict[str, list[str] | None] = {}
        self.created: set[str] = set()  # the tables this instance created (empty before this run)

    def prepare(
        self, table: TableId, path: str, shape: Shape, meta: Sequence[T.StructField], cdf: bool
    ) -> ColumnPlan:
        """The column plan of a write; creates the table (empty, its own first version) or widens types."""
        from delta.tables import DeltaTable

        existing = self.delta_schema(path)
        plan = plan_columns(table, path, existing, shape.schema, shape.seen)
        key = list(shape.schema.key)
        if existing is None:
            if clear_uncommitted_log(self.spark, path):
                log.warning(
                    "%s: removed a _delta_log without any committed version (a creation cut short)", path
                )
            crash_point("delta-before-create")
            fields = [T.StructField(c.name, c.data_type, True) for c in plan.columns] + list(meta)
            builder = (
                DeltaTable.createIfNotExists(self.spark)
                .location(path)
                .addColumns(T.StructType(fields))
                .property(KEY_PROPERTY, json.dumps(key))
                .property(SOURCE_PROPERTY, str(table))
            )
            names = [f.name for f in fields]
            clustering = self.layout.clustering(key, cdf, names)
            more_stats = [*self.layout.stats_columns, *clustering]
            for name, value in table_properties(key, cdf, self.layout.deletion_vectors, more_stats).items():
                builder = builder.property(name, value)
            if clustering:  # liquid clustering: OPTIMIZE clusters the files by these columns
                builder = builder.clusterBy(*clustering)
            builder.execute()
            crash_point("delta-after-create")
            self._delta_schemas[path] = T.StructType(fields)
            self._delta_keys[path] = key
            self.created.add(path)
            log.info("created %s for %s", path, table)
            return plan
        stored = self.delta_key(path)
        if stored is not None and stored != key:
            raise SinkError(
                f"the primary key of {table} is now ({', '.join(key)}) but {path} is merged by "
                f"({', '.join(stored)}): move the Delta tables of {table} away and snapshot it again"
            )
        if plan.widen:
            self.spark.sql(
                f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')"
            )
            for name, data_type in plan.widen.items():
                column, to = quote_ident(name), data_type.simpleString()
                self.spark.sql(f"ALTER TABLE delta.`{path}` CHANGE COLUMN {column} TYPE {to}")
                log.warning("%s: column %s widened to %s", path, name, data_type.simpleString())
            self._delta_schemas.pop(path, None)
        return plan

    def append_arrow(
        self,
        path: str,
        rows: pa.Table,
        schema: T.StructType,
        batch: int,
        meta: dict[str, Any],
        txn: bool = True,
        key: Sequence[str] = (),
    ) -> None:
        """APPEND Arrow rows (a changelog's batch); with ``txn``, idempotent for the sink's app id and
        ``batch``. Where the table takes them as files (:meth:`takes_files`), as a data file written here
        and committed through Delta's API (:mod:`gtidsnap.sinks.delta.file_commits`: a Spark job's fixed
        cost is most of a small batch's); else by Spark, which evolves the table's schema."""
        if self.takes_files(path, schema):
            written = write_data_file(path, [rows], rows.schema, stats_columns(key, mirror=False))
            version = batch if txn else None
            commit_files(self.spark, path, [written] if written else [], self.app_id, version, meta)
            return
        frame = self.spark.createDataFrame(rows, schema=schema)
        self.append_frame(path, frame, batch, self.app_id, meta, txn)

    def takes_files(self, path: str, schema: T.StructType) -> bool:
        """Whether rows of ``schema`` go into the table at ``path`` as data files written by pyarrow and
        committed through Delta's transaction API: on the tested Delta version only (``by_files``), and
        where the table has their columns as they are (a column to add or widen only a Spark write
        evolves)."""
        return self.by_files and holds_plan(self.delta_schema(path), schema)

    def add_columns(self, path: str, schema: T.StructType) -> None:
        """Add the columns of ``schema`` the table lacks, by a metadata commit (no rows): what a Spark
        append with ``mergeSchema`` would do, ahead of files written with those columns."""
        existing = self.delta_schema(path)
        if existing is None or holds_plan(existing, schema):
            return
        have = {f.name.casefold() for f in existing.fields}
        new = [f for f in schema.fields if f.name.casefold() not in have]
        if new:
            columns = ", ".join(f"{quote_ident(f.name)} {f.dataType.simpleString()}" for f in new)
            self.spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({columns})")
            log.info("%s: column(s) %s added", path, ", ".join(f.name for f in new))
        self._delta_schemas.pop(path, None)
        if not holds_plan(self.delta_schema(path), schema):
            raise SinkError(f"{path} does not take the columns {schema.simpleString()} after adding columns")

    def append_frame(
        self, path: str, frame: DataFrame, batch: int, app_id: str, meta: dict[str, Any], txn: bool = True
    ) -> None:
        """APPEND ``frame``, tagged with ``meta``; with ``txn``, idempotent for ``app_id`` and ``batch``
        (without: the caller knows from ``meta`` what the table holds)."""
        append_by_spark(path, frame, meta, (app_id, batch) if txn else None)
        self._delta_schemas[path] = evolved_schema(self._delta_schemas.get(path), frame.schema)

    def merge_frame(
        self,
        path: str,
        source: DataFrame,
        condition: SparkColumn,
        batch: int,
        meta: dict[str, Any],
        txn: bool = True,
    ) -> None:
        """MERGE by key, newest ``_seq`` wins; with ``txn``, idempotent for the sink's app id and
        ``batch``."""
        with self._txn(batch if txn else None, meta):
            retry_conflicts(lambda: merge_newest(self.spark, path, source, condition), path)
        self._delta_schemas[path] = evolved_schema(self._delta_schemas.get(path), source.schema)

    def delta_key(self, path: str) -> list[str] | None:
        """The key a table is merged by, from its table property (None: not recorded)."""
        if path not in self._delta_keys:
            self._delta_keys[path] = recorded_key(self.spark, path)
        return self._delta_keys[path]

    def delta_schema(self, path: str) -> T.StructType | None:
        from delta.tables import DeltaTable

        if path not in self._delta_schemas:
            if not DeltaTable.isDeltaTable(self.spark, path):
                return None
            self._delta_schemas[path] = DeltaTable.forPath(self.spark, path).toDF().schema
        return self._delta_schemas[path]

    @contextmanager
    def _txn(self, batch: int | None, meta: dict[str, Any]) -> Iterator[None]:
        """Session settings of a batch's MERGE: idempotent, tagged with ``meta`` (its batch and how far
        the mirror then holds the changelog), its source (in memory, or staged files) read as is."""
        conf = self.spark.conf
        if batch is not None:
            conf.set(TXN_APP_ID, self.app_id)
            conf.set(TXN_VERSION, str(batch))
        conf.set(USER_METADATA, json.dumps(meta))
        conf.set(MATERIALIZE_SOURCE, "none")
        try:
            yield
        finally:
            for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA, MATERIALIZE_SOURCE):
                conf.unset(key)
