"""Exactly-once recovery when the sink opens: the commits of batches above the checkpoint's are undone,
table by table (see the package docstring of :mod:`gtidsnap.sinks.delta`); what the output then holds
is read with it: the top batch number, each mirror's watermarks, and the greatest ``_seq`` known to be
in the tables (which the checkpoint's ``next_seq`` must be above).

Before anything is undone, the commits recovery would undo are checked against the checkpoint's
``next_seq`` (:func:`cut_problem`): each commit records the lowest ``_seq`` it wrote
(``gtidsnap_first_seq``) and a changelog commit from below ``next_seq`` holds records the checkpoint
counts as written, which no replay writes again; a mirror's background update holds checkpointed data
only, so undoing one is never right either (a checkpoint edited, or another output's): the sink refuses
to open (:class:`CutRefused`), the tables untouched. Commits written before the lowest ``_seq`` was
recorded are not checked by it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from gtidsnap.core.errors import OutputRefusedError, SinkError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.core.ports import HeldSeq
from gtidsnap.sinks.delta.catch_up import FIRST_SEQ, MIRROR_UPDATE, merged_watermark, staged_watermark
from gtidsnap.sinks.delta.jvm_delta import newest_files
from gtidsnap.sinks.delta.layout import KEY_PROPERTY, DeltaTableRef, recorded_key
from gtidsnap.sinks.delta.util import USER_METADATA, same_key, short_error

if TYPE_CHECKING:
    from delta.tables import DeltaTable
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")


@dataclass(frozen=True)
class Recovery:
    restored_to: int | None
    max_batch: int
    merged_seq: int | None  # a mirror's watermark after recovery (see catch_up.merged_watermark)
    staged_seq: int = -1  # how far a mirror holds its staged snapshot rows (catch_up.staged_watermark)


@dataclass(frozen=True)
class Recovered:
    """The output's tables after recovery: the top batch number any of them carries, each mirror's
    watermarks (merged, staged: see :class:`Recovery`), the greatest ``_seq`` known to be held."""

    highest: int
    watermarks: dict[TableId, tuple[int | None, int]]
    held: HeldSeq | None


class CutRefused(SinkError):
    """Recovery would undo records numbered below the checkpoint's ``next_seq`` (nothing changed)."""

    retryable = False


def recover_all(
    spark: SparkSession,
    root: str,
    tables: Sequence[DeltaTableRef],
    last: int | None,
    next_seq: int | None = None,
) -> Recovered:
    """Recovery of every table under ``root`` for the checkpoint of batch ``last`` (None: no
    checkpoint), once the tables are those such a checkpoint can continue and, with ``next_seq`` (the
    checkpoint's), once nothing it would undo is below it (else :class:`CutRefused`, nothing undone)."""
    from delta.tables import DeltaTable

    _check_tables(root, tables, last)
    kept = [ref for ref in tables if ref.kind != "history"]  # kept from the changelog: nothing to undo
    histories: dict[tuple[str, str], list[Any]] = {
        (r.kind, r.path): history_since(DeltaTable.forPath(spark, r.path), last or 0) for r in kept
    }
    if next_seq is not None and (problem := cut_problem(histories, last or 0, next_seq)) is not None:
        raise CutRefused(problem)
    highest, watermarks, held = last or 0, {}, None
    for ref in kept:
        recovery = recover(spark, ref, last or 0, histories[ref.kind, ref.path])
        highest = max(highest, recovery.max_batch)
        if ref.kind == "mirror":
            watermarks[ref.table] = (recovery.merged_seq, recovery.staged_seq)
        held = greater(held, _held_by(spark, ref, recovery))
    return Recovered(highest, watermarks, held)


def _check_tables(root: str, tables: Sequence[DeltaTableRef], last: int | None) -> None:
    if last is None and tables:
        names = ", ".join(sorted({str(t.table) for t in tables}))
        raise OutputRefusedError(
            f"{root} already holds Delta tables of gtidsnap ({names}) but there is no "
            "checkpoint: an earlier run's output cannot be continued without it. Restore the "
            "checkpoint, or move those tables away (or point sink.path elsewhere) to start over"
        )
    if last and not tables:
        raise OutputRefusedError(
            f"the checkpoint says batch {last} was committed to {root}, but no Delta table is "
            "there: point sink.path at that output, or start over with a new checkpoint"
        )


def greater(a: HeldSeq | None, b: HeldSeq | None) -> HeldSeq | None:
    """The greater of two held seqs (None: not known)."""
    return b if a is None or (b is not None and b.seq > a.seq) else a


