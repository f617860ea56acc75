"""Spark start-up for the Spark jobs that use the Delta sink's code."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gtidsnap.config.loading import SinkSettings


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
    from gtidsnap.spark_session import build_spark_session, default_delta_jars_dir, delta_jar_paths

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
