"""The Delta Lake sink: batches of records written to each table's changelog (append) and mirror
(append of fresh snapshot rows, deferred MERGE of the rest), idempotently per batch (see the package
docstring of :mod:`gtidsnap.sinks.delta`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import ConfigError, SinkError
from gtidsnap.core.model import TableId
from gtidsnap.core.records import Emitted, Record
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.catch_up import (
    NOTHING_WAITS,
    changelog_after,
    has_streamed_rows,
)
from gtidsnap.sinks.delta.layout import (
    absolute_root,
    changelog_path,
    default_app_id,
    list_tables,
    mirror_path,
    recorded_key,
)
from gtidsnap.sinks.delta.mirror_route import Key, MergePolicy, route
from gtidsnap.sinks.delta.recovery import recover
from gtidsnap.sinks.delta.rows import Change, changes_of, last_per_key
from gtidsnap.sinks.delta.tables import DeltaTables, Shape
from gtidsnap.sinks.delta.util import same_key, short_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    the current shape of a captured table, or the last one of a table dropped since (the engine's
    :meth:`gtidsnap.core.schema_cache.SchemaCache.current_or_last`), read when records arrive.
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
        self._tables: DeltaTables | None = None
        # Deferred merges (the changelog holds what waits) and the append route of fresh rows:
        interval = settings.merge_interval_s if settings.changelog else 0.0
        self._policy = MergePolicy(interval_s=interval, max_rows=settings.merge_rows)
        self._waiting: dict[TableId, _Waiting] = {}
        self._held: dict[TableId, set[Key] | None] = {}  # absent: not decided yet this run
        self._top_seq: dict[TableId, int] = {}
        self._draining = False

    @property
    def _mirrors(self) -> bool:
        """Does this sink write the mirrors (else spark/mirror_job.py does, from the changelogs)?"""
        return self.settings.mirror == "gtidsnap"

    def _default_spark(self) -> SparkSession:
        from gtidsnap.spark_session import build_spark_session

        return build_spark_session(master=self.settings.spark_master)

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            raise SinkError("the Delta sink is not open")
        return self._spark

    @property
    def tables(self) -> DeltaTables:
        if self._tables is None:
            raise SinkError("the Delta sink is not open")
        return self._tables

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
            merged: dict[TableId, int | None] = {}  # each mirror's watermark after recovery
            for ref in tables:
                recovery = recover(self.spark, ref, last or 0)
                highest = max(highest, recovery.max_batch)
                if ref.kind == "mirror":
                    merged[ref.table] = recovery.merged_seq
            self._reset()
            self._tables = DeltaTables(self.spark, self.app_id)
            logged = {ref.table for ref in tables if ref.kind == "changelog"}
            if self._mirrors and self._catch_up(
                {t: w for t, w in merged.items() if t in logged}, highest + 1
            ):
                highest += 1
        except SinkError:
            raise
        except Exception as exc:  # Spark/Delta/py4j errors: say where
            raise SinkError(f"cannot open the Delta output at {self.root}: {short_error(exc)}") from exc
        self._batch = highest
        self._failed = None
        log.info("Delta sink at %s open: checkpoint at batch %s, next batch %d", self.root, last, highest + 1)

    def write(self, records: Sequence[Emitted]) -> None:
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if self._failed is not None:
            raise SinkError(
                f"the commit of batch {self._failed} failed: retry commit() or reopen the sink before writing"
            )
        by_table: dict[TableId, list[Record]] = {}
        for r in records:
            if not isinstance(r, Record):  # it has no takes_encoded_rows
                raise SinkError("the Delta sink takes records with values, not encoded snapshot lines")
            by_table.setdefault(r.table, []).append(r)
        for table, rows in by_table.items():
            schema = self.schema_of(table)
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
        arrive (:mod:`gtidsnap.engine.committer`). A failed job is not retried: the engine stops, and the next
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
            batch_part = pending.get(table) or _Pending(self._waiting[table].schema)  # a due MERGE alone
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
        self._tables = None
        self._waiting.clear()
        self._held.clear()
        self._top_seq.clear()
        self._draining = False

    # ------------------------------------------------------------------ writing
    def _write_table(self, table: TableId, pending: _Pending, batch: int) -> None:
        """One table's part of a batch: fresh snapshot rows appended to the mirror when provably new
        there (:mod:`gtidsnap.sinks.delta.mirror_route`), the rest waiting for the mirror's MERGE while the
        changelog holds it; at most one mirror commit per batch (a due MERGE takes the appends along)."""
        changes = changes_of(pending.schema, pending.records)
        self.spark.sparkContext.setJobDescription(f"gtidsnap batch {batch}: {table}")
        try:
            if not self._mirrors:  # the mirror job keeps the mirrors: the changelog is the whole output
                self._append(table, changelog_path(self.root, table), pending, changes, batch)
                crash_point("delta-after-changelog")
                return
            mirror = mirror_path(self.root, table)
            waiting = self._waiting.setdefault(table, _Waiting(pending.schema))
            waiting.schema = pending.schema
            waiting.seen.update(pending.seen)
            shape = Shape(waiting.schema, dict(waiting.seen))
            if self.tables.delta_schema(mirror) is None:  # created first: a changelog never lacks its mirror
                self.tables.prepare(table, mirror, shape, delta_types.MIRROR_META, cdf=True)
            routed = route(changes, self._held_keys(table, mirror, changes, waiting))
            if routed.merge and waiting.since is None:
                waiting.since = time.monotonic()
            waiting.changes.extend(changes[i] for i in routed.merge)
            appended = [changes[i] for i in routed.append]
            if changes:
                self._top_seq[table] = max(self._top_seq.get(table, -1), changes[-1].seq)
            # snapshot rows kept out of the changelog cannot wait for a MERGE: nothing else holds them
            unlogged = not self.settings.changelog_snapshot_rows and any(
                changes[i].op == "r" for i in routed.merge
            )
            if waiting.changes and (unlogged or self._due(waiting)):
                merged = last_per_key(waiting.changes + appended)
                self.tables.merge(table, mirror, shape, merged, batch, self._top_seq[table])
                waiting.changes, waiting.since = [], None
            elif appended:
                top = waiting.changes[0].seq - 1 if waiting.changes else self._top_seq[table]
                self.tables.append_mirror(table, mirror, shape, appended, batch, top)
            crash_point("delta-after-mirror")
            logged = changes
            if not self.settings.changelog_snapshot_rows:
                logged = [c for c in changes if c.op != "r"]
            if self.settings.changelog and logged:
                self._append(table, changelog_path(self.root, table), pending, logged, batch)
                crash_point("delta-after-changelog")
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    def _held_keys(
        self, table: TableId, mirror: str, changes: Sequence[Change], waiting: _Waiting
    ) -> set[Key] | None:
        """The keys the mirror may hold besides fresh snapshot rows (see
        :mod:`gtidsnap.sinks.delta.mirror_route`),
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

    def _catch_up(self, watermarks: Mapping[TableId, int | None], batch: int) -> bool:
        """MERGE into each mirror (with a changelog; by its watermark, from its recovery) the changelog
        records it does not hold yet (a run stopped while they waited), as batch ``batch``; see
        :mod:`gtidsnap.sinks.delta.catch_up`. True if any was."""
        caught = 0
        for table, held in sorted(watermarks.items()):
            if held == NOTHING_WAITS:
                continue
            mirror, changelog = mirror_path(self.root, table), changelog_path(self.root, table)
            row = self.spark.read.format("delta").load(changelog).agg(F.max("_seq")).first()
            top = row[0] if row is not None else None
            key = recorded_key(self.spark, mirror)
            if top is None or (held is not None and top <= held) or not key:
                continue
            crash_point("delta-before-catch-up")
            source = changelog_after(self.spark, changelog, key, held)
            condition = F.expr(same_key(key))
            self.tables.merge_source(mirror, source, condition, batch, int(top))
            crash_point("delta-after-catch-up")
            caught += 1
            log.info(
                "%s: caught up with its changelog from _seq %s to %s (batch %d)", mirror, held, top, batch
            )
        return caught > 0

    def _append(
        self, table: TableId, path: str, pending: _Pending, changes: Sequence[Change], batch: int
    ) -> None:
        self.tables.append_changelog(table, path, Shape(pending.schema, pending.seen), changes, batch)

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
