# shellcheck shell=bash
# Shared helpers for the harness scripts: one git-ignored state folder, fixed loopback ports,
# readiness waits and stop-by-PID. Sourced, never executed.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="${GTIDSNAP_STATE_DIR:-$REPO_ROOT/.state}"
mkdir -p "$STATE_DIR"
STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"  # the real folder: servers write it into their files (binlog.index)

# Loopback ports (always used as 127.0.0.1:PORT, never a bare port).
MARIADB_PRIMARY_PORT="${MARIADB_PRIMARY_PORT:-33061}"
MARIADB_REPLICA_PORT="${MARIADB_REPLICA_PORT:-33062}"
MARIADB_REPLICA2_PORT="${MARIADB_REPLICA2_PORT:-33063}"  # a second replica of the same primary (failover)
# An unrelated MariaDB primary -> replica with the same server ids and GTID domain (another primary's history)
MARIADB_OTHER_PRIMARY_PORT="${MARIADB_OTHER_PRIMARY_PORT:-33064}"
MARIADB_OTHER_REPLICA_PORT="${MARIADB_OTHER_REPLICA_PORT:-33065}"
MYSQL_PRIMARY_PORT="${MYSQL_PRIMARY_PORT:-33071}"
MYSQL_REPLICA_PORT="${MYSQL_REPLICA_PORT:-33072}"
MYSQL_REPLICA2_PORT="${MYSQL_REPLICA2_PORT:-33073}"
KAFKA_BROKER_PORT="${KAFKA_BROKER_PORT:-39092}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-39093}"
METASTORE_PORT="${METASTORE_PORT:-39083}"  # the Hive metastore server (tables by name, sink.metastore)

