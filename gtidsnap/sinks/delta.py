"""Delta Lake sink: per source table a mirror (current state, merged by key) and a changelog.

Layout under ``sink.path`` (names encoded by :func:`encode_name`: letters, digits, ``_ $ -`` stay,
any other byte becomes ``~hh``, so ``shop.order-items`` stays readable and no name needs quoting)::

    <path>/<db>/<table>             mirror: the source table's rows + _op, _seq, _gtid, _source_ts;
                                    Change Data Feed on (delta.enableChangeDataFeed)
    <path>/<db>/<table>.changelog   changelog (sink.changelog): every record appended, its row
                                    (the before image for deletes) + _op, _seq, _gtid, _source_ts,
                                    _snapshot

Mirror rules. A batch (one ``commit``) is reduced to the last record per key (by ``seq``) and MERGEd
by primary key; a change applies only when its ``_seq`` is greater than the row's, so nothing replayed
or stale rewinds a row. A delete removes the row. Removing is safe because ``seq`` only grows from
one batch to the next, except for a record that arrives late *and* stale (never produced by the
engine): such an insert after a delete would bring the row back. An update that changes the primary
key deletes the old key and writes the new one (in the changelog it is a ``d`` row with the before
image and a ``c`` row with the after image, both with the record's ``_seq``, as Debezium does).

Schema changes. New columns are added by the MERGE (``withSchemaEvolution``) and the append
(``mergeSchema``). A dropped column stays in the Delta tables; rows written after the drop have NULL in
it. A type change keeps the Delta type when it still holds every value, widens the column (Delta
type widening, enabled on the table when first needed) when Delta supports it, and otherwise stops
with a :class:`SinkError` naming the table and the column (see ``delta_types.evolve_type``).

Exactly once across crashes. The engine calls :meth:`DeltaSink.commit` and then saves its checkpoint
with the returned position ``{"delta_batch": N}``; a crash can fall between the two, or in the middle
of a commit that writes several tables.

* Every commit is batch N = previous + 1. Each Delta write of it carries ``txnAppId`` = the app id
  (``sink.app_id``, default derived from the path) and ``txnVersion`` = N, so Delta skips a write it
  already has: a ``commit()`` retried after a failure never applies a table twice. Each commit also
  carries the user metadata ``{"gtidsnap_batch": N}``.
* ``open(committed)`` walks the recent history of every table under the path. Commits of batches above
  the checkpoint's come from a run whose checkpoint was never saved; that run's records are replayed
  from the checkpoint (as new records, possibly different: a chunk can be read at another point), so
  the table's rows are first put back as they were just before the first such commit, in one commit
  tagged ``{"gtidsnap_undo": {"to_version": V, ...}}``: a mirror is MERGEd with each changed key's row
  as of V, taken from its Change Data Feed (so CDF readers see exactly the rows put back); a changelog
  loses the rows appended since V (``_seq`` above its greatest at V). Should that fail, Delta's RESTORE
  does the same at the file level. A crash during recovery just repeats it on the next start.
* Delta keeps a txn version per app id across an undo (even across RESTORE), so batch numbers are never
  reused: after recovery the next batch is above every batch number found. Positions only increase.

Caveats: Change Data Feed readers see the undone batch's changes, then their undo, then the replay;
Delta reads no feed across a widened column type (read the versions before and after apart). A
Delta streaming reader of a changelog needs ``skipChangeCommits`` to read past an undo.
Tables are created empty, as their own first version, so a table created by an undone batch is left
empty. The mirror records its key in the table property ``gtidsnap.key``; a changed primary key at the
source is refused (move the tables away and snapshot again). VACUUM must keep files for longer than a
checkpoint interval (the default 168 hours is plenty), or the versions an undo reads may be gone.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gtidsnap.config import SinkSettings
from gtidsnap.crashpoints import crash_point
from gtidsnap.errors import ConfigError, SchemaError, SinkError
from gtidsnap.model import Row, TableId
from gtidsnap.records import Record
from gtidsnap.schema import Column, TableSchema
from gtidsnap.sinks import delta_types

if TYPE_CHECKING:
    from delta.tables import DeltaTable
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

CHANGELOG_SUFFIX = ".changelog"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# A MERGE reads its source twice; Delta copies a source that is not a Delta table first, in case it
# changes in between. Ours is an in-memory Arrow table that cannot change: the copy is pure cost.
MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"
POSITION_KEY = "delta_batch"
KEY_PROPERTY = "gtidsnap.key"  # table property: the JSON list of the key columns the table is merged by
SOURCE_PROPERTY = "gtidsnap.source"  # table property: the source table, db.table
CONFLICT_RETRIES = 3
_SAFE = re.compile(r"[A-Za-z0-9_$-]")
_ESCAPE = re.compile(r"~([0-9a-f]{2})")

TableKind = Literal["mirror", "changelog"]


# ----------------------------------------------------------------------------- layout


def encode_name(name: str) -> str:
    """A schema or table name as one path segment that needs no quoting anywhere (``a.b`` -> ``a~2eb``)."""
    return "".join(
        ch if _SAFE.fullmatch(ch) else "".join(f"~{b:02x}" for b in ch.encode("utf-8")) for ch in name
    )


def decode_name(segment: str) -> str:
    """The name :func:`encode_name` encoded."""
    out = bytearray()
    i = 0
    while i < len(segment):
        if _ESCAPE.match(segment, i):
            out.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            out.extend(segment[i].encode("utf-8"))
            i += 1
    return out.decode("utf-8", errors="replace")


def absolute_root(path: str) -> str:
    """The sink path as Spark should see it: local paths absolute, URIs (s3a://, file:, ...) as given."""
    if "://" in path or path.startswith("file:"):
        return path.rstrip("/")
    return os.path.abspath(path)


def mirror_path(root: str, table: TableId) -> str:
    return f"{root}/{encode_name(table.schema)}/{encode_name(table.name)}"


def changelog_path(root: str, table: TableId) -> str:
    return mirror_path(root, table) + CHANGELOG_SUFFIX


def default_app_id(root: str) -> str:
    """Stable per output location, so a restarted instance recognises its own idempotent writes."""
    return "gtidsnap-" + hashlib.sha256(root.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class DeltaTableRef:
    """One Delta table of the layout: which source table, mirror or changelog, where."""

    table: TableId
    kind: TableKind
    path: str


_COMMITTED_LOG_FILE = re.compile(r"^(\d{20}\.(json|checkpoint.*\.parquet)|_last_checkpoint)$")


def _filesystem(spark: SparkSession, path: str) -> tuple[Any, Any, Any]:
    """Hadoop's FileSystem for ``path``, the Path class, and ``path`` as a Hadoop Path."""
    context: Any = spark.sparkContext
    jvm, conf = context._jvm, context._jsc.hadoopConfiguration()
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    where = hadoop_path(path)
    return where.getFileSystem(conf), hadoop_path, where


def _has_commit(fs: Any, log: Any) -> bool:
    """Does a ``_delta_log`` folder hold a committed version (a version file, a checkpoint)?"""
    if not fs.exists(log):
        return False
    return any(_COMMITTED_LOG_FILE.match(str(s.getPath().getName())) for s in fs.listStatus(log))


def clear_uncommitted_log(spark: SparkSession, path: str) -> bool:
    """Remove a ``_delta_log`` that holds no committed version, as a kill during a table's creation
    leaves it (a temporary file, an empty ``_staged_commits``): Delta then refuses to create the table
    there (DELTA_TABLE_NOT_FOUND) and every restart would fail. Nothing committed is touched, and
    nothing else can refer to such a log. True when something was removed."""
    fs, hadoop_path, table = _filesystem(spark, path)
    log_dir = hadoop_path(table, "_delta_log")
    if not fs.exists(log_dir) or _has_commit(fs, log_dir):
        return False
    fs.delete(log_dir, True)
    return True


def list_tables(spark: SparkSession, root: str) -> list[DeltaTableRef]:
    """Every mirror and changelog under ``root`` (through Hadoop's FileSystem, so any Spark storage);
    a folder whose ``_delta_log`` holds no committed version is no table (its creation was cut short)."""
    fs, hadoop_path, base = _filesystem(spark, root)
    if not fs.exists(base):
        return []
    found: list[DeltaTableRef] = []
    for db_status in fs.listStatus(base):
        if not db_status.isDirectory():
            continue
        db_path = db_status.getPath()
        for status in fs.listStatus(db_path):
            name = str(status.getPath().getName())
            if not status.isDirectory() or not _has_commit(fs, hadoop_path(status.getPath(), "_delta_log")):
                continue
            kind: TableKind = "changelog" if name.endswith(CHANGELOG_SUFFIX) else "mirror"
            table_segment = name[: -len(CHANGELOG_SUFFIX)] if kind == "changelog" else name
            table = TableId(decode_name(str(db_path.getName())), decode_name(table_segment))
            path = mirror_path(root, table) + (CHANGELOG_SUFFIX if kind == "changelog" else "")
            found.append(DeltaTableRef(table, kind, path))
    return sorted(found, key=lambda r: (r.table, r.kind))


def job_spark_session(master: str, app_name: str) -> SparkSession:
    """The SparkSession of a Spark job (spark/merge_job.py, spark/maintenance.py), started with
    ``python`` or with ``spark-submit`` alike.

    Under spark-submit the driver JVM is already running, so ``spark.jars`` can no longer put Delta on
    its class path; the pre-resolved jars are added to the driver's class loader instead (spark-submit
    gives it a MutableURLClassLoader), and ``spark.jars`` still ships them to executors.
    """
    from gtidsnap.spark_session import build_spark_session, default_delta_jars_dir, delta_jar_paths

    jars = delta_jar_paths(default_delta_jars_dir())
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # set by spark-submit's PythonRunner
        from pyspark import SparkContext

        SparkContext._ensure_initialized()
        jvm: Any = SparkContext._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        if loader.getClass().getName().endswith("MutableURLClassLoader"):
            for jar in jars:
                loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())
    spark = build_spark_session(app_name=app_name, master=master)
    spark.sparkContext.setLogLevel("WARN")  # spark-submit's default INFO buries the job's own output
    return spark


# ----------------------------------------------------------------------------- column plans


@dataclass(frozen=True)
class PlannedColumn:
    """A data column of one write: its Delta type and the source column its values come from."""

    name: str
    data_type: T.DataType
    source: Column | None  # None: the source no longer has it (dropped), values are NULL


@dataclass(frozen=True)
class ColumnPlan:
    columns: tuple[PlannedColumn, ...]
    widen: Mapping[str, T.DataType]  # existing Delta columns whose type must be widened first


def plan_columns(
    table: TableId,
    where: str,
    existing: T.StructType | None,
    schema: TableSchema,
    seen: Mapping[str, Column],
) -> ColumnPlan:
    """The data columns of a write to the Delta table at ``where``: what it has, in its order, then the
    source's new columns; types per ``delta_types.evolve_type``. ``seen`` is every source column
    described during the batch (a column added and dropped between two commits is kept too)."""
    current = {c.name.casefold(): c for c in schema.columns}
    described = {**{n.casefold(): c for n, c in seen.items()}, **current}
    reserved = [c.name for c in described.values() if c.name in delta_types.RESERVED]
    if reserved:
        raise SinkError(
            f"{table} has column(s) {', '.join(reserved)}, whose names gtidsnap uses for its own columns "
            f"in {where}; rename them at the source or leave the table out of the capture"
        )
    invalid = delta_types.invalid_column_names(c.name for c in described.values())
    if invalid:
        raise SinkError(
            f"{table} has column name(s) {', '.join(map(repr, invalid))} that Delta refuses in {where} "
            "(spaces, commas, braces, parentheses, '=' need column mapping, which gtidsnap does not set)"
        )
    planned: list[PlannedColumn] = []
    widen: dict[str, T.DataType] = {}
    known: set[str] = set()
    for f in existing.fields if existing is not None else ():
        if f.name in delta_types.RESERVED:
            continue
        known.add(f.name.casefold())
        source = described.get(f.name.casefold())
        data_type = f.dataType
        if source is not None and f.name.casefold() in current:
            wanted = delta_types.spark_type(source)
            evolved = delta_types.evolve_type(f.dataType, wanted)
            if evolved is None:
                raise SinkError(
                    f"column {source.name} of {table} changed to {source.column_type} "
                    f"({wanted.simpleString()}), which the Delta column of type {f.dataType.simpleString()} "
                    f"in {where} cannot hold and Delta cannot widen to; move the Delta tables of {table} "
                    "away and snapshot the table again"
                )
            if evolved != f.dataType:
                widen[f.name] = evolved
            data_type = evolved
        planned.append(PlannedColumn(f.name, data_type, source))
    ordered = [*schema.columns, *(c for n, c in seen.items() if n.casefold() not in current)]
    for column in ordered:
        if column.name.casefold() not in known:
            known.add(column.name.casefold())
            planned.append(PlannedColumn(column.name, delta_types.spark_type(column), column))
    missing = [k for k in schema.key if k.casefold() not in known]
    if missing:
        raise SinkError(f"key column(s) {', '.join(missing)} of {table} are not among its columns")
    return ColumnPlan(tuple(planned), widen)


# ----------------------------------------------------------------------------- rows of a batch


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


@dataclass(frozen=True)
class _Change:
    """One row to write: the record's metadata with one row image (a key change is two of these)."""

    op: str
    row: Row
    record: Record


def _key(schema: TableSchema, row: Row) -> tuple[Any, ...]:
    try:
        return tuple(_hashable(row[k]) for k in schema.key)
    except KeyError as exc:
        raise SinkError(f"a row of {schema.table} lacks key column {exc.args[0]}: {dict(row)}") from None


def changes_of(schema: TableSchema, records: Sequence[Record]) -> list[_Change]:
    """Every record as row changes: updates of the primary key split into the delete and the insert."""
    out: list[_Change] = []
    for r in records:
        if r.op == "d":
            assert r.before is not None
            out.append(_Change("d", r.before, r))
        elif r.op == "u" and r.before is not None and r.after is not None:
            if _key(schema, r.before) != _key(schema, r.after):
                out.extend((_Change("d", r.before, r), _Change("c", r.after, r)))
            else:
                out.append(_Change("u", r.after, r))
        else:
            assert r.after is not None
            out.append(_Change(r.op, r.after, r))
    return out


def last_per_key(schema: TableSchema, changes: Sequence[_Change]) -> list[_Change]:
    """The last change of each key (by ``seq``): what a MERGE needs (one source row per target row)."""
    last: dict[tuple[Any, ...], _Change] = {}
    for change in changes:
        key = _key(schema, change.row)
        held = last.get(key)
        if held is None or change.record.seq >= held.record.seq:
            last[key] = change
    return sorted(last.values(), key=lambda c: c.record.seq)


def arrow_rows(
    table: TableId, plan: ColumnPlan, changes: Sequence[_Change], meta: Sequence[T.StructField]
) -> tuple[pa.Table, T.StructType]:
    """The changes as one Arrow table (data columns, then ``meta``) and the matching Spark schema."""
    arrays: dict[str, pa.Array] = {}
    for col in plan.columns:
        values = [c.row.get(col.name) for c in changes]
        try:
            arrays[col.name] = delta_types.arrow_array(col.source, col.data_type, values)
        except ValueError as exc:
            raise SinkError(f"column {col.name} of {table}: {exc}") from exc
    meta_values: dict[str, list[Any]] = {
        "_op": [c.op for c in changes],
        "_seq": [c.record.seq for c in changes],
        "_gtid": [c.record.gtid for c in changes],
        "_source_ts": [dt.datetime.fromtimestamp(c.record.source_ts, dt.UTC) for c in changes],
        "_snapshot": [c.record.snapshot for c in changes],
    }
    for f in meta:
        arrays[f.name] = pa.array(meta_values[f.name], type=delta_types.arrow_type(f.dataType))
    fields = [T.StructField(c.name, c.data_type, True) for c in plan.columns] + list(meta)
    return pa.table(arrays), T.StructType(fields)


# ----------------------------------------------------------------------------- the sink


@dataclass
class _Pending:
    """Records of one table waiting for the next commit, with every shape the engine gave for them."""

    schema: TableSchema
    seen: dict[str, Column] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)


