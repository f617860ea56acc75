#!/usr/bin/env bash
# Debezium's embedded engine and its MySQL and MariaDB connectors for the benchmark's streaming peer
# (scripts/bench part b), resolved once from Maven Central by scripts/debezium/pom.xml into
# .state/jars/debezium (again only when the pom changes). Prints that folder.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

POM="$REPO_ROOT/scripts/debezium/pom.xml"
JARS_DIR="$STATE_DIR/jars/debezium"
MARKER="$JARS_DIR/.complete"
command -v mvn >/dev/null || die "mvn not found (Maven resolves the Debezium jars)"
pom_hash=$(sha256sum "$POM" | cut -d' ' -f1)
mkdir -p "$STATE_DIR/jars"
exec 9>"$STATE_DIR/jars/.debezium.lock"
flock 9
if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$pom_hash" ]]; then
  log "debezium jars: up to date in $JARS_DIR"
else
  tmp_dir=$(mktemp -d "$STATE_DIR/jars/debezium.tmp.XXXXXX")
  trap 'rm -rf "$tmp_dir"' EXIT
  log "debezium jars: resolving $POM with Maven into $JARS_DIR"
  mvn_quiet -f "$POM" dependency:copy-dependencies -DoutputDirectory="$tmp_dir" -DincludeScope=runtime >&2 \
    || die "mvn dependency:copy-dependencies failed for $POM"
  compgen -G "$tmp_dir/debezium-embedded-*.jar" >/dev/null || die "no debezium-embedded jar after resolving $POM"
  chmod 755 "$tmp_dir"
  printf '%s\n' "$pom_hash" >"$tmp_dir/.complete"
  rm -rf "$JARS_DIR"
  mv "$tmp_dir" "$JARS_DIR"
  trap - EXIT
  log "debezium jars: $(find "$JARS_DIR" -name '*.jar' | wc -l) jars in $JARS_DIR"
fi
printf '%s\n' "$JARS_DIR"