def _held_by(spark: SparkSession, ref: DeltaTableRef, recovery: Recovery) -> HeldSeq | None:
    """The greatest ``_seq`` ``ref`` is known to hold after recovery. A changelog: by its files'
    statistics. A mirror: by its commits' watermarks, read with its history (every record up to them
    was given to it); its own files' statistics are not read: what it holds beyond the watermarks is
    in its changelog too, or not told cheaply (deletion vectors leave a file's bounds loose)."""
    if ref.kind == "mirror":
        top: int | None = max(recovery.merged_seq or -1, recovery.staged_seq)
    else:
        top = _logged_top(spark, ref.path)
    return HeldSeq(top, ref.path) if top is not None and top > 0 else None


def _logged_top(spark: SparkSession, path: str) -> int | None:
    """:func:`top_seq_by_stats` of a changelog; a failed read (Delta's internal API, reached over
    Py4J by :mod:`.jvm_delta`) is logged, not raised: the check it serves guards a checkpoint, the output
    needs none."""
    try:
        return top_seq_by_stats(spark, path)
    except Exception as exc:
        log.warning("%s: its greatest _seq is not known (%s)", path, short_error(exc))
        return None


def top_seq_by_stats(spark: SparkSession, path: str) -> int | None:
    """The greatest ``maxValues._seq`` of the table's data files (the add actions of its current
    version, read from its log: no data file is read). Only tight bounds count: a file with deletion
    vectors, or without ``_seq`` statistics (a table of many columns whose names need quoting keeps
    statistics on its first 32 only), tells nothing cheaply and is left out, so the answer may be
    lower than the truth, never higher. None: no file tells."""
    files = newest_files(spark, path)
    bounds = F.coalesce(F.get_json_object("stats", "$.tightBounds"), F.lit("true"))
    tight = F.col("deletionVector").isNull() & (bounds == "true")
    top = F.get_json_object("stats", "$.maxValues._seq").cast("long")
    row = files.where(tight).agg(F.max(top)).first()
    return int(row[0]) if row is not None and row[0] is not None else None


def cut_problem(histories: Mapping[tuple[str, str], list[Any]], last: int, next_seq: int) -> str | None:
    """Why undoing what recovery would undo of ``histories`` (commits by table kind and path, from
    :func:`history_since`) for the checkpoint of batch ``last`` removes records below ``next_seq``: a
    changelog commit from a seq below it (``gtidsnap_first_seq``), or a mirror's background update
    (it holds checkpointed data only: undone, what it took from staged files is gone)."""
    for (kind, path), commits in histories.items():
        target = undo_target(commits, last)
        for c in [c for c in commits if target is not None and int(c["version"]) > target]:
            meta, batch = _metadata_of(c), batch_of(c["userMetadata"])
            first = meta.get(FIRST_SEQ) if kind == "changelog" else None
            where = f"{path} version {c['version']} (batch {batch})"
            if isinstance(first, int) and first < next_seq:
                return (
                    f"{where} holds records from seq {first} on, below the checkpoint's next_seq {next_seq}, "
                    f"and the checkpoint's batch {last} is before it: going back to that batch would remove "
                    "records nothing writes again"
                )
            if MIRROR_UPDATE in meta:
                return (
                    f"{where} holds the checkpointed data of batch {batch}, after the checkpoint's batch "
                    f"{last}: going back to that batch would remove records nothing writes again"
                )
    return None


def undo_target(commits: Sequence[Any], last: int) -> int | None:
    """The version recovery takes a table back to (None: nothing to undo): the one before its first
    commit of a batch above ``last``, unless an undo back there followed (ours, or a RESTORE)."""
    target: int | None = None
    dirty = False
    for c in commits:
        batch = batch_of(c["userMetadata"])
        if batch is not None and batch > last:
            target = int(c["version"]) - 1 if target is None else target
            dirty = True
        elif target is not None and _undoes(c, target):
            dirty = False
    return target if dirty else None


def recover(spark: SparkSession, ref: DeltaTableRef, last: int, commits: list[Any] | None = None) -> Recovery:
    """Undo the commits of batches after ``last`` (see the package docstring); report the top batch
    and, read off the same history (``commits``: read already), how far the table then holds its
    changelog."""
    from delta.tables import DeltaTable

    if commits is None:
        commits = history_since(DeltaTable.forPath(spark, ref.path), last)
    highest = max((batch_of(c["userMetadata"]) or 0 for c in commits), default=0)
    target = undo_target(commits, last)
    if target is None:
        return Recovery(None, highest, merged_watermark(commits), staged_watermark(commits))
    if target < 0:
        raise SinkError(f"{ref.path} has no version before batch {last + 1} to go back to")
    _undo(spark, ref, target, int(commits[-1]["version"]), last)
    log.warning(
        "%s had batches after the checkpoint's batch %d (up to %d), from a run that stopped before "
        "saving its checkpoint: undone back to version %d; the replay writes them again",
        ref.path,
        last,
        highest,
        target,
    )
    kept = [c for c in commits if int(c["version"]) <= target]
    return Recovery(target, highest, merged_watermark(kept), staged_watermark(kept))


