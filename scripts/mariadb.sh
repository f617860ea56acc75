#!/usr/bin/env bash
# MariaDB primary -> two replicas (replica, replica2), GTID replication, from Debian packages, started by hand;
# start-other: an unrelated primary -> replica (other-primary, other-replica) with the same server ids and GTID
# domain, whose GTIDs are numbered like the first primary's (tests of another primary's history).
# Usage: scripts/mariadb.sh install|start|start-other|stop|status   (all idempotent)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NODES=(primary replica replica2 other-primary other-replica)
declare -A PORT=([primary]=$MARIADB_PRIMARY_PORT [replica]=$MARIADB_REPLICA_PORT [replica2]=$MARIADB_REPLICA2_PORT
  [other-primary]=$MARIADB_OTHER_PRIMARY_PORT [other-replica]=$MARIADB_OTHER_REPLICA_PORT)
declare -A SERVER_ID=([primary]=1 [replica]=2 [replica2]=3 [other-primary]=1 [other-replica]=2)
declare -A PRIMARY_OF=([replica]=primary [replica2]=primary [other-replica]=other-primary)

dir_of() { echo "$STATE_DIR/mariadb-$1"; }
client() { # client NODE ARGS... : root over the node's socket (unix_socket auth)
  local node=$1; shift
  mariadb --no-defaults --socket="$(dir_of "$node")/mysqld.sock" -uroot --batch --skip-column-names "$@"
}

install() {
  if command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null; then return 0; fi
  log "installing mariadb-server from Debian packages"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server mariadb-client >/dev/null
}

start_node() {
  local node=$1 d; d=$(dir_of "$node")
  if pid_alive "$d/mysqld.pid"; then return 0; fi
  if (exec 3<>"/dev/tcp/127.0.0.1/${PORT[$node]}") 2>/dev/null; then
    die "127.0.0.1:${PORT[$node]} is already taken by another process: stop it, or move mariadb-$node with" \
      "MARIADB_${node^^}_PORT"
  fi
  mkdir -p "$d"
  if [[ ! -d "$d/data/mysql" ]]; then
    log "mariadb-$node: initialising $d/data"
    mariadb-install-db --no-defaults --datadir="$d/data" --user=root --auth-root-authentication-method=socket --skip-test-db \
      >"$d/install.log" 2>&1 || die "mariadb-install-db failed for $node; see $d/install.log"
  fi
  local tls=() pool=256M
  [[ $node == other-* ]] && pool=64M  # the unrelated pair holds a few rows a test
  if [[ $node == replica2 ]]; then  # serves TLS with the harness's certificates (tests of source.tls)
    tls_files
    tls=(--ssl-ca="$TLS_DIR/ca.pem" --ssl-cert="$TLS_DIR/server-cert.pem" --ssl-key="$TLS_DIR/server-key.pem")
  fi
  log "mariadb-$node: starting on 127.0.0.1:${PORT[$node]}"
  nohup mariadbd --no-defaults --datadir="$d/data" --socket="$d/mysqld.sock" --pid-file="$d/mysqld.pid" \
    --port="${PORT[$node]}" --bind-address=127.0.0.1 --user=root --server-id="${SERVER_ID[$node]}" \
    --log-bin="$d/data/binlog" --binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL \
    --gtid-strict-mode=1 --log-slave-updates=1 --skip-name-resolve --innodb-buffer-pool-size="$pool" \
    --max-connections=300 --log-error="$d/error.log" "${tls[@]}" >"$d/stdout.log" 2>&1 &
  echo $! >"$d/mysqld.pid"
  wait_port "${PORT[$node]}" 60 "$d/error.log"
}

# provision_from NODE SOURCE_NODE -> NODE's datadir as a copy of SOURCE_NODE's, taken while it is stopped
# (a backup, as operators provision replicas): much faster than replaying the primary's whole binlog,
# which benchmarks make tens of GB long. The copy replicates on with its own server id.
provision_from() {
  local node=$1 from=$2 d s
  d=$(dir_of "$node"); s=$(dir_of "$from")
  [[ -d "$d/data/mysql" || ! -f "$s/bootstrapped" || ! -d "$s/data/mysql" ]] && return 0
  log "mariadb-$node: provisioning from a copy of mariadb-$from (stopped for the copy)"
  stop_pid "$s/mysqld.pid" "mariadb-$from"
  mkdir -p "$d"
  cp -a "$s/data" "$d/data"
  # binlog.index names the binlogs by absolute path: point it at the copies, or the copy's RESET MASTER
  # or PURGE would delete the source's own binlogs
  sed -i "s#^$s/data/#$d/data/#" "$d/data/binlog.index"
  touch "$d/bootstrapped"
  start_node "$from"
}

