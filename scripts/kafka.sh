#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft combined broker+controller) for the integration tests, run from
# jars resolved on Maven Central (scripts/kafka/pom.xml); no Docker, loopback only.
#
#   scripts/kafka.sh install   # copy the jars into $STATE_DIR/kafka-lib (skipped when complete)
#   scripts/kafka.sh start     # format on first start, launch, wait until metadata answers
#   scripts/kafka.sh stop      # TERM (then KILL after 30 s) the broker recorded in the pidfile
#   scripts/kafka.sh restart   # stop + start, keeping the data directory
#   scripts/kafka.sh status    # exit 0 when running and answering, 1 otherwise
#   scripts/kafka.sh reset     # stop and delete the data directory (next start formats afresh)
#
# Environment: GTIDSNAP_STATE_DIR, KAFKA_BROKER_PORT, KAFKA_CONTROLLER_PORT (see lib.sh),
# KAFKA_START_TIMEOUT (s, default 120), KAFKA_HEAP_OPTS (default "-Xms128m -Xmx512m"),
# KAFKA_CHECK_PYTHON (interpreter with confluent_kafka for the metadata check; default .venv).
# shellcheck source=scripts/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

KAFKA_POM="$REPO_ROOT/scripts/kafka/pom.xml"
KAFKA_LIB="$STATE_DIR/kafka-lib"
KAFKA_HOME="$STATE_DIR/kafka"
KAFKA_DATA="$KAFKA_HOME/data"
KAFKA_CONF="$KAFKA_HOME/server.properties"
KAFKA_LOG4J="$KAFKA_HOME/log4j2.xml"
KAFKA_LOG="$KAFKA_HOME/kafka.log"   # log4j2 output
KAFKA_OUT="$KAFKA_HOME/kafka.out"   # JVM stdout/stderr (crashes, early errors)
KAFKA_PIDFILE="$KAFKA_HOME/kafka.pid"
KAFKA_BOOTSTRAP="127.0.0.1:$KAFKA_BROKER_PORT"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-120}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m}"
KAFKA_CHECK_PYTHON="${KAFKA_CHECK_PYTHON:-$REPO_ROOT/.venv/bin/python}"

# ---------------------------------------------------------------------------------------------
# install

pom_sha() { sha256sum "$KAFKA_POM" | cut -d' ' -f1; }

# lib_complete -> 0 when $KAFKA_LIB was copied from the current pom and every listed jar is there
lib_complete() {
  [[ -s "$KAFKA_LIB/.pom.sha256" && -s "$KAFKA_LIB/.jars" ]] || return 1
  [[ "$(cat "$KAFKA_LIB/.pom.sha256")" == "$(pom_sha)" ]] || return 1
  local jar
  while IFS= read -r jar; do [[ -s "$KAFKA_LIB/$jar" ]] || return 1; done <"$KAFKA_LIB/.jars"
}

cmd_install() {
  if lib_complete; then
    log "kafka: jars already installed in $KAFKA_LIB ($(wc -l <"$KAFKA_LIB/.jars") jars)"
    return 0
  fi
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$STATE_DIR/kafka-lib.tmp.XXXXXX")
  log "kafka: resolving jars from Maven Central into $KAFKA_LIB"
  # (Maven 3.8 prints bare ESC[0m resets even in batch mode; strip them. pipefail keeps mvn's status.)
  if ! mvn_quiet -f "$KAFKA_POM" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" -DincludeScope=runtime 2>&1 | sed 's/\x1b\[0m//g' >&2; then
    rm -rf "$tmp"; die "kafka: mvn dependency:copy-dependencies failed (pom: $KAFKA_POM)"
  fi
  (cd "$tmp" && ls -1 -- *.jar >.jars)
  [[ -s "$tmp/.jars" ]] || { rm -rf "$tmp"; die "kafka: Maven copied no jars"; }
  pom_sha >"$tmp/.pom.sha256"
  rm -rf "$KAFKA_LIB"; mv "$tmp" "$KAFKA_LIB"
  log "kafka: installed $(wc -l <"$KAFKA_LIB/.jars") jars ($(du -sh "$KAFKA_LIB" | cut -f1)) in $((SECONDS - t0))s"
  if kafka_alive; then log "kafka: a broker is running on the previous jars; run '$0 restart' to use these"; fi
}

