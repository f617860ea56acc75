"""Points at which every table of an output reads as of one source transaction: a consumer joining two
tables never sees a transaction half applied.

Each mirror is updated on its own (in the background, by :mod:`.mirror.keeper`), so the newest
versions of two mirrors stand at different places of the stream. What does stand at one place is a
checkpoint: everything up to its GTID set is in the output, records numbered below its ``next_seq``.
With each checkpoint of a new batch the sink records that point (:func:`record_point`) in a small Delta
table of its own, ``<path>/_gtidsnap_points``: the batch, the GTID set, ``next_seq``, when, the tables
whose snapshot was still under way, and the staged snapshot rows that no mirror held yet.

A table is read at a point (:func:`read_as_of`) as its mirror's newest version written from batches
up to the point's (every mirror commit names the checkpointed batch it holds data up to; commits an
undo took back are skipped), overlaid with its changelog's records from that version's merge watermark
up to the point's ``next_seq``, the newest per key (a delete removes the row): the changelog holds
every checkpointed change, and a version written up to the point's batch holds nothing after it. A
point is complete for a table when the snapshot rows it needs are in that version (its staged
watermark covers those the point names) or in the changelog (``sink.history``,
``sink.changelog_snapshot_rows``); :func:`read_as_of` takes the newest point complete for every table.
Time travel needs the versions' files: VACUUM removes those older than its retention (7 days by
default), and with them the points that need them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gtidsnap.core.errors import SinkError
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.catch_up import MERGED_SEQ, MIRROR_UPDATE, NOTHING_WAITS, STAGED_SEQ, overlaid
from gtidsnap.sinks.delta.file_commits import commit_files, write_data_file
from gtidsnap.sinks.delta.layout import absolute_root, changelog_path, list_tables, mirror_path, recorded_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

POINTS_FOLDER = "_gtidsnap_points"
POINTS_APP = "-points"  # the app id suffix of its commits (idempotent per batch)
_SCHEMA = pa.schema(
    [
        pa.field("batch", pa.int64(), False),
        pa.field("flavor", pa.string(), False),
        pa.field("gtid_set", pa.string(), False),
        pa.field("next_seq", pa.int64(), False),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC"), False),
        pa.field("snapshotting", pa.list_(pa.string()), False),
        pa.field("pending_snapshot_rows", pa.string(), False),  # JSON: table -> greatest staged _seq
        pa.field("snapshot_rows_logged", pa.bool_(), False),
    ]
)


def points_path(root: str) -> str:
    return f"{root}/{POINTS_FOLDER}"


@dataclass(frozen=True)
class RecordedPoint:
    """One checkpoint of the output, as recorded: every record below ``next_seq`` is in, up to
    ``gtid_set``; ``snapshotting`` the tables whose snapshot was under way (their rows are partial
    there); ``pending`` the staged snapshot rows (their greatest ``_seq`` by table) no mirror held yet."""

    batch: int
    flavor: str
    gtid_set: str
    next_seq: int
    recorded_at: datetime
    snapshotting: tuple[str, ...] = ()
    pending: Mapping[str, int] = field(default_factory=dict)
    snapshot_rows_logged: bool = False

    def gtids(self) -> GtidSet:
        return parse_gtid_set(self.flavor, self.gtid_set)

    def row(self) -> dict[str, Any]:
        return {
            "batch": self.batch,
            "flavor": self.flavor,
            "gtid_set": self.gtid_set,
            "next_seq": self.next_seq,
            "recorded_at": self.recorded_at,
            "snapshotting": list(self.snapshotting),
            "pending_snapshot_rows": json.dumps(dict(self.pending), sort_keys=True),
            "snapshot_rows_logged": self.snapshot_rows_logged,
        }

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> RecordedPoint:
        return cls(
            int(row["batch"]),
            str(row["flavor"]),
            str(row["gtid_set"]),
            int(row["next_seq"]),
            row["recorded_at"],
            tuple(row["snapshotting"] or ()),
            {str(k): int(v) for k, v in json.loads(row["pending_snapshot_rows"] or "{}").items()},
            bool(row["snapshot_rows_logged"]),
        )


def record_point(
    spark: SparkSession, root: str, point: RecordedPoint, app_id: str, known: bool, by_files: bool
) -> None:
    """Append ``point`` to the output's points table (created on first use, unless ``known`` to exist),
    once per batch: as a data file committed through Delta's transaction API (``by_files``: on the
    tested Delta version), else by Spark."""
    from delta.tables import DeltaTable

    path = points_path(root)
    if not known and not DeltaTable.isDeltaTable(spark, path):
        builder: Any = DeltaTable.createIfNotExists(spark).location(path).addColumns(_spark_schema())
        builder.property("delta.checkpointInterval", "100").execute()
    rows = pa.Table.from_pylist([point.row()], schema=_SCHEMA)
    if by_files:
        written = write_data_file(path, [rows], _SCHEMA, ("batch", "next_seq"))
        commit_files(spark, path, [written] if written else [], app_id + POINTS_APP, point.batch, {})
        return
    from gtidsnap.sinks.delta.tables import append_by_spark

    frame = spark.createDataFrame(rows, schema=_spark_schema())
    append_by_spark(path, frame, {}, (app_id + POINTS_APP, point.batch))


def _spark_schema() -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("batch", T.LongType(), False),
            T.StructField("flavor", T.StringType(), False),
            T.StructField("gtid_set", T.StringType(), False),
            T.StructField("next_seq", T.LongType(), False),
            T.StructField("recorded_at", T.TimestampType(), False),
            T.StructField("snapshotting", T.ArrayType(T.StringType(), False), False),
            T.StructField("pending_snapshot_rows", T.StringType(), False),
            T.StructField("snapshot_rows_logged", T.BooleanType(), False),
        ]
    )


def recorded_points(spark: SparkSession, output: str) -> list[RecordedPoint]:
    """The points recorded for the output at ``output`` (a path), newest first; none: not one yet."""
    from delta.tables import DeltaTable

    path = points_path(absolute_root(output))
    if not DeltaTable.isDeltaTable(spark, path):
        return []
    rows = spark.read.format("delta").load(path).collect()
    return sorted((RecordedPoint.of_row(r.asDict()) for r in rows), key=lambda p: p.batch, reverse=True)


@dataclass(frozen=True)
class ConsistentRead:
    """Every table of an output at one recorded point: ``tables`` by source name (``shop.orders``),
    each the mirror's columns."""

    point: RecordedPoint
    tables: dict[str, DataFrame]


