"""Keyset SQL text: exact statements for single and composite keys, quoting, and refused conditions."""

from __future__ import annotations

import pytest

from gtidsnap.chunking import check_condition, chunk_query, max_key_query, quote_ident
from gtidsnap.errors import ConfigError, SchemaError
from gtidsnap.model import TableId
from gtidsnap.schema import Column, TableSchema

SINGLE = TableSchema(
    TableId("shop", "orders"),
    (Column("id", "bigint", "bigint unsigned", False), Column("region", "varchar", "varchar(8)")),
    ("id",),
)
COMPOSITE = TableSchema(
    TableId("shop", "lines"),
    (
        Column("order_id", "int", "int", False),
        Column("sku", "varchar", "varchar(20)", False, "utf8mb4_general_ci"),
        Column("qty", "int", "int"),
    ),
    ("order_id", "sku"),
)


def test_quote_ident_doubles_backticks() -> None:
    assert quote_ident("orders") == "`orders`"
    assert quote_ident("we`ird") == "`we``ird`"
    assert quote_ident("a b.c") == "`a b.c`"
    assert quote_ident("``") == "``````"


def test_single_key_chunk_without_lower_bound() -> None:
    sql, params = chunk_query(SINGLE, None, (100,), 10, None)
    assert sql == ("SELECT `id`, `region` FROM `shop`.`orders` WHERE `id` <= %s ORDER BY `id` LIMIT 10")
    assert params == [100]


def test_single_key_chunk_with_both_bounds_and_condition() -> None:
    sql, params = chunk_query(SINGLE, (5,), (100,), 3, "region = 'EU'")
    assert sql == (
        "SELECT `id`, `region` FROM `shop`.`orders` WHERE `id` > %s AND `id` <= %s "
        "AND (region = 'EU') ORDER BY `id` LIMIT 3"
    )
    assert params == [5, 100]


def test_composite_key_uses_row_values_and_a_leading_column_range() -> None:
    sql, params = chunk_query(COMPOSITE, (7, "abc"), (9, "zz"), 50, None)
    assert sql == (
        "SELECT `order_id`, `sku`, `qty` FROM `shop`.`lines` "
        "WHERE `order_id` >= %s AND (`order_id`, `sku`) > (%s, %s) "
        "AND `order_id` <= %s AND (`order_id`, `sku`) <= (%s, %s) "
        "ORDER BY `order_id`, `sku` LIMIT 50"
    )
    assert params == [7, 7, "abc", 9, 9, "zz"]


def test_composite_key_without_lower_bound() -> None:
    sql, params = chunk_query(COMPOSITE, None, (9, "zz"), 1)
    assert "WHERE `order_id` <= %s AND (`order_id`, `sku`) <= (%s, %s) ORDER BY" in sql
    assert ">" not in sql.split("WHERE")[1]
    assert params == [9, 9, "zz"]


def test_max_key_query() -> None:
    assert max_key_query(SINGLE) == ("SELECT `id` FROM `shop`.`orders` ORDER BY `id` DESC LIMIT 1", [])
    assert max_key_query(COMPOSITE, "qty > 0") == (
        "SELECT `order_id`, `sku` FROM `shop`.`lines` WHERE (qty > 0) "
        "ORDER BY `order_id` DESC, `sku` DESC LIMIT 1",
        [],
    )


def test_odd_names_are_quoted_and_percent_signs_doubled_for_pymysql() -> None:
    odd = TableSchema(
        TableId("my`db", "50% off"),
        (Column("k`1", "int", "int", False), Column("v%", "text", "text")),
        ("k`1",),
    )
    sql, params = chunk_query(odd, (1,), (2,), 5, "`v%` LIKE 'a%'")
    assert params == [1, 2]
    assert sql == (
        "SELECT `k``1`, `v%%` FROM `my``db`.`50%% off` WHERE `k``1` > %s AND `k``1` <= %s "
        "AND (`v%%` LIKE 'a%%') ORDER BY `k``1` LIMIT 5"
    )
    # What PyMySQL will send once it substitutes the parameters:
    assert sql % ("1", "2") == (
        "SELECT `k``1`, `v%` FROM `my``db`.`50% off` WHERE `k``1` > 1 AND `k``1` <= 2 "
        "AND (`v%` LIKE 'a%') ORDER BY `k``1` LIMIT 5"
    )
    key_sql, _ = max_key_query(odd)
    assert key_sql % () == "SELECT `k``1` FROM `my``db`.`50% off` ORDER BY `k``1` DESC LIMIT 1"


@pytest.mark.parametrize(
    "condition",
    [
        "region = 'EU'",
        "region IN ('EU', 'US') AND (qty > 1 OR qty IS NULL)",
        "note = 'it''s (not) a problem'",
        'note = "a ) inside quotes"',
        "`odd ) name` = 1",
        "created_at >= NOW() - INTERVAL 1 DAY",
    ],
)
def test_acceptable_conditions(condition: str) -> None:
    assert check_condition(f"  {condition} ") == condition


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ("region = 'EU'; DROP TABLE x", "';'"),
        ("1=1 -- comment", "'--'"),
        ("1=1 # comment", "'#'"),
        ("1=1 /* comment */", "'/*'"),
        ("1=1 */", "'*/'"),
        ("note = 'it\\'s'", "backslash"),
        ("1=1) OR (1=1", "never opened"),
        ("(1=1", "unclosed parenthesis"),
        ("note = 'open", "unclosed ' quote"),
        ('note = "open', 'unclosed " quote'),
        ("`open = 1", "unclosed ` quote"),
        ("   ", "empty"),
    ],
)
def test_refused_conditions(condition: str, reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_condition(condition)
    assert reason in str(refused.value)
    with pytest.raises(ConfigError):
        chunk_query(SINGLE, None, (1,), 10, condition)
    with pytest.raises(ConfigError):
        max_key_query(SINGLE, condition)


def test_bad_limits_and_bounds() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        chunk_query(SINGLE, None, (1,), 0)
    with pytest.raises(ValueError, match="has 1 value"):
        chunk_query(COMPOSITE, None, (1,), 10)


@pytest.mark.parametrize("data_type", ["enum", "set", "float"])
def test_keys_that_do_not_sort_as_they_compare_are_refused(data_type: str) -> None:
    schema = TableSchema(TableId("s", "t"), (Column("k", data_type, data_type, False),), ("k",))
    with pytest.raises(SchemaError, match="surrogate key"):
        chunk_query(schema, None, ("a",), 10)
    with pytest.raises(SchemaError, match="surrogate key"):
        max_key_query(schema)