# ---------------------------------------------------------------------------------------------
# helpers

# kafka_alive -> 0 when the pidfile names a live kafka.Kafka JVM (guards against PID reuse)
kafka_alive() {
  pid_alive "$KAFKA_PIDFILE" || return 1
  tr '\0' ' ' <"/proc/$(cat "$KAFKA_PIDFILE")/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka '
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# JAVA: the JVM command line shared by the storage tool and the broker (an array: no globbing of
# the "lib/*" class path, which the JVM expands itself)
JAVA=()
build_java() {
  local -a heap
  read -r -a heap <<<"$KAFKA_HEAP_OPTS"
  JAVA=(java "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError
    -Djava.awt.headless=true "-Dlog4j2.configurationFile=$KAFKA_LOG4J"
    "-Dkafka.logs.dir=$KAFKA_HOME" -cp "$KAFKA_LIB/*")
}

# Byte offset of $KAFKA_LOG where the current start began: only later lines are searched/shown.
LOG_OFFSET=0

fail_start() {
  local recent
  recent=$(tail -c +$((LOG_OFFSET + 1)) "$KAFKA_LOG" 2>/dev/null | tail -n 30) || true
  die "kafka: $1; log: $KAFKA_LOG (its last lines from this start below; JVM output in $KAFKA_OUT)
${recent:-(nothing logged by this start)}
--- last lines of $KAFKA_OUT ---
$(tail -n 10 "$KAFKA_OUT" 2>/dev/null)"
}

write_config() {
  mkdir -p "$KAFKA_DATA"
  cat >"$KAFKA_CONF" <<EOF
# Written by scripts/kafka.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_BROKER_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_BROKER_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DATA
num.partitions=1
default.replication.factor=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=24
EOF
  cat >"$KAFKA_LOG4J" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by scripts/kafka.sh on every start; edits are lost. -->
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="file" fileName="$KAFKA_LOG" filePattern="$KAFKA_LOG.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <SizeBasedTriggeringPolicy size="50 MB"/>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="file"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.clients" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
  </Loggers>
</Configuration>
EOF
}

format_storage() {
  local cid
  cid=$("${JAVA[@]}" kafka.tools.StorageTool random-uuid 2>>"$KAFKA_OUT") \
    || fail_start "StorageTool random-uuid failed"
  log "kafka: formatting $KAFKA_DATA (cluster id $cid, --standalone)"
  "${JAVA[@]}" kafka.tools.StorageTool format --standalone -t "$cid" -c "$KAFKA_CONF" \
    >>"$KAFKA_OUT" 2>&1 || fail_start "StorageTool format failed"
  echo "$cid" >"$KAFKA_HOME/cluster.id"
}

# metadata_ready SECONDS -> 0 once a Metadata request lists broker 1 (needs confluent_kafka)
metadata_ready() {
  "$KAFKA_CHECK_PYTHON" - "$KAFKA_BOOTSTRAP" "$1" <<'EOF'
import sys
import time

from confluent_kafka.admin import AdminClient

bootstrap, budget = sys.argv[1], float(sys.argv[2])
deadline = time.monotonic() + budget
admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
last: object = "no answer"
while time.monotonic() < deadline:
    try:
        md = admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic())))
        if 1 in md.brokers:
            sys.exit(0)
        last = f"brokers={sorted(md.brokers)}"
    except Exception as exc:  # KafkaException while the broker is still starting
        last = exc
    time.sleep(0.3)
