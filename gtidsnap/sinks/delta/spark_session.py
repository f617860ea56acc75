"""Spark start-up: a SparkSession with Delta Lake from pre-resolved jars, never from Ivy, for the sink,
its readers and consumers (:func:`build_spark_session`) and for the Spark jobs (:func:`job_spark_session`).

``delta.configure_spark_with_delta_pip`` sets ``spark.jars.packages``, which makes every new JVM
resolve and download Delta through Ivy. ``scripts/spark-deps.sh`` resolves the jars once with Maven
instead (``spark/pom.xml``); this module only points ``spark.jars`` at that folder. Once a session
runs, the Delta version its JVM loaded is read and checked against the tested one
(:func:`gtidsnap.sinks.delta.jvm_delta.delta_gate`: one WARNING when it differs).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gtidsnap.config.settings import DEFAULTS
from gtidsnap.config.spark_conf import DOWNLOADING_KEYS
from gtidsnap.core.errors import SinkError
from gtidsnap.sinks.delta.jvm_delta import delta_gate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gtidsnap.config.loading import SinkSettings

__all__ = [
    "DELTA_JARS_ENV",
    "DeltaJarsMissingError",
    "build_spark_session",
    "default_delta_jars_dir",
    "delta_jar_paths",
    "job_spark_session",
]

#: Environment variable naming the folder of Delta jars; overrides the state-dir default.
DELTA_JARS_ENV = "GTIDSNAP_DELTA_JARS"
_STATE_DIR_ENV = "GTIDSNAP_STATE_DIR"
_REPO_ROOT = Path(__file__).resolve().parents[3]
_DEPS_SCRIPT = "scripts/spark-deps.sh"
_LOOPBACK = "127.0.0.1"

# Settings that would make Spark download jars at start-up (Ivy); rejected in extra_conf.
_DOWNLOADING_KEYS = DOWNLOADING_KEYS
# Settings extra_conf adds to instead of replacing (the Delta jars, the JVM's options), with their separator.
_ADDED = {"spark.jars": ",", "spark.driver.extraJavaOptions": " "}


class DeltaJarsMissingError(SinkError):
    """The Delta jars folder is missing or incomplete: run scripts/spark-deps.sh first."""

    retryable = False

    def __init__(self, jars_dir: Path, reason: str) -> None:
        self.jars_dir = jars_dir
        super().__init__(
            f"Delta Lake jars not usable in {jars_dir}: {reason}. "
            f"Resolve them once with `{_REPO_ROOT / _DEPS_SCRIPT}` (Maven, no Ivy), "
            f"or point ${DELTA_JARS_ENV} at a folder holding delta-spark_*.jar."
        )


def default_delta_jars_dir() -> Path:
    """Where scripts/spark-deps.sh puts the jars: $GTIDSNAP_DELTA_JARS, else <state dir>/jars/delta.

    The state dir follows scripts/lib.sh: $GTIDSNAP_STATE_DIR, else <repo>/.state.
    """
    override = os.environ.get(DELTA_JARS_ENV)
    if override:
        return Path(override).expanduser()
    state_dir = os.environ.get(_STATE_DIR_ENV)
    base = Path(state_dir).expanduser() if state_dir else _REPO_ROOT / ".state"
    return base / "jars" / "delta"


def delta_jar_paths(jars_dir: Path) -> list[Path]:
    """The jar files of ``jars_dir`` (sorted, absolute); raises DeltaJarsMissingError when unusable.

    Checked in Python because a bad ``spark.jars`` only shows up later as a ClassNotFoundException.
    """
    jars_dir = jars_dir.expanduser().resolve()
    if not jars_dir.is_dir():
        raise DeltaJarsMissingError(jars_dir, "folder does not exist")
    jars = sorted(p for p in jars_dir.glob("*.jar") if p.is_file())
    if not jars:
        raise DeltaJarsMissingError(jars_dir, "folder holds no .jar files")
    if not any(p.name.startswith("delta-spark_") for p in jars):
        raise DeltaJarsMissingError(jars_dir, "no delta-spark_*.jar among the jars")
    return jars


def _default_conf(jars: list[Path]) -> dict[str, str]:
    """Delta wiring plus defaults for a 2-core machine, loopback only, UTC, Arrow on."""
    return {
        # Delta from local files only: no spark.jars.packages, hence no Ivy.
        "spark.jars": ",".join(str(p) for p in jars),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        # Nothing listens or advertises off loopback.
        "spark.driver.host": _LOOPBACK,
        "spark.driver.bindAddress": _LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Small data, 2 cores: 200 shuffle partitions and Delta's 50 log-replay partitions
        # are mostly scheduling overhead.
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.databricks.delta.snapshotPartitions": "2",
        # Binlog timestamps are UTC; never depend on the host's zone.
        "spark.sql.session.timeZone": "UTC",
        # Arrow for pandas/pyarrow <-> Spark; fail loudly rather than silently take the row path.
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        # The JIT: every Spark query generates new classes, which C2 would compile again and again
        # (measured: C2 took ~0.5 of a core through a snapshot); C1 code is good enough here. The
        # parallel collector: G1's concurrent marking cost the JVM ~2 of its ~7 CPU-s while a 1M-row
        # snapshot was read (bench part a), and nobody waits on a batch's pause. C1 alone reserves
        # a 48 MB code cache, which a run with a catalog and histories filled ("Out of space in
        # CodeCache for adapters" failed a MERGE): 256 MB, as the JVM gives tiered compilation.
        "spark.driver.extraJavaOptions": os.environ.get(
            "GTIDSNAP_JVM_OPTS",
            "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseParallelGC",
        ),
        # Large Arrow batches: Spark cuts an Arrow table into one partition (and file) per batch.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "250000",
        # The mirrors' updates run beside the batches (sinks/delta/mirror/keeper.py): share the cores
        # between them instead of queueing a changelog's append behind a mirror's MERGE.
        "spark.scheduler.mode": "FAIR",
    }


_LOG4J2 = """status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


