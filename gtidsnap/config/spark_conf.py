"""Which ``sink.spark_conf`` keys gtidsnap refuses: those that would break its own Spark session.

``sink.spark_conf`` reaches gtidsnap's SparkSession and its Spark jobs as given, over gtidsnap's own
settings (:mod:`gtidsnap.sinks.delta.spark_session`, :mod:`gtidsnap.sinks.delta.catalog_names`). Most keys are
tuning and pass; these would turn the session into one gtidsnap cannot work in, so each is refused
at config time with what to do instead:

* Delta itself: ``spark.sql.extensions`` without Delta's extension, ``spark.sql.catalog.spark_catalog``
  other than Delta's catalog (another catalog goes under a name of its own, with ``sink.catalog``).
* ``spark.master``: ``sink.spark_master`` says it (both set: which one wins would be a guess).
* ``spark.sql.session.timeZone`` other than UTC: binlog times are UTC, and so is every time gtidsnap
  writes.
* Keys that download jars at start-up (``spark.jars.packages`` ...): the jars are resolved ahead.
* The metastore's places (``spark.sql.warehouse.dir``, ``spark.sql.catalogImplementation``, the
  Derby/JDO and DataNucleus settings) unless ``sink.metastore = "external"``: gtidsnap's embedded
  metastore keeps them beside the output. ``spark.hadoop.hive.metastore.uris`` is not among them:
  with an external metastore it is how the metastore is reached.

``spark.jars`` and ``spark.driver.extraJavaOptions`` are not refused: they are added to gtidsnap's own
(the Delta jars, its JVM options), never put in their place.
"""

from __future__ import annotations

from collections.abc import Mapping

from gtidsnap.config.values import show_value

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
DOWNLOADING_KEYS = frozenset({"spark.jars.packages", "spark.jars.repositories", "spark.jars.ivySettings"})
ADDED_KEYS = frozenset({"spark.jars", "spark.driver.extraJavaOptions"})  # added to gtidsnap's own
METASTORE_KEYS = frozenset({"spark.sql.warehouse.dir", "spark.sql.catalogImplementation"})
METASTORE_PREFIXES = ("spark.hadoop.javax.jdo.", "javax.jdo.", "spark.hadoop.datanucleus.", "datanucleus.")


def spark_conf_problem(conf: Mapping[str, str], metastore: str, where: str = "sink.spark_conf") -> str | None:
    """Why ``conf`` (``sink.spark_conf``) would break gtidsnap's session, one line naming the key and
    what to do; None when it would not. ``metastore``: ``sink.metastore``."""
    for key, value in conf.items():
        said = f"{where}[{show_value(key)}] = {show_value(value)}"
        if key == "spark.master":
            return f"{said}: set the Spark master with sink.spark_master instead"
        if key == "spark.sql.extensions" and DELTA_EXTENSION not in _parts(value):
            return (
                f"{said} leaves out Delta's SQL extension, which gtidsnap needs: write "
                f'"{DELTA_EXTENSION},{value}"'
            )
        if key == "spark.sql.catalog.spark_catalog" and value.strip() != DELTA_CATALOG:
            return (
                f"{said} replaces Delta's catalog ({DELTA_CATALOG}), which gtidsnap needs: configure "
                "another catalog under a name of its own (spark.sql.catalog.NAME) and set sink.catalog to it"
            )
        if key == "spark.sql.session.timeZone" and value.strip().upper() not in ("UTC", "+00:00", "Z"):
            return f"{said}: gtidsnap's session works in UTC (binlog times are UTC); leave it out"
        if key in DOWNLOADING_KEYS:
            return (
                f"{said} would download jars at start-up: add jar files with spark.jars (added to "
                "Delta's), or resolve them ahead as scripts/spark-deps.sh does"
            )
        if metastore != "external" and (key in METASTORE_KEYS or key.startswith(METASTORE_PREFIXES)):
            return (
                f"{said}: gtidsnap keeps its embedded metastore and warehouse beside the output; to "
                'configure your own, set sink.metastore = "external"'
            )
    return None


def _parts(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")]
