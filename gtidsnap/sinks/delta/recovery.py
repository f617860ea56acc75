"""Exactly-once recovery when the sink opens: the commits of batches above the checkpoint's are undone,
table by table (see the package docstring of :mod:`gtidsnap.sinks.delta`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import quote_ident
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