@dataclass(frozen=True)
class _Recovery:
    restored_to: int | None
    max_batch: int


def _batch_of(user_metadata: str | None) -> int | None:
    if not user_metadata:
        return None
    try:
        data = json.loads(user_metadata)
    except ValueError:
        return None
    batch = data.get("gtidsnap_batch") if isinstance(data, dict) else None
    return batch if isinstance(batch, int) else None


def _committed(batch: int | None, last: int) -> bool:
    return batch is not None and batch <= last


class DeltaSink:
    """The Delta Lake sink (see the module docstring for the layout and the exactly-once design).

    ``spark_factory`` gives the SparkSession when the sink opens (default:
    :func:`gtidsnap.spark_session.build_spark_session` on ``settings.spark_master``); ``schema_of`` is
    the engine's current shape of a captured table (refreshed after DDL), read when records arrive.
    """

    def __init__(
        self,
        settings: SinkSettings,
        spark_factory: Callable[[], SparkSession] | None = None,
        schema_of: Callable[[TableId], TableSchema] | None = None,
    ) -> None:
        if schema_of is None:
            raise ConfigError(
                "the Delta sink needs schema_of, the source tables' shapes (column types and primary "
                "key): records carry canonical values only, which do not say their type"
            )
        self.settings = settings
        self.root = absolute_root(settings.path)
        self.app_id = settings.app_id or default_app_id(self.root)
        self.schema_of = schema_of
        self._spark_factory = spark_factory or self._default_spark
        self._spark: SparkSession | None = None
        self._batch: int | None = None  # the last batch written; None until open
        self._failed: int | None = None  # a batch whose commit failed, to be retried as is
        self._pending: dict[TableId, _Pending] = {}
        self._shapes: dict[TableId, TableSchema] = {}
        self._delta_schemas: dict[str, T.StructType] = {}
        self._delta_keys: dict[str, list[str] | None] = {}

    def _default_spark(self) -> SparkSession:
        from gtidsnap.spark_session import build_spark_session

        return build_spark_session(master=self.settings.spark_master)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            raise SinkError("the Delta sink is not open")
        return self._spark

    # ------------------------------------------------------------------ Sink protocol
    def open(self, committed: Any) -> None:
        last = self._parse_position(committed)
        try:
            self._spark = self._spark_factory()
            tables = list_tables(self.spark, self.root)
            if last is None and tables:
                names = ", ".join(sorted({str(t.table) for t in tables}))
                raise SinkError(
                    f"{self.root} already holds Delta tables of gtidsnap ({names}) but there is no "
                    "checkpoint: an earlier run's output cannot be continued without it. Restore the "
                    "checkpoint, or move those tables away (or point sink.path elsewhere) to start over"
                )
            if last and not tables:
                raise SinkError(
                    f"the checkpoint says batch {last} was committed to {self.root}, but no Delta table is "
                    "there: point sink.path at that output, or start over with a new checkpoint"
                )
            highest = last or 0
            for ref in tables:
                highest = max(highest, self._recover(ref, last or 0).max_batch)
        except SinkError:
            raise
        except Exception as exc:  # Spark/Delta/py4j errors: say where
            raise SinkError(f"cannot open the Delta output at {self.root}: {_short(exc)}") from exc
        self._batch = highest
        self._failed = None
        self._pending.clear()
        self._delta_schemas.clear()
        self._delta_keys.clear()
        log.info("Delta sink at %s open: checkpoint at batch %s, next batch %d", self.root, last, highest + 1)

    def write(self, records: Sequence[Record]) -> None:
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if self._failed is not None:
            raise SinkError(
                f"the commit of batch {self._failed} failed: retry commit() or reopen the sink before writing"
            )
        by_table: dict[TableId, list[Record]] = {}
        for r in records:
            by_table.setdefault(r.table, []).append(r)
        for table, rows in by_table.items():
            schema = self._shape(table)
            pending = self._pending.get(table)
            if pending is None:
                pending = self._pending[table] = _Pending(schema)
            pending.schema = schema
            pending.seen.update({c.name: c for c in schema.columns})
            pending.records.extend(rows)

    def commit(self) -> dict[str, int]:
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if not self._pending:
            return {POSITION_KEY: self._batch}
        batch = self._batch + 1
        self._failed = batch
        self._write_batch(batch, self._pending)
        self._pending = {}
        self._batch, self._failed = batch, None
        return {POSITION_KEY: batch}

    def seal(self) -> Callable[[], dict[str, int]]:
        """The batch so far, to be committed by the returned job in another thread while new records
        arrive (:mod:`gtidsnap.committer`). A failed job is not retried: the engine stops, and the next
        ``open`` puts back whatever the batch wrote without a checkpoint."""
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if self._failed is not None:
            raise SinkError(f"the commit of batch {self._failed} failed: reopen the sink")
        position = {POSITION_KEY: self._batch}
        if not self._pending:
            return lambda: position
        batch, pending = self._batch + 1, self._pending
        self._batch, self._pending = batch, {}

        def job() -> dict[str, int]:
            try:
                self._write_batch(batch, pending)
            except BaseException:
                self._failed = batch
                raise
            return {POSITION_KEY: batch}

        return job

    def _write_batch(self, batch: int, pending: Mapping[TableId, _Pending]) -> None:
        started = time.monotonic()
        for table in sorted(pending):
            crash_point("delta-before-table")
            try:
                self._write_table(table, pending[table], batch)
            except SinkError:
                raise
            except Exception as exc:
                raise SinkError(
                    f"writing batch {batch} of {table} to {self.root} failed: {_short(exc)}"
                ) from exc
        count = sum(len(p.records) for p in pending.values())
        log.info(
            "batch %d: %d records of %d tables in %.2f s",
            batch,
            count,
            len(pending),
            time.monotonic() - started,
        )

    def close(self) -> None:
        """Drops what was not committed (the replay brings it back); the SparkSession stays up."""
        self._pending.clear()
        self._batch = None
        self._failed = None

    # ------------------------------------------------------------------ writing
    def _shape(self, table: TableId) -> TableSchema:
        try:
            shape = self.schema_of(table)
        except SchemaError:
            if table in self._shapes:  # dropped or renamed since: its earlier records keep their shape
                return self._shapes[table]
            raise
        self._shapes[table] = shape
        return shape

    def _write_table(self, table: TableId, pending: _Pending, batch: int) -> None:
        changes = changes_of(pending.schema, pending.records)
        self.spark.sparkContext.setJobDescription(f"gtidsnap batch {batch}: {table}")
        try:
            mirror = mirror_path(self.root, table)
            self._merge(table, mirror, pending, last_per_key(pending.schema, changes), batch)
            crash_point("delta-after-mirror")
            if self.settings.changelog:
                self._append(table, changelog_path(self.root, table), pending, changes, batch)
                crash_point("delta-after-changelog")
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    def _prepare(
        self, table: TableId, path: str, pending: _Pending, meta: Sequence[T.StructField], cdf: bool
    ) -> ColumnPlan:
        """The column plan of a write; creates the table (empty, its own first version) or widens types."""
        from delta.tables import DeltaTable

        existing = self._delta_schema(path)
        plan = plan_columns(table, path, existing, pending.schema, pending.seen)
        key = list(pending.schema.key)
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
            if cdf:
                builder = builder.property("delta.enableChangeDataFeed", "true")
            builder.execute()
            crash_point("delta-after-create")
            self._delta_schemas[path] = T.StructType(fields)
            self._delta_keys[path] = key
            log.info("created %s for %s", path, table)
            return plan
        stored = self._delta_key(path)
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
                self.spark.sql(
                    f"ALTER TABLE delta.`{path}` CHANGE COLUMN {_q(name)} TYPE {data_type.simpleString()}"
                )
                log.warning("%s: column %s widened to %s", path, name, data_type.simpleString())
            self._delta_schemas.pop(path, None)
        return plan

    def _merge(
        self, table: TableId, path: str, pending: _Pending, changes: Sequence[_Change], batch: int
    ) -> None:
        from delta.tables import DeltaTable

        plan = self._prepare(table, path, pending, delta_types.MIRROR_META, cdf=True)
        rows, struct = arrow_rows(table, plan, changes, delta_types.MIRROR_META)
        source = self.spark.createDataFrame(rows, schema=struct)
        condition = F.expr(" AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in pending.schema.key))
        condition = _prune(condition, plan, pending.schema, changes)
        merge = (
            DeltaTable.forPath(self.spark, path)
            .alias("t")
            .merge(source.alias("s"), condition)
            .whenMatchedDelete(condition="s._op = 'd' AND s._seq > t._seq")
            .whenMatchedUpdateAll(condition="s._op <> 'd' AND s._seq > t._seq")
            .whenNotMatchedInsertAll(condition="s._op <> 'd'")
            .withSchemaEvolution()
        )
        with self._txn(batch):
            _retry_conflicts(lambda: merge.execute(), path)
        self._delta_schemas[path] = _evolved(self._delta_schemas.get(path), struct)

    def _append(
        self, table: TableId, path: str, pending: _Pending, changes: Sequence[_Change], batch: int
    ) -> None:
        plan = self._prepare(table, path, pending, delta_types.CHANGELOG_META, cdf=False)
        rows, struct = arrow_rows(table, plan, changes, delta_types.CHANGELOG_META)
        frame: DataFrame = self.spark.createDataFrame(rows, schema=struct)
        writer = (
            frame.write.format("delta")
            .mode("append")
            .option("mergeSchema", "true")
            .option("txnAppId", self.app_id)
            .option("txnVersion", str(batch))
            .option("userMetadata", json.dumps({"gtidsnap_batch": batch, "app_id": self.app_id}))
        )
        _retry_conflicts(lambda: writer.save(path), path)
        self._delta_schemas[path] = _evolved(self._delta_schemas.get(path), struct)

    @contextmanager
    def _txn(self, batch: int) -> Iterator[None]:
        """Session settings of a batch's MERGE: idempotent, tagged with its batch, its source (an Arrow
        table in memory) read as is."""
        conf = self.spark.conf
        conf.set(TXN_APP_ID, self.app_id)
        conf.set(TXN_VERSION, str(batch))
        conf.set(USER_METADATA, json.dumps({"gtidsnap_batch": batch, "app_id": self.app_id}))
        conf.set(MATERIALIZE_SOURCE, "none")
        try:
            yield
        finally:
            for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA, MATERIALIZE_SOURCE):
                conf.unset(key)

    def _delta_key(self, path: str) -> list[str] | None:
        """The key a table is merged by, from its table property (None: not recorded)."""
        from delta.tables import DeltaTable

        if path not in self._delta_keys:
            properties = DeltaTable.forPath(self.spark, path).detail().select("properties").first()
            text = (properties[0] or {}).get(KEY_PROPERTY) if properties is not None else None
            self._delta_keys[path] = list(json.loads(text)) if text else None
        return self._delta_keys[path]

    def _delta_schema(self, path: str) -> T.StructType | None:
        from delta.tables import DeltaTable

        if path not in self._delta_schemas:
            if not DeltaTable.isDeltaTable(self.spark, path):
                return None
            self._delta_schemas[path] = DeltaTable.forPath(self.spark, path).toDF().schema
        return self._delta_schemas[path]

    # ------------------------------------------------------------------ recovery
    def _parse_position(self, committed: Any) -> int | None:
        if committed is None:
            return None
        if isinstance(committed, dict) and isinstance(committed.get(POSITION_KEY), int):
            return int(committed[POSITION_KEY])
        raise SinkError(
            f"the checkpoint's sink position {committed!r} was not written by the Delta sink (was sink.type "
            "changed?): use the checkpoint that belongs to this output, or a new checkpoint and sink.path"
        )

    def _history(self, table: DeltaTable, last: int) -> list[Any]:
        """Commits (oldest first) from the newest one of a batch <= ``last`` (or from the oldest kept)."""
        limit = 16
        while True:
            rows = (
                table.history(limit).select("version", "operation", "userMetadata", "operationParameters")
            ).collect()
            commits = sorted(rows, key=lambda r: int(r["version"]))
            anchors = [i for i, c in enumerate(commits) if _committed(_batch_of(c["userMetadata"]), last)]
            if anchors:
                return commits[anchors[-1] :]
            if len(rows) < limit or int(commits[0]["version"]) == 0:
                return commits
            limit *= 8

    def _recover(self, ref: DeltaTableRef, last: int) -> _Recovery:
        """Undo the commits of batches after ``last`` (see the module docstring); report the top batch."""
        from delta.tables import DeltaTable

        commits = self._history(DeltaTable.forPath(self.spark, ref.path), last)
        highest = max((_batch_of(c["userMetadata"]) or 0 for c in commits), default=0)
        target: int | None = None
        dirty = False
        for c in commits:
            batch = _batch_of(c["userMetadata"])
            if batch is not None and batch > last:
                target = int(c["version"]) - 1 if target is None else target
                dirty = True
            elif target is not None and _undoes(c, target):
                dirty = False
        if not dirty or target is None:
            return _Recovery(None, highest)
        if target < 0:
            raise SinkError(f"{ref.path} has no version before batch {last + 1} to go back to")
        self._undo(ref, target, int(commits[-1]["version"]), last)
        log.warning(
            "%s had batches after the checkpoint's batch %d (up to %d), from a run that stopped before "
            "saving its checkpoint: undone back to version %d; the replay writes them again",
            ref.path,
            last,
            highest,
            target,
        )
        return _Recovery(target, highest)

    def _undo(self, ref: DeltaTableRef, target: int, current: int, last: int) -> None:
        """Bring the table's rows back to version ``target`` with one commit tagged ``gtidsnap_undo``.

        A mirror is MERGEd with, per key changed since ``target``, its row as of ``target`` (from the
        Change Data Feed: the first change's pre-image, or "absent" when that change is an insert); a
        changelog loses the rows appended since. Consumers of the mirror's Change Data Feed see exactly
        the rows put back. If that is impossible (the feed is incomplete, say), Delta's RESTORE does it,
        at the file level.
        """
        from delta.tables import DeltaTable

        self.spark.conf.set(
            USER_METADATA, json.dumps({"gtidsnap_undo": {"to_version": target, "checkpoint_batch": last}})
        )
        try:
            try:
                if ref.kind == "changelog":
                    self._undo_changelog(ref.path, target)
                else:
                    self._undo_mirror(ref.path, target, current)
            except Exception as exc:
                log.warning("%s: undo through its data failed (%s); using RESTORE", ref.path, _short(exc))
                DeltaTable.forPath(self.spark, ref.path).restoreToVersion(target)
        finally:
            self.spark.conf.unset(USER_METADATA)

    def _undo_changelog(self, path: str, target: int) -> None:
        """Appended rows only, in ``_seq`` order: the rows above the greatest ``_seq`` at ``target`` go."""
        from delta.tables import DeltaTable

        old = self.spark.read.format("delta").option("versionAsOf", target).load(path)
        row = old.agg(F.max("_seq")).first()
        kept = row[0] if row is not None and row[0] is not None else -1
        DeltaTable.forPath(self.spark, path).delete(F.col("_seq") > F.lit(kept))

    def _undo_mirror(self, path: str, target: int, current: int) -> None:
        from delta.tables import DeltaTable
        from pyspark.sql import Window

        key = self._delta_key(path)
        if not key:
            raise SinkError(f"{path} does not record its key ({KEY_PROPERTY})")
        changes = (
            self.spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", target + 1)
            .option("endingVersion", current)
            .load(path)
            .where("_change_type <> 'update_postimage'")
        )
        columns = [f.name for f in DeltaTable.forPath(self.spark, path).toDF().schema.fields]
        first_change = Window.partitionBy(*[F.col(_q(k)) for k in key]).orderBy(
            F.col("_commit_version"), F.when(F.col("_change_type") == "insert", 1).otherwise(0)
        )
        before = (
            changes.withColumn("_gtidsnap_n", F.row_number().over(first_change))
            .where("_gtidsnap_n = 1")
            .select(
                *[F.col(_q(c)) for c in columns],
                (F.col("_change_type") != "insert").alias("_gtidsnap_existed"),
            )
        )
        assignments: dict[str, str | SparkColumn] = {_q(c): F.col(f"s.{_q(c)}") for c in columns}
        (
            DeltaTable.forPath(self.spark, path)
            .alias("t")
            .merge(before.alias("s"), " AND ".join(f"t.{_q(k)} = s.{_q(k)}" for k in key))
            .whenMatchedDelete(condition="NOT s._gtidsnap_existed")
            .whenMatchedUpdate(condition="s._gtidsnap_existed", set=assignments)
            .whenNotMatchedInsert(condition="s._gtidsnap_existed", values=assignments)
            .execute()
        )


