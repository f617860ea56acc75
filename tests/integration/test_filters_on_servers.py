"""The SQL check_filter regenerates means on the real servers what the filter it was given means.

Every ACCEPTED filter of tests/unit/filters/test_check.py is run twice against one table of typed columns
and awkward values, as given and as regenerated, from the replica as gtidsnap reads it, on MariaDB
10.11 and on MySQL 8.0; both must select the same rows. A filter that is not valid SQL as given on one
server (JSON ``->`` on MariaDB, for one) is listed in NOT_VALID_AS_GIVEN with a hand-written equivalent
for that server; the test proves the given text really fails there, so nothing is skipped silently.
Also: the regenerated SQL selects the same rows under ANSI_QUOTES, PIPES_AS_CONCAT and
HIGH_NOT_PRECEDENCE, and string literals, once regenerated, are the same bytes to the server.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pymysql
import pytest
from hypothesis import HealthCheck, given, settings

from gtidsnap.core.model import TableId
from gtidsnap.filters.check import check_filter
from tests.integration.fixtures.db_servers import ReplicaPair
from tests.unit.filters.test_check import ACCEPTED, COLUMNS, conditions

pytestmark = pytest.mark.integration

CREATE = """
CREATE TABLE t (
    id INT PRIMARY KEY,
    region VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
    amount DECIMAL(12, 2),
    created DATETIME,
    doc JSON,
    note VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    `weird col` INT,
    `odd``name` INT
)
"""

NOTES = [
    "it's", 'say "hi"', "a\\b", "line\nbreak", "tab\there", "50% off", "100%_x", "xzy", "nul\0byte",
    "back\\\\slashes", "\\'", "%\\%", "01/05/2023", "", "Monday", "é€😀",
]  # fmt: skip
REGIONS = ["EU", "eu", "US", None, "Eu", " EU ", "XU", "E%x", "EU", "us"]


def _rows() -> list[tuple[Any, ...]]:
    """30 rows that make the example filters select some rows and not others."""
    base = datetime(2023, 5, 1, 10, 30, 15)  # a Monday
    rows: list[tuple[Any, ...]] = [
        (1, "EU", Decimal("12.50"), base, {"a": "x", "n": 1, "arr": [1, 2]}, "it's", 3, 1),
        (2, "eu", Decimal("-7.25"), datetime(2023, 1, 15, 8), {"a": "y", "n": 2}, 'say "hi"', 1, 2),
        (3, "US", Decimal("0"), datetime(2022, 12, 31, 23, 59, 59), {"a": "x", "n": 5}, "a\\b", None, 0),
        (4, None, Decimal("1.50"), datetime(2020, 2, 29, 12), None, "line\nbreak", 3, 5),
        (5, "Eu", Decimal("100.00"), datetime(2024, 3, 1), {"n": 1.5}, "tab\there", 7, None),
        (6, " EU ", Decimal("250.75"), datetime(2023, 5, 1), {"a": None}, "50% off", 3, 6),
        (7, "XU", Decimal("12.45"), datetime(2099, 1, 1), {"arr": [1, 2, 3]}, "100%_x", 0, 7),
        (8, "E%x", None, None, [1, 2], None, None, None),
        (9, "EU", Decimal("13.00"), datetime(2023, 6, 15, 14, 45), "str", "xzy", 3, 9),
        (10, "US", Decimal("10.00"), datetime(2023, 5, 31, 23, 0, 1), {"a": "x", "n": 1}, "nul\0byte", 2, 1),
        (11, "EU", Decimal("-12.50"), datetime(2021, 7, 4, 4, 4, 4), {"a": "X", "n": 3}, "\\'", 3, 3),
        (12, "eu", Decimal("12.49"), datetime(2023, 5, 1, 12), {"a": "x", "arr": [2, 3]}, "%\\%", 3, 2),
    ]
    for i in range(13, 31):
        region = REGIONS[i % len(REGIONS)]
        amount = Decimal(i * 37 % 200 - 50) + Decimal("0.25") * (i % 4)
        created = base + timedelta(days=i * 23 - 300, hours=i * 5, minutes=i * 7, seconds=i)
        doc = {"a": "xyz"[i % 3], "n": i % 4, "arr": list(range(i % 3))}
        rows.append((i, region, amount, created, doc, NOTES[i % len(NOTES)], i % 5, i % 7))
    return [(*row[:4], None if row[4] is None else json.dumps(row[4]), *row[5:]) for row in rows]


NOT_VALID_AS_GIVEN: dict[str, dict[str, str]] = {
    "mariadb": {
        "doc->'$.n' = 1": "JSON_EXTRACT(doc, '$.n') = 1",
        "doc->>'$.a' = 'x'": "JSON_UNQUOTE(JSON_EXTRACT(doc, '$.a')) = 'x'",
        "doc->\"$.a\" = 'x'": "JSON_EXTRACT(doc, '$.a') = 'x'",
    },
    "mysql": {},
}
"""Per server, the ACCEPTED filters that server rejects as written, each with an equivalent it accepts."""

STRINGS = [
    "'plain'", "'it''s'", r"'it\'s'", "\"it's\"", "\"say \"\"hi\"\"\"", "'say \"hi\"'", r"'a\\b'", r"'a\b'",
    r"'\\'", r"'\\\''", r"'x\%y'", r"'x\_y'", r"'x\\%y'", r"'\0'", r"'\Z'", r"'\b\t\n\r'", r"'\a\f\v\x\z'",
    "'\\\"'", "'tab\there'", "'new\nline'", "'é€😀'", r"'\é'", "''", "\"\"", "'a' 'b'", "'%s'", "'--'",
    "'#'", "'/*'", "'`'",
]  # fmt: skip
"""String literals as users may write them (MySQL syntax, backslash escapes on)."""


@pytest.fixture
def table(pair: ReplicaPair, fresh_db: str) -> Iterator[TableId]:
    """Table ``t`` filled on the primary and replicated; the tests read it from the replica."""
    columns = ", ".join(f"`{c.replace('`', '``')}`" for c in COLUMNS)
    with pair.primary(fresh_db) as conn, conn.cursor() as cur:
        cur.execute(CREATE)
        cur.executemany(f"INSERT INTO t ({columns}) VALUES ({', '.join(['%s'] * len(COLUMNS))})", _rows())
        pair.wait_replicated(conn)
    yield TableId(fresh_db, "t")


def _ids(conn: pymysql.connections.Connection, condition: str) -> list[int] | str:
    """The ids ``condition`` selects, or the server's error as text."""
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM t WHERE ({condition}) ORDER BY id")
            return [int(row[0]) for row in cur.fetchall()]
    except pymysql.MySQLError as e:
        return f"error {e.args[0]}: {e.args[1] if len(e.args) > 1 else ''}"