@contextmanager
def _output_to(log_file: Path) -> Iterator[None]:
    """This process's stdout and stderr (file descriptors 1 and 2) go to ``log_file`` meanwhile: a
    JVM started now keeps them for its lifetime, so its own banners and warnings land in the file."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    target = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = [os.dup(1), os.dup(2)]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def build_spark_session(
    app_name: str = "gtidsnap",
    master: str = DEFAULTS["sink"]["spark_master"],
    jars_dir: Path | None = None,
    extra_conf: Mapping[str, str] | None = None,
    log_file: Path | None = None,
    java_options: Sequence[str] = (),
) -> SparkSession:
    """Start (or reuse) a SparkSession with Delta Lake loaded from ``jars_dir``.

    ``jars_dir`` defaults to :func:`default_delta_jars_dir`. ``extra_conf`` overrides the defaults,
    except keys that would download jars (``spark.jars.packages`` ...), which raise ValueError, and
    ``spark.jars`` and ``spark.driver.extraJavaOptions``, which are added to the Delta jars and the JVM's
    options (a jar for s3a, say, must not take Delta's place).
    As with ``getOrCreate``, static settings (``spark.jars``, ...) only apply when no session runs yet.
    ``java_options`` are added to the driver JVM's (the embedded metastore's home, say).
    ``log_file``: Spark's own output (the JVM's banners, its log at WARN and above) goes there instead
    of the console (gtidsnap's output stays readable; ``gtidsnap run --verbose`` keeps it on screen).
    The JVM's Delta version is checked once it runs (:func:`gtidsnap.sinks.delta.jvm_delta.delta_gate`).
    """
    extra = dict(extra_conf or {})
    downloading = sorted(_DOWNLOADING_KEYS.intersection(extra))
    if downloading:
        raise ValueError(f"{', '.join(downloading)} would download jars at start-up; use {_DEPS_SCRIPT}")

    jars = delta_jar_paths(jars_dir if jars_dir is not None else default_delta_jars_dir())

    # Read by the JVM launcher before SparkConf exists; keeps the block manager etc. on loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", _LOOPBACK)
    # The Python workers the JVM starts (the Spark chunk readers' data source: planned in the driver,
    # read in the executors) run this interpreter, which has gtidsnap and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession  # imported late: pyspark is heavy and not needed to fail fast

    conf = _default_conf(jars)
    if java_options:
        conf["spark.driver.extraJavaOptions"] += " " + " ".join(java_options)
    if log_file is not None:
        log_file = log_file.resolve()
        properties = log_file.with_name(log_file.name + ".log4j2.properties")
        properties.parent.mkdir(parents=True, exist_ok=True)
        properties.write_text(_LOG4J2.format(path=log_file), encoding="utf-8")
        conf["spark.driver.extraJavaOptions"] = (
            f"{conf['spark.driver.extraJavaOptions']} -Dlog4j2.configurationFile={properties.as_uri()}"
        )
    for key, separator in _ADDED.items():
        if extra.get(key, "").strip():
            extra[key] = f"{conf[key]}{separator}{extra[key].strip()}"
    builder = SparkSession.builder.appName(app_name).master(master)
    for key, value in {**conf, **extra}.items():
        builder = builder.config(key, value)
    if log_file is None or _session_runs():
        session = builder.getOrCreate()
    else:
        with _output_to(log_file):  # the JVM's banners, at its start only: this takes the process's stderr
            session = builder.getOrCreate()
    delta_gate(session)  # the JVM's Delta version read once, a WARNING if it is not the tested one
    return session


def _session_runs() -> bool:
    """Whether this process runs a SparkContext already: ``getOrCreate`` then starts nothing to send
    elsewhere, and stderr must stay (another thread may be logging, e.g. while a sink reopens)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def job_spark_session(
    master: str, app_name: str, sink: SinkSettings | None = None, root: str | None = None
) -> SparkSession:
    """The SparkSession of a Spark job (spark/merge_job.py, spark/maintenance.py), started with
    ``python`` or with ``spark-submit`` alike; with the ``sink`` settings of the output at ``root``,
    the catalog its table names need (``sink.database``) and its ``sink.spark_conf``.

    Under spark-submit the driver JVM is already running, so ``spark.jars`` can no longer put Delta on
    its class path; the pre-resolved jars are added to the driver's class loader instead (spark-submit
    gives it a MutableURLClassLoader), and ``spark.jars`` still ships them to executors.
    """
    jars = delta_jar_paths(default_delta_jars_dir())
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # set by spark-submit's PythonRunner
        from pyspark import SparkContext

        SparkContext._ensure_initialized()
        jvm: Any = SparkContext._jvm
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        if loader.getClass().getName().endswith("MutableURLClassLoader"):
            for jar in jars:
                loader.addURL(jvm.java.io.File(str(jar)).toURI().toURL())
    conf: dict[str, str] = {}
    java_options: list[str] = []
    if sink is not None and root is not None:
        from gtidsnap.sinks.delta.catalog_names import catalog_spark_conf

        conf, java_options = catalog_spark_conf(sink, root)
    spark = build_spark_session(app_name, master, None, conf, None, java_options)
    spark.sparkContext.setLogLevel("WARN")  # spark-submit's default INFO buries the job's own output
    return spark