bootstrap_primary() { # bootstrap_primary NODE: users are made on the primary so they replicate to the replica
  local node=$1 d; d=$(dir_of "$node")
  [[ -f "$d/bootstrapped" ]] && return 0
  client "$node" <<SQL
CREATE USER IF NOT EXISTS '$ADMIN_USER'@'%' IDENTIFIED BY '$ADMIN_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO '$ADMIN_USER'@'%' WITH GRANT OPTION;
CREATE USER IF NOT EXISTS '$REPL_USER'@'%' IDENTIFIED BY '$REPL_PASSWORD';
GRANT REPLICATION SLAVE ON *.* TO '$REPL_USER'@'%';
CREATE USER IF NOT EXISTS '$READER_USER'@'%' IDENTIFIED BY '$READER_PASSWORD';
GRANT SELECT, REPLICATION CLIENT, REPLICATION SLAVE ON *.* TO '$READER_USER'@'%';
SQL
  touch "$d/bootstrapped"
}

bootstrap_replica() { # bootstrap_replica NODE
  local node=$1 d; d=$(dir_of "$node")
  if [[ ! -f "$d/bootstrapped" ]]; then
    client "$node" <<SQL
CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=${PORT[${PRIMARY_OF[$node]}]}, MASTER_USER='$REPL_USER',
  MASTER_PASSWORD='$REPL_PASSWORD', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1;
SQL
    touch "$d/bootstrapped"
  fi
  client "$node" -e "START SLAVE" 2>/dev/null || true
  local i io="" sql="" status
  for ((i = 0; i < 150; i++)); do
    status=$(mariadb --no-defaults --socket="$d/mysqld.sock" -uroot -e "SHOW SLAVE STATUS\G")
    io=$(awk '/Slave_IO_Running:/ {print $2}' <<<"$status")
    sql=$(awk '/Slave_SQL_Running:/ {print $2}' <<<"$status")
    [[ "$io" == Yes && "$sql" == Yes ]] && return 0
    sleep 0.2
  done
  die "mariadb-$node is not replicating (IO=$io SQL=$sql); see $d/error.log
$(grep -E 'Last_(IO|SQL)_Error' <<<"$status")"
}

start() {
  install
  start_node primary
  bootstrap_primary primary
  local n
  for n in replica replica2; do
    [[ $n == replica2 ]] && provision_from replica2 replica
    start_node "$n"
    bootstrap_replica "$n"
  done
  log "mariadb: primary 127.0.0.1:$MARIADB_PRIMARY_PORT -> replicas 127.0.0.1:$MARIADB_REPLICA_PORT and" \
    "127.0.0.1:$MARIADB_REPLICA2_PORT replicating"
}

start_other() {
  install
  start_node other-primary
  bootstrap_primary other-primary
  start_node other-replica
  bootstrap_replica other-replica
  log "mariadb (unrelated): primary 127.0.0.1:$MARIADB_OTHER_PRIMARY_PORT -> replica" \
    "127.0.0.1:$MARIADB_OTHER_REPLICA_PORT replicating"
}

stop() {
  local n
  for n in other-replica other-primary replica2 replica primary; do stop_pid "$(dir_of "$n")/mysqld.pid" "mariadb-$n"; done
}

status() {
  local n d
  for n in "${NODES[@]}"; do
    d=$(dir_of "$n")
    if pid_alive "$d/mysqld.pid"; then echo "mariadb-$n: running on 127.0.0.1:${PORT[$n]} (pid $(cat "$d/mysqld.pid"))"
    else echo "mariadb-$n: stopped"; fi
  done
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  start-other) start_other ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 install|start|start-other|stop|status" >&2; exit 2 ;;
esac
