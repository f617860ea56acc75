"""Where the benchmark runs: the local primary -> replica pairs of the harness (ports and accounts as in
``scripts/lib.sh``), GTID watermarks read the way gtidsnap reads them, and what the machine is."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.source.connection import ConnectionSettings, Secret

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = Path(os.environ.get("GTIDSNAP_STATE_DIR", str(REPO / ".state")))
HOST = "127.0.0.1"
ADMIN = ("admin", "admin-test-pw")  # writes, on the primaries only
READER = ("gtidsnap", "gtidsnap-test-pw")  # gtidsnap's read-only account on the replicas
DATABASE = "bench"
FLAVORS = ("mariadb", "mysql")


def choices(text: str, allowed: tuple[str, ...] | str, what: str) -> list[str]:
    """A comma-separated option of the bench scripts: each item one of ``allowed``, each once, in order."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        choices = ", ".join(allowed)
        raise argparse.ArgumentTypeError(f"{what}: {', '.join(bad) or text!r}; choose from {choices}")
    return list(dict.fromkeys(items))


def flavors(text: str) -> list[str]:
    """``--flavors``: ``mariadb,mysql`` or either."""
    return choices(text, FLAVORS, "flavours")


_PORTS = {
    "mariadb": ("MARIADB_PRIMARY_PORT", 33061, "MARIADB_REPLICA_PORT", 33062),
    "mysql": ("MYSQL_PRIMARY_PORT", 33071, "MYSQL_REPLICA_PORT", 33072),
}
_SECOND_REPLICA = {"mariadb": ("MARIADB_REPLICA2_PORT", 33063), "mysql": ("MYSQL_REPLICA2_PORT", 33073)}


@dataclass(frozen=True)
class Pair:
    """One primary -> replica pair: the bench writes to the primary, everything else reads the replica."""

    flavor: str
    primary_port: int
    replica_port: int

    @classmethod
    def of(cls, flavor: str) -> Pair:
        p_env, p_default, r_env, r_default = _PORTS[flavor]
        return cls(flavor, int(os.environ.get(p_env, p_default)), int(os.environ.get(r_env, r_default)))

    @property
    def replica2_port(self) -> int:
        """The second replica of the same primary (the failover measurement kills it)."""
        name, default = _SECOND_REPLICA[self.flavor]
        return int(os.environ.get(name, default))

    @property
    def replica_address(self) -> str:
        return f"{HOST}:{self.replica_port}"

    def primary(self, **kwargs: Any) -> pymysql.connections.Connection[Any]:
        return _connect(self.primary_port, ADMIN, **kwargs)

    def reader(self, **kwargs: Any) -> pymysql.connections.Connection[Any]:
        return _connect(self.replica_port, READER, **kwargs)

    def reader_settings(self) -> ConnectionSettings:
        """The replica as gtidsnap's config names it (TLS disabled, as in the harness)."""
        return ConnectionSettings(HOST, self.replica_port, READER[0], Secret(READER[1]))

    def executed(self, conn: pymysql.connections.Connection[Any]) -> GtidSet:
        """The executed GTID set, read as gtidsnap reads its watermarks."""
        if self.flavor == "mariadb":
            return _mariadb_position(conn, "gtid_binlog_pos")
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            names = [d[0] for d in cur.description or ()]
            row = cur.fetchone()
        assert row is not None, f"{self.flavor}: no binary log status"
        return parse_gtid_set("mysql", str(dict(zip(names, row, strict=True))["Executed_Gtid_Set"]))

    def replica_executed(self) -> GtidSet:
        with self.reader() as conn:
            return self.executed(conn)

    def applied(self, conn: pymysql.connections.Connection[Any]) -> GtidSet:
        """What a replica has applied: MariaDB's ``gtid_current_pos`` (a replica whose binlog never
        logged a domain, as the tests' provisioned-from-a-backup replica2, still applied it), MySQL's
        executed set."""
        return (
            _mariadb_position(conn, "gtid_current_pos") if self.flavor == "mariadb" else self.executed(conn)
        )

    def wait_replicated(self, timeout: float = 900.0, port: int | None = None) -> GtidSet:
        """Block until the replica (``port``: another one, e.g. :attr:`replica2_port`) has executed
        everything the primary has; return that replica's set."""
        with self.primary() as primary:
            target = self.executed(primary)
        deadline = time.monotonic() + timeout
        with _connect(port or self.replica_port, READER) as replica:
            while True:
                if target <= self.applied(replica):
                    return self.executed(replica)
                if time.monotonic() > deadline:
                    raise SystemExit(
                        f"{self.flavor} replica {HOST}:{port or self.replica_port} did not reach {target} "
                        f"in {timeout:.0f}s"
                    )
                time.sleep(0.05)

    def version(self) -> str:
        with self.reader() as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
        return str(row[0]) if row else "?"


def _mariadb_position(conn: pymysql.connections.Connection[Any], variable: str) -> GtidSet:
    """MariaDB's GTID position ``variable`` (``gtid_binlog_pos``, ``gtid_current_pos``) as a set."""
    with conn.cursor() as cur:
        cur.execute(f"SELECT @@global.{variable}")
        row = cur.fetchone()
    return parse_gtid_set("mariadb", str(row[0] if row and row[0] is not None else ""))


def _connect(port: int, account: tuple[str, str], **kwargs: Any) -> pymysql.connections.Connection[Any]:
    settings: dict[str, Any] = {
        "host": HOST,
        "port": port,
        "user": account[0],
        "password": account[1],
        "autocommit": True,
        "charset": "utf8mb4",
        "connect_timeout": 10,
        "ssl_disabled": True,
        **kwargs,
    }
    return pymysql.connect(**settings)


# ----------------------------------------------------------------------------- the machine


def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, OS, Python, and the versions of what gtidsnap runs on."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    os_name = platform.platform()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = f"{line.split('=', 1)[1].strip(chr(34))} (Linux {platform.release()})"
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": ram_gb,
        "os": os_name,
        "python": platform.python_version(),
        "packages": {n: _version(n) for n in ("pymysql", "mysql-replication", "pyspark", "delta-spark")},
        "java": _java_version(),
    }


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    lines = (done.stderr or done.stdout).splitlines()
    return lines[0].strip() if lines else "?"


def git_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "subject": git("log", "-1", "--format=%s"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }
