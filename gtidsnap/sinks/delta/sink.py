"""The Delta Lake sink: batches of records written to each table's changelog (append) and mirror
(append of fresh snapshot rows, deferred MERGE of the rest), idempotently per batch (see the package
docstring of :mod:`gtidsnap.sinks.delta`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from gtidsnap.config import SinkSettings
from gtidsnap.crashpoints import crash_point
from gtidsnap.errors import ConfigError, SchemaError, SinkError
from gtidsnap.model import TableId
from gtidsnap.records import Record
from gtidsnap.schema import Column, TableSchema
from gtidsnap.sinks import delta_types
from gtidsnap.sinks.delta.catch_up import (
    MERGED_SEQ,
    NOTHING_WAITS,
    changelog_after,
    has_streamed_rows,
    merged_watermark,
)
from gtidsnap.sinks.delta.columns import ColumnPlan, plan_columns
from gtidsnap.sinks.delta.layout import (
    KEY_PROPERTY,
    SOURCE_PROPERTY,
    DeltaTableRef,
    absolute_root,
    changelog_path,
    clear_uncommitted_log,
    default_app_id,
    list_tables,
    mirror_path,
    recorded_key,
)
from gtidsnap.sinks.delta.recovery import history_since, recover
from gtidsnap.sinks.delta.rows import Change, arrow_rows, changes_of, last_per_key
from gtidsnap.sinks.delta.util import (
    MATERIALIZE_SOURCE,
    TXN_APP_ID,
    TXN_VERSION,
    USER_METADATA,
    quote,
    short_error,
)
from gtidsnap.sinks.delta.writes import evolved_schema, prune_condition, retry_conflicts
from gtidsnap.sinks.mirror_route import Key, MergePolicy, route

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

POSITION_KEY = "delta_batch"
# Keys kept per table to route fresh snapshot rows (about 100 bytes each); beyond, that table's rows
# are merged for the rest of the run.
HELD_KEYS_CAP = 500_000


@dataclass
class _Pending:
    """Records of one table waiting for the next commit, with every shape the engine gave for them."""

    schema: TableSchema
    seen: dict[str, Column] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)


@dataclass
class _Waiting:
    """Changes of one table written to its changelog, waiting for the mirror's next MERGE."""

    schema: TableSchema
    seen: dict[str, Column] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    since: float | None = None  # time.monotonic() of the first one


