"""Exactly-once recovery when the sink opens: the commits of batches above the checkpoint's are undone,
table by table (see the package docstring of :mod:`gtidsnap.sinks.delta`); what the output then holds
is read with it: the top batch number, each mirror's watermarks, and the greatest ``_seq`` known to be
in the tables (which the checkpoint's ``next_seq`` must be above)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.core.ports import HeldSeq
from gtidsnap.sinks.delta.catch_up import MIRROR_UPDATE, merged_watermark, staged_watermark
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


def recover_all(
    spark: SparkSession, root: str, tables: Sequence[DeltaTableRef], last: int | None
) -> Recovered:
    """Recovery of every table under ``root`` for the checkpoint of batch ``last`` (None: no
    checkpoint), once the tables are those such a checkpoint can continue."""
    _check_tables(root, tables, last)
    highest, watermarks, held = last or 0, {}, None
    for ref in tables:
        if ref.kind == "history":  # kept from the changelog, never ahead of it: nothing to undo
            continue
        recovery = recover(spark, ref, last or 0)
        highest = max(highest, recovery.max_batch)
        if ref.kind == "mirror":
            watermarks[ref.table] = (recovery.merged_seq, recovery.staged_seq)
        held = greater(held, _held_by(spark, ref, recovery))
    return Recovered(highest, watermarks, held)


def _check_tables(root: str, tables: Sequence[DeltaTableRef], last: int | None) -> None:
    if last is None and tables:
        names = ", ".join(sorted({str(t.table) for t in tables}))
        raise SinkError(
            f"{root} already holds Delta tables of gtidsnap ({names}) but there is no "
            "checkpoint: an earlier run's output cannot be continued without it. Restore the "
            "checkpoint, or move those tables away (or point sink.path elsewhere) to start over"
        )
    if last and not tables:
        raise SinkError(
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
    Py4J) is logged, not raised: the check it serves guards a checkpoint, the output needs none."""
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
    from pyspark.sql import DataFrame

    jvm: Any = spark._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    files = DataFrame(delta_log.startTransaction().snapshot().allFiles().toDF(), spark)  # the newest version
    bounds = F.coalesce(F.get_json_object("stats", "$.tightBounds"), F.lit("true"))
    tight = F.col("deletionVector").isNull() & (bounds == "true")
    top = F.get_json_object("stats", "$.maxValues._seq").cast("long")
    row = files.where(tight).agg(F.max(top)).first()
    return int(row[0]) if row is not None and row[0] is not None else None


def recover(spark: SparkSession, ref: DeltaTableRef, last: int) -> Recovery:
    """Undo the commits of batches after ``last`` (see the package docstring); report the top batch
    and, read off the same history, how far the table then holds its changelog."""
    from delta.tables import DeltaTable

    commits = history_since(DeltaTable.forPath(spark, ref.path), last)
    highest = max((batch_of(c["userMetadata"]) or 0 for c in commits), default=0)
    target: int | None = None
    dirty = False
    for c in commits:
        batch = batch_of(c["userMetadata"])
        if batch is not None and batch > last:
            target = int(c["version"]) - 1 if target is None else target
            dirty = True
        elif target is not None and _undoes(c, target):
            dirty = False
    if not dirty or target is None:
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
    if not user_metadata:
        return None
    try:
        data = json.loads(user_metadata)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    # a background mirror update names the batch whose checkpoint was saved: never above the checkpoint
    batch = data.get("gtidsnap_batch", data.get(MIRROR_UPDATE))
    return batch if isinstance(batch, int) else None


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
