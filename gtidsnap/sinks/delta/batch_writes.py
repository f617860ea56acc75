"""One table's part of a Delta batch: its changelog rows appended, its snapshot rows staged (or, from
remote readers, named where they were staged), its streamed changes handed with them to its mirror's
keeper (:mod:`gtidsnap.sinks.delta.mirror.keeper` decides when the mirror takes them)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.core.records import ChangeLines, Emitted, Record, SnapshotColumns, SnapshotLines
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.arrow_columns import StagedRows
from gtidsnap.sinks.delta import staging
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.catch_up import FIRST_SEQ
from gtidsnap.sinks.delta.change_rows import conformed, plan_schema, record_rows, snapshot_rows
from gtidsnap.sinks.delta.changelog_appends import LogAppend
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.file_commits import write_data_file
from gtidsnap.sinks.delta.history import create_history
from gtidsnap.sinks.delta.layout import DeltaTableRef, changelog_path, history_path, mirror_path
from gtidsnap.sinks.delta.mirror.file_appends import staged_mirror_rows
from gtidsnap.sinks.delta.mirror.keeper import Handover
from gtidsnap.sinks.delta.staged_frames import staged_frame
from gtidsnap.sinks.delta.streamed_rows import StreamedRows
from gtidsnap.sinks.delta.tables import DeltaTables, Shape, stats_columns

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")


@dataclass
class Pending:
    """One table's part of the batch being filled: its streamed changes, snapshot records and chunks,
    with every shape the engine gave for them."""

    schema: TableSchema
    seen: dict[str, Column] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)  # snapshot rows read as records
    changes: StreamedRows = field(default_factory=StreamedRows)  # streamed records, as Arrow
    chunks: list[SnapshotColumns] = field(default_factory=list)


def by_table(records: Sequence[Emitted]) -> dict[TableId, list[Record | SnapshotColumns]]:
    """``records`` by table, in their order; encoded snapshot lines refused (a JSON-lines form)."""
    tables: dict[TableId, list[Record | SnapshotColumns]] = {}
    table, group = None, []
    for r in records:
        if isinstance(r, SnapshotLines | ChangeLines):
            raise SinkError("the Delta sink takes records and columns, not encoded JSON lines")
        if r.table is not table:  # an event's records share one table object: one lookup an event
            table, group = r.table, tables.setdefault(r.table, [])
        group.append(r)
    return tables


class TableWriter:
    """Writes tables' parts of batches for a sink (see the module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        tables: DeltaTables,
        root: str,
        app_id: str,
        settings: SinkSettings,
        txn: bool = True,
    ) -> None:
        self.spark, self.tables, self.root, self.app_id, self.settings = spark, tables, root, app_id, settings
        # Delta's txn ids make a retried batch a no-op; an engine never retries one (it stops, and the
        # next open undoes what the batch wrote), so it spares their cost (~1 s and 2 CPU-s an append)
        self.txn = txn
        # changelog rows written as files, committed once their checkpoint is saved (changelog_appends)
        self.defer_log = False
        self.deferred: list[LogAppend] = []  # the appends of the batch being written
        self._seen: dict[TableId, dict[str, Column]] = {}  # every column a table's mirror was given
        self.keeps_mirrors = settings.mirror == "gtidsnap"
        self.logs_snapshot_rows = settings.changelog and (  # the history is kept from the changelog
            settings.changelog_snapshot_rows or settings.history or not self.keeps_mirrors
        )

    def mirror_shape(self, table: TableId, schema: TableSchema, seen: dict[str, Column]) -> Shape:
        """The shape a table's mirror is written with: the current one, every column it was given."""
        known = self._seen.setdefault(table, {})
        known.update(seen)
        return Shape(schema, dict(known))

    def create(self, table: TableId, schema: TableSchema) -> list[DeltaTableRef]:
        """The tables of ``table`` consumers read, created empty where missing (the mirror, the changelog
        and its history, as the settings keep them): a batch's writes find them as they would have
        made them. Those that exist now."""
        seen = {c.name: c for c in schema.columns}
        made: list[DeltaTableRef] = []
        if self.keeps_mirrors:
            path, shape = mirror_path(self.root, table), self.mirror_shape(table, schema, seen)
            self.tables.prepare(table, path, shape, delta_types.MIRROR_META, cdf=True)
            made.append(DeltaTableRef(table, "mirror", path))
        if self.settings.changelog:
            path = changelog_path(self.root, table)
            self.tables.prepare(table, path, Shape(schema, seen), delta_types.CHANGELOG_META, cdf=False)
            made.append(DeltaTableRef(table, "changelog", path))
            history = history_path(self.root, table)
            if self.settings.history and self.tables.delta_schema(history) is None:
                logged = self.tables.delta_schema(path)
                assert logged is not None
                create_history(self.spark, history, table, schema.key, logged)
            if self.settings.history:
                made.append(DeltaTableRef(table, "history", history))
        return made

    def write(self, table: TableId, part: Pending, batch: int) -> Handover | None:
        """One table's part of a batch: its changelog rows appended, its snapshot rows staged; what it
        hands the table's mirror (None: no mirror is kept)."""
        shape = Shape(part.schema, dict(part.seen))
        streamed, snapshot = part.changes, part.records
        self.spark.sparkContext.setJobDescription(f"gtidsnap batch {batch}: {table}")
        try:
            if self.keeps_mirrors:  # created (or widened) first: a changelog never lacks its mirror
                handover = self._mirror_handover(table, part)
            logged = None  # the streamed records' changelog rows, built once
            if self.settings.changelog:
                logged = self._append_changelog(table, shape, streamed, snapshot, part.chunks, batch)
            if not self.keeps_mirrors:
                return None
            plan = handover.plan
            if streamed.count:
                handover.waiting.append(_mirror_rows(plan, streamed, logged))
            for fresh in (True, False):
                rows = [r for r in snapshot if r.fresh is fresh]
                chunks = [c for c in part.chunks if c.fresh is fresh and not isinstance(c.rows, StagedRows)]
                if rows or chunks:
                    handover.staged.append(self._stage(table, handover, rows, chunks, fresh, batch))
            for chunk in part.chunks:  # staged where they were read: only named here
                if isinstance(chunk.rows, StagedRows) and len(chunk.rows):
                    handover.staged.append(
                        staging.staged_split(table, chunk.rows, chunk.first_seq, chunk.source_ts, chunk.fresh)
                    )
            return handover
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    def _mirror_handover(self, table: TableId, part: Pending) -> Handover:
        shape = self.mirror_shape(table, part.schema, part.seen)
        mirror = mirror_path(self.root, table)
        plan = self.tables.prepare(table, mirror, shape, delta_types.MIRROR_META, cdf=True)
        return Handover(shape, plan, created=mirror in self.tables.created)

    def _append_changelog(
        self,
        table: TableId,
        shape: Shape,
        streamed: StreamedRows,
        snapshot: Sequence[Record],
        chunks: Sequence[SnapshotColumns],
        batch: int,
    ) -> pa.Table | None:
        """Appends the batch's changelog rows; the streamed records' rows (None: none)."""
        path = changelog_path(self.root, table)
        logs_snapshot = self.logs_snapshot_rows
        if not streamed.count and not (logs_snapshot and (snapshot or chunks)):
            return None
        plan = self.tables.prepare(table, path, shape, delta_types.CHANGELOG_META, cdf=False)
        changes = streamed.rows(plan)
        parts = [changes] if changes is not None else []
        splits = [c for c in chunks if isinstance(c.rows, StagedRows)] if logs_snapshot else []
        if logs_snapshot:
            if snapshot:
                parts.append(record_rows(table, shape.schema, plan, snapshot, changelog=True))
            local = [c for c in chunks if not isinstance(c.rows, StagedRows)]
            if local:
                parts.append(snapshot_rows(plan, local, changelog=True))
        schema = changelog_schema(plan, changelog=True)
        if self.defer_log:
            self._write_log_files(table, path, plan, schema, parts, splits, shape.schema.key, batch)
            crash_point("delta-after-changelog")
            return changes
        meta: dict[str, Any] = {"gtidsnap_batch": batch, "app_id": self.app_id}
        firsts = [c.first_seq for c in splits]
        firsts += [pc.min(p.column("_seq")).as_py() for p in parts if p.num_rows]
        if firsts:  # the lowest _seq it writes (recovery never undoes one below a checkpoint's next_seq)
            meta[FIRST_SEQ] = int(min(firsts))
        if splits:  # read by Spark from where the remote readers staged them
            files = [
                staging.staged_split(table, c.rows, c.first_seq, c.source_ts, c.fresh)
                for c in splits
                if isinstance(c.rows, StagedRows) and len(c.rows)
            ]
            frame = staged_frame(self.spark, files, plan, changelog=True)
            if parts:
                rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
                frame = frame.unionByName(self.spark.createDataFrame(rows, schema=schema))
            self.tables.append_frame(path, frame, batch, self.app_id, meta, self.txn)
            crash_point("delta-after-changelog")
            return changes
        if not parts:
            return None
        rows = pa.concat_tables(parts).sort_by("_seq") if len(parts) > 1 else parts[0]
        self.tables.append_arrow(path, rows, schema, batch, meta, self.txn, key=shape.schema.key)
        crash_point("delta-after-changelog")
        return changes

    def _write_log_files(
        self,
        table: TableId,
        path: str,
        plan: ColumnPlan,
        schema: Any,
        parts: list[pa.Table],
        splits: Sequence[SnapshotColumns],
        key: Sequence[str],
        batch: int,
    ) -> None:
        """The batch's changelog rows as one data file of the changelog, not committed yet: a
        :class:`LogAppend` the sink commits once the batch's checkpoint is saved. A column the changelog
        lacks is added first (a metadata commit, no rows), so the file is of the table's own columns."""
        self.tables.add_columns(path, schema)
        pieces: list[Iterable[pa.Table]] = []
        if parts:
            rows = pa.concat_tables(parts).sort_by("_seq") if len(parts) > 1 else parts[0]
            pieces.append([conformed(rows, plan, changelog=True)])
        for chunk in splits:  # read where the remote readers staged them, as the changelog's rows
            if isinstance(chunk.rows, StagedRows) and len(chunk.rows):
                split = staging.staged_split(table, chunk.rows, chunk.first_seq, chunk.source_ts, chunk.fresh)
                pieces.append(staged_mirror_rows(split, plan, changelog=True))
        target = plan_schema(plan, changelog=True)
        written = write_data_file(path, itertools.chain(*pieces), target, stats_columns(key, mirror=False))
        if written is not None:
            self.deferred.append(LogAppend(table, batch, (written,)))

    def _stage(
        self,
        table: TableId,
        handover: Handover,
        records: Sequence[Record],
        chunks: Sequence[SnapshotColumns],
        fresh: bool,
        batch: int,
    ) -> staging.StagedFile:
        """Snapshot rows as one staged file of the mirror (see :mod:`gtidsnap.sinks.delta.staging`)."""
        plan = handover.plan
        parts = [snapshot_rows(plan, chunks, changelog=False)] if chunks else []
        if records:
            parts.append(record_rows(table, handover.shape.schema, plan, records, changelog=False))
        rows = pa.concat_tables(parts).sort_by("_seq") if len(parts) > 1 else parts[0]
        name = f"b{batch}-{'fresh' if fresh else 'merge'}"
        staged = staging.write_staged(self.root, table, name, rows, fresh)
        crash_point("delta-after-staging")
        return staged


def _mirror_rows(plan: ColumnPlan, streamed: StreamedRows, logged: pa.Table | None) -> pa.Table:
    """The streamed records as the mirror's rows: their changelog rows (``logged``, else built now)
    without ``_snapshot``, as columns of the mirror's ``plan``."""
    rows = logged if logged is not None else streamed.rows(plan)
    assert rows is not None
    return conformed(rows.drop_columns(["_snapshot"]), plan, changelog=False)


def changelog_schema(plan: ColumnPlan, changelog: bool) -> Any:
    from pyspark.sql import types as T

    meta = delta_types.CHANGELOG_META if changelog else delta_types.MIRROR_META
    fields = [T.StructField(c.name, c.data_type, True) for c in plan.columns]
    return T.StructType(fields + list(meta))
