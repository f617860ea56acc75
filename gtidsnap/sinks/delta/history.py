"""SCD type 2 history of a source table, kept from its changelog: ``<path>/<db>/<table>.history``, one
row per version of a key, with when it was valid (``valid_from``/``valid_to``, the source's commit
times; ``valid_from_seq``/``valid_to_seq``), ``is_current``, and the operation that ended it
(``ended_by``: ``u`` or ``d``).

Why from the changelog: it holds every version, in ``_seq`` order, and (since it is only ever appended
to, :mod:`gtidsnap.sinks.delta.changelog_appends`) only checkpointed ones, so the history never has to
be undone. Each update takes the changelog's records above the history's watermark in one MERGE, keyed
by (key, ``valid_from_seq``): new versions are inserted, the version each key had open is closed by
its first new record; the watermark (``gtidsnap_history_seq``) is in the same commit's metadata, so an
update is whole or absent, and running one again changes nothing. A snapshot row (``r``) opens a version
only when its key has none open (else it restates the version the stream already holds), so the
changelog must hold the snapshot rows (``sink.history`` puts them there).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.sinks.delta.layout import KEY_PROPERTY, changelog_path, history_path, recorded_key
from gtidsnap.sinks.delta.types import RESERVED
from gtidsnap.sinks.delta.util import USER_METADATA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

WATERMARK = "gtidsnap_history_seq"
VERSION_COLUMNS = (
    "_op",
    "_gtid",
    "valid_from",
    "valid_to",
    "valid_from_seq",
    "valid_to_seq",
    "is_current",
    "ended_by",
)


@dataclass(frozen=True)
class HistoryUpdate:
    table: TableId
    records: int  # changelog records taken in
    watermark: int  # the greatest _seq the history now holds (-1: none)
    exists: bool = True  # the history table exists (not yet: its changelog had no record)


def history_watermark(spark: SparkSession, path: str) -> int:
    """How far the history holds its changelog: the newest commit's ``gtidsnap_history_seq``."""
    from delta.tables import DeltaTable

    for row in DeltaTable.forPath(spark, path).history(64).select("userMetadata").collect():
        try:
            meta = json.loads(row[0] or "null")
        except ValueError:
            continue
        if isinstance(meta, dict) and isinstance(meta.get(WATERMARK), int):
            return int(meta[WATERMARK])
    return -1


