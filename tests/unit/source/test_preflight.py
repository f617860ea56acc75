"""Preflight rules on hand-made facts: a healthy replica passes, each fault is named, all are reported."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column
from gtidsnap.source.preflight import Problem, ReplicaFacts, TableFacts, find_problems, parse_grants

T = TableId("shop", "orders")
NOPK = TableId("shop", "audit")
GONE = TableId("shop", "gone")

MYSQL_VARS = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "gtid_mode": "ON",
    "enforce_gtid_consistency": "ON",
    "log_replica_updates": "ON",
    "log_slave_updates": "ON",
    "replica_parallel_workers": "4",
    "slave_parallel_workers": "4",
    "replica_preserve_commit_order": "ON",
    "slave_preserve_commit_order": "ON",
}
MARIADB_VARS = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "gtid_strict_mode": "ON",
    "log_slave_updates": "ON",
    "slave_parallel_threads": "4",
    "slave_parallel_mode": "optimistic",
}
MYSQL_GRANTS = ("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `gtidsnap`@`%`",)
MARIADB_GRANTS = ("GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `gtidsnap`@`%`",)
COLUMNS = (Column("id", "int", "int", False), Column("note", "varchar", "varchar(9)", True, "utf8mb4_bin"))
TABLES = {
    T: TableFacts(True, COLUMNS, ("id",)),
    NOPK: TableFacts(True, COLUMNS, ()),
    GONE: TableFacts(False),
}


def mysql(**changes: object) -> ReplicaFacts:
    facts = ReplicaFacts("mysql", (8, 0, 31), MYSQL_VARS, MYSQL_GRANTS, "gtidsnap@%", True, TABLES)
    return replace(facts, **changes)  # type: ignore[arg-type]


def mariadb(**changes: object) -> ReplicaFacts:
    facts = ReplicaFacts("mariadb", (10, 11, 6), MARIADB_VARS, MARIADB_GRANTS, "gtidsnap@%", None, TABLES)
    return replace(facts, **changes)  # type: ignore[arg-type]


def only(problems: list[Problem]) -> Problem:
    assert len(problems) == 1, [str(p) for p in problems]
    return problems[0]


@pytest.mark.parametrize("facts", [mysql(), mariadb(), mysql(is_replica=None), mariadb(is_replica=True)])
def test_healthy_replica_has_no_problems(facts: ReplicaFacts) -> None:
    assert find_problems(facts, [T], {}) == []


def test_problem_reads_as_a_sentence() -> None:
    problem = only(find_problems(mysql(variables={**MYSQL_VARS, "binlog_format": "STATEMENT"}), [T], {}))
    assert str(problem) == (
        "binlog_format is STATEMENT; gtidsnap needs ROW (row events carry the changed rows): "
        "SET GLOBAL binlog_format=ROW on the replica and in its config"
    )


@pytest.mark.parametrize(
    ("variable", "value", "setting", "in_fix"),
    [
        ("log_bin", "OFF", "log_bin", "log-bin"),
        ("binlog_format", "MIXED", "binlog_format", "SET GLOBAL binlog_format=ROW"),
        ("binlog_row_image", "MINIMAL", "binlog_row_image", "SET GLOBAL binlog_row_image=FULL"),
        ("binlog_row_metadata", "MINIMAL", "binlog_row_metadata", "SET GLOBAL binlog_row_metadata=FULL"),
        ("gtid_mode", "ON_PERMISSIVE", "gtid_mode", "OFF_PERMISSIVE, ON_PERMISSIVE, ON"),
        ("enforce_gtid_consistency", "WARN", "enforce_gtid_consistency", "enforce_gtid_consistency=ON"),
        ("log_replica_updates", "OFF", "log_replica_updates", "restart"),
        (
            "replica_preserve_commit_order",
            "OFF",
            "replica_preserve_commit_order",
            "replica_parallel_workers=0",
        ),
    ],
)
def test_each_mysql_variable_problem(variable: str, value: str, setting: str, in_fix: str) -> None:
    problem = only(find_problems(mysql(variables={**MYSQL_VARS, variable: value}), [T], {}))
    assert problem.setting == setting
    assert problem.value.startswith(value)
    assert in_fix in problem.fix


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("log_bin", "OFF"),
        ("binlog_format", "STATEMENT"),
        ("binlog_row_image", "NOBLOB"),
        ("binlog_row_metadata", "NO_LOG"),
        ("gtid_strict_mode", "OFF"),
        ("log_slave_updates", "OFF"),
    ],
)
def test_each_mariadb_variable_problem(variable: str, value: str) -> None:
    problem = only(find_problems(mariadb(variables={**MARIADB_VARS, variable: value}), [T], {}))
    assert problem.setting == variable
    assert problem.value == value


def test_binlog_row_metadata_is_only_demanded_where_it_exists() -> None:
    old = {k: v for k, v in MYSQL_VARS.items() if k != "binlog_row_metadata"}
    assert find_problems(mysql(version=(8, 0, 13), variables=old), [T], {}) == []


def test_older_mysql_variable_names_are_read() -> None:
    old = {k: v for k, v in MYSQL_VARS.items() if not k.startswith("replica_") and k != "log_replica_updates"}
    assert find_problems(mysql(version=(8, 0, 20), variables=old), [T], {}) == []
    broken = {**old, "slave_preserve_commit_order": "OFF", "log_slave_updates": "OFF"}
    problems = find_problems(mysql(version=(8, 0, 20), variables=broken), [T], {})
    assert [p.setting for p in problems] == ["log_slave_updates", "slave_preserve_commit_order"]


def test_commit_order_only_matters_with_parallel_workers() -> None:
    serial = {**MYSQL_VARS, "replica_parallel_workers": "0", "replica_preserve_commit_order": "OFF"}
    assert find_problems(mysql(variables=serial), [T], {}) == []


def test_mariadb_parallel_apply_needs_no_commit_order_check() -> None:
    aggressive = {**MARIADB_VARS, "slave_parallel_mode": "aggressive", "slave_parallel_threads": "16"}
    assert find_problems(mariadb(variables=aggressive), [T], {}) == []


def test_a_server_that_is_not_a_replica_needs_no_replica_settings() -> None:
    lax = {**MYSQL_VARS, "log_replica_updates": "OFF", "replica_preserve_commit_order": "OFF"}
    assert find_problems(mysql(is_replica=False, variables=lax), [T], {}) == []
    # Unknown (the reader may not run SHOW REPLICA STATUS): assume it replicates.
    assert len(find_problems(mysql(is_replica=None, variables=lax), [T], {})) == 2


def test_missing_variable_is_reported_as_not_available() -> None:
    partial = {k: v for k, v in MYSQL_VARS.items() if k != "gtid_mode"}
    problem = only(find_problems(mysql(variables=partial), [T], {}))
    assert str(problem).startswith("gtid_mode is not available; gtidsnap needs ON")


@pytest.mark.parametrize(
    ("facts", "grants", "missing"),
    [
        (mysql, ("GRANT SELECT ON *.* TO `weak`@`%`",), ["REPLICATION CLIENT", "REPLICATION SLAVE"]),
        (mariadb, ("GRANT SELECT ON *.* TO `weak`@`%`",), ["BINLOG MONITOR", "REPLICATION SLAVE"]),
        (mysql, ("GRANT USAGE ON *.* TO `weak`@`%`",), ["SELECT", "REPLICATION CLIENT", "REPLICATION SLAVE"]),
        (mysql, ("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `weak`@`%`",), ["SELECT"]),
        (mysql, ("GRANT SELECT, REPLICATION CLIENT ON *.* TO `weak`@`%`",), ["REPLICATION SLAVE"]),
    ],
)
def test_missing_grants_are_named(facts: object, grants: tuple[str, ...], missing: list[str]) -> None:
    made = facts(grants=grants, user="weak@%")  # type: ignore[operator]
    problems = find_problems(made, [T], {})
    assert [p.setting for p in problems] == [f"privilege {m}" for m in missing]
    for problem, name in zip(problems, missing, strict=True):
        assert problem.value.startswith("not granted to 'weak'@'%'")
        assert problem.fix.startswith(f"GRANT {name} ON *.* TO 'weak'@'%'")


@pytest.mark.parametrize(
    "grants",
    [
        ("GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION",),
        ("GRANT ALL ON *.* TO `root`@`localhost`",),
        (
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `u`@`%`",
            "GRANT SELECT ON `shop`.* TO `u`@`%`",
        ),
        (
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `u`@`%`",
            "GRANT SELECT ON `shop`.`orders` TO `u`@`%`",
        ),
        (
            "GRANT SELECT,REPLICATION SLAVE,REPLICATION CLIENT ON *.* TO `u`@`%`",
            "GRANT BACKUP_ADMIN,CLONE_ADMIN ON *.* TO `u`@`%`",
            "GRANT `some_role`@`%` TO `u`@`%`",
        ),
    ],
)
def test_sufficient_grants(grants: tuple[str, ...]) -> None:
    assert find_problems(mysql(grants=grants), [T], {}) == []


def test_select_on_another_database_is_not_enough() -> None:
    grants = (
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `u`@`%`",
        "GRANT SELECT ON `other`.* TO `u`@`%`",
    )
    problem = only(find_problems(mysql(grants=grants, user="u@%"), [T], {}))
    assert problem.setting == "privilege SELECT"
    assert "shop.orders" in problem.value


def test_column_select_privileges_do_not_cover_a_table() -> None:
    grants = parse_grants(["GRANT SELECT (`id`), INSERT ON `shop`.`orders` TO `u`@`%`"])
    assert grants == {("shop", "orders"): frozenset({"INSERT"})}


def test_missing_table() -> None:
    problem = only(find_problems(mysql(), [GONE], {}))
    assert problem.setting == "table shop.gone"
    assert str(problem).startswith("table shop.gone is missing on the replica")


def test_table_not_gathered_counts_as_missing() -> None:
    assert only(find_problems(mysql(tables={}), [T], {})).value == "missing on the replica"


def test_table_without_primary_key_and_its_fix() -> None:
    problem = only(find_problems(mysql(), [NOPK], {}))
    assert problem.setting == "table shop.audit"
    assert problem.value == "without a primary key"
    assert "surrogate key" in problem.fix and "unique NOT NULL" in problem.fix


def test_surrogate_key_makes_a_table_without_primary_key_acceptable() -> None:
    assert find_problems(mysql(), [NOPK], {NOPK: ("id",)}) == []


def test_surrogate_key_columns_must_exist_and_be_not_null() -> None:
    assert "without column(s) nope" in only(find_problems(mysql(), [NOPK], {NOPK: ("id", "nope")})).value
    assert (
        "nullable surrogate key column(s) note"
        in only(find_problems(mysql(), [NOPK], {NOPK: ("note",)})).value
    )


@pytest.mark.parametrize("data_type", ["enum", "set", "float"])
def test_keys_that_cannot_be_chunked(data_type: str) -> None:
    table = TableFacts(True, (Column("k", data_type, data_type, False),), ("k",))
    problem = only(find_problems(mysql(tables={T: table}), [T], {}))
    assert problem.value == "keyed by ENUM/SET/FLOAT column(s) k"


def test_every_problem_is_reported_at_once() -> None:
    broken = {
        "log_bin": "OFF",
        "binlog_format": "STATEMENT",
        "binlog_row_image": "MINIMAL",
        "binlog_row_metadata": "MINIMAL",
        "gtid_mode": "OFF",
        "enforce_gtid_consistency": "OFF",
        "log_replica_updates": "OFF",
        "replica_parallel_workers": "8",
        "replica_preserve_commit_order": "OFF",
    }
    facts = mysql(variables=broken, grants=("GRANT USAGE ON *.* TO `weak`@`%`",), user="weak@%")
    problems = find_problems(facts, [T, NOPK, GONE], {})
    assert [p.setting for p in problems] == [
        "log_bin",
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "gtid_mode",
        "enforce_gtid_consistency",
        "log_replica_updates",
        "replica_preserve_commit_order",
        "privilege SELECT",
        "privilege REPLICATION CLIENT",
        "privilege REPLICATION SLAVE",
        "table shop.audit",
        "table shop.gone",
    ]
    assert all(str(p).count("; gtidsnap needs ") == 1 for p in problems)


def test_every_mariadb_problem_is_reported_at_once() -> None:
    broken = {k: "OFF" for k in ("log_bin", "gtid_strict_mode", "log_slave_updates")}
    broken |= {"binlog_format": "MIXED", "binlog_row_image": "MINIMAL", "binlog_row_metadata": "NO_LOG"}
    facts = mariadb(variables=broken, grants=("GRANT SELECT ON *.* TO `weak`@`%`",), user="weak@%")
    assert [p.setting for p in find_problems(facts, [T, GONE], {})] == [
        "log_bin",
        "binlog_format",
        "binlog_row_image",
        "binlog_row_metadata",
        "gtid_strict_mode",
        "log_slave_updates",
        "privilege BINLOG MONITOR",
        "privilege REPLICATION SLAVE",
        "table shop.gone",
    ]
