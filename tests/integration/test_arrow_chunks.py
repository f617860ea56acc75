"""The compiled chunk read (connectorx into Arrow) against real MariaDB 10.11 and MySQL 8.0 replicas:
value for value and key for key what the Python path makes of the same chunks, for every type it
serves and odd values of each; the types and chunks it does not serve go to the Python path, named once.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gtidsnap.core.model import TableId
from gtidsnap.sinks.arrow_columns import ArrowRenderer
from gtidsnap.source.replica import Replica
from tests.integration.cdc import reader_settings
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration

SERVED = """CREATE TABLE served (
  id BIGINT UNSIGNED NOT NULL PRIMARY KEY, t TINYINT, tu TINYINT UNSIGNED, s SMALLINT UNSIGNED,
  m MEDIUMINT, i INT UNSIGNED, b BIGINT, d DECIMAL(12,2), dn DECIMAL(28,10), db DOUBLE, y YEAR,
  day DATE, at DATETIME, at6 DATETIME(6), c CHAR(5), v VARCHAR(40) COLLATE utf8mb4_bin,
  l VARCHAR(20) CHARACTER SET latin1, tx TEXT, e ENUM('a','b c',''), bn BINARY(4), vb VARBINARY(8),
  bl BLOB)"""


def odd_row(k: int) -> tuple[Any, ...]:
    return (
        k,
        k % 100,
        k % 200,
        k,
        -k,
        k,
        k * 1000,
        f"{k}.{k % 100:02d}",
        f"{k}.{k:010d}",
        k / 7,
        1901 + k % 200,
        f"2020-{1 + k % 12:02d}-{1 + k % 28:02d}",
        f"2020-01-01 {k % 24:02d}:00:00",
        f"2020-01-01 00:00:{k % 60:02d}.5",
        str(k),
        f"v{k}",
        f"l{k}",
        "t" * (k % 50),
        "a",
        b"\x02\x03",
        bytes([k % 256]),
        None,
    )


ODD: list[tuple[Any, ...]] = [
    (
        1,
        -128,
        255,
        65535,
        -8388608,
        4294967295,
        -(2**63),
        "-9999999999.99",
        "-999999999999999999.9999999999",
        -1.7976931348623157e308,
        1901,
        "1000-01-01",
        "1000-01-01 00:00:00",
        "2038-01-19 03:14:07.999999",
        "ab",
        "Ab\u00e9\U0001f600",
        "caf\u00e9",
        "",
        "b c",
        b"\x00",
        b"",
        b"\x00\xff\x00",
    ),
    (
        2**64 - 1,
        127,
        0,
        0,
        8388607,
        0,
        2**63 - 1,
        "0.00",
        "0.0000000001",
        5e-324,
        2155,
        "9999-12-31",
        "9999-12-31 23:59:59",
        "1970-01-01 00:00:00.000001",
        "a    ",
        "  x  ",
        "",
        "line\nbreak\ttab",
        "",
        b"abcd",
        b"\x01" * 8,
        b"z" * 70000,
    ),
    *[odd_row(k) for k in range(3, 700)],
    (700, *([None] * 21)),
]


def load(pair: ReplicaPair, db: str, ddl: str, table: str, rows: list[tuple[Any, ...]]) -> None:
    with pair.primary(db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # a zero date for the refused chunk
        cur.execute(ddl)
        if rows:
            cur.executemany(f"INSERT INTO {table} VALUES ({', '.join(['%s'] * len(rows[0]))})", rows)
        pair.wait_replicated(conn)


def both_ways(replica: Replica, table: TableId, bounds: list[tuple[Any, Any]]) -> int:
    """Every range of ``bounds`` read both ways and compared; the rows compared."""
    schema = replica.schema(table)
    renderer, compared = ArrowRenderer(), 0
    for after, upto in bounds:
        python_keys, python_rows = renderer(replica.select_chunk(schema, after, upto, None).rows, schema)
        columns = replica.select_chunk_columns(schema, after, upto)
        assert columns is not None, f"the compiled read refused {table} {after}..{upto}"
        keys, rows = renderer.from_columns(columns, schema)
        assert keys == python_keys
        assert rows.batch.schema == python_rows.batch.schema
        for name in rows.batch.schema.names:
            assert rows.batch.column(name).to_pylist() == python_rows.batch.column(name).to_pylist(), name
        compared += len(keys)
    return compared


def test_every_served_type_reads_as_the_python_path_reads_it(pair: ReplicaPair, fresh_db: str) -> None:
    load(pair, fresh_db, SERVED, "served", ODD)
    with Replica(reader_settings(pair)) as replica:
        table = TableId(fresh_db, "served")
        bounds = [(None, (1,)), ((1,), (300,)), ((300,), (2**64 - 1,)), ((2**64 - 1,), (2**64 - 1,))]
        assert both_ways(replica, table, bounds) == len(ODD)


def test_a_filter_reaches_the_compiled_read_escaped(pair: ReplicaPair, fresh_db: str) -> None:
    load(pair, fresh_db, SERVED, "served", ODD)
    with Replica(reader_settings(pair)) as replica:
        schema = replica.schema(TableId(fresh_db, "served"))
        condition = "v = 'v5' OR l = 'caf\u00e9' OR tx = 'it''s' OR v LIKE '%\\\\%'"
        columns = replica.select_chunk_columns(schema, None, (2**64 - 1,), condition)
        assert columns is not None
        python = replica.select_chunk(schema, None, (2**64 - 1,), None, condition).rows
        assert [k for k, _ in python] == [(1,), (5,)]
        assert ArrowRenderer().from_columns(columns, schema)[0] == ((1,), (5,))


def test_what_it_does_not_serve_goes_to_the_python_path_named_once(
    pair: ReplicaPair, fresh_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    load(pair, fresh_db, "CREATE TABLE f (id INT PRIMARY KEY, x FLOAT)", "f", [(1, 1.25)])
    load(pair, fresh_db, "CREATE TABLE k (id VARCHAR(10) PRIMARY KEY, x INT)", "k", [("a", 1)])
    load(
        pair, fresh_db, "CREATE TABLE z (id INT PRIMARY KEY, at DATETIME)", "z", [(1, "0000-00-00 00:00:00")]
    )
    caplog.set_level(logging.INFO, logger="gtidsnap.source.arrow_chunks")
    with Replica(reader_settings(pair)) as replica:
        for name, upto, why in (
            ("f", (9,), "column x is float"),
            ("k", ("z",), "key column id is varchar(10)"),
            ("z", (9,), "a chunk of"),  # served by type; its zero date is refused by connectorx
        ):
            schema = replica.schema(TableId(fresh_db, name))
            for _ in range(2):
                assert replica.select_chunk_columns(schema, None, upto) is None
                assert len(replica.select_chunk(schema, None, upto, None).rows) == 1
            said = [r.getMessage() for r in caplog.records if f"{fresh_db}.{name}" in r.getMessage()]
            assert len(said) == 1 and why in said[0], said
    assert "gtidsnap-test-pw" not in caplog.text
