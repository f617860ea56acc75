"""Chunk readers on Spark's executors: each chunk (a split) a task, reconciled against the one binlog in
the driver (``snapshot.reader_pool = "spark"``).

The same job as a reader process (:mod:`gtidsnap.snapshot.readers`): wait until the split's ``lw`` is
visible, SELECT the split's key range, read the executed set right after (its ``hw``), and send the
rows back. Here the job runs as the one partition of a PySpark Python data source
(:class:`pyspark.sql.datasource.DataSource`, Spark 4): the executor's Python worker opens its own
read-only connection (kept by the worker for its next tasks) and returns the whole
:class:`ChunkRead`, pickled, as one row. The driver's engine keeps the stream and the windows
(:mod:`gtidsnap.snapshot.windows`) exactly as with reader processes: nothing changes in how a split's
rows are reconciled, ordered and checkpointed, only where they are read. So a replica's keyset ranges
can be read by as many executors as a cluster gives, each with its own connection and watermarks.

Each split is one Spark job of one task, run from a thread of the driver (``readers`` of them, so
that many splits are read at once); a Spark job costs ~0.1-0.4 s whatever its size, so splits should be
large (``snapshot.chunk_size`` of 100,000 rows, say). A split's rows travel to the driver: memory is
about 2 x ``readers`` splits in flight.

The connection settings (the password among them) reach the executors inside the data source class,
pickled by value when it is registered, never as an option (options show in plans and logs); the job
(table shape, key range, ``lw``) is an option. A Spark job that fails (an executor lost, a bug) breaks
the pool as a dead reader process does: its splits are read again (:mod:`gtidsnap.snapshot.planner`).
"""

from __future__ import annotations

import base64
import itertools
import logging
import os
import pickle
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gtidsnap.core.ports import ChunkJob, ChunkRead
from gtidsnap.snapshot.readers import read_with
from gtidsnap.source.connection import ConnectionSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import DataSource

log = logging.getLogger(__name__)

_pools = itertools.count(1)


def split_source(name: str, settings: ConnectionSettings) -> type[DataSource]:
    """A Python data source named ``name`` reading the split its ``job`` option names, with
    ``settings`` held by the class itself (defined here, so it is pickled by value)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class SplitReader(DataSourceReader):
        def __init__(self, job: str) -> None:
            self.job = job

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0)]

        def read(self, partition: InputPartition) -> Iterator[tuple[int, bytes]]:
            job: ChunkJob = pickle.loads(base64.b64decode(self.job))
            yield job.window, pickle.dumps(read_with(settings, job))  # the worker's connection, kept

    class SplitSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return "window INT, chunk_read BINARY"

        def reader(self, schema: Any) -> DataSourceReader:
            return SplitReader(self.options["job"])

    return SplitSource


@dataclass
class SparkChunkReaders:
    """``readers`` splits read at once, each a Spark job (see the module docstring)."""

    settings: ConnectionSettings
    readers: int
    spark_factory: Callable[[], SparkSession]
    _spark: SparkSession | None = None
    _threads: ThreadPoolExecutor | None = None
    _futures: list[Future[ChunkRead]] = field(default_factory=list)
    _name: str = ""
    _group: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def size(self) -> int:
        return self.readers

    @property
    def in_flight(self) -> int:
        return 2 * self.readers

    @property
    def remote(self) -> bool:
        """Splits are read on the executors: rows rendered for the output stay there (a Delta output
        stages them where they were read, :class:`gtidsnap.sinks.arrow_columns.StagedRenderer`)."""
        return True

    def start(self) -> None:
        """Start Spark (or take the running session) and register the data source."""
        self._started()

    def _started(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._threads is None:
                number = next(_pools)
                self._name = f"gtidsnap_splits_{os.getpid()}_{number}"
                self._group = f"gtidsnap-splits-{os.getpid()}-{number}"
                self._spark = self.spark_factory()
                self._spark.dataSource.register(split_source(self._name, self.settings))
                self._threads = ThreadPoolExecutor(self.readers, thread_name_prefix="gtidsnap-split")
            return self._threads

    def submit(self, job: ChunkJob) -> None:
        threads = self._started()
        self._futures.append(threads.submit(self._read, job.portable()))

    def _read(self, job: ChunkJob) -> ChunkRead:
        """One Spark job reading ``job``'s split (in a thread of the driver)."""
        spark = self._spark
        assert spark is not None
        spark.sparkContext.setJobGroup(self._group, f"gtidsnap: split of {job.schema.table}", True)
        encoded = base64.b64encode(pickle.dumps(job)).decode("ascii")
        (row,) = spark.read.format(self._name).option("job", encoded).load().collect()
        read: ChunkRead = pickle.loads(row["chunk_read"])
        return read

    def collect(self) -> tuple[list[ChunkRead], bool]:
        done = [f for f in self._futures if f.done()]
        if not done:
            return [], False
        failed = [error for f in done if (error := f.exception()) is not None]
        if failed:
            log.warning(
                "a Spark job reading a split failed; the splits in flight are read again: %s", failed[0]
            )
            self._cancel()
            return [], True
        reads = [f.result() for f in done]
        self._futures = [f for f in self._futures if f not in done]
        return reads, False

    def _cancel(self) -> None:
        """Forget every split in flight, cancelling their Spark jobs."""
        futures, self._futures = self._futures, []
        for future in futures:
            future.cancel()
        if self._spark is not None and self._group:
            self._spark.sparkContext.cancelJobGroup(self._group)

    def close(self) -> None:
        self._cancel()
        with self._lock:
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=True, cancel_futures=True)
