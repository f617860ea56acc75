"""Staged snapshot rows as Spark frames, in the mirror's or the changelog's columns: read by Spark
from their staged files, so no row comes into this process (the updates of a mirror, and the
changelog's snapshot rows, that Spark writes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gtidsnap.core.model import quote_ident
from gtidsnap.sinks.arrow_columns import POSITION, kept_numbers
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.staging import StagedFile

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SPLIT_FILE = "_gtidsnap_file"  # a staged split row's file name, in the scan of every split


def spark_schema(plan: ColumnPlan) -> T.StructType:
    """The mirror's rows in ``plan`` as Spark reads them."""
    fields = [T.StructField(c.name, c.data_type, True) for c in plan.columns]
    return T.StructType(fields + list(delta_types.MIRROR_META))


def staged_frame(
    spark: SparkSession, staged: Sequence[StagedFile], plan: ColumnPlan, changelog: bool
) -> DataFrame:
    """Staged rows as the columns of ``plan`` (a column a file lacks is NULL, types the plan's), with
    the meta columns of a mirror or a changelog: a split's ``_seq`` its ``first_seq`` + the row's
    position (the positions its windows dropped left out), ``_op`` r, no GTID, its time. Read by
    Spark: no row comes into this process."""
    schema = spark_schema(plan) if not changelog else _changelog_schema(plan)
    whole = [f.path for f in staged if not f.split]
    frames = [spark.read.option("mergeSchema", "true").parquet(*whole)] if whole else []
    splits = [f for f in staged if f.split and f.by_position]
    if splits:
        frames.append(_splits_frame(spark, splits))
    for split in (f for f in staged if f.split and not f.by_position):
        frames.append(_older_split_frame(spark, split))
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other, allowMissingColumns=True)
    have = set(frame.columns)
    columns = []
    for field_ in schema.fields:
        value = F.col(quote_ident(field_.name)) if field_.name in have else F.lit(None)
        columns.append(value.cast(field_.dataType).alias(field_.name))
    return frame.select(*columns)


def _splits_frame(spark: SparkSession, splits: Sequence[StagedFile]) -> DataFrame:
    """Splits in one scan and one plan, whatever their number (a frame a split cost the driver
    seconds of analysis each): each row's file gives its ``_seq`` base, positions and time, and the
    positions its windows dropped are left out by a broadcast anti-join."""
    files = pa.table(
        {
            SPLIT_FILE: [_file_name(f.path) for f in splits],
            "_gtidsnap_first": pa.array([f.first_seq for f in splits], pa.int64()),
            "_gtidsnap_positions": pa.array([f.positions for f in splits], pa.int64()),
            "_gtidsnap_ts": pa.array([f.source_ts for f in splits], pa.int64()),
        }
    )
    scan = spark.read.option("mergeSchema", "true").parquet(*[f.path for f in splits])
    frame = scan.select("*", F.col("_metadata.file_name").alias(SPLIT_FILE))
    frame = frame.join(F.broadcast(spark.createDataFrame(files)), on=SPLIT_FILE)
    position = F.col(quote_ident(POSITION))
    frame = frame.filter(position < F.col("_gtidsnap_positions"))
    if any(f.dropped for f in splits):
        gone = pa.table(
            {
                SPLIT_FILE: [_file_name(f.path) for f in splits for _ in f.dropped],
                POSITION: pa.array([p for f in splits for p in f.dropped], pa.int64()),
            }
        )
        frame = frame.join(
            F.broadcast(spark.createDataFrame(gone)), on=[SPLIT_FILE, POSITION], how="left_anti"
        )
    seq = (position + F.col("_gtidsnap_first")).alias("_seq")
    return frame.select("*", seq, *_snapshot_meta(F.col("_gtidsnap_ts")))


def _older_split_frame(spark: SparkSession, split: StagedFile) -> DataFrame:
    """A split staged before 2026-11-27, its kept rows numbered in order: joined to its numbers."""
    gone = set(split.dropped)
    kept = pa.array([p for p in range(split.positions) if p not in gone], pa.int64())
    numbers = pa.table({POSITION: kept, "_seq": kept_numbers(kept, split.dropped, split.first_seq)})
    frame = spark.read.parquet(split.path).join(F.broadcast(spark.createDataFrame(numbers)), on=POSITION)
    return frame.select("*", *_snapshot_meta(F.lit(split.source_ts)))


def _snapshot_meta(source_ts: Column) -> list[Column]:
    """A split's meta columns but ``_seq``: ``_op`` r, no GTID, its time (epoch seconds), a snapshot row."""
    return [
        F.lit("r").alias("_op"),
        F.lit(None).cast("string").alias("_gtid"),
        F.timestamp_seconds(source_ts).alias("_source_ts"),
        F.lit(True).alias("_snapshot"),
    ]


def _file_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _changelog_schema(plan: ColumnPlan) -> T.StructType:
    fields = [T.StructField(c.name, c.data_type, True) for c in plan.columns]
    return T.StructType(fields + list(delta_types.CHANGELOG_META))


def newest_in_spark(frame: DataFrame, key: Sequence[str]) -> DataFrame:
    """One row a key, the newest (two snapshots' staged rows of a key, merged together)."""
    from pyspark.sql import Window

    newest = Window.partitionBy(*[F.col(quote_ident(k)) for k in key]).orderBy(F.col("_seq").desc())
    return (
        frame.withColumn("_gtidsnap_n", F.row_number().over(newest))
        .where("_gtidsnap_n = 1")
        .drop("_gtidsnap_n")
    )
