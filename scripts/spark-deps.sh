#!/usr/bin/env bash
# Resolves Delta Lake's JVM jars (spark/pom.xml) once into $STATE_DIR/jars/delta and prints that folder.
# gtidsnap.spark_session passes them as spark.jars, so a SparkSession never downloads through Ivy.
# Idempotent: a marker holding the pom's sha256 skips Maven when the folder is already complete.
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

POM="$REPO_ROOT/spark/pom.xml"
JARS_DIR="$STATE_DIR/jars/delta"
MARKER="$JARS_DIR/.complete"

[[ -f "$POM" ]] || die "missing $POM"
command -v mvn >/dev/null || die "mvn not found (Maven is needed to resolve the Delta jars)"
command -v java >/dev/null || die "java not found (Spark 4 needs Java 17 or 21)"

pom_hash=$(sha256sum "$POM" | cut -d' ' -f1)

is_complete() {
  [[ -f "$MARKER" && "$(cat "$MARKER")" == "$pom_hash" ]] && compgen -G "$JARS_DIR/delta-spark_*.jar" >/dev/null
}

mkdir -p "$STATE_DIR/jars"
# One resolver at a time (parallel test sessions, a CI step and a developer may all call this).
exec 9>"$STATE_DIR/jars/.delta.lock"
flock 9

if is_complete; then
  log "delta jars: up to date in $JARS_DIR"
else
  tmp_dir=$(mktemp -d "$STATE_DIR/jars/delta.tmp.XXXXXX")
  trap 'rm -rf "$tmp_dir"' EXIT
  log "delta jars: resolving $POM with Maven into $JARS_DIR"
  start=$SECONDS
  # Maven's stdout goes to stderr: this script's stdout is only the folder.
  mvn_quiet -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$tmp_dir" -DincludeScope=runtime -DoverWriteReleases=true >&2 \
    || die "mvn dependency:copy-dependencies failed for $POM"
  compgen -G "$tmp_dir/delta-spark_*.jar" >/dev/null || die "no delta-spark_*.jar after resolving $POM"
  if compgen -G "$tmp_dir/spark-*.jar" >/dev/null || compgen -G "$tmp_dir/scala-library-*.jar" >/dev/null; then
    die "Spark or Scala jars were copied (they come from pyspark); fix the exclusions in $POM"
  fi
  chmod 755 "$tmp_dir"
  printf '%s\n' "$pom_hash" >"$tmp_dir/.complete"
  rm -rf "$JARS_DIR"
  mv "$tmp_dir" "$JARS_DIR"
  trap - EXIT
  log "delta jars: $(find "$JARS_DIR" -name '*.jar' | wc -l) jars, $(du -sh "$JARS_DIR" | cut -f1)," \
    "resolved in $((SECONDS - start))s"
fi

printf '%s\n' "$JARS_DIR"
