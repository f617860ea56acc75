"""The Delta Lake sink: each batch writes its changelog rows (committed once its checkpoint is saved:
:mod:`.changelog_appends`) and stages its snapshot rows as Parquet files; a table's mirror is updated
when due, by one APPEND of its staged rows (folded with newer changes) and one MERGE of the rest
(:mod:`.mirror.rule`), in the background once the batch's checkpoint is saved (:mod:`.mirror.keeper`;
see the package docstring of :mod:`gtidsnap.sinks.delta`). Snapshot rows come from the chunk readers as
Arrow columns (:class:`SnapshotColumns`, :meth:`DeltaSink.chunk_renderer`): never Python objects here,
they go to Delta in large appends, since Spark pays per commit and per file, not per row.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import ConfigError, GtidsnapError, SinkError
from gtidsnap.core.model import TableId
from gtidsnap.core.ports import HeldSeq
from gtidsnap.core.records import Emitted, Record, SnapshotColumns
from gtidsnap.core.schema import TableSchema
from gtidsnap.sinks.arrow_columns import ArrowRenderer, StagedRenderer
from gtidsnap.sinks.delta import staging
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.batch_writes import Pending, TableWriter, by_table
from gtidsnap.sinks.delta.catalog_names import Registrar, sink_spark_session
from gtidsnap.sinks.delta.catch_up import NOTHING_WAITS, changelog_after
from gtidsnap.sinks.delta.changelog_appends import commit_append, finish_appends
from gtidsnap.sinks.delta.consistent_points import point_of, record_point
from gtidsnap.sinks.delta.history_keeper import HistoryKeeper
from gtidsnap.sinks.delta.jvm_delta import delta_gate
from gtidsnap.sinks.delta.layout import (
    absolute_root,
    changelog_path,
    default_app_id,
    list_tables,
    mirror_path,
    recorded_key,
)
from gtidsnap.sinks.delta.mirror.keeper import Handover, MirrorEntry, MirrorKeeper
from gtidsnap.sinks.delta.mirror.update import MirrorState, MirrorWriter
from gtidsnap.sinks.delta.position import POSITION_KEY, SinkPosition, appends_of, parse_position
from gtidsnap.sinks.delta.recovery import CutRefused, greater, recover_all
from gtidsnap.sinks.delta.staged_frames import spark_schema
from gtidsnap.sinks.delta.tables import DeltaTables, TableLayout, warm_up
from gtidsnap.sinks.delta.util import short_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")


class DeltaSink:
    """The Delta Lake sink (see the package docstring, :mod:`gtidsnap.sinks.delta`, for the layout and
    the exactly-once design). ``spark_factory`` gives the SparkSession when the sink opens (default:
    :func:`gtidsnap.sinks.delta.spark_session.build_spark_session` on ``settings.spark_master``);
    ``schema_of`` is the current shape of a captured table, or the last one of a table dropped since
    (the engine's :meth:`gtidsnap.core.schema_cache.SchemaCache.current_or_last`), read when records
    arrive.
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
        self._pending: dict[TableId, Pending] = {}
        self._tables: DeltaTables | None = None
        self._keeper: MirrorKeeper | None = None
        self._table_writer: TableWriter | None = None
        self._checkpoints_reported = False  # an engine says when each checkpoint is saved
        self._draining = False
        self._final: int | None = None  # the batch sealed once the run drains: its checkpoint ends it
        self._done: list[staging.StagedFile] = []  # appended: deleted once no checkpoint names them
        self._held: HeldSeq | None = None  # the greatest _seq in the output when it opened
        self._history: HistoryKeeper | None = None  # sink.history's tables, kept from the changelogs
        self._names: Registrar | None = None  # sink.database: the tables by name
        self._pointed = 0  # the batch of the last point recorded (consistent_points)
        self._to_prepare: dict[TableId, TableSchema] = {}  # captured tables: the next batch makes theirs
        self._by_files = True  # data files committed through Delta's transaction API (jvm_delta's gate)

    @property
    def _keeps_mirrors(self) -> bool:
        """Does this sink write the mirrors (else spark/mirror_job.py does, from the changelogs)?"""
        return self.settings.mirror == "gtidsnap"

    def _default_spark(self) -> SparkSession:
        return sink_spark_session(self.settings, self.root)

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

    def chunk_renderer(self, remote: bool) -> ArrowRenderer | StagedRenderer:
        """Chunk readers build their rows as Arrow columns in the Delta types; remote ones (Spark
        executors) write them under the output's staging folder, so no row comes to this process."""
        return StagedRenderer(staging.splits_folder(self.root)) if remote else ArrowRenderer()

    @property
    def keeper(self) -> MirrorKeeper:
        if self._keeper is None:
            raise SinkError("the Delta sink is not open")
        return self._keeper

    # ------------------------------------------------------------------ Sink protocol
    def report_checkpoints(self) -> None:
        """The engine will call :meth:`checkpointed` after each checkpoint it saves: the mirrors are
        then updated in the background (with a changelog; see :mod:`.mirror.keeper`)."""
        self._checkpoints_reported = True

    def checkpointed(self, position: Any, saved: Checkpoint | None = None) -> None:
        """The checkpoint naming ``position`` is saved (``saved``): what its batch handed the mirrors is
        theirs, and the point it stands for is recorded (:mod:`.consistent_points`); at the end of a
        run, wait until every mirror holds it (raising a failed update's error)."""
        if not isinstance(position, dict):
            return
        for append in appends_of(position):  # the changelog takes checkpointed batches only
            commit_append(self.spark, self.root, append, self.app_id, self._by_files)
        batch = int(position[POSITION_KEY])
        if saved is not None and batch > self._pointed:
            self._record_point(batch, position, saved)
        if self._keeper is None:
            return
        self._keeper.checkpointed(batch)
        if self._final is not None and batch >= self._final:
            self._keeper.finish(wait=True)
            if self._history is not None:  # the changelogs are whole: the histories are made so too
                self._history.finish(final=True)

    def _record_point(self, batch: int, position: dict[str, Any], saved: Checkpoint) -> None:
        pending: dict[TableId, int] = {}
        for file in parse_position(position).staged:
            pending[file.table] = max(pending.get(file.table, -1), file.last_seq)
        writer = self._table_writer
        logged = writer is not None and writer.logs_snapshot_rows
        try:
            point = point_of(saved, batch, pending, logged)
            record_point(self.spark, self.root, point, self.app_id, self._pointed > 0, self._by_files)
        except Exception as exc:
            problem = f"recording the point of batch {batch} under {self.root} failed: {short_error(exc)}"
            raise SinkError(problem) from exc
        self._pointed = batch

    def open_checked(self, committed: Any, next_seq: int) -> str | None:
        """:meth:`open`, unless recovery would undo records below ``next_seq`` (nothing undone)."""
        try:
            self.open(committed, next_seq)
        except CutRefused as exc:
            return str(exc)
        return None

    def open(self, committed: Any, next_seq: int | None = None) -> None:
        position = parse_position(committed)
        last, staged = position.batch, position.staged
        try:
            self._spark = self._spark_factory()
            self._by_files = delta_gate(self.spark).fast_paths  # the fast paths: on the tested Delta
            tables = list_tables(self.spark, self.root)
            recovered = recover_all(self.spark, self.root, tables, last, next_seq)
            # the checkpointed changelog appends a stopped run did not commit: before any catch-up
            finish_appends(self.spark, self.root, position.appends, self.app_id, self._by_files)
            self._names = Registrar.of(self.spark, self.settings, [t for t in tables if t.kind != "history"])
            self._held = greater(recovered.held, position.staged_held())
            self._reset()
            started = time.monotonic()
            staging.remove_folder(staging.warm_up_folder(self.root))
            warm_up(self.spark, staging.warm_up_folder(self.root))
            staging.remove_folder(staging.warm_up_folder(self.root))
            log.debug("Delta writes warmed up in %.1f s", time.monotonic() - started)
            self._tables = DeltaTables(self.spark, self.app_id, TableLayout.of(self.settings), self._by_files)
            retried = not self._checkpoints_reported  # commit() may be retried: idempotent Delta txns
            self._table_writer = TableWriter(
                self.spark, self._tables, self.root, self.app_id, self.settings, txn=retried
            )
            self._table_writer.defer_log = self._checkpoints_reported  # committed once checkpointed
            settings = self.settings  # merge_interval_s = 0: each batch brings its mirrors up to date
            background = self._checkpoints_reported and settings.changelog and settings.merge_interval_s > 0
            background = background and self._keeps_mirrors
            spark = self.spark.newSession() if background else self.spark  # its own conf (commit tags)
            tables_ = self._tables
            if background:
                tables_ = DeltaTables(spark, self.app_id, TableLayout.of(settings), self._by_files)
            writer = MirrorWriter(spark, tables_, self.app_id)
            self._keeper = MirrorKeeper(spark, writer, self.root, self.settings, background)
            logged = {ref.table for ref in tables if ref.kind == "changelog"}
            self._resume_mirrors(recovered.watermarks, logged, staged, last or 0)
            self._keeper.start()
            if settings.history and self._checkpoints_reported:  # changelogs of checkpointed data only
                history = self.spark.newSession()
                self._history = HistoryKeeper(history, self.root, settings.merge_interval_s, self._names)
                self._history.start()
        except GtidsnapError:  # ours say what they are (a ConfigError stays one: no retry helps)
            raise
        except Exception as exc:  # Spark/Delta/py4j errors: say where
            raise SinkError(f"cannot open the Delta output at {self.root}: {short_error(exc)}") from exc
        self._batch = recovered.highest
        self._failed = None
        log.info(
            "Delta sink at %s open: checkpoint at batch %s, next batch %d", self.root, last, self._batch + 1
        )

    def greatest_seq(self) -> HeldSeq | None:
        """The greatest ``_seq`` the output is known to hold once open: read by recovery (changelogs'
        file statistics, mirrors' commit watermarks) and from the staged files the checkpoint names."""
        return self._held

    def _resume_mirrors(
        self,
        watermarks: Mapping[TableId, tuple[int | None, int]],
        logged: set[TableId],
        staged: Sequence[staging.StagedFile],
        last: int,
    ) -> None:
        """Staged files the checkpoint names wait again (those the mirror already holds are deleted);
        other staged files are deleted; a mirror behind its changelog catches up at the next update."""
        pending: list[staging.StagedFile] = []
        for file in staged:
            held = watermarks.get(file.table, (None, -1))[1]
            (self._done if file.last_seq <= held else pending).append(file)
        staging.remove(self._done)
        self._done = []
        for removed in staging.remove_unlisted(self.root, pending):
            log.info("removed %s: staged by a batch whose checkpoint was never saved", removed)
        if not self._keeps_mirrors:
            return
        for table in sorted({*(f.table for f in pending), *(t for t in watermarks if t in logged)}):
            merged, staged_seq = watermarks.get(table, (None, -1))
            schema = self.schema_of(table)
            shape = self._writer_of_tables().mirror_shape(table, schema, {c.name: c for c in schema.columns})
            plan = self.tables.prepare(
                table, mirror_path(self.root, table), shape, delta_types.MIRROR_META, cdf=True
            )
            state = MirrorState(staged=[f for f in pending if f.table == table], staged_seq=staged_seq)
            entry = MirrorEntry(state, shape, plan)
            if table in logged and merged != NOTHING_WAITS:
                self._catch_up(table, entry, merged)
            self.keeper.resume(table, entry, last)

    def _catch_up(self, table: TableId, entry: MirrorEntry, merged: int | None) -> None:
        """The changelog's records the mirror does not hold yet (a run stopped while they waited): they
        wait again, and the mirror's next update (at once, by its keeper) merges them."""
        mirror, changelog = mirror_path(self.root, table), changelog_path(self.root, table)
        key = recorded_key(self.spark, mirror)
        if not key:
            return
        rows = changelog_after(self.spark, changelog, key, merged).toArrow()
        if rows.num_rows:
            entry.state.wait(rows)
            entry.catch_up = (merged, entry.state.top_seq)

    def write(self, records: Sequence[Emitted]) -> None:
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if self._failed is not None:
            raise SinkError(
                f"the commit of batch {self._failed} failed: retry commit() or reopen the sink before writing"
            )
        for table, group in by_table(records).items():
            schema = self.schema_of(table)  # the shape the rows were written with: the current one
            part = self._pending.get(table)
            if part is None:
                part = self._pending[table] = Pending(schema, {c.name: c for c in schema.columns})
            elif schema is not part.schema:
                part.schema = schema
                part.seen.update({c.name: c for c in schema.columns})
            streamed: list[Record] = []
            for r in group:
                if isinstance(r, SnapshotColumns):
                    part.chunks.append(r)
                elif r.op == "r":
                    part.records.append(r)
                else:
                    streamed.append(r)
            if streamed:
                part.changes.add(streamed, schema)

    def snapshots_pending(self, tables: frozenset[TableId]) -> None:
        self.keeper.reading = tables

    def drain(self) -> None:
        """The run ends: every mirror is brought up to date (inline: by the next commit; in the
        background: before :meth:`checkpointed` of the next commit returns), so the output is whole."""
        self._draining = True
        self.keeper.drain()

    def prepare(self, shapes: Mapping[TableId, TableSchema]) -> None:
        """Captured tables: their mirror, changelog and history (as the settings have them) are created
        empty by the next batch, and named in the catalog, so consumers can start reading at once."""
        self._to_prepare.update(shapes)

    def commit(self) -> dict[str, Any]:
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if not self._pending and not self._to_prepare and not self.keeper.due():
            self._mark_final(self._batch)
            return self._position(self._batch)
        batch = self._batch + 1
        self._mark_final(batch)
        self._failed = batch
        self._write_batch(batch, self._pending, self._to_prepare)
        self._pending, self._to_prepare = {}, {}
        self._batch, self._failed = batch, None
        return self._position(batch)

    def seal(self) -> Callable[[], dict[str, Any]]:
        """The batch so far, to be committed by the returned job in another thread while new records
        arrive (:mod:`gtidsnap.engine.committer`). A failed job is not retried: the engine stops, and
        the next ``open`` puts back whatever the batch wrote without a checkpoint."""
        if self._batch is None:
            raise SinkError("the Delta sink is not open")
        if self._failed is not None:
            raise SinkError(f"the commit of batch {self._failed} failed: reopen the sink")
        if not self._pending and not self._to_prepare and not self.keeper.due():
            self._mark_final(self._batch)
            position = self._position(self._batch)
            return lambda: position
        batch, pending, prepare = self._batch + 1, self._pending, self._to_prepare
        self._mark_final(batch)
        self._batch, self._pending, self._to_prepare = batch, {}, {}

        def job() -> dict[str, Any]:
            try:
                self._write_batch(batch, pending, prepare)
            except BaseException:
                self._failed = batch
                raise
            return self._position(batch)

        return job

    def _mark_final(self, batch: int) -> None:
        """Once the run drains, the checkpoint of ``batch`` (the last) brings the mirrors up to date."""
        self._final = batch if self._draining else None

    def close(self) -> None:
        """Drops what was not committed (the replay brings it back) and what waits for the mirror (the
        next ``open`` finds it in the changelog and the staged files); the SparkSession stays up."""
        if self._keeper is not None:
            self._keeper.finish(wait=False)  # an update under way ends first
            if self._draining and self._keeper.background:  # appended after the last checkpoint
                with contextlib.suppress(OSError):
                    staging.remove(self._keeper.position_files()[1])
        if self._history is not None:
            self._history.finish(final=False)
        self._reset()
        self._batch = None
        self._failed = None

    def _writer_of_tables(self) -> TableWriter:
        if self._table_writer is None:
            raise SinkError("the Delta sink is not open")
        return self._table_writer

    def _reset(self) -> None:
        self._pending.clear()
        self._tables = self._keeper = self._history = self._table_writer = None
        self._draining, self._final = False, None

    # ------------------------------------------------------------------ writing
    def _write_batch(
        self, batch: int, pending: Mapping[TableId, Pending], prepare: Mapping[TableId, TableSchema]
    ) -> None:
        started = time.monotonic()
        keeper = self.keeper
        keeper.check()  # a failed background update stops the run
        if self._history is not None:
            self._history.check()
        staging.remove(self._done)  # appended before the checkpoint the last batch saved
        self._done = []
        saved = keeper.saved() if not keeper.background else None
        try:
            self._create_tables(prepare)
            self._write_tables(batch, pending)
        except BaseException:  # a retried batch starts from the same state (its Delta writes are skipped)
            if saved is not None:
                keeper.restore(saved)
            raise
        count = sum(len(p.records) + len(p.changes) + sum(map(len, p.chunks)) for p in pending.values())
        took = time.monotonic() - started
        log.info("batch %d: %d records of %d tables in %.2f s", batch, count, len(pending), took)
        if count:  # a crash test's instant that batches of no record (their number varies) never pass
            crash_point("delta-batch-with-records-written")

    def _create_tables(self, shapes: Mapping[TableId, TableSchema]) -> None:
        """The tables of newly captured ones that do not exist yet, empty (see :meth:`prepare`)."""
        for table, schema in sorted(shapes.items()):
            try:
                created = self._writer_of_tables().create(table, schema)
            except SinkError:
                raise
            except Exception as exc:
                problem = f"creating the tables of {table} under {self.root} failed: {short_error(exc)}"
                raise SinkError(problem) from exc
            if self._names is not None:
                for ref in created:
                    self._names.register(ref)

    def _write_tables(self, batch: int, pending: Mapping[TableId, Pending]) -> None:
        handovers: dict[TableId, Handover] = {}
        for table in sorted(pending):
            crash_point("delta-before-table")
            try:
                handover = self._writer_of_tables().write(table, pending[table], batch)
            except GtidsnapError:
                raise
            except Exception as exc:
                raise SinkError(
                    f"writing batch {batch} of {table} to {self.root} failed: {short_error(exc)}"
                ) from exc
            if handover is not None:
                handovers[table] = handover
        if self._names is not None:
            self._names.created(self.root, pending, self.tables.created)
        self.keeper.hand_over(batch, handovers)
        if not self.keeper.background:
            self.keeper.update_due(batch)

    # ------------------------------------------------------------------ position
    def _position(self, batch: int) -> dict[str, Any]:
        pending, applied = self.keeper.position_files()
        self._done.extend(applied)
        writer = self._table_writer
        appends = writer.deferred if writer is not None else []  # the batch just written: none else
        if writer is not None:
            writer.deferred = []
        return SinkPosition(batch, list(pending), appends).to_json()


__all__ = ["POSITION_KEY", "DeltaSink", "spark_schema"]
