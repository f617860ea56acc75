"""Smoke test of the Spark + Delta Lake stack: CDF-enabled table, MERGE, Change Data Feed, Arrow.

Proves the Maven-resolved jars (scripts/spark-deps.sh) load in the pip-installed PySpark without any
download, before real snapshot/merge code depends on them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def test_no_jar_download_configured(spark: SparkSession) -> None:
    conf = dict(spark.sparkContext.getConf().getAll())
    assert "spark.jars.packages" not in conf
    assert spark.conf.get("spark.jars.packages", None) is None
    assert "delta-spark_" in conf["spark.jars"]
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"


def test_merge_and_change_data_feed(spark: SparkSession, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    path = str(tmp_path / "customers")
    initial = spark.createDataFrame(
        [(1, "alice", 10), (2, "bob", 20), (3, "carol", 30)],
        "id INT, name STRING, score INT",
    )
    (initial.write.format("delta").option("delta.enableChangeDataFeed", "true").save(path))  # version 0
    props = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    assert {r.key: r.value for r in props}.get("delta.enableChangeDataFeed") == "true"

    # One batch: update id 2, insert id 4, delete id 3 (op 'D' marks a delete, as a binlog row would).
    batch = spark.createDataFrame(
        [(2, "bobby", 21, "U"), (4, "dave", 40, "I"), (3, None, None, "D")],
        "id INT, name STRING, score INT, op STRING",
    )
    (
        DeltaTable.forPath(spark, path)
        .alias("t")
        .merge(batch.alias("s"), "t.id = s.id")
        .whenMatchedDelete(condition="s.op = 'D'")
        .whenMatchedUpdate(set={"name": "s.name", "score": "s.score"})
        .whenNotMatchedInsert(
            condition="s.op != 'D'", values={"id": "s.id", "name": "s.name", "score": "s.score"}
        )
        .execute()
    )  # version 1

    rows = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    assert rows == [(1, "alice", 10), (2, "bobby", 21), (4, "dave", 40)]

    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .load(path)
        .select("id", "name", "score", "_change_type", "_commit_version")
        .collect()
    )
    got = sorted((r.id, r._change_type, r.name, r.score, r._commit_version) for r in changes)
    assert got == [
        (2, "update_postimage", "bobby", 21, 1),
        (2, "update_preimage", "bob", 20, 1),
        (3, "delete", "carol", 30, 1),
        (4, "insert", "dave", 40, 1),
    ]

    # From version 0 the initial rows show up as inserts too.
    v0_types = {
        (r.id, r._change_type)
        for r in spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(path)
        .where("_commit_version = 0")
        .collect()
    }
    assert v0_types == {(1, "insert"), (2, "insert"), (3, "insert")}


def test_dataframe_from_arrow(spark: SparkSession) -> None:
    table = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "gtid": pa.array(["0-1-1", "0-1-2", None], pa.string()),
            "amount": pa.array([1.5, None, 3.25], pa.float64()),
        }
    )
    # Arrow fallback is disabled by build_spark_session, so this fails instead of taking the row path.
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.fallback.enabled") == "false"
    from_arrow = spark.createDataFrame(table)
    assert [f.name for f in from_arrow.schema.fields] == ["id", "gtid", "amount"]
    rows = sorted(tuple(r) for r in from_arrow.collect())
    assert rows == [(1, "0-1-1", 1.5), (2, "0-1-2", None), (3, None, 3.25)]

    from_pandas = spark.createDataFrame(table.to_pandas())
    assert from_pandas.count() == 3

    back = from_arrow.orderBy("id").toArrow()
    assert back.column("gtid").to_pylist() == ["0-1-1", "0-1-2", None]