@dataclass(frozen=True)
class _MirrorAt:
    version: int  # the mirror's version the point reads
    merged: int | None  # its merge watermark there (None: nothing merged; see catch_up)
    staged: int  # how far it holds staged snapshot rows there


def read_as_of(spark: SparkSession, output: str, gtid_set: str | GtidSet | None = None) -> ConsistentRead:
    """Every table of the Delta output at ``output`` (its ``sink.path``) at the newest recorded point
    complete for all of them whose GTID set is within ``gtid_set`` (None: the newest such point); see
    the module docstring. A clear error when no recorded point serves."""
    root = absolute_root(output)
    points = recorded_points(spark, root)
    if not points:
        raise SinkError(f"{root} has no recorded point yet: gtidsnap records one with each checkpoint")
    tables = sorted({ref.table for ref in list_tables(spark, root) if ref.kind == "mirror"})
    commits = {t: _commits(spark, mirror_path(root, t)) for t in tables}
    for point in points:
        if gtid_set is not None:
            within = parse_gtid_set(point.flavor, gtid_set) if isinstance(gtid_set, str) else gtid_set
            if not point.gtids() <= within:
                continue
        at = {t: _mirror_at(commits[t], point.batch) for t in tables}
        if all(point.snapshot_rows_logged or at[t].staged >= point.pending.get(str(t), -1) for t in tables):
            return ConsistentRead(point, {str(t): _table_at(spark, root, t, at[t], point) for t in tables})
    within_text = "" if gtid_set is None else f" within {gtid_set}"
    raise SinkError(
        f"no recorded point of {root}{within_text} has every table's snapshot rows in its mirror "
        f"({len(points)} recorded): read it again once the mirrors have taken them"
    )


