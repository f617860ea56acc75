"""The mirror merge as a Spark job of its own (``spark/mirror_job.py``), for outputs whose gtidsnap
writes the changelogs only (``sink.mirror = "job"``): each mirror is kept from its changelog, read
incrementally, on any Spark cluster, as often as its readers need.

Exactly once, with no state of the job's own: every mirror commit of the job records in its user
metadata how far the mirror holds the changelog (``gtidsnap_merged_seq`` = W, as the sink's own
commits do), so a pass reads the changelog's records above W only (files at or below W are skipped by
their ``_seq`` statistics), keeps the newest per key and MERGEs them, newest ``_seq`` winning; the
commit and its W are one atomic Delta commit. A job killed at any instant, run twice at once, or
run again over what it merged changes nothing it should not.

A pass reads a changelog only as far as gtidsnap has checkpointed it: a batch above gtidsnap's
checkpoint is undone when gtidsnap restarts, and its records may come back with other values under
the same ``_seq``. The job therefore reads each changelog as of the version before its first commit
of a batch above the checkpoint (undo commits included: they only remove such batches).

A new mirror, or one the job created and has not written yet, takes its first pass by APPEND (the
newest record per key of the changelog, deletes left out): Spark's append speed for the first load.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pyspark.sql import functions as F

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.catch_up import MERGED_SEQ, MIRROR_JOB, changelog_after, merged_watermark
from gtidsnap.sinks.delta.layout import (
    KEY_PROPERTY,
    changelog_path,
    clear_uncommitted_log,
    list_tables,
    mirror_path,
)
from gtidsnap.sinks.delta.recovery import batch_of, history_since, recent_commits
from gtidsnap.sinks.delta.tables import merge_newest, table_properties
from gtidsnap.sinks.delta.util import USER_METADATA, same_key
from gtidsnap.sinks.delta.writes import retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.mirror_job")

TYPE_WIDENING = "delta.enableTypeWidening"


@dataclass(frozen=True)
class MirrorPass:
    """What one pass did for one mirror: the changelog version it read, the mirror's watermark before
    and after, and how it wrote (nothing: the mirror already held everything committed)."""

    table: TableId
    version: int | None
    before: int | None
    after: int | None
    how: Literal["append", "merge", "nothing"]


def readable_version(commits: Sequence[Any], committed_batch: int) -> int | None:
    """The newest changelog version a pass may read, from its history (rows with ``version`` and
    ``userMetadata``): the one before its first commit of a batch above ``committed_batch`` (gtidsnap's
    checkpoint), else the newest. None: not even the table's creation is readable."""
    readable: int | None = None
    for commit in sorted(commits, key=lambda c: int(c["version"])):
        batch = batch_of(commit["userMetadata"])
        if batch is not None and batch > committed_batch:
            break
        readable = int(commit["version"])
    return readable


def mirror_watermark(spark: SparkSession, mirror: str) -> int | None:
    """W of a mirror (see :func:`gtidsnap.sinks.delta.catch_up.merged_watermark`), reading as little of
    its history as finds it."""
    from delta.tables import DeltaTable

    commits = recent_commits(
        DeltaTable.forPath(spark, mirror), lambda found: merged_watermark(found) is not None
    )
    return merged_watermark(commits)


def merge_mirrors(
    spark: SparkSession, root: str, committed_batch: int | None, deletion_vectors: bool = False
) -> list[MirrorPass]:
    """One pass over every changelog under ``root``, up to gtidsnap's checkpointed batch (a mirror it
    creates has deletion vectors when told, as the sink's ``deletion_vectors``)."""
    if committed_batch is None:
        return []  # gtidsnap has not checkpointed any batch: nothing in the changelogs is final
    return [
        merge_mirror(spark, root, ref.table, committed_batch, deletion_vectors)
        for ref in list_tables(spark, root)
        if ref.kind == "changelog"
    ]


