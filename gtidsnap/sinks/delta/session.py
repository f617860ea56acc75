"""Spark start-up for the Spark jobs that use the Delta sink's code."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def job_spark_session(master: str, app_name: str) -> SparkSession:
    """The SparkSession of a Spark job (spark/merge_job.py, spark/maintenance.py), started with
    ``python`` or with ``spark-submit`` alike.

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
    spark = build_spark_session(app_name=app_name, master=master)
    spark.sparkContext.setLogLevel("WARN")  # spark-submit's default INFO buries the job's own output
    return spark