def _undoes(commit: Any, target: int) -> bool:
    """Is this commit an undo (ours, or a RESTORE) back to version ``target``?"""
    if commit["operation"] == "RESTORE":
        return (commit["operationParameters"] or {}).get("version") == str(target)
    try:
        data = json.loads(commit["userMetadata"] or "null")
    except ValueError:
        return False
    undo = data.get("gtidsnap_undo") if isinstance(data, dict) else None
    return isinstance(undo, dict) and undo.get("to_version") == target


# ----------------------------------------------------------------------------- helpers


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _short(exc: BaseException) -> str:
    """The first line of a (often very long, JVM) error message."""
    text = str(exc).strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


def _prune(
    condition: SparkColumn, plan: ColumnPlan, schema: TableSchema, changes: Sequence[_Change]
) -> SparkColumn:
    """Add ``t.k BETWEEN min AND max`` on the first key column, so Delta skips files by their
    statistics (snapshot chunks come in key order). Only for types whose literals compare exactly."""
    first = schema.key[0]
    col = next((c for c in plan.columns if c.name == first), None)
    if col is None or not isinstance(col.data_type, T.IntegralType | T.DecimalType | T.StringType):
        return condition
    convert = delta_types.converter(col.source, col.data_type)
    values = [convert(c.row.get(first)) for c in changes]
    values = [v for v in values if v is not None]
    if not values:
        return condition
    return condition & F.col(f"t.{_q(first)}").between(F.lit(min(values)), F.lit(max(values)))


def _evolved(known: T.StructType | None, written: T.StructType) -> T.StructType:
    """The table's schema after a write with schema evolution: what it had, then the new columns."""
    if known is None:
        return written
    names = {f.name.casefold() for f in known.fields}
    by_name = {f.name.casefold(): f for f in written.fields}
    fields = [by_name.get(f.name.casefold(), f) for f in known.fields]
    return T.StructType(fields + [f for f in written.fields if f.name.casefold() not in names])


def _retry_conflicts(action: Callable[[], object], path: str) -> None:
    """Run a Delta write; again when it lost a race with another writer (OPTIMIZE, say). Safe: the
    write is idempotent through its txn version."""
    for attempt in range(1, CONFLICT_RETRIES + 1):
        try:
            action()
            return
        except Exception as exc:
            if "Concurrent" not in type(exc).__name__ + str(exc)[:200] or attempt == CONFLICT_RETRIES:
                raise
            log.warning("%s: conflicting commit (%s), trying again", path, _short(exc))
            time.sleep(0.2 * attempt)
