"""Chunk splits read by Spark's executors (``snapshot.reader_pool = "spark"``), reconciled against the
one binlog in the driver: real replicas, a real writer, the run's SparkSession (local[2]: its Python
workers are the executors' readers, in processes of their own)."""

from __future__ import annotations

import base64
import dataclasses
import os
import pickle
import random
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gtidsnap.config.loading import Config, SnapshotSettings
from gtidsnap.core.model import TableId
from gtidsnap.core.ports import ChunkJob
from gtidsnap.run import build_engine
from gtidsnap.snapshot.spark_readers import SparkChunkReaders
from gtidsnap.source.replica import Replica
from tests.integration.cdc import (
    Writer,
    check_invariants,
    create_table,
    make_config,
    read_records,
    run_engine,
    source_rows,
)
from tests.integration.fixtures.db_servers import READER, ReplicaPair

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def spark_config(pair: ReplicaPair, out: Path, tables: list[TableId], chunk_size: int) -> Config:
    config = make_config(pair, out, tables, chunk_size=chunk_size)
    return dataclasses.replace(
        config, snapshot=SnapshotSettings(chunk_size=chunk_size, readers=2, reader_pool="spark")
    )


def test_splits_read_by_spark_tasks_lose_nothing_and_rewind_nothing_under_a_writer(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    for name in ("a", "b"):
        create_table(pair, fresh_db, name, 300)
    tables = [TableId(fresh_db, "a"), TableId(fresh_db, "b")]
    # Spark and its data source take a few seconds to start: the writer goes on well past that.
    writer = Writer(pair, fresh_db, ["a", "b"], seed=7, transactions=300, pause_s=0.02).start()
    config = spark_config(pair, tmp_path, tables, chunk_size=random.Random(7).choice([40, 64]))
    with Replica(config.source) as replica:
        engine = build_engine(config, replica, spark_factory=lambda: spark)
        assert isinstance(engine.readers, SparkChunkReaders)
        stats = engine.run(snapshot=tables, until_caught_up=True)
    writer.join()
    run_engine(pair, tmp_path, [], tables=tables)  # the writer may finish after the snapshot: catch up
    records = read_records(tmp_path)
    assert any(not r["snapshot"] for r in records) and any(r["snapshot"] for r in records)
    check_invariants(records, {f"{fresh_db}.{t}": source_rows(pair, fresh_db, t) for t in ("a", "b")})
    assert stats.readers and os.getpid() not in stats.readers, "splits were read in Spark's workers"
    assert sum(t.rows for t in stats.readers.values()) >= 600


def test_a_split_names_no_secret_and_a_failed_spark_job_reads_its_splits_again(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """The job option Spark sees (and may show in a plan) holds the split, not the connection; a Spark
    job that fails (here: its data source gone) breaks the pool, as a dead reader process does."""
    create_table(pair, fresh_db, "t", 10)
    config = spark_config(pair, tmp_path, [TableId(fresh_db, "t")], chunk_size=5)
    with Replica(config.source) as replica:
        schema = replica.schema(TableId(fresh_db, "t"))
    readers = SparkChunkReaders(config.source, 1, lambda: spark)
    try:
        readers.start()
        job = ChunkJob(1, schema, None, (8,), lw="")
        readers.submit(job)
        reads: list = []
        while not reads:
            reads, broken = readers.collect()
            assert not broken
        assert [r.window for r in reads] == [1] and not reads[0].failed
        assert [row["id"] for row in reads[0].rows] == [0, 2, 4, 6, 8]  # type: ignore[index]
        option = base64.b64encode(pickle.dumps(job.portable()))
        assert READER[1].encode() not in base64.b64decode(option)
        readers._name = "gtidsnap_no_such_source"  # the next Spark job cannot plan its scan
        readers.submit(dataclasses.replace(job, window=2))
        broken = False
        while not broken:
            reads, broken = readers.collect()
        assert reads == []
    finally:
        readers.close()


def test_splits_into_delta_are_staged_by_the_executors_and_no_row_reaches_the_driver(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Delta output with Spark readers: each split's task writes its rows (Arrow, the Delta types) to
    the output's staging folder and sends back only its keys, watermarks and the file's name; the
    driver's sink has Spark tasks make them the mirror's data files, the rows each window dropped left
    out, and commits them. No split row is ever read into the driver's Python (pyarrow may read key
    columns only), under a writer."""
    import pyarrow.parquet as pq

    from gtidsnap.config.loading import SinkSettings
    from gtidsnap.sinks.arrow_columns import StagedRows
    from gtidsnap.sinks.delta import mirror_path
    from gtidsnap.snapshot import planner

    create_table(pair, fresh_db, "a", 400)
    table = TableId(fresh_db, "a")
    writer = Writer(pair, fresh_db, ["a"], seed=11, transactions=300, pause_s=0.02).start()
    config = spark_config(pair, tmp_path, [table], chunk_size=50)
    config = dataclasses.replace(config, sink=SinkSettings(type="delta", path=str(tmp_path / "delta")))
    crossed: list[object] = []
    on_read = planner.ChunkPlanner._on_read

    def watched(self: planner.ChunkPlanner, read: object) -> object:
        crossed.append(getattr(read, "rows", None))
        return on_read(self, read)  # type: ignore[arg-type]

    read_table = pq.read_table

    def keys_only(source: object, *args: object, columns: object = None, **kwargs: object) -> object:
        assert columns is not None and "payload" not in columns, f"the driver read rows of {source}"
        return read_table(source, *args, columns=columns, **kwargs)

    iter_batches = pq.ParquetFile.iter_batches

    def no_rows(self: pq.ParquetFile, *args: object, columns: object = None, **kwargs: object) -> object:
        assert columns is not None and "payload" not in columns, "the driver read rows of a split"
        return iter_batches(self, *args, columns=columns, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner.ChunkPlanner, "_on_read", watched)
    monkeypatch.setattr(pq, "read_table", keys_only)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", no_rows)
    with Replica(config.source) as replica:
        engine = build_engine(config, replica, spark_factory=lambda: spark)
        assert isinstance(engine.readers, SparkChunkReaders)
        engine.run(snapshot=[table], until_caught_up=True)
    writer.join()
    monkeypatch.undo()
    rows = [r for r in crossed if r is not None]
    assert rows and all(isinstance(r, StagedRows) for r in rows), "only file names crossed, not rows"
    with pair.primary() as primary:  # the replica holds all the writer did before the catch-up reads it
        pair.wait_replicated(primary)
    with Replica(config.source) as replica:  # the writer may finish after the snapshot: catch up
        build_engine(config, replica, spark_factory=lambda: spark).run(until_caught_up=True)
    mirror = spark.read.format("delta").load(mirror_path(str(tmp_path / "delta"), table)).collect()
    got = {(r["id"],): {"id": r["id"], "v": r["v"], "payload": r["payload"]} for r in mirror}
    assert len(got) == len(mirror), "no key twice in the mirror"
    assert got == source_rows(pair, fresh_db, "a")