def update_history(
    spark: SparkSession, root: str, table: TableId, since: int | None = None, missing_ok: bool = False
) -> HistoryUpdate:
    """Take the changelog's records above the history's watermark (``since``: above that ``_seq``, to
    take records again) into the history, created on first use, keyed like the changelog; see the
    module docstring. ``missing_ok``: a changelog not created yet is no error (nothing to take)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    changelog, path = changelog_path(root, table), history_path(root, table)
    if not DeltaTable.isDeltaTable(spark, changelog):
        if missing_ok:
            return HistoryUpdate(table, 0, -1, exists=False)
        raise SinkError(f"{table} has no changelog at {changelog}: its history is kept from it")
    key = recorded_key(spark, changelog)
    if not key:
        raise SinkError(f"{changelog} does not record its key ({KEY_PROPERTY})")
    log_rows = spark.read.format("delta").load(changelog)
    data = [c for c in log_rows.columns if c not in RESERVED]
    exists = DeltaTable.isDeltaTable(spark, path)
    if since is None:
        since = history_watermark(spark, path) if exists else -1
    new = log_rows.where(F.col("_seq") > F.lit(since))
    top = new.agg(F.max("_seq")).first()
    if top is None or top[0] is None:
        return HistoryUpdate(table, 0, since, exists)
    records = new.count()
    if not exists:
        _create(spark, path, table, key, log_rows, data)
    history = spark.read.format("delta").load(path)
    source = versions_and_closures(new, history, key, data)
    watermark = max(int(top[0]), history_watermark(spark, path))
    spark.conf.set(USER_METADATA, json.dumps({WATERMARK: watermark}))
    try:
        on = " AND ".join(
            [
                *(f"t.{quote_ident(k)} <=> s.{quote_ident(k)}" for k in key),
                "t.valid_from_seq = s.valid_from_seq",
            ]
        )
        closing = {c: F.col(f"s.{c}") for c in ("valid_to", "valid_to_seq", "is_current", "ended_by")}
        (
            DeltaTable.forPath(spark, path)
            .alias("t")
            .merge(source.alias("s"), on)
            .whenMatchedUpdate(condition="s._op IS NULL", set=closing)  # type: ignore[arg-type]
            .whenMatchedUpdateAll(condition="s._op IS NOT NULL")
            .whenNotMatchedInsertAll(condition="s._op IS NOT NULL")
            .withSchemaEvolution()
            .execute()
        )
    finally:
        spark.conf.unset(USER_METADATA)
    log.info("%s: history took %d changelog records (to _seq %d)", table, records, top[0])
    return HistoryUpdate(table, records, watermark)


def versions_and_closures(new: DataFrame, history: DataFrame, key: list[str], data: list[str]) -> DataFrame:
    """The MERGE's source: a row per version the records ``new`` open (``_op`` c, u or r), valid until
    the key's next record; and a row per key's open version in ``history`` that its first new record
    ends (``_op`` NULL: only its end is set). A version opened at or after the first record taken (the
    records taken again) is left as the records make it, not closed."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [F.col(quote_ident(k)) for k in key]
    in_order = Window.partitionBy(*keys).orderBy("_seq")
    opened = history.where("is_current").select(*keys, F.col("valid_from_seq").alias("_open_seq"))
    marked = new.withColumn("_prev_op", F.lag("_op").over(in_order)).join(opened, on=key, how="left")
    older_open = F.col("_open_seq").isNotNull() & (F.col("_open_seq") < F.col("_seq"))  # not a replay's own
    restating = (F.col("_op") == "r") & (
        (F.col("_prev_op").isNotNull() & (F.col("_prev_op") != "d"))
        | (F.col("_prev_op").isNull() & older_open)
    )
    kept = marked.where(~restating)
    after = kept.withColumn("_next_seq", F.lead("_seq").over(in_order))
    after = after.withColumn("_next_ts", F.lead("_source_ts").over(in_order))
    after = after.withColumn("_next_op", F.lead("_op").over(in_order))
    after = after.withColumn("_first", F.row_number().over(in_order) == 1)
    versions = after.where(F.col("_op") != "d").select(
        *[F.col(quote_ident(c)) for c in data],
        "_op",
        "_gtid",
        F.col("_source_ts").alias("valid_from"),
        F.col("_next_ts").alias("valid_to"),
        F.col("_seq").alias("valid_from_seq"),
        F.col("_next_seq").alias("valid_to_seq"),
        F.col("_next_seq").isNull().alias("is_current"),
        F.col("_next_op").alias("ended_by"),
    )
    closures = after.where(F.col("_first") & older_open).select(
        *[F.col(quote_ident(c)) if c in key else F.lit(None).alias(c) for c in data],
        F.lit(None).cast("string").alias("_op"),
        F.lit(None).cast("string").alias("_gtid"),
        F.lit(None).cast("timestamp").alias("valid_from"),
        F.col("_source_ts").alias("valid_to"),
        F.col("_open_seq").alias("valid_from_seq"),
        F.col("_seq").alias("valid_to_seq"),
        F.lit(False).alias("is_current"),
        F.col("_op").alias("ended_by"),
    )
    return versions.unionByName(closures)


def _create(
    spark: SparkSession, path: str, table: TableId, key: list[str], log_rows: DataFrame, data: list[str]
) -> None:
    """The history, empty, as its own first version: the changelog's data columns and the version's."""
    from delta.tables import DeltaTable
    from pyspark.sql import types as T

    fields = {f.name: f for f in log_rows.schema.fields}
    columns = [T.StructField(c, fields[c].dataType, True) for c in data]
    columns += [
        T.StructField("_op", T.StringType()),
        T.StructField("_gtid", T.StringType()),
        T.StructField("valid_from", T.TimestampType()),
        T.StructField("valid_to", T.TimestampType()),
        T.StructField("valid_from_seq", T.LongType()),
        T.StructField("valid_to_seq", T.LongType()),
        T.StructField("is_current", T.BooleanType()),
        T.StructField("ended_by", T.StringType()),
    ]
    builder: Any = (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(T.StructType(columns))
        .property(KEY_PROPERTY, json.dumps(key))
        .property("delta.checkpointInterval", "50")
    )
    builder.execute()
    log.info("created %s, the history of %s", path, table)