def _commits(spark: SparkSession, mirror: str) -> list[dict[str, Any]]:
    """A mirror's commits, newest first: version and user metadata, with undone ones left out."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, mirror).history()
    rows = history.select("version", "operation", "userMetadata", "operationParameters").collect()
    return list(_kept(sorted((r.asDict() for r in rows), key=lambda c: int(c["version"]), reverse=True)))


def _kept(commits: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The commits no undo (ours, or Delta's RESTORE) took back, newest first, with their metadata."""
    below: int | None = None
    for commit in commits:
        version = int(commit["version"])
        if below is not None and version > below:
            continue
        meta = _metadata(commit["userMetadata"])
        undo = meta.get("gtidsnap_undo")
        if commit["operation"] == "RESTORE":
            target = (commit["operationParameters"] or {}).get("version")
            undone_to = int(target) if target is not None else None
        else:
            undone_to = int(undo["to_version"]) if isinstance(undo, dict) and "to_version" in undo else None
        if undone_to is not None:
            below = undone_to if below is None else min(below, undone_to)
            continue
        yield {"version": version, "meta": meta}


def _metadata(text: str | None) -> dict[str, Any]:
    try:
        data = json.loads(text or "null")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _mirror_at(commits: Sequence[dict[str, Any]], batch: int) -> _MirrorAt:
    """The newest kept version written from batches up to ``batch`` (else the empty first version),
    with its watermarks."""
    chosen: int | None = None
    merged: int | None = None
    staged = -1
    for commit in commits:  # newest first
        meta = commit["meta"]
        tag = meta.get("gtidsnap_batch", meta.get(MIRROR_UPDATE))
        if chosen is None:
            if not isinstance(tag, int) or tag > batch:
                continue
            chosen = commit["version"]
        if merged is None and isinstance(tag, int):
            seq = meta.get(MERGED_SEQ)
            merged = int(seq) if isinstance(seq, int) else NOTHING_WAITS
        if staged < 0 and isinstance(meta.get(STAGED_SEQ), int):
            staged = int(meta[STAGED_SEQ])
        if merged is not None and staged >= 0:
            break
    return _MirrorAt(0 if chosen is None else chosen, merged, staged)


def _table_at(
    spark: SparkSession, root: str, table: TableId, at: _MirrorAt, point: RecordedPoint
) -> DataFrame:
    """``table``'s rows at ``point``: its mirror's version overlaid with the changelog's records below
    the point's ``next_seq``."""
    from delta.tables import DeltaTable

    mirror, changelog = mirror_path(root, table), changelog_path(root, table)
    rows = spark.read.format("delta").option("versionAsOf", at.version).load(mirror)
    if not DeltaTable.isDeltaTable(spark, changelog):
        return rows
    return overlaid(spark, rows, changelog, recorded_key(spark, mirror), at.merged, before=point.next_seq)


def point_of(checkpoint: Any, batch: int, pending: Mapping[TableId, int], logged: bool) -> RecordedPoint:
    """The point a saved checkpoint (:class:`gtidsnap.core.checkpoint.Checkpoint`) of ``batch`` stands
    for."""
    return RecordedPoint(
        batch,
        checkpoint.flavor,
        str(checkpoint.processed),
        checkpoint.next_seq,
        datetime.now(UTC),
        tuple(sorted(str(t.table) for t in checkpoint.context.pending())),
        {str(t): seq for t, seq in pending.items()},
        logged,
    )
