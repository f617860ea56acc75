#!/usr/bin/env bash
# Debezium's embedded engine and its MySQL and MariaDB connectors for the benchmark's streaming peer
# (scripts/bench part b), resolved once from Maven Central by scripts/debezium/pom.xml into
# .state/jars/debezium (again only when the pom changes). Prints that folder.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

JARS_DIR="$STATE_DIR/jars/debezium"
resolve_pom_jars debezium "$REPO_ROOT/scripts/debezium/pom.xml" "$JARS_DIR" "debezium-embedded-*.jar"
printf '%s\n' "$JARS_DIR"
