"""A fresh mirror's APPEND of staged snapshot rows as data files written by pyarrow and committed
through Delta's transaction API (gtidsnap.sinks.delta.mirror.file_appends), against the Spark APPEND it
replaces (the staged rows read by Spark, folded with the newer changes, appended), on random worlds:
batches' staged files and Spark readers' splits (some empty), newer updates and deletes of staged
keys, new keys inserted, a column of every Delta type gtidsnap writes. Both tables must hold the
same rows, value for value; the commit is idempotent per app id and version and says what it is (a
WRITE with the batch's metadata)."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column
from gtidsnap.sinks.arrow_columns import POSITION
from gtidsnap.sinks.delta.change_rows import plan_schema
from gtidsnap.sinks.delta.columns import ColumnPlan, PlannedColumn
from gtidsnap.sinks.delta.file_commits import FileStats, commit_files, file_stats, holds_plan, write_data_file
from gtidsnap.sinks.delta.mirror.file_appends import append_staged_files
from gtidsnap.sinks.delta.mirror.update import MirrorWriter
from gtidsnap.sinks.delta.staged_frames import spark_schema, staged_frame
from gtidsnap.sinks.delta.staging import StagedFile
from gtidsnap.sinks.delta.tables import DeltaTables, stats_columns, table_properties

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

KEY = ["id"]
TABLE = TableId("d", "t")


def _plan() -> ColumnPlan:
    """A column of each Delta type gtidsnap writes (and a boolean)."""
    from pyspark.sql import types as T

    columns = (
        ("id", T.LongType(), "bigint"),
        ("b", T.ByteType(), "tinyint"),
        ("sh", T.ShortType(), "smallint"),
        ("n", T.IntegerType(), "int"),
        ("f", T.FloatType(), "float"),
        ("d", T.DoubleType(), "double"),
        ("v", T.StringType(), "varchar(20)"),
        ("bin", T.BinaryType(), "varbinary(20)"),
        ("day", T.DateType(), "date"),
        ("wall", T.TimestampNTZType(), "datetime(6)"),
        ("at", T.TimestampType(), "timestamp(6)"),
        ("flag", T.BooleanType(), "bool"),
        ("big", T.DecimalType(20, 0), "bigint unsigned"),
        ("price", T.DecimalType(38, 10), "decimal(38,10)"),
        ("tags", T.ArrayType(T.StringType(), True), "set('a','b','c')"),
    )
    return ColumnPlan(tuple(PlannedColumn(n, t, Column(n, s, s, n != "id")) for n, t, s in columns), {})


def _value(rnd: random.Random, kind: pa.DataType) -> Any:
    """A random value of an Arrow column type (NULL one time in ten)."""
    from decimal import Decimal

    if rnd.random() < 0.1:
        return None
    if pa.types.is_boolean(kind):
        return rnd.random() < 0.5
    if pa.types.is_integer(kind):
        return rnd.randrange(-(2 ** (kind.bit_width - 1)), 2 ** (kind.bit_width - 1))
    if pa.types.is_floating(kind):
        return float(rnd.randrange(-(10**6), 10**6)) / 8  # exact in float32 too
    if pa.types.is_string(kind):
        return "".join(rnd.choice("ab é€😀") for _ in range(rnd.randint(0, 12)))
    if pa.types.is_binary(kind):
        return rnd.randbytes(rnd.randint(0, 10))
    if pa.types.is_date32(kind):
        return dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randrange(-1000, 30000))
    if pa.types.is_timestamp(kind):
        moment = dt.datetime(2000, 1, 1) + dt.timedelta(microseconds=rnd.randrange(10**15))
        return moment.replace(tzinfo=dt.UTC) if kind.tz else moment
    if pa.types.is_decimal(kind):
        digits = rnd.randrange(-(10 ** (kind.precision - 1)), 10 ** (kind.precision - 1))
        return Decimal(digits).scaleb(-kind.scale)
    if pa.types.is_list(kind):
        return sorted(rnd.sample(["a", "b", "c"], rnd.randint(0, 3)))
    raise AssertionError(f"no values for {kind}")


def _rows(rnd: random.Random, ids: list[int], plan: ColumnPlan, seqs: list[int], ops: list[str]) -> pa.Table:
    schema = plan_schema(plan, changelog=False)
    epoch = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    data: dict[str, Any] = {"id": ids}
    for column in plan.columns[1:]:
        kind = schema.field(column.name).type
        data[column.name] = [_value(rnd, kind) for _ in ids]
    data.update(
        _op=ops,
        _seq=seqs,
        _gtid=[None if op == "r" else f"0-1-{s}" for op, s in zip(ops, seqs, strict=True)],
        _source_ts=[epoch] * len(ids),
    )
    return pa.table(data, schema=schema)


def _world(rnd: random.Random, folder: Path, plan: ColumnPlan) -> tuple[list[StagedFile], pa.Table]:
    """Staged files (batches' own with their meta columns, splits of Spark readers numbered by position
    with some dropped; some empty) and the changes newer than them: updates and deletes of staged
    keys, inserts of new keys."""
    staged: list[StagedFile] = []
    seq = 100
    next_id = 0
    for i in range(rnd.randint(1, 4)):
        count = rnd.randint(0, 400)
        ids = list(range(next_id, next_id + count))
        next_id += count + rnd.randint(0, 5)
        path = folder / f"staged-{i}.parquet"
        if rnd.random() < 0.5:  # a batch's own staged file
            pq.write_table(_rows(rnd, ids, plan, list(range(seq, seq + count)), ["r"] * count), path)
            staged.append(StagedFile(TABLE, str(path), count, seq, seq + count - 1, True))
            seq += count
            continue
        # a split a Spark reader staged: data columns and positions, some dropped, some past its end
        data = _rows(rnd, ids, plan, [0] * count, ["r"] * count).select([c.name for c in plan.columns])
        pq.write_table(data.append_column(POSITION, pa.array(range(count), pa.int64())), path)
        positions = count - rnd.randint(0, min(count, 3))
        dropped = tuple(sorted(rnd.sample(range(positions), rnd.randint(0, positions // 3))))
        by_position = rnd.random() < 0.8  # else numbered in order, as before 2026-11-27
        span = positions if by_position else positions - len(dropped)
        staged.append(
            StagedFile(
                TABLE, str(path), positions - len(dropped), seq, seq + span - 1, True, split=True,
                dropped=dropped, source_ts=1_790_000_000 + i, positions=positions, by_position=by_position,
            )
        )  # fmt: skip
        seq += span
    changed = rnd.sample(range(next_id), min(next_id, rnd.randint(0, 60)))
    new = list(range(next_id + 10, next_id + 10 + rnd.randint(0, 20)))
    ids = changed + new
    ops = [rnd.choice("ud") for _ in changed] + ["c"] * len(new)
    changes = _rows(rnd, ids, plan, list(range(seq, seq + len(ids))), ops)
    return staged, changes


def _create(spark: SparkSession, path: str, plan: ColumnPlan) -> None:
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(spark_schema(plan))
    for name, value in table_properties(KEY, mirror=True).items():
        builder = builder.property(name, value)
    builder.execute()


def _table_rows(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())


@pytest.mark.parametrize("seed", range(6))
def test_files_hold_what_the_spark_append_held(spark: SparkSession, tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    plan = _plan()
    staged, changes = _world(rnd, tmp_path, plan)
    by_spark, by_files = str(tmp_path / "by-spark"), str(tmp_path / "by-files")
    _create(spark, by_spark, plan)
    _create(spark, by_files, plan)

    from pyspark.sql import functions as F

    writer = MirrorWriter(spark, DeltaTables(spark, "app"), "app")
    frame = staged_frame(spark, staged, plan, changelog=False)
    if changes.num_rows:
        frame = writer._fold(frame, changes, KEY, plan)
    frame.where(F.col("_op") != "d").write.format("delta").mode("append").save(by_spark)

    meta = {"gtidsnap_batch": 7, "seed": seed}

    def append() -> int:  # as batch 7 of app id "app:snapshot"
        return append_staged_files(
            spark,
            by_files,
            staged,
            changes,
            plan,
            KEY,
            stats_columns(KEY, mirror=True),
            ("app:snapshot", 7, meta),
        )

    appended = append()
    want = _table_rows(spark, by_spark)
    assert _table_rows(spark, by_files) == want
    assert appended == len(want)

    # idempotent per app id and version: the same call again commits nothing
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{by_files}`").collect()
    append()
    history = spark.sql(f"DESCRIBE HISTORY delta.`{by_files}`").collect()
    assert len(history) == len(versions) and _table_rows(spark, by_files) == want
    top = max(history, key=lambda r: r["version"])
    assert top["operation"] == "WRITE" and json.loads(top["userMetadata"]) == meta
    assert holds_plan(DeltaTables(spark, "app").delta_schema(by_files), spark_schema(plan))


def test_file_statistics_let_delta_skip_files_by_key(spark: SparkSession, tmp_path: Path) -> None:
    """Two committed files with disjoint key ranges, each written in two parts: a key filter reads one
    only (the other is deleted from disk and never opened: its statistics, merged over its parts, are
    in Delta's own format); a string column whose rows are all NULL has its NULL count alone, one past
    Delta's 32 characters no bounds, in the part that has it or in the whole file."""
    plan = _plan()
    path = str(tmp_path / "t")
    _create(spark, path, plan)
    rnd = random.Random(3)
    schema = plan_schema(plan, changelog=False)
    files = []
    for ids in (list(range(0, 100)), list(range(1000, 1100))):
        rows = _rows(rnd, ids, plan, ids, ["r"] * len(ids))
        written = write_data_file(path, [rows.slice(50), rows.slice(0, 50)], schema, stats_columns(KEY, True))
        assert written is not None and written.rows == 100
        assert json.loads(written.stats)["minValues"] == {"id": ids[0], "_seq": ids[0], "_op": "r"}
        files.append(written)
    assert write_data_file(path, [], schema, ["id"]) is None, "no row: no file"
    assert commit_files(spark, path, files, "app", None, {"gtidsnap_batch": 1})
    (Path(path) / files[0].name).unlink()  # only a read that skips it by its statistics still works
    assert spark.read.format("delta").load(path).where("id >= 1000").count() == 100

    rows = pa.table({"id": pa.array([5, 2], pa.int64()), "v": pa.nulls(2, pa.string())})
    stats = file_stats(rows, ["id", "v", "missing"])
    assert stats == {
        "numRecords": 2,
        "minValues": {"id": 2},
        "maxValues": {"id": 5},
        "nullCount": {"id": 0, "v": 2},
    }
    long = pa.table({"v": pa.array(["a" * 40, "b"], pa.string())})
    assert file_stats(long, ["v"])["minValues"] == {}, "a string past Delta's 32 characters has no bounds"
    parts = FileStats(["id", "v"])
    parts.add(pa.table({"id": pa.array([7], pa.int64()), "v": pa.array(["b"], pa.string())}))
    parts.add(pa.table({"id": pa.array([3, None], pa.int64()), "v": pa.array(["z" * 33, None], pa.string())}))
    merged = parts.as_delta()
    assert merged["minValues"] == {"id": 3} and merged["maxValues"] == {"id": 7}
    assert merged["nullCount"] == {"id": 1, "v": 1} and merged["numRecords"] == 3


def test_an_idempotent_commit_is_skipped_whoever_committed_its_version(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``commit_files`` with a version commits once per app version, whether the table's checksum or
    its state says which versions it holds: right after its own commit, after another writer's commit
    of a later version of the app, after a commit of no app, on a table made again at the same path,
    without checksum files, and with app transactions that expire."""
    import shutil

    from delta.tables import DeltaTable

    from gtidsnap.sinks.delta.jvm_delta import DeltaTransaction

    path = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64(), False)])

    def one(i: int) -> Any:
        rows = pa.table({"id": pa.array([i], pa.int64())}, schema=schema)
        return write_data_file(path, [rows], schema, ["id"])

    def ids() -> list[int]:
        return sorted(r[0] for r in spark.read.format("delta").load(path).collect())

    def create(**properties: str) -> None:
        builder = DeltaTable.createIfNotExists(spark).location(path).addColumn("id", "BIGINT", nullable=False)
        for name, value in properties.items():
            builder = builder.property(name, value)
        builder.execute()

    create()
    assert commit_files(spark, path, [one(1)], "app", 1, {})
    assert DeltaTransaction(spark, path)._crc_app_version("app") == 1, "the checksum answers"
    assert not commit_files(spark, path, [one(2)], "app", 1, {}), "the same version again"
    assert commit_files(spark, path, [one(3)], "app", 2, {})
    frame = spark.createDataFrame([(4,)], "id BIGINT")
    frame.write.format("delta").mode("append").option("txnAppId", "app").option("txnVersion", "5").save(path)
    assert not commit_files(spark, path, [one(5)], "app", 3, {}), "another writer's version 5 covers 3"
    spark.createDataFrame([(6,)], "id BIGINT").write.format("delta").mode("append").save(path)
    assert commit_files(spark, path, [one(7)], "app", 6, {})
    assert not commit_files(spark, path, [one(8)], "app", 6, {})
    assert ids() == [1, 3, 4, 6, 7]
    for crc in Path(path, "_delta_log").glob("*.crc"):
        crc.unlink()
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # as a new process finds the table
    fresh = DeltaTransaction(spark, path)
    assert fresh._crc_app_version("app") is None and fresh.transaction_version("app") == 6, "no checksum"
    assert not commit_files(spark, path, [one(9)], "app", 6, {}), "the state answers alike"

    shutil.rmtree(path)  # the same path, a new table: none of app's versions
    create(**{"delta.setTransactionRetentionDuration": "interval 7 days"})
    assert commit_files(spark, path, [one(10)], "app", 6, {}), "a new table holds no version of app"
    expiring = DeltaTransaction(spark, path)
    assert expiring._crc_app_version("app") is None and expiring.transaction_version("app") == 6
    assert not commit_files(spark, path, [one(11)], "app", 6, {})
    assert ids() == [10]
