#!/usr/bin/env bash
# Resolves Delta Lake's JVM jars (spark/pom.xml) once into $STATE_DIR/jars/delta and prints that folder.
# gtidsnap.sinks.delta.spark_session passes them as spark.jars, so a SparkSession never downloads through Ivy.
# Idempotent: a marker holding the pom's sha256 skips Maven when the folder is already complete.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

JARS_DIR="$STATE_DIR/jars/delta"
command -v java >/dev/null || die "java not found (Spark 4 needs Java 17 or 21)"

# pyspark ships Spark and Scala: a copy of them would only be shadowed duplicates
no_spark_jars() {
  if compgen -G "$1/spark-*.jar" >/dev/null || compgen -G "$1/scala-library-*.jar" >/dev/null; then
    die "Spark or Scala jars were copied (they come from pyspark); fix the exclusions in spark/pom.xml"
  fi
}

resolve_pom_jars delta "$REPO_ROOT/spark/pom.xml" "$JARS_DIR" "delta-spark_*.jar" no_spark_jars
printf '%s\n' "$JARS_DIR"
