"""Deferred merges: how far a mirror has taken its changelog, and the MERGE that catches it up.

A mirror MERGEs streamed changes every ``sink.merge_interval_s`` (or ``sink.merge_rows``); between
merges the changelog is their durable record. Every mirror commit of the sink says in its user
metadata how far the mirror holds the changelog: ``gtidsnap_merged_seq`` = W, every record with
``_seq`` <= W is in the mirror (records above W may be too: appended snapshot rows). When a run stops
with changes still waiting, the next ``open`` merges the changelog's records above W into the mirror
(newest per key), before anything else: re-merging a record the mirror already has changes nothing,
since a change applies only to an older ``_seq``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.sinks.delta.layout import KEY_PROPERTY, changelog_path, mirror_path, recorded_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

MERGED_SEQ = "gtidsnap_merged_seq"
STAGED_SEQ = "gtidsnap_staged_seq"  # staged snapshot rows up to this _seq are in the mirror
MIRROR_UPDATE = "gtidsnap_mirror"  # a background update of checkpointed data, never undone (mirror.keeper)
FIRST_SEQ = "gtidsnap_first_seq"  # the lowest _seq a commit wrote (recovery undoes none below next_seq)
MIRROR_JOB = "gtidsnap_mirror_job"  # user metadata of a commit of the mirror job (spark/mirror_job.py)
NOTHING_WAITS = -1  # the watermark of a mirror written before merges were deferred: nothing to catch up


def _metadata(commit: Any) -> dict[str, Any]:
    try:
        data = json.loads(commit["userMetadata"] or "null")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _undone_to(commit: Any, meta: dict[str, Any]) -> int | None:
    """The version an undo commit (ours, or Delta's RESTORE) put the table back to."""
    if commit["operation"] == "RESTORE":
        version = (commit["operationParameters"] or {}).get("version")
        return int(version) if version is not None else None
    undo = meta.get("gtidsnap_undo")
    return int(undo["to_version"]) if isinstance(undo, dict) and "to_version" in undo else None


def _kept_newest_first(commits: Sequence[Any]) -> Iterator[dict[str, Any]]:
    """The user metadata of the commits no undo took back (ours, or a RESTORE), newest first."""
    below: int | None = None  # commits above this version were undone
    for commit in sorted(commits, key=lambda c: int(c["version"]), reverse=True):
        if below is not None and int(commit["version"]) > below:
            continue
        meta = _metadata(commit)
        undone_to = _undone_to(commit, meta)
        if undone_to is not None:
            below = undone_to if below is None else min(below, undone_to)
            continue
        yield meta


def merged_watermark(commits: Sequence[Any]) -> int | None:
    """W of a mirror from its history (rows with version, operation, userMetadata,
    operationParameters; any order): the newest commit that is not undone and was written by a batch
    of the sink, a background mirror update or the mirror job.

    None: no batch ever wrote the mirror (every record of its changelog waits). ``NOTHING_WAITS``: the
    newest batch commit predates deferred merges (each batch was merged whole)."""
    for meta in _kept_newest_first(commits):
        if "gtidsnap_batch" in meta or MIRROR_UPDATE in meta or MIRROR_JOB in meta:
            seq = meta.get(MERGED_SEQ)
            return int(seq) if isinstance(seq, int) else NOTHING_WAITS
    return None


def staged_watermark(commits: Sequence[Any]) -> int:
    """How far a mirror holds its staged snapshot rows (``gtidsnap_staged_seq`` of its newest commit
    that is not undone and carries it); -1: none."""
    for meta in _kept_newest_first(commits):
        seq = meta.get(STAGED_SEQ)
        if isinstance(seq, int):
            return seq
    return -1


def changelog_after(
    spark: SparkSession,
    changelog: str,
    key: Sequence[str],
    after: int | None,
    version: int | None = None,
    before: int | None = None,
) -> DataFrame:
    """The changelog's records above ``after`` (and below ``before``; as of ``version``, default the
    newest), the newest per key, shaped as a MERGE source for the mirror (no ``_snapshot``). Files
    wholly at or below ``after`` are skipped by their ``_seq`` statistics: the read is incremental."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(changelog)
    if after is not None:
        frame = frame.where(F.col("_seq") > F.lit(after))
    if before is not None:
        frame = frame.where(F.col("_seq") < F.lit(before))
    newest = Window.partitionBy(*[F.col(quote_ident(k)) for k in key]).orderBy(F.col("_seq").desc())
    return (
        frame.withColumn("_gtidsnap_n", F.row_number().over(newest))
        .where("_gtidsnap_n = 1")
        .drop("_gtidsnap_n", "_snapshot")
    )


def has_streamed_rows(spark: SparkSession, mirror: str) -> bool:
    """Does the mirror hold a row last written by anything but a snapshot row (``_op`` other than r)?
    Files of snapshot rows only are skipped by their statistics."""
    return bool(spark.read.format("delta").load(mirror).where("_op <> 'r'").limit(1).count())


def current_state(spark: SparkSession, root: str, table: TableId) -> DataFrame:
    """The freshest state of a source table: its mirror, overlaid with the changelog's records the
    mirror does not hold yet (above its watermark), the newest per key; deletes remove the row. Columns
    of the mirror (the changelog's ``_snapshot`` left out)."""
    return _state_at(spark, mirror_path(root, table), changelog_path(root, table))


def current_state_of(spark: SparkSession, name: str) -> DataFrame:
    """:func:`current_state` of the mirror named ``name`` in a catalog (``sink.database``), e.g.
    ``"shop.orders"``: its changelog is found beside it."""
    from gtidsnap.sinks.delta.catalog_names import paths_of

    return _state_at(spark, *paths_of(spark, name))


def _state_at(spark: SparkSession, mirror: str, changelog: str) -> DataFrame:
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, mirror):  # the mirror job has not created it yet
        logged_key = recorded_key(spark, changelog)
        if not logged_key:
            raise SinkError(f"{changelog} does not record its key ({KEY_PROPERTY})")
        return changelog_after(spark, changelog, logged_key, None).where("_op <> 'd'")
    rows = spark.read.format("delta").load(mirror)
    if not DeltaTable.isDeltaTable(spark, changelog):
        return rows
    return overlaid(spark, rows, changelog, recorded_key(spark, mirror), mirror_watermark(spark, mirror))


def mirror_watermark(spark: SparkSession, mirror: str) -> int | None:
    """:func:`merged_watermark` of the mirror at ``mirror``, from its history. It only grows while a run
    writes the mirror, so a value read once stays a lower bound for :func:`overlaid`."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, mirror).history()
    return merged_watermark(
        history.select("version", "operation", "userMetadata", "operationParameters").collect()
    )


def mirror_staged_watermark(spark: SparkSession, mirror: str) -> int:
    """:func:`staged_watermark` of the mirror at ``mirror``: its staged snapshot rows up to this ``_seq``
    are in it (-1: none)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, mirror).history()
    return staged_watermark(
        history.select("version", "operation", "userMetadata", "operationParameters").collect()
    )


def overlaid(
    spark: SparkSession,
    rows: DataFrame,
    changelog: str,
    key: Sequence[str] | None,
    held: int | None,
    before: int | None = None,
) -> DataFrame:
    """The mirror's ``rows`` overlaid with the changelog's records above ``held`` (below ``before``),
    the newest per key (deletes remove the row). ``held`` may be lower than the mirror's watermark: a
    record the mirror already holds is overlaid by itself or by a newer one, so the result is the same."""
    if held == NOTHING_WAITS or not key:
        return rows
    recent = changelog_after(spark, changelog, key, held, before=before)
    kept = rows.join(recent.select(*key), on=list(key), how="left_anti")
    newer = recent.where("_op <> 'd'").select(*rows.columns)
    return kept.unionByName(newer)