def test_regenerated_filters_select_the_same_rows(pair: ReplicaPair, table: TableId) -> None:
    not_valid = NOT_VALID_AS_GIVEN[pair.flavor]
    assert set(not_valid) <= {text for text, _ in ACCEPTED}
    problems: list[str] = []
    with pair.replica_reader(table.schema) as conn:
        every = _ids(conn, "TRUE")
        assert isinstance(every, list) and len(every) == 30
        for text, expected in ACCEPTED:
            rendered = check_filter(text, table, COLUMNS)
            if rendered != expected:
                problems.append(f"{text!r} renders as {rendered!r}, not {expected!r}")
            given = _ids(conn, text)
            if text in not_valid:
                if isinstance(given, list):
                    problems.append(f"{text!r} runs on {pair.flavor}: take it out of NOT_VALID_AS_GIVEN")
                given = _ids(conn, not_valid[text])
            after = _ids(conn, rendered)
            if isinstance(given, str) or isinstance(after, str) or given != after:
                problems.append(f"{text!r} selects {given}, its rendering {rendered!r} selects {after}")
            elif not 0 < len(after) < len(every):
                problems.append(f"{text!r} selects {len(after)} of {len(every)} rows: it tells nothing apart")
    assert not problems, f"{len(problems)} on {pair.flavor}:\n" + "\n".join(problems)


ODD_MODES = "ANSI_QUOTES,PIPES_AS_CONCAT,HIGH_NOT_PRECEDENCE"


def test_regenerated_filters_mean_the_same_under_odd_sql_modes(pair: ReplicaPair, table: TableId) -> None:
    """The regenerated SQL leaves nothing to ANSI_QUOTES, PIPES_AS_CONCAT or HIGH_NOT_PRECEDENCE."""
    problems: list[str] = []
    with pair.replica_reader(table.schema) as default, pair.replica_reader(table.schema) as odd:
        with odd.cursor() as cur:
            cur.execute(f"SET SESSION sql_mode = CONCAT(@@sql_mode, ',{ODD_MODES}')")
        # the modes bite: written as given, these filters change meaning or stop parsing
        for text in ('region = "EU"', "region = 'EU' || id = 1", "NOT id BETWEEN 3 AND 7"):
            assert _ids(default, text) != _ids(odd, text), text
        for text, _ in ACCEPTED:
            rendered = check_filter(text, table, COLUMNS)
            before, after = _ids(default, rendered), _ids(odd, rendered)
            if before != after:
                problems.append(f"{rendered!r} selects {before}, under {ODD_MODES} {after}")
    assert not problems, f"{len(problems)} on {pair.flavor}:\n" + "\n".join(problems)


@pytest.mark.filterwarnings("ignore:Generating overly large repr")
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=conditions(["id", "region", "amount", "created", "note", "t.id", "`weird col`", "`odd``name`"]))
def test_random_filters_select_the_same_rows(pair: ReplicaPair, table: TableId, text: str) -> None:
    """Random filters of the allowed grammar (the table only read, so sharing it between examples is
    fine): as given and as regenerated, the same rows, or the same server error."""
    rendered = check_filter(text, table, COLUMNS)
    with pair.replica_reader(table.schema) as conn:
        given_ids, after = _ids(conn, text), _ids(conn, rendered)
    if isinstance(given_ids, str) and isinstance(after, str):
        assert given_ids.split(":")[0] == after.split(":")[0], (text, rendered, given_ids, after)
    else:
        assert given_ids == after, (text, rendered)


def test_regenerated_string_literals_are_the_same_bytes(pair: ReplicaPair, table: TableId) -> None:
    problems: list[str] = []
    with pair.replica_reader(table.schema) as conn, conn.cursor() as cur:
        for literal in STRINGS:
            rendered = check_filter(f"note = {literal}", table, COLUMNS)
            assert rendered.startswith("`note` = ")
            cur.execute(f"SELECT HEX({literal}), HEX({rendered.removeprefix('`note` = ')})")
            given, after = cur.fetchone()
            if given != after:
                problems.append(f"{literal!r} is {given}, its rendering {rendered!r} is {after}")
    assert not problems, "\n".join(problems)


def test_the_rows_hold_the_awkward_values(pair: ReplicaPair, table: TableId) -> None:
    """The notes arrive on the replica byte for byte, so the filters above really met them."""
    with pair.replica_reader(table.schema) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, note FROM t ORDER BY id")
        notes = {int(i): n for i, n in cur.fetchall()}
    assert notes == {row[0]: row[5] for row in _rows()}