def recent_commits(table: DeltaTable, enough: Callable[[list[Any]], bool]) -> list[Any]:
    """The table's latest commits, oldest first (version, operation, userMetadata, operationParameters),
    read further back (16, 128, 1024, ... commits) until ``enough`` of them or the whole kept history."""
    limit = 16
    while True:
        rows = table.history(limit).select("version", "operation", "userMetadata", "operationParameters")
        commits = sorted(rows.collect(), key=lambda r: int(r["version"]))
        if enough(commits) or len(commits) < limit or int(commits[0]["version"]) == 0:
            return commits
        limit *= 8


def history_since(table: DeltaTable, last: int) -> list[Any]:
    """Commits (oldest first) from the newest one of a batch <= ``last`` (or from the oldest kept)."""
    commits = recent_commits(
        table, lambda found: any(_committed(batch_of(c["userMetadata"]), last) for c in found)
    )
    anchors = [i for i, c in enumerate(commits) if _committed(batch_of(c["userMetadata"]), last)]
    return commits[anchors[-1] :] if anchors else commits


def batch_of(user_metadata: str | None) -> int | None:
    data = _parsed(user_metadata)
    # a background mirror update names the batch whose checkpoint was saved: never above the checkpoint
    batch = data.get("gtidsnap_batch", data.get(MIRROR_UPDATE))
    return batch if isinstance(batch, int) else None


def _metadata_of(commit: Any) -> dict[str, Any]:
    return _parsed(commit["userMetadata"])


def _parsed(user_metadata: str | None) -> dict[str, Any]:
    """A commit's user metadata as an object ({}: none, or not one)."""
    try:
        data = json.loads(user_metadata) if user_metadata else None
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _committed(batch: int | None, last: int) -> bool:
    return batch is not None and batch <= last


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


def _undo(spark: SparkSession, ref: DeltaTableRef, target: int, current: int, last: int) -> None:
    """Bring the table's rows back to version ``target`` with one commit tagged ``gtidsnap_undo``.

    A mirror is MERGEd with, per key changed since ``target``, its row as of ``target`` (from the
    Change Data Feed: the first change's pre-image, or "absent" when that change is an insert); a
    changelog loses the rows appended since. Consumers of the mirror's Change Data Feed see exactly
    the rows put back. If that is impossible (the feed is incomplete, say), Delta's RESTORE does it,
    at the file level.
    """
    from delta.tables import DeltaTable

    spark.conf.set(
        USER_METADATA, json.dumps({"gtidsnap_undo": {"to_version": target, "checkpoint_batch": last}})
    )
    try:
        try:
            if ref.kind == "changelog":
                _undo_changelog(spark, ref.path, target)
            else:
                _undo_mirror(spark, ref.path, target, current)
        except Exception as exc:
            log.warning("%s: undo through its data failed (%s); using RESTORE", ref.path, short_error(exc))
            DeltaTable.forPath(spark, ref.path).restoreToVersion(target)
    finally:
        spark.conf.unset(USER_METADATA)


def _undo_changelog(spark: SparkSession, path: str, target: int) -> None:
    """Appended rows only, in ``_seq`` order: the rows above the greatest ``_seq`` at ``target`` go."""
    from delta.tables import DeltaTable

    old = spark.read.format("delta").option("versionAsOf", target).load(path)
    row = old.agg(F.max("_seq")).first()
    kept = row[0] if row is not None and row[0] is not None else -1
    DeltaTable.forPath(spark, path).delete(F.col("_seq") > F.lit(kept))


def _undo_mirror(spark: SparkSession, path: str, target: int, current: int) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql import Window

    key = recorded_key(spark, path)
    if not key:
        raise SinkError(f"{path} does not record its key ({KEY_PROPERTY})")
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", target + 1)
        .option("endingVersion", current)
        .load(path)
        .where("_change_type <> 'update_postimage'")
    )
    columns = [f.name for f in DeltaTable.forPath(spark, path).toDF().schema.fields]
    first_change = Window.partitionBy(*[F.col(quote_ident(k)) for k in key]).orderBy(
        F.col("_commit_version"), F.when(F.col("_change_type") == "insert", 1).otherwise(0)
    )
    before = (
        changes.withColumn("_gtidsnap_n", F.row_number().over(first_change))
        .where("_gtidsnap_n = 1")
        .select(
            *[F.col(quote_ident(c)) for c in columns],
            (F.col("_change_type") != "insert").alias("_gtidsnap_existed"),
        )
    )
    assignments: dict[str, str | SparkColumn] = {
        quote_ident(c): F.col(f"s.{quote_ident(c)}") for c in columns
    }
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(before.alias("s"), same_key(key))
        .whenMatchedDelete(condition="NOT s._gtidsnap_existed")
        .whenMatchedUpdate(condition="s._gtidsnap_existed", set=assignments)
        .whenNotMatchedInsert(condition="s._gtidsnap_existed", values=assignments)
        .execute()
    )