print(f"metadata not answered within {budget:.0f}s: {last}", file=sys.stderr)
sys.exit(1)
EOF
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_start() {
  if kafka_alive; then
    log "kafka: already running (pid $(cat "$KAFKA_PIDFILE")) on $KAFKA_BOOTSTRAP"
    return 0
  fi
  rm -f "$KAFKA_PIDFILE"
  local t0=$SECONDS p
  for p in "$KAFKA_BROKER_PORT" "$KAFKA_CONTROLLER_PORT"; do
    if port_open "$p"; then
      die "kafka: 127.0.0.1:$p is already in use by a process not started by this script"
    fi
  done
  lib_complete || cmd_install
  write_config
  build_java
  : >>"$KAFKA_OUT"
  if [[ -f "$KAFKA_LOG" ]]; then LOG_OFFSET=$(stat -c %s "$KAFKA_LOG"); fi
  [[ -s "$KAFKA_DATA/meta.properties" ]] || format_storage

  log "kafka: starting on $KAFKA_BOOTSTRAP (controller 127.0.0.1:$KAFKA_CONTROLLER_PORT)"
  # New session (no terminal signals from the caller); stdio to files so that a caller capturing
  # our output is not held open by the JVM, and fd 9 (the lock) closed so that the JVM does not
  # keep holding it. The inner shell records its PID, then execs java.
  # shellcheck disable=SC2016
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$KAFKA_PIDFILE" \
    "${JAVA[@]}" kafka.Kafka "$KAFKA_CONF" </dev/null >>"$KAFKA_OUT" 2>&1 9>&- &
  local i
  for ((i = 0; i < 50; i++)); do
    if [[ -s "$KAFKA_PIDFILE" ]]; then break; fi
    sleep 0.1
  done

  # 1) the JVM listens and logs the started message (only lines written by this start count)
  local deadline=$((SECONDS + KAFKA_START_TIMEOUT))
  until port_open "$KAFKA_BROKER_PORT" \
      && grep -q 'Kafka Server started' < <(tail -c +$((LOG_OFFSET + 1)) "$KAFKA_LOG" 2>/dev/null); do
    kafka_alive || fail_start "the JVM exited during start"
    ((SECONDS < deadline)) || { cmd_stop; fail_start "not started after ${KAFKA_START_TIMEOUT}s"; }
    sleep 0.2
  done
  # 2) a real client gets metadata listing this broker
  if "$KAFKA_CHECK_PYTHON" -c 'import confluent_kafka' 2>/dev/null; then
    local left=$((deadline - SECONDS)); ((left > 5)) || left=5
    local err
    if ! err=$(metadata_ready "$left" 2>&1); then
      cmd_stop; fail_start "the broker does not answer Metadata on $KAFKA_BOOTSTRAP: $err"
    fi
  else
    log "kafka: $KAFKA_CHECK_PYTHON has no confluent_kafka; skipped the client metadata check"
  fi
  log "kafka: ready on $KAFKA_BOOTSTRAP in $((SECONDS - t0))s (pid $(cat "$KAFKA_PIDFILE"), log $KAFKA_LOG)"
}

cmd_stop() {
  if [[ -s "$KAFKA_PIDFILE" ]] && ! kafka_alive; then
    log "kafka: stale pidfile removed"; rm -f "$KAFKA_PIDFILE"; return 0
  fi
  stop_pid "$KAFKA_PIDFILE" kafka
}

cmd_status() {
  if kafka_alive && port_open "$KAFKA_BROKER_PORT"; then
    echo "kafka: running (pid $(cat "$KAFKA_PIDFILE")) on $KAFKA_BOOTSTRAP; log $KAFKA_LOG"
    return 0
  fi
  if kafka_alive; then echo "kafka: process $(cat "$KAFKA_PIDFILE") alive but $KAFKA_BOOTSTRAP closed"
  else echo "kafka: not running"; fi
  return 1
}

cmd_reset() {
  cmd_stop
  rm -rf "$KAFKA_DATA" "$KAFKA_HOME/cluster.id"
  log "kafka: data directory removed"
}

main() {
  local cmd=${1:-}
  case "$cmd" in
    install | start | stop | status | reset) ;;
    restart) ;;
    *) die "usage: $0 {install|start|stop|restart|status|reset}" ;;
  esac
  # One kafka.sh at a time (parallel pytest sessions, a manual call during a run).
  exec 9>"$STATE_DIR/kafka.lock"
  flock -w 600 9 || die "kafka: another scripts/kafka.sh holds $STATE_DIR/kafka.lock"
  case "$cmd" in
    restart) cmd_stop; cmd_start ;;
    *) "cmd_$cmd" ;;
  esac
}

main "$@"
