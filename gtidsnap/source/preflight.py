"""Is the replica set up for read-only capture? A pure check of gathered facts, every problem at once.

:meth:`gtidsnap.source.replica.Replica.facts` reads :class:`ReplicaFacts` from the server;
:func:`find_problems`
judges them, so every rule is unit-tested with hand-made facts and a user fixes everything in one go.

What is demanded, and why:

* ``log_bin=ON``, ``binlog_format=ROW``, ``binlog_row_image=FULL``: we stream full row images.
* ``binlog_row_metadata=FULL`` where the variable exists (MySQL >= 8.0.14, MariaDB >= 10.5): column
  names travel with the rows, so a row is never decoded against the wrong column list.
* MySQL: ``gtid_mode=ON`` and ``enforce_gtid_consistency=ON``: the watermarks are GTID sets.
* MariaDB: ``gtid_strict_mode=ON``: a position means "every seq up to n" only if seqs never go back.
* On a replica, ``log_replica_updates`` (``log_slave_updates``) ``=ON``: otherwise the replica's binlog
  lacks the replicated changes we capture. When the reader may not run ``SHOW REPLICA STATUS``
  (MariaDB wants SLAVE MONITOR), the server is assumed to be a replica.
* MySQL with ``replica_parallel_workers > 0``: ``replica_preserve_commit_order=ON``, else the replica
  commits (and binlogs) transactions out of the primary's order and a watermark can cover a gap.
  MariaDB needs no check: its parallel apply always commits in the primary's binlog order within a
  replication domain (only different ``gtid_domain_id`` s may commit out of order, and a MariaDB
  position is tracked per domain).
* Privileges: SELECT, REPLICATION CLIENT (MariaDB: BINLOG MONITOR) and REPLICATION SLAVE on ``*.*``
  (``ALL PRIVILEGES`` covers them; SELECT may also be granted per database or table). Privileges held
  only through a role are not seen.
* Each requested table exists and has a primary key, or a configured surrogate key whose columns
  exist and are NOT NULL (uniqueness is the user's promise); keys of ENUM, SET or FLOAT columns are
  refused (see :mod:`gtidsnap.source.chunk_sql`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gtidsnap.core.errors import SourceError
from gtidsnap.core.model import Flavor, TableId
from gtidsnap.core.schema import Column
from gtidsnap.source.chunk_sql import UNSUPPORTED_KEY_TYPES

# Global variables gathered for the checks (those a server does not have are simply absent).
RELEVANT_VARIABLES = (
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "gtid_mode",
    "enforce_gtid_consistency",
    "gtid_strict_mode",
    "log_replica_updates",
    "log_slave_updates",
    "replica_parallel_workers",
    "slave_parallel_workers",
    "replica_preserve_commit_order",
    "slave_preserve_commit_order",
    "slave_parallel_threads",
    "slave_parallel_mode",
)


@dataclass(frozen=True)
class TableFacts:
    """What the replica says about one requested table."""

    exists: bool
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()
    kind: str = "BASE TABLE"  # information_schema TABLE_TYPE: BASE TABLE, VIEW, SYSTEM VERSIONED, ...


@dataclass(frozen=True)
class ReplicaFacts:
    """Everything :func:`find_problems` judges, read from the server in one go."""

    flavor: Flavor
    version: tuple[int, int, int]
    variables: Mapping[str, str]
    grants: tuple[str, ...]  # SHOW GRANTS lines, with any password hash removed
    user: str = "gtidsnap@%"  # CURRENT_USER(), as user@host
    is_replica: bool | None = None  # None: the reader may not run SHOW REPLICA STATUS
    tables: Mapping[TableId, TableFacts] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """One thing to fix; ``str()`` is a sentence a user can act on."""

    setting: str
    value: str
    need: str
    fix: str

    def __str__(self) -> str:
        return f"{self.setting} is {self.value}; gtidsnap needs {self.need}: {self.fix}"


def find_problems(
    facts: ReplicaFacts,
    tables: Sequence[TableId],
    surrogate_keys: Mapping[TableId, tuple[str, ...]],
) -> list[Problem]:
    """Every reason the replica cannot be captured read-only, in a stable order; empty when ready."""
    return [
        *_binlog_problems(facts),
        *_replication_problems(facts),
        *_grant_problems(facts, tables),
        *(p for t in tables for p in _table_problems(t, facts.tables.get(t), surrogate_keys.get(t))),
    ]


# --------------------------------------------------------------------------- server variables


def _var(facts: ReplicaFacts, *names: str) -> tuple[str, str | None]:
    """The first of ``names`` the server has, and its value (upper case); else the first name, None."""
    for name in names:
        if name in facts.variables:
            return name, str(facts.variables[name]).strip().upper()
    return names[0], None


def _shown(value: str | None) -> str:
    return "not available" if value is None else (value or "empty")


def _demand(facts: ReplicaFacts, name: str, wanted: str, why: str) -> list[Problem]:
    name, value = _var(facts, name)
    if value == wanted:
        return []
    return [
        Problem(
            name,
            _shown(value),
            f"{wanted} ({why})",
            f"SET GLOBAL {name}={wanted} on the replica and in its config",
        )
    ]


def _binlog_problems(facts: ReplicaFacts) -> list[Problem]:
    problems: list[Problem] = []
    name, log_bin = _var(facts, "log_bin")
    if log_bin != "ON":
        problems.append(
            Problem(
                name,
                _shown(log_bin),
                "ON (the binlog is what gtidsnap streams)",
                "start the replica with log_bin (log-bin in its config); it cannot be set at runtime",
            )
        )
    problems += _demand(facts, "binlog_format", "ROW", "row events carry the changed rows")
    problems += _demand(facts, "binlog_row_image", "FULL", "every column of every changed row")
    if "binlog_row_metadata" in facts.variables:
        problems += _demand(facts, "binlog_row_metadata", "FULL", "column names travel with the rows")
    if facts.flavor == "mysql":
        name, mode = _var(facts, "gtid_mode")
        if mode != "ON":
            problems.append(
                Problem(
                    name,
                    _shown(mode),
                    "ON (watermarks are GTID sets)",
                    "raise gtid_mode one step at a time (OFF_PERMISSIVE, ON_PERMISSIVE, ON) with "
                    "SET GLOBAL on the primary and the replica, and set gtid_mode=ON in their configs",
                )
            )
        problems += _demand(facts, "enforce_gtid_consistency", "ON", "required by gtid_mode=ON")
    else:
        problems += _demand(facts, "gtid_strict_mode", "ON", "GTID seqs never go back within a domain")
    return problems


def _replication_problems(facts: ReplicaFacts) -> list[Problem]:
    if facts.is_replica is False:
        return []
    problems: list[Problem] = []
    name, value = _var(facts, "log_replica_updates", "log_slave_updates")
    if value != "ON":
        problems.append(
            Problem(
                name,
                _shown(value),
                "ON (the replica's binlog must hold the changes it replicates)",
                f"set {name}=ON in the replica's config and restart it (it cannot be set at runtime)",
            )
        )
    if facts.flavor == "mysql":
        workers_name, workers = _var(facts, "replica_parallel_workers", "slave_parallel_workers")
        order_name, order = _var(facts, "replica_preserve_commit_order", "slave_preserve_commit_order")
        if workers is not None and workers.isdigit() and int(workers) > 0 and order != "ON":
            problems.append(
                Problem(
                    order_name,
                    f"{_shown(order)} with {workers_name}={workers}",
                    "ON (parallel workers must commit in the primary's order)",
                    f"STOP REPLICA SQL_THREAD; SET GLOBAL {order_name}=ON; START REPLICA SQL_THREAD, "
                    f"and set it in the replica's config (or set {workers_name}=0)",
                )
            )
    return problems


# --------------------------------------------------------------------------- privileges

_GRANT_RE = re.compile(r"^GRANT\s+(?P<privs>.+?)\s+ON\s+(?P<object>\S+)\s+TO\s", re.IGNORECASE)
_OBJECT_RE = re.compile(
    r"^(?:(?:TABLE|FUNCTION|PROCEDURE)\s+)?(?P<db>`(?:[^`]|``)*`|[^.`\s]+|\*)"
    r"\.(?P<table>`(?:[^`]|``)*`|[^.`\s]+|\*)$"
)
_ALIASES = {
    "ALL": "ALL PRIVILEGES",
    "BINLOG MONITOR": "REPLICATION CLIENT",  # MariaDB >= 10.5.2 prints the new name
    "REPLICATION REPLICA": "REPLICATION SLAVE",
}


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def parse_grants(lines: Sequence[str]) -> dict[tuple[str, str], frozenset[str]]:
    """Privileges per ``(db, table)`` (``'*'`` for all) from SHOW GRANTS lines; role grants ignored."""
    out: dict[tuple[str, str], set[str]] = {}
    for line in lines:
        m = _GRANT_RE.match(line.strip())
        if not m:
            continue
        obj = _OBJECT_RE.match(m.group("object"))
        if not obj:
            continue
        target = (_unquote(obj.group("db")), _unquote(obj.group("table")))
        # Column privileges, e.g. SELECT (`a`, `b`), do not cover a whole table.
        privs = {
            _ALIASES.get(p, p)
            for p in (p.strip().upper() for p in m.group("privs").split(","))
            if "(" not in p and ")" not in p
        }
        out.setdefault(target, set()).update(privs)
    return {k: frozenset(v) for k, v in out.items()}


def _quoted_user(user: str) -> str:
    name, _, host = user.rpartition("@")
    return f"'{name}'@'{host}'" if name else f"'{user}'"


def _grant_problems(facts: ReplicaFacts, tables: Sequence[TableId]) -> list[Problem]:
    grants = parse_grants(facts.grants)
    everywhere = grants.get(("*", "*"), frozenset())

    def has(priv: str, db: str = "*", table: str = "*") -> bool:
        scopes = (everywhere, grants.get((db, "*"), frozenset()), grants.get((db, table), frozenset()))
        return any(priv in privs or "ALL PRIVILEGES" in privs for privs in scopes)

    who = _quoted_user(facts.user)
    problems: list[Problem] = []
    if not has("SELECT"):
        unreadable = [t for t in tables if not has("SELECT", t.schema, t.name)]
        if unreadable or not tables:
            on = f" on {', '.join(map(str, unreadable))}" if unreadable else ""
            problems.append(
                Problem(
                    "privilege SELECT",
                    f"not granted to {who}{on}",
                    "SELECT to read snapshot chunks and table schemas",
                    f"GRANT SELECT ON *.* TO {who} (or on each captured database)",
                )
            )
    client = "BINLOG MONITOR" if facts.flavor == "mariadb" else "REPLICATION CLIENT"
    for priv, shown, why in (
        ("REPLICATION CLIENT", client, "it on *.* to read the executed GTID set"),
        ("REPLICATION SLAVE", "REPLICATION SLAVE", "it on *.* to stream the binlog"),
    ):
        if not has(priv):
            problems.append(
                Problem(f"privilege {shown}", f"not granted to {who}", why, f"GRANT {shown} ON *.* TO {who}")
            )
    return problems


# --------------------------------------------------------------------------- tables


def _table_problems(
    table: TableId, facts: TableFacts | None, surrogate: tuple[str, ...] | None
) -> list[Problem]:
    setting = f"table {table}"
    if facts is None or not facts.exists:
        return [
            Problem(
                setting,
                "missing on the replica",
                "every configured table to exist",
                "check the name (schema.table) or remove it from the configured tables",
            )
        ]
    if facts.kind == "VIEW":
        return [
            Problem(
                setting,
                "a view",
                "base tables (a view has no rows of its own in the binlog)",
                f"capture the tables {table} reads instead of the view",
            )
        ]
    by_name = {c.name: c for c in facts.columns}
    if surrogate:
        missing = [c for c in surrogate if c not in by_name]
        if missing:
            return [
                Problem(
                    setting,
                    f"without column(s) {', '.join(missing)} of its configured surrogate key",
                    "surrogate key columns that exist",
                    f"configure a surrogate key from the columns of {table}: a unique NOT NULL column set",
                )
            ]
        nullable = [c for c in surrogate if by_name[c].nullable]
        if nullable:
            return [
                Problem(
                    setting,
                    f"with nullable surrogate key column(s) {', '.join(nullable)}",
                    "NOT NULL key columns (rows with a NULL key would never be selected)",
                    f"configure a surrogate key of {table} made of NOT NULL columns, or make them NOT NULL",
                )
            ]
        key = surrogate
    elif facts.primary_key:
        key = facts.primary_key
    else:
        return [
            Problem(
                setting,
                "without a primary key",
                "a primary key or a configured surrogate key",
                f"add a PRIMARY KEY to {table}, or configure a surrogate key for it: "
                "a unique NOT NULL column set",
            )
        ]
    bad = [c for c in key if c in by_name and by_name[c].data_type in UNSUPPORTED_KEY_TYPES]
    if bad:
        return [
            Problem(
                setting,
                f"keyed by ENUM/SET/FLOAT column(s) {', '.join(bad)}",
                "key columns that sort and compare alike",
                f"configure a surrogate key for {table}: a unique NOT NULL column set of other types",
            )
        ]
    return []


_PASSWORD_IN_GRANT = re.compile(r"\s+IDENTIFIED\s.*?(?=\s+WITH\s|$)", re.IGNORECASE)


def parse_version(text: str) -> tuple[Flavor, tuple[int, int, int]]:
    """Flavour and version from ``VERSION()``: ``'10.11.19-MariaDB-0+deb12u1-log'``, ``'8.0.31'``."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    if not m:
        raise SourceError(f"cannot read a server version from {text!r}")
    flavor: Flavor = "mariadb" if "mariadb" in text.lower() else "mysql"
    return flavor, (int(m.group(1)), int(m.group(2)), int(m.group(3)))


def strip_password(grant: str) -> str:
    """A SHOW GRANTS line without its ``IDENTIFIED BY PASSWORD '<hash>'`` part (MariaDB prints it)."""
    return _PASSWORD_IN_GRANT.sub("", grant)