class DeltaSink:
    """The Delta Lake sink (see the package docstring, :mod:`gtidsnap.sinks.delta`, for the layout and
    the exactly-once design).

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
        # Deferred merges (the changelog holds what waits) and the append route of fresh rows:
        interval = settings.merge_interval_s if settings.changelog else 0.0
        self._policy = MergePolicy(interval_s=interval, max_rows=settings.merge_rows)
        self._waiting: dict[TableId, _Waiting] = {}
        self._held: dict[TableId, set[Key] | None] = {}  # absent: not decided yet this run
        self._top_seq: dict[TableId, int] = {}
        self._draining = False

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
                highest = max(highest, recover(self.spark, ref, last or 0).max_batch)
            self._reset()
            if self._catch_up(tables, last or 0, highest + 1):
                highest += 1
        except SinkError:
            raise
        except Exception as exc:  # Spark/Delta/py4j errors: say where
            raise SinkError(f"cannot open the Delta output at {self.root}: {short_error(exc)}") from exc
        self._batch = highest
        self._failed = None
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

    def drain(self) -> None:
        """The run ends: the next commit also MERGEs every change that waits, so the mirrors are whole."""
        self._draining = True

    def commit(self) -> dict[str, int]:
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if not self._pending and not self._merges_due():
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
        if not self._pending and not self._merges_due():
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

    def _merges_due(self) -> bool:
        return any(w.changes and self._due(w) for w in self._waiting.values())

    def _due(self, waiting: _Waiting) -> bool:
        return self._draining or self._policy.due(len(waiting.changes), waiting.since, time.monotonic())

    def _write_batch(self, batch: int, pending: Mapping[TableId, _Pending]) -> None:
        started = time.monotonic()
        due = {t for t, w in self._waiting.items() if w.changes and self._due(w)}
        tables = sorted(set(pending) | due)
        for table in tables:
            crash_point("delta-before-table")
            waiting = self._waiting.get(table)
            batch_part = pending.get(table) or _Pending(waiting.schema if waiting else self._shape(table))
            try:
                self._write_table(table, batch_part, batch)
            except SinkError:
                raise
            except Exception as exc:
                raise SinkError(
                    f"writing batch {batch} of {table} to {self.root} failed: {short_error(exc)}"
                ) from exc
        count = sum(len(p.records) for p in pending.values())
        log.info(
            "batch %d: %d records of %d tables in %.2f s",
            batch,
            count,
            len(tables),
            time.monotonic() - started,
        )

    def close(self) -> None:
        """Drops what was not committed (the replay brings it back) and what waits for a MERGE (the
        next ``open`` takes it from the changelog); the SparkSession stays up."""
        self._reset()
        self._batch = None
        self._failed = None

    def _reset(self) -> None:
        self._pending.clear()
        self._delta_schemas.clear()
        self._delta_keys.clear()
        self._waiting.clear()
        self._held.clear()
        self._top_seq.clear()
        self._draining = False

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
        """One table's part of a batch: fresh snapshot rows appended to the mirror when provably new
        there (:mod:`gtidsnap.sinks.mirror_route`), the rest waiting for the mirror's MERGE while the
        changelog holds it; at most one mirror commit per batch (a due MERGE takes the appends along)."""
        changes = changes_of(pending.schema, pending.records)
        self.spark.sparkContext.setJobDescription(f"gtidsnap batch {batch}: {table}")
        try:
            mirror = mirror_path(self.root, table)
            waiting = self._waiting.setdefault(table, _Waiting(pending.schema))
            waiting.schema = pending.schema
            waiting.seen.update(pending.seen)
            shape = _Pending(waiting.schema, dict(waiting.seen))
            if self._delta_schema(mirror) is None:  # created first: a changelog never lacks its mirror
                self._prepare(table, mirror, shape, delta_types.MIRROR_META, cdf=True)
            routed = route(changes, self._held_keys(table, mirror, changes, waiting))
            if routed.merge and waiting.since is None:
                waiting.since = time.monotonic()
            waiting.changes.extend(changes[i] for i in routed.merge)
            appended = [changes[i] for i in routed.append]
            if changes:
                self._top_seq[table] = max(self._top_seq.get(table, -1), changes[-1].seq)
            if waiting.changes and self._due(waiting):
                merged = last_per_key(waiting.changes + appended)
                self._merge(table, mirror, shape, merged, batch, self._top_seq[table])
                waiting.changes, waiting.since = [], None
            elif appended:
                top = waiting.changes[0].seq - 1 if waiting.changes else self._top_seq[table]
                self._append_mirror(table, mirror, shape, appended, batch, top)
            crash_point("delta-after-mirror")
            if self.settings.changelog and changes:
                self._append(table, changelog_path(self.root, table), pending, changes, batch)
                crash_point("delta-after-changelog")
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    def _held_keys(
        self, table: TableId, mirror: str, changes: Sequence[Change], waiting: _Waiting
    ) -> set[Key] | None:
        """The keys the mirror may hold besides fresh snapshot rows (see :mod:`gtidsnap.sinks.mirror_route`),
        decided once per run when the table's first fresh rows come: nothing but waiting keys if the
        mirror holds no row written by anything but a snapshot row; otherwise not known (None: merge)."""
        if table in self._held:
            held = self._held[table]
            if held is not None and len(held) > HELD_KEYS_CAP:
                log.info(
                    "%s: over %d keys held; its snapshot rows are merged from now on", table, HELD_KEYS_CAP
                )
                self._held[table] = held = None
            return held
        if not any(c.fresh for c in changes):
            return None  # not decided yet: everything merges until fresh rows come
        if has_streamed_rows(self.spark, mirror):
            log.info(
                "%s: its mirror holds streamed rows from before this run: snapshot rows are merged", table
            )
            self._held[table] = None
            return None
        keys: set[Key] = {c.route_key for c in waiting.changes}
        self._held[table] = keys
        return keys

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
                    f"ALTER TABLE delta.`{path}` CHANGE COLUMN {quote(name)} TYPE {data_type.simpleString()}"
                )
                log.warning("%s: column %s widened to %s", path, name, data_type.simpleString())
            self._delta_schemas.pop(path, None)
        return plan

    def _merge(
        self,
        table: TableId,
        path: str,
        pending: _Pending,
        changes: Sequence[Change],
        batch: int,
        merged_seq: int,
    ) -> None:
        plan = self._prepare(table, path, pending, delta_types.MIRROR_META, cdf=True)
        rows, struct = arrow_rows(table, plan, changes, delta_types.MIRROR_META)
        source = self.spark.createDataFrame(rows, schema=struct)
        condition = F.expr(" AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in pending.schema.key))
        condition = prune_condition(condition, plan, pending.schema, changes)
        self._merge_source(path, source, condition, batch, merged_seq)
        self._delta_schemas[path] = evolved_schema(self._delta_schemas.get(path), struct)

    def _merge_source(
        self, path: str, source: DataFrame, condition: SparkColumn, batch: int, merged_seq: int
    ) -> None:
        """MERGE by key, newest ``_seq`` wins; the commit says how far the mirror holds the changelog."""
        from delta.tables import DeltaTable

        merge = (
            DeltaTable.forPath(self.spark, path)
            .alias("t")
            .merge(source.alias("s"), condition)
            .whenMatchedDelete(condition="s._op = 'd' AND s._seq > t._seq")
            .whenMatchedUpdateAll(condition="s._op <> 'd' AND s._seq > t._seq")
            .whenNotMatchedInsertAll(condition="s._op <> 'd'")
            .withSchemaEvolution()
        )
        with self._txn(batch, merged_seq):
            retry_conflicts(lambda: merge.execute(), path)

    def _append_mirror(
        self,
        table: TableId,
        path: str,
        pending: _Pending,
        changes: Sequence[Change],
        batch: int,
        merged_seq: int,
    ) -> None:
        """Fresh snapshot rows whose keys the mirror cannot hold: a plain APPEND (what the MERGE would
        do with them, at the cost of a write)."""
        plan = self._prepare(table, path, pending, delta_types.MIRROR_META, cdf=True)
        rows, struct = arrow_rows(table, plan, changes, delta_types.MIRROR_META)
        frame: DataFrame = self.spark.createDataFrame(rows, schema=struct)
        writer = frame.write.format("delta").mode("append").option("mergeSchema", "true")
        with self._txn(batch, merged_seq):
            retry_conflicts(lambda: writer.save(path), path)
        self._delta_schemas[path] = evolved_schema(self._delta_schemas.get(path), struct)

    def _catch_up(self, tables: Sequence[DeltaTableRef], last: int, batch: int) -> bool:
        """MERGE into each mirror the changelog records it does not hold yet (a run stopped while they
        waited), as batch ``batch``; see :mod:`gtidsnap.sinks.delta.catch_up`. True if any was."""
        from delta.tables import DeltaTable

        caught = 0
        for ref in tables:
            if ref.kind != "mirror":
                continue
            changelog = changelog_path(self.root, ref.table)
            if not DeltaTable.isDeltaTable(self.spark, changelog):
                continue
            held = merged_watermark(history_since(DeltaTable.forPath(self.spark, ref.path), last))
            if held == NOTHING_WAITS:
                continue
            row = self.spark.read.format("delta").load(changelog).agg(F.max("_seq")).first()
            top = row[0] if row is not None else None
            key = recorded_key(self.spark, ref.path)
            if top is None or (held is not None and top <= held) or not key:
                continue
            crash_point("delta-before-catch-up")
            source = changelog_after(self.spark, changelog, key, held)
            condition = F.expr(" AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key))
            self._merge_source(ref.path, source, condition, batch, int(top))
            crash_point("delta-after-catch-up")
            caught += 1
            log.info(
                "%s: caught up with its changelog from _seq %s to %s (batch %d)", ref.path, held, top, batch
            )
        return caught > 0

    def _append(
        self, table: TableId, path: str, pending: _Pending, changes: Sequence[Change], batch: int
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
        retry_conflicts(lambda: writer.save(path), path)
        self._delta_schemas[path] = evolved_schema(self._delta_schemas.get(path), struct)

    @contextmanager
    def _txn(self, batch: int, merged_seq: int) -> Iterator[None]:
        """Session settings of a batch's mirror write: idempotent, tagged with its batch and how far the
        mirror then holds the changelog, its source (in memory, or the changelog) read as is."""
        conf = self.spark.conf
        conf.set(TXN_APP_ID, self.app_id)
        conf.set(TXN_VERSION, str(batch))
        meta = {"gtidsnap_batch": batch, "app_id": self.app_id, MERGED_SEQ: merged_seq}
        conf.set(USER_METADATA, json.dumps(meta))
        conf.set(MATERIALIZE_SOURCE, "none")
        try:
            yield
        finally:
            for key in (TXN_APP_ID, TXN_VERSION, USER_METADATA, MATERIALIZE_SOURCE):
                conf.unset(key)

    def _delta_key(self, path: str) -> list[str] | None:
        """The key a table is merged by, from its table property (None: not recorded)."""
        if path not in self._delta_keys:
            self._delta_keys[path] = recorded_key(self.spark, path)
        return self._delta_keys[path]

    def _delta_schema(self, path: str) -> T.StructType | None:
        from delta.tables import DeltaTable

        if path not in self._delta_schemas:
            if not DeltaTable.isDeltaTable(self.spark, path):
                return None
            self._delta_schemas[path] = DeltaTable.forPath(self.spark, path).toDF().schema
        return self._delta_schemas[path]

    # ------------------------------------------------------------------ position
    def _parse_position(self, committed: Any) -> int | None:
        if committed is None:
            return None
        if isinstance(committed, dict) and isinstance(committed.get(POSITION_KEY), int):
            return int(committed[POSITION_KEY])
        raise SinkError(
            f"the checkpoint's sink position {committed!r} was not written by the Delta sink (was sink.type "
            "changed?): use the checkpoint that belongs to this output, or a new checkpoint and sink.path"
        )
