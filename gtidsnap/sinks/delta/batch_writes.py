"""One table's part of a Delta batch: its changelog rows appended, its snapshot rows staged (or, from
remote readers, named where they were staged), its streamed changes left waiting for its mirror's
update (:mod:`gtidsnap.sinks.delta.sink` decides when that is)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.model import TableId
from gtidsnap.core.records import Record, SnapshotColumns
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.arrow_columns import StagedRows
from gtidsnap.sinks.delta import staging
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.catch_up import has_streamed_rows
from gtidsnap.sinks.delta.change_rows import plan_schema, record_rows, snapshot_rows
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.layout import changelog_path, mirror_path
from gtidsnap.sinks.delta.mirror_writes import MirrorState, staged_frame
from gtidsnap.sinks.delta.tables import DeltaTables, Shape

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")


@dataclass
class Pending:
    """One table's part of the batch being filled: its records and snapshot chunks, with every shape the
    engine gave for them."""

    schema: TableSchema
    seen: dict[str, Column] = field(default_factory=dict)
    records: list[Record] = field(default_factory=list)
    chunks: list[SnapshotColumns] = field(default_factory=list)


@dataclass
class MirrorEntry:
    """A table's mirror as the sink keeps it: its state and the last shape written with."""

    state: MirrorState
    shape: Shape
    catch_up: tuple[int | None, int] | None = None  # changelog records merged at the next update: (from, to)


class TableWriter:
    """Writes tables' parts of batches for a sink (see the module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        tables: DeltaTables,
        root: str,
        app_id: str,
        settings: SinkSettings,
        entry: Callable[[TableId], MirrorEntry],
    ) -> None:
        self.spark, self.tables, self.root, self.app_id, self.settings = spark, tables, root, app_id, settings
        self.entry = entry
        self.keeps_mirrors = settings.mirror == "gtidsnap"
        self.logs_snapshot_rows = settings.changelog and (
            settings.changelog_snapshot_rows or not self.keeps_mirrors
        )

    def write(self, table: TableId, part: Pending, batch: int) -> None:
        """One table's part of a batch: its changelog rows appended, its snapshot rows staged, its
        streamed changes left waiting for the mirror's update."""
        shape = Shape(part.schema, dict(part.seen))
        streamed = [r for r in part.records if r.op != "r"]
        snapshot = [r for r in part.records if r.op == "r"]
        self.spark.sparkContext.setJobDescription(f"gtidsnap batch {batch}: {table}")
        try:
            if self.keeps_mirrors:  # created first: a changelog never lacks its mirror
                entry = self.entry(table)
                entry.shape = Shape(part.schema, {**entry.shape.seen, **part.seen})
                plan = self.tables.prepare(
                    table, mirror_path(self.root, table), entry.shape, delta_types.MIRROR_META, cdf=True
                )
            if self.settings.changelog:
                self._append_changelog(table, shape, streamed, snapshot, part.chunks, batch)
            if not self.keeps_mirrors:
                return
            state = entry.state
            if streamed:
                state.wait(record_rows(table, part.schema, plan, streamed, changelog=False))
            for fresh in (True, False):
                rows = [r for r in snapshot if r.fresh is fresh]
                chunks = [c for c in part.chunks if c.fresh is fresh and not isinstance(c.rows, StagedRows)]
                if rows or chunks:
                    self._stage(table, entry, plan, rows, chunks, fresh, batch)
            for chunk in part.chunks:  # staged where they were read: only named here
                if isinstance(chunk.rows, StagedRows) and len(chunk.rows):
                    split = staging.staged_split(
                        table, chunk.rows, chunk.first_seq, chunk.source_ts, chunk.fresh
                    )
                    entry.state.staged.append(split)
                    self._held_decided(table, entry, plan)
        finally:
            self.spark.sparkContext.setJobDescription(None)  # type: ignore[arg-type]

    def _append_changelog(
        self,
        table: TableId,
        shape: Shape,
        streamed: Sequence[Record],
        snapshot: Sequence[Record],
        chunks: Sequence[SnapshotColumns],
        batch: int,
    ) -> None:
        path = changelog_path(self.root, table)
        logs_snapshot = self.logs_snapshot_rows
        if not streamed and not (logs_snapshot and (snapshot or chunks)):
            return
        plan = self.tables.prepare(table, path, shape, delta_types.CHANGELOG_META, cdf=False)
        parts = [record_rows(table, shape.schema, plan, streamed, changelog=True)] if streamed else []
        splits = [c for c in chunks if isinstance(c.rows, StagedRows)] if logs_snapshot else []
        if logs_snapshot:
            if snapshot:
                parts.append(record_rows(table, shape.schema, plan, snapshot, changelog=True))
            local = [c for c in chunks if not isinstance(c.rows, StagedRows)]
            if local:
                parts.append(snapshot_rows(plan, local, changelog=True))
        schema = changelog_schema(plan, changelog=True)
        meta = {"gtidsnap_batch": batch, "app_id": self.app_id}
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
            self.tables.append_frame(path, frame, batch, self.app_id, meta)
            crash_point("delta-after-changelog")
            return
        if not parts:
            return
        rows = pa.concat_tables(parts).sort_by("_seq") if len(parts) > 1 else parts[0]
        self.tables.append_arrow(path, rows, schema, batch, meta)
        crash_point("delta-after-changelog")

    def _stage(
        self,
        table: TableId,
        entry: MirrorEntry,
        plan: ColumnPlan,
        records: Sequence[Record],
        chunks: Sequence[SnapshotColumns],
        fresh: bool,
        batch: int,
    ) -> None:
        """Snapshot rows as one staged file of the mirror (see :mod:`gtidsnap.sinks.delta.staging`)."""
        parts = [snapshot_rows(plan, chunks, changelog=False)] if chunks else []
        if records:
            parts.append(record_rows(table, entry.shape.schema, plan, records, changelog=False))
        rows = pa.concat_tables(parts).sort_by("_seq") if len(parts) > 1 else parts[0]
        name = f"b{batch}-{'fresh' if fresh else 'merge'}"
        entry.state.staged.append(staging.write_staged(self.root, table, name, rows, fresh))
        crash_point("delta-after-staging")
        self._held_decided(table, entry, plan)

    def _held_decided(self, table: TableId, entry: MirrorEntry, plan: ColumnPlan) -> None:
        state = entry.state
        if not state.held_known:  # decided once a run, when the table's first snapshot rows come
            state.held_known = True
            if has_streamed_rows(self.spark, mirror_path(self.root, table)):
                log.info(
                    "%s: its mirror holds streamed rows from before: its snapshot rows are merged", table
                )
                state.held = None
            else:
                state.held = pa.schema(
                    [plan_schema(plan, False).field(k) for k in entry.shape.schema.key]
                ).empty_table()


def changelog_schema(plan: ColumnPlan, changelog: bool) -> Any:
    from pyspark.sql import types as T

    meta = delta_types.CHANGELOG_META if changelog else delta_types.MIRROR_META
    fields = [T.StructField(c.name, c.data_type, True) for c in plan.columns]
    return T.StructType(fields + list(meta))
