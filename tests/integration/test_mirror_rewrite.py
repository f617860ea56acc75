"""A mirror's MERGE done by rewriting its files (gtidsnap.sinks.delta.mirror.file_rewrite) against Spark's
MERGE it replaces (tables.merge_newest), on random worlds over a column of every Delta type gtidsnap
writes: a mirror in several files (some written by Spark, with its INT96 times), changes newer and
older than the rows, deletes, inserts. Both mirrors must hold the same rows, value for value, and
Change Data Feed readers must see the same changes; the commit is idempotent per app id and
version, and a mirror it is not for (deletion vectors) is left to Spark."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from gtidsnap.sinks.delta.change_rows import newest_per_key
from gtidsnap.sinks.delta.file_commits import commit_files, write_data_file
from gtidsnap.sinks.delta.mirror.file_rewrite import Rewrite, rewrite_merge
from gtidsnap.sinks.delta.staged_frames import spark_schema
from gtidsnap.sinks.delta.tables import merge_newest, stats_columns
from gtidsnap.sinks.delta.util import same_key
from tests.integration.test_mirror_files import KEY, _create, _plan, _rows, _table_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gtidsnap.sinks.delta.columns import ColumnPlan


def _mirror(spark: SparkSession, rnd: random.Random, path: str, plan: ColumnPlan) -> dict[int, int]:
    """A mirror of a few files: some written by Spark, some by pyarrow; its keys and their _seq."""
    from gtidsnap.sinks.delta.change_rows import plan_schema

    _create(spark, path, plan)
    held: dict[int, int] = {}
    next_id = 0
    for _ in range(rnd.randint(1, 4)):
        count = rnd.randint(0, 120)
        ids = list(range(next_id, next_id + count))
        next_id += count + rnd.randint(0, 5)
        seqs = [rnd.randint(1, 50) for _ in ids]
        rows = _rows(rnd, ids, plan, seqs, [rnd.choice("cur") for _ in ids])
        held.update(zip(ids, seqs, strict=True))
        if rnd.random() < 0.5:
            spark.createDataFrame(rows, schema=spark_schema(plan)).write.format("delta").mode("append").save(
                path
            )
        else:
            written = write_data_file(path, [rows], plan_schema(plan, False), stats_columns(KEY, True))
            commit_files(spark, path, [written] if written else [], "setup", None, {})
    return held


def _changes(rnd: random.Random, held: dict[int, int], plan: ColumnPlan) -> pa.Table:
    keys = list(held)
    changed = rnd.sample(keys, min(len(keys), rnd.randint(0, 50)))
    new = [max(keys, default=0) + 1 + i for i in range(rnd.randint(0, 15))] + [-5]
    ids = changed + new
    seqs = [rnd.randint(1, 80) for _ in ids]  # older, equal or newer than the rows
    ops = [rnd.choice("ud") for _ in changed] + [rnd.choice("cd") for _ in new]
    return newest_per_key(_rows(rnd, ids, plan, seqs, ops), KEY)


def _feed(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    """The Change Data Feed of the table's newest commit, without the commit's version and time."""
    version = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]["version"]
    frame = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version)
    rows = frame.load(path).drop("_commit_version", "_commit_timestamp").collect()
    return sorted((tuple(r) for r in rows), key=repr)


@pytest.mark.parametrize("seed", range(5))
def test_rewrite_holds_what_the_spark_merge_held(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    from pyspark.sql import functions as F

    plan = _plan()
    by_spark, by_files = str(tmp_path / "by-spark"), str(tmp_path / "by-files")
    held = _mirror(spark, random.Random(seed), by_spark, plan)
    assert _mirror(spark, random.Random(seed), by_files, plan) == held
    changes = _changes(random.Random(seed + 100), held, plan)

    merge_newest(
        spark, by_spark, spark.createDataFrame(changes, schema=spark_schema(plan)), F.expr(same_key(KEY))
    )
    meta = {"gtidsnap_batch": 3, "seed": seed}
    if seed % 2:  # no checksum files (their list of the table's files): the files listed by Spark
        for checksum in (tmp_path / "by-files" / "_delta_log").glob("*.crc"):
            checksum.unlink()
    done = rewrite_merge(spark, by_files, changes, KEY, plan, stats_columns(KEY, True), ("app", 3, meta))
    assert done is not None

    assert _table_rows(spark, by_files) == _table_rows(spark, by_spark)
    assert _feed(spark, by_files) == _feed(spark, by_spark)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{by_files}`").collect()
    assert history[0]["operation"] == "MERGE" and '"gtidsnap_batch": 3' in history[0]["userMetadata"]
    spark_merge = spark.sql(f"DESCRIBE HISTORY delta.`{by_spark}`").collect()[0]["operationMetrics"]
    counted = ("numSourceRows", "numTargetRowsUpdated", "numTargetRowsDeleted", "numTargetRowsInserted")
    assert {k: history[0]["operationMetrics"][k] for k in counted} == {k: spark_merge[k] for k in counted}

    # idempotent per app id and version: the same call again commits nothing
    again = rewrite_merge(spark, by_files, changes, KEY, plan, stats_columns(KEY, True), ("app", 3, meta))
    assert again == Rewrite(0, 0, 0, 0)
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{by_files}`").collect()) == len(history)


@pytest.mark.parametrize(
    "change",
    [
        "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')",
        "ADD COLUMNS (extra STRING)",  # the sink's cached schema older than the table's: it checks the txn's
        "SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')",
    ],
)
def test_a_mirror_it_is_not_for_is_left_to_spark(spark: SparkSession, tmp_path: Path, change: str) -> None:
    """Deletion vectors, a column another writer added, row tracking: Spark's MERGE keeps them, the
    rewrite would not, so it commits nothing and says so (None)."""
    plan = _plan()
    path = str(tmp_path / "other")
    held = _mirror(spark, random.Random(1), path, plan)
    spark.sql(f"ALTER TABLE delta.`{path}` {change}")
    versions = len(spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect())
    changes = _changes(random.Random(2), held, plan)
    assert rewrite_merge(spark, path, changes, KEY, plan, stats_columns(KEY, True), ("app", 1, {})) is None
    assert len(spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()) == versions


def test_a_commit_from_another_thread_and_session_carries_its_metadata(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The background mirror updates run on a thread of their own with a session of their own; a
    MERGE's user metadata comes from the active session's settings, so the rewrite makes its own
    session active for the commit (else the commit carried none: restarts would redo its MERGE)."""
    plan = _plan()
    path = str(tmp_path / "mirror")
    held = _mirror(spark, random.Random(3), path, plan)
    changes = _changes(random.Random(4), held, plan)
    other = spark.newSession()
    done: list[Any] = []

    def update() -> None:
        meta = {"gtidsnap_mirror": 9}
        done.append(
            rewrite_merge(other, path, changes, KEY, plan, stats_columns(KEY, True), ("app", None, meta))
        )

    thread = threading.Thread(target=update)
    thread.start()
    thread.join()
    assert done and done[0] is not None
    last = spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").collect()[0]
    assert last["operation"] == "MERGE" and json.loads(last["userMetadata"]) == {"gtidsnap_mirror": 9}
