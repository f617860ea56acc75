"""Keyset SQL text: exact statements for single and composite keys, quoting, refused conditions, and how
each key type's raw value is bound so the server compares it exactly as the key."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pymysql.converters
import pytest

from gtidsnap.core.errors import FilterError, SchemaError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.core.plan import decode_key, encode_key
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.source.chunk_sql import BOUNDS_MODE, chunk_ends_query, chunk_query, key_binder, max_key_query

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
    assert sql == (
        f"SELECT {BOUNDS_MODE}`id`, `region` FROM `shop`.`orders` WHERE `id` <= %s ORDER BY `id` LIMIT 10"
    )
    assert params == [100]


def test_single_key_chunk_with_both_bounds_and_condition() -> None:
    sql, params = chunk_query(SINGLE, (5,), (100,), 3, "region = 'EU'")
    assert sql == (
        f"SELECT {BOUNDS_MODE}`id`, `region` FROM `shop`.`orders` WHERE `id` > %s AND `id` <= %s "
        "AND (`region` = 'EU') ORDER BY `id` LIMIT 3"
    )
    assert params == [5, 100]


def test_composite_key_uses_row_values_and_a_leading_column_range() -> None:
    sql, params = chunk_query(COMPOSITE, (7, "abc"), (9, "zz"), 50, None)
    assert sql == (
        f"SELECT {BOUNDS_MODE}`order_id`, `sku`, `qty` FROM `shop`.`lines` "
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


def test_chunk_without_limit_reads_the_whole_range() -> None:
    sql, params = chunk_query(SINGLE, (5,), (100,), None, "region = 'EU'")
    assert sql == (
        f"SELECT {BOUNDS_MODE}`id`, `region` FROM `shop`.`orders` WHERE `id` > %s AND `id` <= %s "
        "AND (`region` = 'EU') ORDER BY `id`"
    )
    assert "LIMIT" not in sql
    assert params == [5, 100]
    composite, composite_params = chunk_query(COMPOSITE, (7, "abc"), (9, "zz"), None)
    assert composite.endswith("ORDER BY `order_id`, `sku`")
    assert composite_params == [7, 7, "abc", 9, 9, "zz"]


def test_single_key_chunk_ends_number_the_rows_of_a_bounded_keyset_walk() -> None:
    sql, params = chunk_ends_query(SINGLE, (5,), (100,), 3, 4, "region = 'EU'")
    walk = (
        "SELECT `id` FROM `shop`.`orders` WHERE `id` > %s AND `id` <= %s "
        "AND (`region` = 'EU') ORDER BY `id` LIMIT 12"
    )
    assert sql == (
        f"SELECT {BOUNDS_MODE}`id` FROM (SELECT `id`, ROW_NUMBER() OVER (ORDER BY `id`) AS `gtidsnap_row` "
        f"FROM ({walk}) AS gtidsnap_keys) AS gtidsnap_ends "
        "WHERE MOD(`gtidsnap_row`, 3) = 0 ORDER BY `gtidsnap_row`"
    )
    assert params == [5, 100]
    first, first_params = chunk_ends_query(SINGLE, None, (100,), 1, 1)
    assert "WHERE `id` <= %s ORDER BY `id` LIMIT 1)" in first
    assert first_params == [100]


def test_composite_key_chunk_ends_select_only_the_key_columns() -> None:
    sql, params = chunk_ends_query(COMPOSITE, (7, "abc"), (9, "zz"), 1000, 2, "qty > 0")
    assert sql.startswith(f"SELECT {BOUNDS_MODE}`order_id`, `sku` FROM (SELECT `order_id`, `sku`, ")
    assert "ROW_NUMBER() OVER (ORDER BY `order_id`, `sku`)" in sql
    assert (
        "WHERE `order_id` >= %s AND (`order_id`, `sku`) > (%s, %s) "
        "AND `order_id` <= %s AND (`order_id`, `sku`) <= (%s, %s) "
        "AND (`qty` > 0) ORDER BY `order_id`, `sku` LIMIT 2000)"
    ) in sql
    assert params == [7, 7, "abc", 9, 9, "zz"]
    assert "`qty`" not in sql.split(" FROM ")[0]


def test_the_row_number_never_takes_a_key_columns_name() -> None:
    schema = TableSchema(
        TableId("s", "t"),
        (Column("gtidsnap_row", "int", "int"), Column("GTIDSNAP_ROW_", "int", "int")),
        ("gtidsnap_row", "GTIDSNAP_ROW_"),
    )
    sql, _ = chunk_ends_query(schema, None, (1, 1), 10, 2)
    assert "AS `gtidsnap_row__`" in sql and "MOD(`gtidsnap_row__`, 10)" in sql


def test_chunk_ends_are_bounded_like_the_chunks_they_end() -> None:
    """The planner's ranges and the reader's SELECT must cover the same rows: same WHERE, same order."""
    for schema, after, upto in ((SINGLE, (5,), (100,)), (COMPOSITE, (7, "abc"), (9, "zz"))):
        end_sql, end_params = chunk_ends_query(schema, after, upto, 10, 3, None)
        read_sql, read_params = chunk_query(schema, after, upto, None, None)
        walk = end_sql.split("FROM (SELECT ")[2]
        assert walk.split(" WHERE ", 1)[1].split(" LIMIT ")[0] == read_sql.split(" WHERE ")[1]
        assert end_params == read_params


def test_chunk_ends_refuse_bad_sizes_bounds_and_filters() -> None:
    for size, count in ((0, 1), (-1, 1), (1, 0)):
        with pytest.raises(ValueError, match="at least 1"):
            chunk_ends_query(SINGLE, None, (1,), size, count)
    with pytest.raises(ValueError, match="has 1 value"):
        chunk_ends_query(COMPOSITE, (1,), (2, "a"), 10, 2)
    with pytest.raises(FilterError):
        chunk_ends_query(SINGLE, None, (1,), 10, 2, "1=1; DROP TABLE x")
    with pytest.raises(SchemaError, match="surrogate key"):
        chunk_ends_query(
            TableSchema(TableId("s", "t"), (Column("k", "enum", "enum('a')", False),), ("k",)),
            None,
            ("a",),
            10,
            2,
        )


def test_max_key_query() -> None:
    assert max_key_query(SINGLE) == ("SELECT `id` FROM `shop`.`orders` ORDER BY `id` DESC LIMIT 1", [])
    assert max_key_query(COMPOSITE, "qty > 0") == (
        "SELECT `order_id`, `sku` FROM `shop`.`lines` WHERE (`qty` > 0) "
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
        f"SELECT {BOUNDS_MODE}`k``1`, `v%%` FROM `my``db`.`50%% off` WHERE `k``1` > %s AND `k``1` <= %s "
        "AND (`v%%` LIKE 'a%%') ORDER BY `k``1` LIMIT 5"
    )
    # What PyMySQL will send once it substitutes the parameters:
    assert sql % ("1", "2") == (
        f"SELECT {BOUNDS_MODE}`k``1`, `v%` FROM `my``db`.`50% off` WHERE `k``1` > 1 AND `k``1` <= 2 "
        "AND (`v%` LIKE 'a%') ORDER BY `k``1` LIMIT 5"
    )
    key_sql, _ = max_key_query(odd)
    assert key_sql % () == "SELECT `k``1` FROM `my``db`.`50% off` ORDER BY `k``1` DESC LIMIT 1"


@pytest.mark.parametrize(
    ("condition", "rendered"),
    [
        ("region = 'EU'", "`region` = 'EU'"),
        (
            "region IN ('EU', 'US') AND (id > 1 OR id IS NULL)",
            "`region` IN ('EU', 'US') AND (`id` > 1 OR `id` IS NULL)",
        ),
        ("region = 'it''s (not) a problem'", "`region` = 'it''s (not) a problem'"),
        ("region LIKE 'a%'", "`region` LIKE 'a%%'"),
    ],
)
def test_filters_go_in_as_checked_and_rendered(condition: str, rendered: str) -> None:
    sql, _ = chunk_query(SINGLE, None, (1,), 10, condition)
    assert f"AND ({rendered}) ORDER BY" in sql
    key_sql, _ = max_key_query(SINGLE, condition)
    assert f"WHERE ({rendered}) ORDER BY" in key_sql


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ("region = 'EU'; DROP TABLE x", "';'"),
        ("1=1 -- comment", "comment"),
        ("1=1 /* comment */", "comment"),
        ("1=1) OR (1=1", "not one valid MySQL condition"),
        ("id IN (SELECT id FROM mysql.user)", "subqueries"),
        ("qty > 1", "qty is not a column of shop.orders"),
        ("   ", "empty"),
    ],
)
def test_refused_filters_never_reach_the_sql(condition: str, reason: str) -> None:
    """Whatever calls chunk_query, only a checked filter goes into the statement."""
    with pytest.raises(FilterError) as refused:
        chunk_query(SINGLE, None, (1,), 10, condition)
    assert reason in str(refused.value)
    with pytest.raises(FilterError):
        max_key_query(SINGLE, condition)


def test_bad_limits_and_bounds() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        chunk_query(SINGLE, None, (1,), 0)
    with pytest.raises(ValueError, match="has 1 value"):
        chunk_query(COMPOSITE, None, (1,), 10)


@pytest.mark.parametrize("data_type", ["enum", "set", "float"])
def test_keys_that_do_not_sort_as_they_compare_are_refused(data_type: str) -> None:
    schema = TableSchema(TableId("s", "t"), (Column("k", data_type, data_type, False),), ("k",))
    with pytest.raises(SchemaError, match=rf"key column\(s\) k \({data_type.upper()}\).*surrogate key"):
        chunk_query(schema, None, ("a",), 10)
    with pytest.raises(SchemaError, match="surrogate key"):
        max_key_query(schema)


def literal(data_type: str, column_type: str, raw: Any) -> str:
    """The SQL text PyMySQL sends for a raw key value bound as a keyset bound."""
    bind = key_binder(Column("k", data_type, column_type, False))
    return bind.placeholder % pymysql.converters.escape_item(bind.param(raw), "utf8mb4")


@pytest.mark.parametrize(
    ("data_type", "column_type", "raw", "sql"),
    [
        # BIT: PyMySQL returns bytes; MariaDB compares a binary string with BIT by its numeric value
        ("bit", "bit(8)", b"\x05", "5"),
        ("bit", "bit(64)", b"\xff" * 8, str(2**64 - 1)),
        ("bit", "bit(1)", b"\x00", "0"),
        # TIME: PyMySQL 1.x wrote -1 s as '-1:59:59'
        ("time", "time", -dt.timedelta(seconds=1), "CAST('-00:00:01' AS TIME(0))"),
        (
            "time",
            "time(6)",
            -dt.timedelta(minutes=59, seconds=59, microseconds=999500),
            "CAST('-00:59:59.999500' AS TIME(6))",
        ),
        ("time", "time", dt.timedelta(hours=838, minutes=59, seconds=59), "CAST('838:59:59' AS TIME(0))"),
        # DECIMAL: an exact numeric literal, never text compared as a double
        ("decimal", "decimal(65,30)", Decimal("0E-30"), "0.000000000000000000000000000000"),
        ("decimal", "decimal(65,30)", "1E-30", "0.000000000000000000000000000001"),
        ("decimal", "decimal(12,2)", Decimal("-1.50"), "-1.50"),
        # everything else as PyMySQL writes it
        ("double", "double", 0.1 + 0.2, "0.30000000000000004e0"),
        ("bigint", "bigint unsigned", 2**64 - 1, str(2**64 - 1)),
        ("year", "year", 0, "0"),
        # temporal types typed by a CAST (MySQL compares them with text as text in a row comparison)
        ("time", "time(6)", dt.timedelta(seconds=-1), "CAST('-00:00:01' AS TIME(6))"),
        ("date", "date", dt.date(2024, 2, 29), "CAST('2024-02-29' AS DATE)"),
        ("date", "date", "0000-00-00", "CAST('0000-00-00' AS DATE)"),  # zero/invalid: PyMySQL's text
        (
            "datetime",
            "datetime(6)",
            dt.datetime(2024, 1, 2, 3, 4, 5, 6),
            "CAST('2024-01-02 03:04:05.000006' AS DATETIME(6))",
        ),
        ("timestamp", "timestamp", dt.datetime(2038, 1, 19), "CAST('2038-01-19 00:00:00' AS DATETIME(0))"),
        ("uuid", "uuid", "123e4567-e89b-12d3-a456-426655440000", "'123e4567-e89b-12d3-a456-426655440000'"),
        ("inet6", "inet6", "::ffff:1.2.3.4", "'::ffff:1.2.3.4'"),
    ],
)
def test_each_key_type_binds_a_literal_the_server_compares_exactly(
    data_type: str, column_type: str, raw: Any, sql: str
) -> None:
    assert literal(data_type, column_type, raw) == sql


@pytest.mark.parametrize(
    ("data_type", "raw"),
    [
        ("varbinary", b"\x00\xff"),
        ("binary", b"ab\x00\x00"),
        ("point", b"\x00\x00\x00\x00\x01\x01"),  # MariaDB compares spatial keys byte by byte
        ("varchar", "a "),
        ("double", -0.5),
    ],
)
def test_other_key_types_bind_the_raw_value_itself(data_type: str, raw: Any) -> None:
    bind = key_binder(Column("k", data_type, data_type, False))
    assert bind.placeholder == "%s" and bind.param(raw) is raw


def test_every_bound_is_bound_the_same_way_lower_upper_and_composite() -> None:
    schema = TableSchema(
        TableId("s", "t"),
        (
            Column("b", "bit", "bit(8)", False),
            Column("t", "time", "time(6)", False),
            Column("d", "decimal", "decimal(65,30)", False),
        ),
        ("b", "t", "d"),
    )
    lower = (b"\x05", -dt.timedelta(seconds=1), Decimal("0E-30"))
    upper = (b"\xff", dt.timedelta(hours=1), Decimal("1E-30"))
    sql, params = chunk_query(schema, lower, upper, 2)
    assert "WHERE `b` >= %s AND (`b`, `t`, `d`) > (%s, CAST(%s AS TIME(6)), %s) AND `b` <= %s AND " in sql
    low = [5, "-00:00:01", Decimal("0E-30")]
    high = [255, "01:00:00", Decimal("1E-30")]
    assert params == [low[0], *low, high[0], *high]


def test_raw_keys_stored_in_older_checkpoints_bind_alike() -> None:
    """plan.py stores raw keys typed (BIT as bytes, TIME as seconds, DECIMAL as text): after a restart
    the stored bound must bind exactly as the value the server returned."""
    schema = TableSchema(
        TableId("s", "t"),
        (
            Column("b", "bit", "bit(8)", False),
            Column("t", "time", "time(6)", False),
            Column("d", "decimal", "decimal(65,30)", False),
            Column("z", "date", "date", False),
        ),
        ("b", "t", "d", "z"),
    )
    raw = (
        b"\x05",
        -dt.timedelta(minutes=59, seconds=59, microseconds=999500),
        Decimal("0E-30"),
        "2024-00-10",
    )
    stored = decode_key(encode_key(raw))
    assert stored is not None
    assert chunk_query(schema, stored, stored, 1) == chunk_query(schema, raw, raw, 1)
