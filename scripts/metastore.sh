#!/usr/bin/env bash
# A Hive metastore server for the tests of tables by name (sink.metastore = "external"): the Hive 2.3
# metastore in pyspark's own jars (no download), embedded Derby under $STATE_DIR/metastore, served on
# 127.0.0.1 only by scripts/metastore/LoopbackMetastore.java (Hive 2.3's own main binds every interface).
#
#   scripts/metastore.sh install   # compile the launcher against pyspark's jars (skipped when current)
#   scripts/metastore.sh start     # launch, wait until it answers on 127.0.0.1:$METASTORE_PORT
#   scripts/metastore.sh stop      # TERM (then KILL after 30 s)
#   scripts/metastore.sh restart   # stop + start, keeping its database
#   scripts/metastore.sh status    # exit 0 when it runs and listens
# shellcheck source=scripts/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

HOME_DIR="$STATE_DIR/metastore"
CLASSES="$HOME_DIR/classes"
CONF_DIR="$HOME_DIR/conf"
PIDFILE="$HOME_DIR/metastore.pid"
LOGFILE="$HOME_DIR/metastore.log"
SOURCE="$REPO_ROOT/scripts/metastore/LoopbackMetastore.java"
START_TIMEOUT="${METASTORE_START_TIMEOUT:-180}"

pyspark_jars() {
  local home
  home=$("$REPO_ROOT/.venv/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))') \
    || die "metastore: pyspark is not installed in .venv (run scripts/setup)"
  [[ -d "$home/jars" ]] || die "metastore: no jars folder in $home"
  echo "$home/jars"
}

cmd_install() {
  local jars stamp
  jars=$(pyspark_jars)
  stamp="$(sha256sum "$SOURCE" | cut -c1-16)-$(basename "$(ls "$jars"/hive-metastore-*.jar)")"
  if [[ -f "$CLASSES/.stamp" && "$(cat "$CLASSES/.stamp")" == "$stamp" ]]; then
    log "metastore: launcher already compiled in $CLASSES"
    return 0
  fi
  command -v javac >/dev/null || die "metastore: javac is needed (apt-get install openjdk-17-jdk-headless)"
  rm -rf "$CLASSES"; mkdir -p "$CLASSES"
  javac -nowarn -cp "$jars/*" -d "$CLASSES" "$SOURCE" 2>"$HOME_DIR/javac.log" \
    || die "metastore: compiling $SOURCE failed: $(tail -n 20 "$HOME_DIR/javac.log")"
  echo "$stamp" >"$CLASSES/.stamp"
  log "metastore: launcher compiled against $(basename "$(ls "$jars"/hive-metastore-*.jar)")"
}

write_conf() {
  mkdir -p "$CONF_DIR" "$HOME_DIR/warehouse"
  cat >"$CONF_DIR/hive-site.xml" <<XML
<?xml version="1.0"?>
<configuration>
  <property><name>javax.jdo.option.ConnectionURL</name>
    <value>jdbc:derby:;databaseName=$HOME_DIR/metastore_db;create=true</value></property>
  <property><name>datanucleus.schema.autoCreateAll</name><value>true</value></property>
  <property><name>hive.metastore.schema.verification</name><value>false</value></property>
  <property><name>hive.metastore.warehouse.dir</name><value>file://$HOME_DIR/warehouse</value></property>
  <property><name>hive.async.log.enabled</name><value>false</value></property>
</configuration>
XML
}

alive() {
  pid_alive "$PIDFILE" || return 1
  tr '\0' ' ' <"/proc/$(cat "$PIDFILE")/cmdline" 2>/dev/null | grep -q 'LoopbackMetastore'
}

cmd_start() {
  mkdir -p "$HOME_DIR"
  if alive; then log "metastore: running on 127.0.0.1:$METASTORE_PORT (pid $(cat "$PIDFILE"))"; return 0; fi
  cmd_install
  write_conf
  local jars; jars=$(pyspark_jars)
  log "metastore: starting on 127.0.0.1:$METASTORE_PORT (log $LOGFILE)"
  [[ -f "$LOGFILE" ]] && mv -f "$LOGFILE" "$LOGFILE.1"  # "serving on" is read from this start's log
  # its own session and no inherited descriptors but the log: a caller's lock is never held by it
  (cd "$HOME_DIR" && exec setsid java -Xmx512m -Dderby.system.home="$HOME_DIR" \
    -cp "$CONF_DIR:$CLASSES:$jars/*" LoopbackMetastore 127.0.0.1 "$METASTORE_PORT" \
    </dev/null >"$LOGFILE" 2>&1 9>&- 8>&-) &
  echo $! >"$PIDFILE"
  local i
  for ((i = 0; i < START_TIMEOUT * 5; i++)); do
    if ! pid_alive "$PIDFILE"; then die "metastore: exited while starting; see $LOGFILE:
$(tail -n 30 "$LOGFILE")"; fi
    if grep -q "metastore: serving on" "$LOGFILE" 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$METASTORE_PORT") 2>/dev/null; then
      log "metastore: ready on 127.0.0.1:$METASTORE_PORT (pid $(cat "$PIDFILE"))"
      return 0
    fi
    sleep 0.2
  done
  die "metastore: not listening on 127.0.0.1:$METASTORE_PORT after ${START_TIMEOUT}s; see $LOGFILE"
}

cmd_stop() { stop_pid "$PIDFILE" metastore; }

cmd_status() {
  if alive && (exec 3<>"/dev/tcp/127.0.0.1/$METASTORE_PORT") 2>/dev/null; then
    log "metastore: running on 127.0.0.1:$METASTORE_PORT"
  else
    log "metastore: not running"; return 1
  fi
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart) cmd_stop; cmd_start ;;
  status) cmd_status ;;
  *) echo "usage: $0 install|start|stop|restart|status" >&2; exit 2 ;;
esac
