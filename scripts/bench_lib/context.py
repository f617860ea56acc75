"""What every measurement gets: the pair, the sizes, where to work and log, and results to share."""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench_lib.env import STATE_DIR, Pair

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("bench")

WRITER_RATE = 1_000.0  # rows/s of the concurrent writer during snapshots (a, c, e)
WRITER_BATCH = 10  # rows per writer transaction


@dataclass
class Context:
    pair: Pair
    rows: int
    big_rows: int
    chunk_size: int
    latency_s: float
    label: str
    timeout: float  # seconds a gtidsnap run may take before it is stopped and measured as it stands
    shared: dict[str, Any] = field(default_factory=dict)  # results one part reuses from another
    tx_rows: int = 1_000  # rows per transaction of b.'s changes

    @property
    def flavor(self) -> str:
        return self.pair.flavor

    @property
    def table(self) -> str:
        return f"snap_{self.rows}"

    @property
    def big_table(self) -> str:
        return f"snap_{self.big_rows}"

    def work(self, name: str) -> Path:
        """An empty folder for one gtidsnap run's output and checkpoint (git-ignored, under .state)."""
        path = STATE_DIR / "bench" / "work" / f"{self.flavor}-{name}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    def log_path(self, name: str) -> Path:
        return STATE_DIR / "bench" / "logs" / self.label / f"{self.flavor}-{name}.log"


_spark: SparkSession | None = None


def spark() -> SparkSession:
    """The bench's one SparkSession (reading f.'s Delta output, a.'s Spark append), built as gtidsnap
    builds its own: ``build_spark_session`` on the default ``sink.spark_master``, the pre-resolved jars
    (nothing downloaded). Stop it with :func:`stop_spark` before a gtidsnap run needs the memory."""
    global _spark
    if _spark is None:
        from gtidsnap.config.loading import DEFAULTS
        from gtidsnap.sinks.delta.spark_session import build_spark_session

        _spark = build_spark_session(app_name="gtidsnap-bench", master=str(DEFAULTS["sink"]["spark_master"]))
        _spark.sparkContext.setLogLevel("WARN")
    return _spark


def stop_spark() -> None:
    """Stop the bench's SparkSession and end its JVM: ``SparkSession.stop`` alone leaves PySpark's
    gateway JVM running (heap and all) for the next session; the gtidsnap runs after it should not
    share the machine with it. The JVM exits when its stdin closes; the next :func:`spark` starts
    another."""
    global _spark
    if _spark is None:
        return
    from pyspark import SparkContext

    _spark.stop()
    _spark = None
    gateway = SparkContext._gateway
    if gateway is None:
        return
    SparkContext._gateway = None
    SparkContext._jvm = None
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log.warning("the bench's Spark JVM (pid %d) did not exit; killing it", proc.pid)
            proc.kill()
            proc.wait()