def merge_mirror(
    spark: SparkSession, root: str, table: TableId, committed_batch: int, deletion_vectors: bool = False
) -> MirrorPass:
    """Bring one mirror up to its changelog as far as gtidsnap has checkpointed it."""
    from delta.tables import DeltaTable

    changelog, mirror = changelog_path(root, table), mirror_path(root, table)
    logged = DeltaTable.forPath(spark, changelog)
    version = readable_version(history_since(logged, committed_batch), committed_batch)
    exists = DeltaTable.isDeltaTable(spark, mirror)
    before = mirror_watermark(spark, mirror) if exists else None
    if version is None:
        return MirrorPass(table, None, before, before, "nothing")
    at_version = spark.read.format("delta").option("versionAsOf", version).load(changelog)
    top_row = at_version.agg(F.max("_seq")).first()
    top = top_row[0] if top_row is not None else None
    if top is None or (before is not None and top <= before):
        return MirrorPass(table, version, before, before, "nothing")
    properties: dict[str, str] = logged.detail().select("properties").first()[0] or {}  # type: ignore[index]
    key = json.loads(properties.get(KEY_PROPERTY) or "null")
    if not key:
        raise SinkError(f"{changelog} does not record its key ({KEY_PROPERTY})")
    source = changelog_after(spark, changelog, key, before, version)
    if not exists:
        _create(spark, mirror, source, key, properties, deletion_vectors)
    meta = {MIRROR_JOB: {"changelog_version": version}, MERGED_SEQ: int(top)}
    how: Literal["append", "merge"] = "merge"
    spark.conf.set(USER_METADATA, json.dumps(meta))
    try:
        crash_point("mirror-job-before-write")
        if before is None and _empty(spark, mirror):
            how = "append"
            writer = source.where("_op <> 'd'").write.format("delta").mode("append")
            retry_conflicts(lambda: writer.option("mergeSchema", "true").save(mirror), mirror)
        else:
            _allow_widening(spark, mirror, source)
            condition = F.expr(same_key(key))
            retry_conflicts(lambda: merge_newest(spark, mirror, source, condition), mirror)
        crash_point("mirror-job-after-write")
    finally:
        spark.conf.unset(USER_METADATA)
    log.info("%s: %s of the changelog's _seq %s..%s (version %d)", mirror, how, before, top, version)
    return MirrorPass(table, version, before, int(top), how)


def _create(
    spark: SparkSession,
    mirror: str,
    source: DataFrame,
    key: Sequence[str],
    logged: dict[str, str],
    deletion_vectors: bool,
) -> None:
    """The mirror, empty, as its own first version: the changelog's columns without ``_snapshot``, its
    key and source, and the sink's mirror properties (Change Data Feed on), type widening allowed."""
    from delta.tables import DeltaTable
    from pyspark.sql import types as T

    if clear_uncommitted_log(spark, mirror):
        log.warning("%s: removed a _delta_log without any committed version (a creation cut short)", mirror)
    fields = [T.StructField(f.name, f.dataType, True) for f in source.schema.fields]
    builder = DeltaTable.createIfNotExists(spark).location(mirror).addColumns(T.StructType(fields))
    copied = {k: v for k, v in logged.items() if k.startswith("gtidsnap.")}
    properties = {**copied, **table_properties(key, True, deletion_vectors), TYPE_WIDENING: "true"}
    for name, value in properties.items():
        builder = builder.property(name, value)
    builder.execute()
    crash_point("mirror-job-after-create")
    log.info("created %s", mirror)


def _empty(spark: SparkSession, mirror: str) -> bool:
    from delta.tables import DeltaTable

    detail = DeltaTable.forPath(spark, mirror).detail().select("numFiles").first()
    return detail is None or not detail[0]


def _allow_widening(spark: SparkSession, mirror: str, source: DataFrame) -> None:
    """A column whose type the changelog widened (gtidsnap widens it after an ALTER of the source) is
    widened by the MERGE's schema evolution, once the mirror allows it."""
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, mirror)
    types = {f.name.casefold(): f.dataType for f in table.toDF().schema.fields}
    if all(types.get(f.name.casefold(), f.dataType) == f.dataType for f in source.schema.fields):
        return
    properties: dict[str, str] = table.detail().select("properties").first()[0] or {}  # type: ignore[index]
    if properties.get(TYPE_WIDENING) != "true":
        spark.sql(f"ALTER TABLE delta.`{mirror}` SET TBLPROPERTIES ('{TYPE_WIDENING}' = 'true')")