# Accounts created by the scripts. The tool's own account is read-only on the replica.
ADMIN_USER=admin; ADMIN_PASSWORD=admin-test-pw          # tests write to primaries with it
REPL_USER=repl; REPL_PASSWORD=repl-test-pw              # replica -> primary replication
READER_USER=gtidsnap; READER_PASSWORD=gtidsnap-test-pw  # SELECT, REPLICATION CLIENT, REPLICATION SLAVE

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pid_alive PIDFILE -> 0 when the process recorded in PIDFILE runs
pid_alive() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# wait_port PORT SECONDS LOGFILE -> waits until 127.0.0.1:PORT accepts TCP, else dies naming the log
wait_port() {
  local port=$1 secs=$2 logfile=$3 i
  for ((i = 0; i < secs * 5; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  die "nothing listens on 127.0.0.1:$port after ${secs}s; see $logfile (last lines below)
$(tail -n 20 "$logfile" 2>/dev/null)"
}

# stop_pid PIDFILE NAME -> TERM, wait up to 30 s, then KILL
stop_pid() {
  local pidfile=$1 name=$2 pid i
  if ! pid_alive "$pidfile"; then rm -f "$pidfile"; log "$name: not running"; return 0; fi
  pid=$(cat "$pidfile"); kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidfile"; log "$name: stopped"
}

# mvn_quiet ARGS... -> Maven in batch mode, reusing ~/.m2
mvn_quiet() { mvn -B -q -ntp "$@"; }

# resolve_pom_jars NAME POM JARS_DIR MUST_GLOB [CHECK] -> POM's runtime dependencies copied by Maven into
# JARS_DIR, once: a marker holds the pom's sha256, so Maven runs again only when the pom changes. Under a
# lock; the copy must hold MUST_GLOB, and CHECK (a function, given the copy's folder) may refuse it.
resolve_pom_jars() {
  local name=$1 pom=$2 jars_dir=$3 must=$4 check=${5:-} pom_hash tmp_dir start=$SECONDS
  [[ -f "$pom" ]] || die "missing $pom"
  command -v mvn >/dev/null || die "mvn not found (Maven resolves the $name jars)"
  pom_hash=$(sha256sum "$pom" | cut -d' ' -f1)
  mkdir -p "$(dirname "$jars_dir")"
  exec 9>"$(dirname "$jars_dir")/.$name.lock"
  flock 9
  if [[ -f "$jars_dir/.complete" && "$(cat "$jars_dir/.complete")" == "$pom_hash" ]] \
    && compgen -G "$jars_dir/$must" >/dev/null; then
    log "$name jars: up to date in $jars_dir"
    return 0
  fi
  tmp_dir=$(mktemp -d "$(dirname "$jars_dir")/$name.tmp.XXXXXX")
  trap 'rm -rf "$tmp_dir"' EXIT
  log "$name jars: resolving $pom with Maven into $jars_dir"
  mvn_quiet -f "$pom" dependency:copy-dependencies \
    -DoutputDirectory="$tmp_dir" -DincludeScope=runtime -DoverWriteReleases=true >&2 \
    || die "mvn dependency:copy-dependencies failed for $pom"
  compgen -G "$tmp_dir/$must" >/dev/null || die "no $must after resolving $pom"
  [[ -z "$check" ]] || "$check" "$tmp_dir"
  chmod 755 "$tmp_dir"
  printf '%s\n' "$pom_hash" >"$tmp_dir/.complete"
  rm -rf "$jars_dir"
  mv "$tmp_dir" "$jars_dir"
  trap - EXIT
  log "$name jars: $(find "$jars_dir" -name '*.jar' | wc -l) jars, $(du -sh "$jars_dir" | cut -f1)," \
    "resolved in $((SECONDS - start))s"
}

# tls_files -> a CA, a server certificate for 127.0.0.1 (IP only) and a client certificate (CN gtidsnap)
# under $STATE_DIR/tls, made once with openssl; the second replicas serve TLS with them (TLS tests)
TLS_DIR="$STATE_DIR/tls"
tls_files() {
  [[ -s "$TLS_DIR/client-key.pem" ]] && return 0
  command -v openssl >/dev/null || die "openssl is needed to make the test certificates"
  local tmp="$TLS_DIR.tmp"
  rm -rf "$tmp"; mkdir -p "$tmp"
  (
    cd "$tmp"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gtidsnap test CA" \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=gtidsnap test server" -keyout server-key.pem \
      -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile server.ext -out server-cert.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=gtidsnap" -keyout client-key.pem -out client.csr 2>/dev/null
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -out client-cert.pem 2>/dev/null
    rm -f ./*.csr ./*.ext ./*.srl
    chmod 644 ./*.pem
  ) || die "making the test certificates in $tmp failed"
  rm -rf "$TLS_DIR"; mv "$tmp" "$TLS_DIR"
}

# install_locked VENV LOCK -> a Python venv at VENV (made with $PYTHON, default python3, when missing)
# holding exactly LOCK's versions, each file checked against LOCK's sha256 (pip --require-hashes), then
# gtidsnap itself as an editable install of this checkout without dependencies (they are all in LOCK).
# Idempotent: a stamp per lock names the sha256 of pyproject.toml and LOCK, so pip runs again when either
# changes (scripts/setup installs lock/dev.txt, scripts/bench lock/bench.txt, into the same .venv).
install_locked() {
  local venv=$1 lock=$2 name stamp
  [[ -f "$lock" ]] || die "missing $lock (write it with scripts/lock)"
  name=$(basename "$lock" .txt)
  stamp="$venv/.installed-$name-$(cat "$REPO_ROOT/pyproject.toml" "$lock" | sha256sum | cut -c1-16)"
  [[ -f "$stamp" ]] && return 0
  log "installing the versions $lock pins into $venv, then gtidsnap (pyspark is large; pip caches it)"
  [[ -x "$venv/bin/python" ]] || "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || log "WARNING: $lock is resolved and tested for Python 3.11; $venv has $("$venv/bin/python" -V)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes -r "$lock" \
    || die "pip could not install $lock into $venv (see pip's message above)"
  # setuptools' notice that an editable install links to this checkout is what we want: not shown
  PYTHONWARNINGS='ignore:Editable installation' \
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$REPO_ROOT" \
    || die "pip could not install gtidsnap into $venv"
  # this lock's earlier stamps, and the one of the unlocked install before (sha256 of pyproject.toml only)
  rm -f "$venv/.installed-$name-"* "$venv"/.installed-????????????????; touch "$stamp"
}
