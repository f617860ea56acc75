"""SCD type 2 history of a source table, kept from its changelog: ``<path>/<db>/<table>.history``, one
row per version of a key, with when it was valid (``valid_from``/``valid_to``, the source's commit
times; ``valid_from_seq``/``valid_to_seq``), ``is_current``, and the operation that ended it
(``ended_by``: ``u`` or ``d``).

Why from the changelog: it holds every version, in ``_seq`` order, and (since it is only ever appended
to, :mod:`gtidsnap.sinks.delta.changelog_appends`, a batch's records in one commit, batches in order)
any version of it holds exactly the records up to its greatest ``_seq``. So an update reads one version
of it, pinned, for everything it does: the records above the history's watermark, up to that version's
greatest ``_seq`` (the new watermark). It takes them in one MERGE keyed by (key, ``valid_from_seq``):
new versions are inserted, the version each key had open is closed by its first new record; the
watermark (``gtidsnap_history_seq``) is in the same commit's metadata, so an update is whole or absent,
and taking records again (``since`` below the watermark) changes nothing.

The rule, record by record in ``_seq`` order per key (the property test builds it so, row by row):

* ``c`` or ``u`` opens a version and closes the key's open one (``ended_by`` its op); ``d`` closes it.
* ``r`` (a snapshot row) opens a version only when the key has none open; else it restates the open
  version and opens nothing. So the changelog must hold the snapshot rows (``sink.history`` puts them
  there).
* ``valid_from`` is the opening record's ``_source_ts``, ``valid_to`` the next record's. A snapshot row
  is stamped with the source time of the stream where it went out (the last change the stream had
  passed; the wall clock before any), which a key's next change can precede when that change was
  streamed first in another run: a version a snapshot row opens starts at the earlier of its stamp and
  the next record's time, so it never ends before it starts.

Whether a key has a version open at its first new record is read from the history itself: its version
with the greatest ``valid_from_seq`` below that record, open there unless it ended before it. (Reading
only the versions still open would take a snapshot row taken again, under a version opened after it,
for a key without one: a second, overlapping version.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.sinks.delta.layout import KEY_PROPERTY, changelog_path, history_path, recorded_key
from gtidsnap.sinks.delta.types import RESERVED
from gtidsnap.sinks.delta.util import USER_METADATA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

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
    log_rows = pinned(spark, changelog)  # both reads below see the same records
    data = [c for c in log_rows.columns if c not in RESERVED]
    exists = DeltaTable.isDeltaTable(spark, path)
    if not exists:
        create_history(spark, path, table, key, log_rows.schema)
    if since is None:
        since = history_watermark(spark, path)
    new = log_rows.where(F.col("_seq") > F.lit(since))
    found = new.agg(F.max("_seq"), F.count(F.lit(1))).first()
    if found is None or found[0] is None:
        return HistoryUpdate(table, 0, since)
    top, records = int(found[0]), int(found[1])
    history = spark.read.format("delta").load(path)
    source = versions_and_closures(new, history, key, data)
    watermark = max(top, history_watermark(spark, path))
    spark.conf.set(USER_METADATA, json.dumps({WATERMARK: watermark}))
    try:
        on = " AND ".join(
            [
                *(f"t.{quote_ident(k)} <=> s.{quote_ident(k)}" for k in key),
                "t.valid_from_seq = s.valid_from_seq",
            ]
        )
        closing = {
            c: F.col(f"s.{c}") for c in ("valid_from", "valid_to", "valid_to_seq", "is_current", "ended_by")
        }
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
    log.info("%s: history took %d changelog records (to _seq %d)", table, records, top)
    return HistoryUpdate(table, records, watermark)


def pinned(spark: SparkSession, path: str) -> DataFrame:
    """The Delta table at ``path`` as of its newest version now: read again later (Spark reads lazily),
    it still holds the same rows."""
    from delta.tables import DeltaTable

    newest = DeltaTable.forPath(spark, path).history(1).select("version").first()
    reader = spark.read.format("delta")
    if newest is not None:
        reader = reader.option("versionAsOf", int(newest[0]))
    return reader.load(path)


def versions_and_closures(new: DataFrame, history: DataFrame, key: list[str], data: list[str]) -> DataFrame:
    """The MERGE's source: a row per version the records ``new`` open (``_op`` c, u or r), valid until
    the key's next record; and a row per key whose version open at its first new record that record
    ends (``_op`` NULL: only its end is set, and a snapshot row's start; see the module docstring)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [F.col(quote_ident(k)) for k in key]
    in_order = Window.partitionBy(*keys).orderBy("_seq")
    first = new.groupBy(*keys).agg(F.min("_seq").alias("_first_seq"))
    latest = Window.partitionBy(*keys).orderBy(F.col("valid_from_seq").desc())
    prior = (
        history.join(first, on=key)
        .where(F.col("valid_from_seq") < F.col("_first_seq"))
        .withColumn("_n", F.row_number().over(latest))
        .where("_n = 1")
        .select(
            *keys,
            F.col("valid_from_seq").alias("_prior_seq"),
            F.col("valid_from").alias("_prior_from"),
            F.col("_op").alias("_prior_op"),
            # open at the key's first new record: never ended, or ended by it or a later one (taken again)
            (F.col("valid_to_seq").isNull() | (F.col("valid_to_seq") >= F.col("_first_seq"))).alias("_open"),
        )
    )
    marked = new.withColumn("_prev_op", F.lag("_op").over(in_order)).join(prior, on=key, how="left")
    open_before = F.coalesce(F.col("_open"), F.lit(False))
    previous = F.col("_prev_op")
    restating = (F.col("_op") == "r") & (
        (previous.isNotNull() & (previous != "d")) | (previous.isNull() & open_before)
    )
    kept = marked.where(~restating)
    after = kept.withColumn("_next_seq", F.lead("_seq").over(in_order))
    after = after.withColumn("_next_ts", F.lead("_source_ts").over(in_order))
    after = after.withColumn("_next_op", F.lead("_op").over(in_order))
    after = after.withColumn("_first", F.row_number().over(in_order) == 1)
    snapshot_start = F.when(F.col("_op") == "r", F.least("_source_ts", "_next_ts"))
    snapshot_start = snapshot_start.otherwise(F.col("_source_ts"))
    versions = after.where(F.col("_op") != "d").select(
        *[F.col(quote_ident(c)) for c in data],
        "_op",
        "_gtid",
        snapshot_start.alias("valid_from"),
        F.col("_next_ts").alias("valid_to"),
        F.col("_seq").alias("valid_from_seq"),
        F.col("_next_seq").alias("valid_to_seq"),
        F.col("_next_seq").isNull().alias("is_current"),
        F.col("_next_op").alias("ended_by"),
    )
    prior_start = F.when(F.col("_prior_op") == "r", F.least("_prior_from", "_source_ts"))
    closures = after.where(F.col("_first") & open_before).select(
        *[F.col(quote_ident(c)) if c in key else F.lit(None).alias(c) for c in data],
        F.lit(None).cast("string").alias("_op"),
        F.lit(None).cast("string").alias("_gtid"),
        prior_start.otherwise(F.col("_prior_from")).alias("valid_from"),
        F.col("_source_ts").alias("valid_to"),
        F.col("_prior_seq").alias("valid_from_seq"),
        F.col("_seq").alias("valid_to_seq"),
        F.lit(False).alias("is_current"),
        F.col("_op").alias("ended_by"),
    )
    return versions.unionByName(closures)


def create_history(
    spark: SparkSession, path: str, table: TableId, key: Sequence[str], changelog: StructType
) -> None:
    """The history, empty, as its own first version: the data columns of the changelog (``changelog``,
    its schema) and the version's."""
    from delta.tables import DeltaTable
    from pyspark.sql import types as T

    columns = [T.StructField(f.name, f.dataType, True) for f in changelog.fields if f.name not in RESERVED]
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
        .property(KEY_PROPERTY, json.dumps(list(key)))
        .property("delta.checkpointInterval", "50")
    )
    builder.execute()
    log.info("created %s, the history of %s", path, table)
