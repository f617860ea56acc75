"""A table's mirror between batches, and its update in Spark: the rule of
:mod:`gtidsnap.sinks.delta.mirror.rule` (staged snapshot rows folded with newer changes, APPENDed
where the mirror cannot hold their key, the rest and the due changes MERGEd, the changes of keys it
cannot hold APPENDed each batch), run on Arrow tables in this process where they are small (the
waiting changes, keys) and in Spark where they are large (the staged rows, never into Python).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.model import quote_ident
from gtidsnap.sinks.delta.catch_up import MERGED_SEQ, MIRROR_UPDATE, STAGED_SEQ
from gtidsnap.sinks.delta.change_rows import (
    SEQ,
    conformed,
    key_rows,
    matching,
    newer_than,
    newest_per_key,
    top_seqs,
)
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.mirror.file_appends import append_staged_files, staged_meeting
from gtidsnap.sinks.delta.mirror.file_rewrite import rewrite_merge
from gtidsnap.sinks.delta.staged_frames import newest_in_spark, spark_schema, staged_frame
from gtidsnap.sinks.delta.staging import StagedFile
from gtidsnap.sinks.delta.tables import DeltaTables, stats_columns
from gtidsnap.sinks.delta.util import same_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

SNAPSHOT_APP = ":snapshot"  # the txn app id suffix of the APPENDs of staged rows (a second per batch)
HELD_KEYS_CAP = 1_000_000  # keys merged kept per table; beyond, its staged rows are merged


@dataclass
class MirrorState:
    """One table's mirror between batches: changes waiting for its MERGE (the changelog holds them),
    snapshot rows staged for its APPEND (their files named by the checkpoint), and the keys merged
    into it since its first staged rows of this run (``held``; None: not known, so staged rows are
    merged; ``held_known`` False: not decided yet)."""

    waiting: list[pa.Table] = field(default_factory=list)
    waiting_since: float | None = None
    staged: list[StagedFile] = field(default_factory=list)
    held: pa.Table | None = None
    held_known: bool = False
    held_is_all: bool = False  # ``held`` names every key the mirror holds (see .rule)
    top_seq: int = -1  # the greatest _seq of a change given to the changelog
    staged_seq: int = -1  # staged rows up to this _seq are in the mirror
    applied: list[StagedFile] = field(default_factory=list)  # to delete once no checkpoint names them
    unseen: bool = False  # changes came since the last update looked for keys it cannot hold

    def __copy__(self) -> MirrorState:
        return replace(self, waiting=list(self.waiting), staged=list(self.staged), applied=list(self.applied))

    @property
    def waiting_rows(self) -> int:
        return sum(t.num_rows for t in self.waiting)

    @property
    def staged_rows(self) -> int:
        return sum(f.rows for f in self.staged)

    def wait(self, rows: pa.Table) -> None:
        if rows.num_rows:
            self.waiting.append(rows)
            self.unseen = True
            if self.waiting_since is None:
                self.waiting_since = time.monotonic()
            self.top_seq = max(self.top_seq, int(rows.column(SEQ).to_numpy().max()))

    def compact(self, key: Sequence[str]) -> None:
        """Only the newest waiting change of each key kept: all a MERGE takes of them, so ``merge_rows``
        counts keys, not changes (the changelog holds the others; a key's newest is above them)."""
        if self.waiting:
            self.waiting = [newest_per_key(_concat(self.waiting), key)]


def _concat(tables: Sequence[pa.Table]) -> pa.Table:
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


@dataclass(frozen=True)
class UpdateResult:
    appended: int
    merged: int


class MirrorWriter:
    """Runs mirror updates for a sink (see the module docstring)."""

    def __init__(self, spark: SparkSession, tables: DeltaTables, app_id: str) -> None:
        self.spark = spark
        self.tables = tables
        self.app_id = app_id

    def update(
        self,
        path: str,
        key: Sequence[str],
        plan: ColumnPlan,
        state: MirrorState,
        batch: int,
        merge_due: bool,
        background: bool = False,
        append_due: bool = False,
    ) -> UpdateResult:
        """One update of the mirror at ``path``; ``state`` moves past it. Inline, its commits belong to
        batch ``batch`` (idempotent for it, undone with it); in the background (of checkpointed data
        only) they are tagged ``gtidsnap_mirror`` with the checkpointed batch ``batch`` and never undone:
        their watermarks say what the mirror holds. ``append_due`` (the MERGE not due): the waiting
        changes of keys the mirror cannot hold are APPENDed now, the others keep waiting."""
        txn = not background
        key = list(key)
        waiting = conformed(_concat(state.waiting), plan, changelog=False) if state.waiting else None
        appended = merged = 0
        appends: list[DataFrame] = []  # what this update APPENDs, in one commit
        merge_parts: list[DataFrame | pa.Table] = []
        merge_keys: list[pa.Table] = []  # the keys of the MERGE's source (when it is small)
        pruned = True
        staged = state.staged
        files: list[pa.Table] | None = None  # rows APPENDed as data files with the staged ones
        if staged:
            asked = key_rows(waiting, key) if waiting is not None else None
            met, held_met = staged_meeting(staged, key, asked, state.held)
            newer = None
            if waiting is not None and met is not None:
                staged_tops = top_seqs(met, key)
                newer = newer_than(newest_per_key(waiting, key), staged_tops, key)
                waiting = matching(waiting, staged_tops.select(list(key)), key, keep=False)
            fresh = state.held is not None and not held_met and all(f.fresh for f in staged)
            if fresh and self.tables.takes_files(path, spark_schema(plan)):
                files = [newer] if newer is not None and newer.num_rows else []
            else:
                frame = staged_frame(self.spark, staged, plan, changelog=False)
                if newer is not None and newer.num_rows:
                    frame = self._fold(frame, newer, key, plan)
                if fresh:
                    appends.append(frame.where(F.col("_op") != "d"))
                    appended = sum(f.rows for f in staged)
                else:  # all merged, so one commit holds them (an APPEND before a MERGE of some of them
                    # would say the staged rows are in while the MERGE's were not yet)
                    merge_parts.append(newest_in_spark(frame, key) if len(staged) > 1 else frame)
                    pruned = False
            state.staged_seq = max(state.staged_seq, *(f.last_seq for f in staged))
            state.applied.extend(staged)
            state.staged = []
        unmerged = waiting  # what the APPEND's commit says the mirror does not hold yet, a MERGE following
        all_held = state.held is not None and state.held_is_all
        if all_held and not staged and self.tables.takes_files(path, spark_schema(plan)):
            files = [] if merge_due or append_due else None  # new keys as data files
        if not merge_due and append_due and all_held and waiting is not None and waiting.num_rows:
            inserts, gone = _new_keys(newest_per_key(waiting, key), state, key, path)
            appended += self._to_append(inserts, files, appends, plan)
            waiting = unmerged = matching(waiting, gone, key, keep=False)
        if merge_due or append_due:
            state.unseen = False
        if merge_due and waiting is not None and waiting.num_rows:
            changes = newest_per_key(waiting, key)
            # keys it cannot hold: appended (beside staged rows only when those are appended too: an
            # APPEND before the MERGE of staged rows would say they are in while the MERGE's were not)
            if all_held and (not staged or bool(appends) or files is not None):
                held = matching(changes, state.held, key, keep=True)
                inserts, _ = _new_keys(changes, state, key, path)  # held gains their keys
                changes = held
                appended += self._to_append(inserts, files, appends, plan)
            elif state.held is not None:
                _hold(state, key_rows(changes, key), key, path)
            if changes.num_rows:
                merge_parts.append(changes)  # a frame only if Spark MERGEs it (see _merge)
                merge_keys.append(key_rows(changes, key))
            waiting = None
        state.waiting = [waiting] if waiting is not None and waiting.num_rows else []
        if not state.waiting:
            state.waiting_since = None
        as_files = files is not None and (bool(staged) or any(t.num_rows for t in files))
        if files is not None and as_files:
            meta = self._meta(batch, state, unmerged if merge_parts else None, SNAPSHOT_APP, background)
            rows = [conformed(t, plan, changelog=False) for t in files]
            commit = (self.app_id + SNAPSHOT_APP, batch if txn else None, meta)
            appended += append_staged_files(
                self.spark, path, staged, _concat(rows) if rows else None, plan, key,
                stats_columns(key, mirror=True), commit,
            )  # fmt: skip
        elif appends:
            source = appends[0]
            for part in appends[1:]:
                source = source.unionByName(part)
            meta = self._meta(batch, state, unmerged if merge_parts else None, SNAPSHOT_APP, background)
            self.tables.append_frame(path, source, batch, self.app_id + SNAPSHOT_APP, meta, txn)
        if staged:  # the keys of staged rows are not kept
            state.held_is_all = False
        if merge_parts:
            meta = self._meta(batch, state, None, "", background)
            merged = self._merge(path, key, plan, merge_parts, merge_keys, (batch, meta, txn, pruned))
        if appends or merge_parts or as_files:
            crash_point("delta-after-mirror")
        return UpdateResult(appended, merged)

    def _merge(
        self,
        path: str,
        key: list[str],
        plan: ColumnPlan,
        parts: Sequence[DataFrame | pa.Table],
        keys: list[pa.Table],
        commit: tuple[int, dict[str, Any], bool, bool],
    ) -> int:
        """The MERGE of ``parts`` (frames, or the waiting changes as Arrow, whose keys are ``keys``);
        ``commit``: batch, metadata, idempotent for the batch, a small source (Delta skips the files
        outside its keys' range). The rows merged from changes. Changes alone into a mirror of their
        columns are merged by rewriting the files they touch (:mod:`.file_rewrite`, on the tested Delta
        version: :meth:`DeltaTables.takes_files`), else by Spark."""
        batch, meta, txn, pruned = commit
        only = parts[0] if len(parts) == 1 and isinstance(parts[0], pa.Table) else None
        if only is not None and self.tables.takes_files(path, spark_schema(plan)):
            ident = (self.app_id, batch if txn else None, meta)
            if rewrite_merge(self.spark, path, only, key, plan, stats_columns(key, True), ident) is not None:
                return int(only.num_rows)
        frames = [
            self.spark.createDataFrame(p, schema=spark_schema(plan)) if isinstance(p, pa.Table) else p
            for p in parts
        ]
        source = frames[0]
        for part in frames[1:]:
            source = source.unionByName(part, allowMissingColumns=True)
        condition = F.expr(same_key(key))
        if pruned:
            condition = _pruned(condition, key[0], plan, keys)
        self.tables.merge_frame(path, source, condition, batch, meta, txn)
        return sum(t.num_rows for t in keys)

    def _to_append(
        self, rows: pa.Table, files: list[pa.Table] | None, appends: list[DataFrame], plan: ColumnPlan
    ) -> int:
        """``rows`` joins this update's APPEND (a data file, else a Spark frame); the rows counted now
        (a data file's count once written)."""
        if not rows.num_rows:
            return 0
        if files is not None:
            files.append(rows)
            return 0
        appends.append(self.spark.createDataFrame(rows, schema=spark_schema(plan)))
        return int(rows.num_rows)

    def _meta(
        self, batch: int, state: MirrorState, waiting: pa.Table | None, suffix: str, background: bool
    ) -> dict[str, Any]:
        """A mirror commit's user metadata: its batch and how far it then holds the changelog (every
        change up to ``gtidsnap_merged_seq``) and the staged rows (up to ``gtidsnap_staged_seq``).
        With no change waiting, it holds every changelog record up to the staged rows' too: a change
        below them was given before them, and the snapshot rows a changelog holds are those staged (a
        restart would otherwise MERGE them again from the changelog, in a batch of its own)."""
        left = waiting if waiting is not None else (_concat(state.waiting) if state.waiting else None)
        merged = (
            int(left.column(SEQ).to_numpy().min()) - 1
            if left is not None and left.num_rows
            else max(state.top_seq, state.staged_seq)
        )
        return {
            MIRROR_UPDATE if background else "gtidsnap_batch": batch,
            "app_id": self.app_id + suffix,
            MERGED_SEQ: merged,
            STAGED_SEQ: state.staged_seq,
        }

    def _fold(self, frame: DataFrame, newer: pa.Table, key: Sequence[str], plan: ColumnPlan) -> DataFrame:
        """The staged rows of a key with a ``newer`` change (newer than all of them) replaced by that
        change (a delete stays a ``d`` row: where the mirror cannot hold the key it is dropped,
        elsewhere MERGEd): an anti-join on the keys alone, so Spark never joins the rows' columns."""
        changes = self.spark.createDataFrame(newer, schema=spark_schema(plan))
        changed = F.broadcast(changes.select(*[F.col(quote_ident(k)) for k in key]))
        return frame.join(changed, on=list(key), how="left_anti").unionByName(changes)


def _hold(state: MirrorState, keys: pa.Table, key: Sequence[str], path: str) -> None:
    """``held`` gains ``keys``; past :data:`HELD_KEYS_CAP` it is let go (the mirror's keys unknown)."""
    assert state.held is not None
    state.held = key_rows(_concat([state.held, keys]), key)
    if state.held.num_rows > HELD_KEYS_CAP:
        log.info("%s: over %d keys held; its changes and staged rows are merged now", path, HELD_KEYS_CAP)
        state.held = None


def _new_keys(
    changes: pa.Table, state: MirrorState, key: Sequence[str], path: str
) -> tuple[pa.Table, pa.Table]:
    """Of the newest changes of their keys, those the mirror cannot hold (``held``, naming every key it
    holds, does not name them): the rows to APPEND (a delete: none) and their keys, which ``held`` gains."""
    assert state.held is not None
    new = matching(changes, state.held, key, keep=False)
    gone = key_rows(new, key)
    if gone.num_rows:
        _hold(state, gone, key, path)
    return new.filter(pc.not_equal(new.column("_op"), "d")), gone


def _pruned(condition: Any, first: str, plan: ColumnPlan, keys: Sequence[pa.Table]) -> Any:
    """``t.k BETWEEN min AND max`` on the first key column added, so Delta skips files by their
    statistics; only for types whose literals compare exactly."""
    column = next((c for c in plan.columns if c.name == first), None)
    if column is None or not isinstance(column.data_type, T.IntegralType | T.DecimalType | T.StringType):
        return condition
    values = [t.column(first) for t in keys if t.num_rows]
    if not values:
        return condition
    bounds = pc.min_max(pa.chunked_array([c for v in values for c in v.chunks], type=values[0].type))
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None:
        return condition
    return condition & F.col(f"t.{quote_ident(first)}").between(F.lit(low), F.lit(high))


def metadata_json(meta: dict[str, Any]) -> str:
    return json.dumps(meta)
