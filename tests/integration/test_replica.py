"""The Replica adapter against real MariaDB 10.11 and MySQL 8.0 replicas, as the read-only user.

Tables and rows are made on the primary (as admin) and read on the replica once replicated; the
replica is only ever read, by ``gtidsnap`` (a throw-away SELECT-only user for the grants test).
"""

from __future__ import annotations

import datetime as dt
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from gtidsnap.core.errors import ConfigError, FilterError, PrerequisiteError, SchemaError, SourceError
from gtidsnap.core.gtid import MariadbGtidSet, MysqlGtidSet
from gtidsnap.core.model import Key, TableId
from gtidsnap.core.plan import TableProgress
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.snapshot.chunk_budget import CHUNK_BYTES_BUDGET, ChunkSizes
from gtidsnap.source.connection import ConnectionSettings, Secret, TlsMode
from gtidsnap.source.preflight import parse_version, strip_password
from gtidsnap.source.replica import Replica
from gtidsnap.source.result_rows import ChunkResult
from tests.integration.fixtures.db_servers import READER, STATE_DIR, ReplicaPair

pytestmark = pytest.mark.integration


def reader(pair: ReplicaPair, **changes: Any) -> ConnectionSettings:
    """The tool's own view of the replica: the read-only user, TLS off (loopback)."""
    return ConnectionSettings(pair.host, pair.replica_port, READER[0], Secret(READER[1]), **changes)


def on_primary(
    pair: ReplicaPair, db: str, *statements: str, many: Sequence[tuple[str, Sequence[Any]]] = ()
) -> None:
    """Run statements on the primary, then wait until the replica has them."""
    with pair.primary(db) as conn:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            for statement, rows in many:
                cur.executemany(statement, rows)
        pair.wait_replicated(conn)


@pytest.fixture
def replica(pair: ReplicaPair) -> Iterator[Replica]:
    with Replica(reader(pair)) as r:
        yield r


def walk(
    replica: Replica,
    schema: TableSchema,
    size: int,
    *,
    after: tuple[Any, ...] | None = None,
    upto: tuple[Any, ...] | None = None,
    condition: str | None = None,
) -> tuple[list[tuple[Key, dict[str, Any]]], list[ChunkResult]]:
    """Every row up to ``upto`` (the max key when None), chunk by chunk, as the engine walks a table."""
    bound = upto if upto is not None else replica.max_key(schema, condition)
    if bound is None:
        return [], []
    chunks: list[ChunkResult] = []
    while True:
        chunk = replica.select_chunk(schema, after, bound, size, condition)
        assert chunk.count == len(chunk.rows) <= size
        chunks.append(chunk)
        if chunk.count < size or chunk.last_raw_key is None:
            return [row for c in chunks for row in c.rows], chunks
        after = chunk.last_raw_key


# --------------------------------------------------------------------------- connection, flavour, GTIDs


def test_detects_flavour_and_version(pair: ReplicaPair, replica: Replica) -> None:
    assert replica.flavor == pair.flavor
    assert replica.version[:2] == ((10, 11) if pair.flavor == "mariadb" else (8, 0))
    assert parse_version("10.11.19-MariaDB-0+deb12u1-log") == ("mariadb", (10, 11, 19))
    assert parse_version("8.0.31") == ("mysql", (8, 0, 31))
    assert parse_version("8.4.2-commercial") == ("mysql", (8, 4, 2))


def test_executed_grows_after_a_write_and_parses(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    before = replica.executed()
    assert isinstance(before, MariadbGtidSet if pair.flavor == "mariadb" else MysqlGtidSet)
    assert before, "the replica has executed the bootstrap transactions"
    on_primary(pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)")
    after = replica.executed()
    assert before <= after and not after <= before
    with pair.replica_reader() as conn:
        assert pair.executed(conn) >= after  # what the fixtures read agrees


def test_no_transaction_or_metadata_lock_outlives_a_read(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    """A held metadata lock would stall the replica's SQL thread at the next DDL on the table."""
    on_primary(
        pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1), (2, 2)"
    )
    table = TableId(fresh_db, "t")
    schema = replica.schema(table)
    replica.executed()
    replica.select_chunk(schema, None, replica.max_key(schema) or (0,), 1)
    with pair.primary(fresh_db) as conn:  # the Replica session stays open meanwhile
        with conn.cursor() as cur:
            cur.execute("ALTER TABLE t ADD COLUMN w INT")
        pair.wait_replicated(conn, timeout=15)
    assert [c.name for c in replica.schema(table).columns] == ["id", "v", "w"]


def test_reconnects_once_after_losing_the_connection(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    on_primary(pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
    schema = replica.schema(TableId(fresh_db, "t"))
    first = replica.connection_id()
    with pair.replica_reader() as other, other.cursor() as cur:
        cur.execute(f"KILL {first}")  # any user may end its own sessions
    chunk = replica.select_chunk(schema, None, (2,), 10)
    assert [k for k, _ in chunk.rows] == [(1,), (2,)]
    assert replica.connection_id() != first


def test_unreachable_replica_is_a_retryable_source_error(pair: ReplicaPair) -> None:
    with socket.socket() as s:
        s.bind((pair.host, 0))
        free_port = s.getsockname()[1]
    settings = ConnectionSettings(pair.host, free_port, READER[0], Secret("s3cret-pw"), connect_timeout=2)
    with pytest.raises(SourceError) as failed:
        Replica(settings)
    assert failed.value.retryable
    assert f"gtidsnap@127.0.0.1:{free_port}" in str(failed.value)
    assert "s3cret-pw" not in str(failed.value)


def test_wrong_password_is_a_config_error_without_the_password(pair: ReplicaPair) -> None:
    settings = ConnectionSettings(pair.host, pair.replica_port, READER[0], Secret("not-the-pw-123"))
    with pytest.raises(ConfigError) as refused:
        Replica(settings)
    assert f"gtidsnap@127.0.0.1:{pair.replica_port}" in str(refused.value)
    assert "not-the-pw-123" not in str(refused.value)
    assert not refused.value.retryable


# --------------------------------------------------------------------------- TLS


def cipher(settings: ConnectionSettings) -> str:
    with pymysql.connect(**settings.pymysql_kwargs()) as conn, conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        row = cur.fetchone()
    return str(row[1]) if row else ""


def test_tls_modes_are_explicit(pair: ReplicaPair) -> None:
    """MySQL 8.0 offers TLS with its auto-generated certificates; the MariaDB pair has no TLS."""
    assert cipher(reader(pair)) == ""  # DISABLED is the default
    preferred = cipher(reader(pair, tls=TlsMode.PREFERRED))
    if pair.flavor == "mysql":
        assert preferred.startswith("TLS_")
        ca = STATE_DIR / "mysql-replica" / "data" / "ca.pem"
        with Replica(reader(pair, tls=TlsMode.REQUIRED, ca=ca)) as verified:
            assert verified.executed()
        with pytest.raises(ConfigError, match="not signed by the system's trusted CAs"):
            Replica(reader(pair, tls=TlsMode.REQUIRED))
    else:
        assert preferred == ""  # offered nothing: PREFERRED falls back to plain TCP
        with pytest.raises(PrerequisiteError, match=r"TLS is required but the replica .* does not offer it"):
            Replica(reader(pair, tls=TlsMode.REQUIRED))


# --------------------------------------------------------------------------- schema and tables


def test_schema_of_a_composite_key_table(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE `odd``name` (note TEXT, sku VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL, "
        "amount DECIMAL(12,2), order_id BIGINT UNSIGNED NOT NULL, PRIMARY KEY (order_id, sku)) "
        "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    )
    schema = replica.schema(TableId(fresh_db, "odd`name"))
    assert schema.key == ("order_id", "sku")  # key order, not column order
    assert [c.name for c in schema.columns] == ["note", "sku", "amount", "order_id"]
    note, sku, amount, order_id = schema.columns
    assert (note.data_type, note.nullable, note.collation) == ("text", True, "utf8mb4_bin")
    assert sku == Column("sku", "varchar", "varchar(20)", False, "utf8mb4_general_ci")
    assert (amount.data_type, amount.column_type, amount.collation) == ("decimal", "decimal(12,2)", None)
    assert order_id.data_type == "bigint" and order_id.unsigned and not order_id.nullable
    assert TableId(fresh_db, "odd`name") in replica.tables()


def test_tables_lists_base_tables_outside_system_schemas(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    on_primary(pair, fresh_db, "CREATE TABLE a (id INT PRIMARY KEY)", "CREATE VIEW v AS SELECT id FROM a")
    tables = replica.tables()
    assert TableId(fresh_db, "a") in tables
    assert TableId(fresh_db, "v") not in tables
    assert not {t.schema for t in tables} & {"mysql", "sys", "information_schema", "performance_schema"}
    assert tables == sorted(tables)


def test_missing_table_is_a_schema_error_naming_it(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    with pytest.raises(SchemaError) as missing:
        replica.schema(TableId(fresh_db, "nope"))
    assert str(missing.value) == (
        f"table {fresh_db}.nope does not exist on the replica 'gtidsnap@127.0.0.1:{pair.replica_port}'"
    )


def test_table_without_primary_key_needs_a_surrogate(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE log (id INT NOT NULL, note VARCHAR(10), UNIQUE KEY (id))",
        "INSERT INTO log VALUES (3, 'c'), (1, 'a'), (2, 'b')",
    )
    table = TableId(fresh_db, "log")
    with pytest.raises(SchemaError) as no_key:
        replica.schema(table)
    assert f"table {fresh_db}.log has no primary key" in str(no_key.value)
    assert "surrogate key" in str(no_key.value)
    schema = replica.schema(table, surrogate_key=("id",))
    assert schema.key == ("id",)
    rows, _ = walk(replica, schema, 2)
    assert [k for k, _ in rows] == [(1,), (2,), (3,)]
    with pytest.raises(SchemaError, match=r"surrogate key column.*nope.*do not exist"):
        replica.schema(table, surrogate_key=("id", "nope"))
    with pytest.raises(SchemaError, match=r"note of table .* are nullable"):
        replica.schema(table, surrogate_key=("note",))


# --------------------------------------------------------------------------- keyset chunking


@pytest.mark.parametrize("size", [1, 7, 1000])
def test_keyset_walk_visits_every_row_once_in_order(
    pair: ReplicaPair, fresh_db: str, replica: Replica, size: int
) -> None:
    ids = list(range(5, 5 + 3 * 300, 3))  # gaps between keys
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), amount DECIMAL(8,2))",
        many=[("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"v{i}", Decimal(i) / 4) for i in reversed(ids)])],
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    assert replica.max_key(schema) == (ids[-1],)
    rows, chunks = walk(replica, schema, size)
    assert [k for k, _ in rows] == [(i,) for i in ids]
    assert rows[0][1] == {"id": 5, "v": "v5", "amount": "1.25"}  # normalised row
    assert len(chunks) == len(ids) // size + 1
    assert all(c.last_raw_key == (c.rows[-1][1]["id"],) for c in chunks if c.rows)


def test_chunk_ends_are_where_the_keyset_walks_chunks_end(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    """One query finds where several chunks end, as a walk of the same size would end them: composite
    keys under a case-insensitive collation, DATETIME(6), BIGINT UNSIGNED past 2^63, a filter; the
    raw keys come back as the server stores them (the next lower bounds)."""
    base = dt.datetime(2024, 3, 31, 1, 59, 59)
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE c (a INT NOT NULL, b VARCHAR(10) COLLATE utf8mb4_general_ci NOT NULL, v INT, "
        "PRIMARY KEY (a, b))",
        "CREATE TABLE d (at DATETIME(6) PRIMARY KEY, v INT)",
        "CREATE TABLE u (id BIGINT UNSIGNED PRIMARY KEY, v INT)",
        many=[
            ("INSERT INTO c VALUES (%s, %s, %s)", [(a, b, a % 3) for a in range(30, 0, -1) for b in "dBaCe"]),
            (
                "INSERT INTO d VALUES (%s, %s)",
                [(base + dt.timedelta(microseconds=n * 250_001), n) for n in range(60)],
            ),
            ("INSERT INTO u VALUES (%s, %s)", [(2**63 - 30 + 2 * n, n) for n in range(40)]),
        ],
    )
    cases = [("c", None), ("c", "v = 1"), ("d", None), ("u", "v >= 7")]
    for name, condition in cases:
        schema = replica.schema(TableId(fresh_db, name))
        upto = replica.max_key(schema, condition)
        assert upto is not None
        for size, count in ((1, 3), (7, 4), (13, 50)):
            _, chunks = walk(replica, schema, size, condition=condition)
            expected = [c.last_raw_key for c in chunks if c.count == size][:count]
            assert replica.chunk_ends(schema, None, upto, size, count, condition) == expected, (name, size)
            after = chunks[1].last_raw_key
            _, rest = walk(replica, schema, size, after=after, condition=condition)
            expected = [c.last_raw_key for c in rest if c.count == size][:count]
            assert replica.chunk_ends(schema, after, upto, size, count, condition) == expected, (name, size)
    schema = replica.schema(TableId(fresh_db, "c"))
    assert replica.chunk_ends(schema, (10, "a"), (12, "c"), 4, 3) == [(10, "e"), (11, "d"), (12, "C")]


def test_bounds_lower_and_upper(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        many=[("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(1, 301)])],
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    upto = replica.max_key(schema)
    assert upto == (300,)
    on_primary(pair, fresh_db, many=[("INSERT INTO t VALUES (%s, %s)", [(i, i) for i in range(301, 351)])])
    rows, _ = walk(replica, schema, 40, upto=upto)
    assert [k for k, _ in rows] == [(i,) for i in range(1, 301)]  # rows above the captured max are left out
    rows, _ = walk(replica, schema, 40, after=(100,), upto=(150,))
    assert [k for k, _ in rows] == [(i,) for i in range(101, 151)]
    empty = replica.select_chunk(schema, (150,), (150,), 10)
    assert (empty.count, empty.rows, empty.last_raw_key) == (0, (), None)


def test_empty_table_has_no_max_key(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    on_primary(pair, fresh_db, "CREATE TABLE t (a INT, b VARCHAR(5), PRIMARY KEY (a, b))")
    assert replica.max_key(replica.schema(TableId(fresh_db, "t"))) is None


def test_avg_row_length_is_the_servers_estimate_as_it_is_now(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    """AVG_ROW_LENGTH as the read-only user sees it: none for an empty table or one not there; once
    InnoDB's statistics follow the rows (taken in the background, no ANALYZE), near a row's bytes, on
    MySQL too, whose information_schema would otherwise serve the empty table's 0 for a day. The name
    travels as a parameter."""
    name = "odd'name %_t"
    on_primary(pair, fresh_db, f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, payload TEXT)")
    table = TableId(fresh_db, name)
    assert replica.avg_row_length(table) is None  # empty: 0
    assert replica.avg_row_length(TableId(fresh_db, "odd'name x_t")) is None  # no such table
    rows = [(i, f"{i:08d}" * 375) for i in range(3000)]  # 3,000 bytes of text each
    insert = f"INSERT INTO `{name.replace('%', '%%')}` VALUES (%s, %s)"
    on_primary(pair, fresh_db, many=[(insert, rows)])
    deadline = time.monotonic() + 90
    while (estimate := replica.avg_row_length(table)) is None or estimate < 1500:
        assert time.monotonic() < deadline, f"the estimate stayed {estimate} for 3,000 rows of ~3 KB"
        time.sleep(0.5)
    assert 1500 <= estimate <= 8000, estimate
    capped = ChunkSizes(replica).of(TableProgress(table), 10_000_000)
    assert capped == CHUNK_BYTES_BUDGET // estimate


def test_composite_key_int_varchar(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    letters = ["d", "B", "a", "C", "e"]
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (a INT NOT NULL, b VARCHAR(10) COLLATE utf8mb4_general_ci NOT NULL, v INT, "
        "PRIMARY KEY (a, b))",
        many=[("INSERT INTO t VALUES (%s, %s, %s)", [(a, b, a) for a in range(40, 0, -1) for b in letters])],
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    assert replica.max_key(schema) == (40, "e")
    expected = [(a, b.lower()) for a in range(1, 41) for b in sorted(letters, key=str.lower)]
    for size in (1, 3, 7, 500):
        rows, _ = walk(replica, schema, size)
        assert [k for k, _ in rows] == expected, size
    rows, _ = walk(replica, schema, 4, after=(10, "B"), upto=(12, "c"))
    assert [k for k, _ in rows] == [
        (10, "c"),
        (10, "d"),
        (10, "e"),
        *[(11, x) for x in "abcde"],
        (12, "a"),
        (12, "b"),
        (12, "c"),
    ]
    chunk = replica.select_chunk(schema, (10, "a"), (12, "c"), 1)
    assert chunk.last_raw_key == (10, "B")  # raw, as stored: the next lower bound
    assert chunk.rows[0][0] == (10, "b")  # folded: the key the window compares


def test_case_insensitive_varchar_key_follows_the_collation(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (k VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)",
        many=[("INSERT INTO t VALUES (%s, %s)", [("c", 3), ("B", 2), ("a", 1), ("D", 4), ("e", 5)])],
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    assert replica.max_key(schema) == ("e",)
    rows, chunks = walk(replica, schema, 2)
    assert [r["k"] for _, r in rows] == ["a", "B", "c", "D", "e"]  # not binary order (B, D, a, c, e)
    assert [k for k, _ in rows] == [("a",), ("b",), ("c",), ("d",), ("e",)]
    assert chunks[0].last_raw_key == ("B",)
    # Bounds are compared by the server under the collation: 'b' < 'c' <= 'C'.
    rows, _ = walk(replica, schema, 10, after=("b",), upto=("C",))
    assert [r["k"] for _, r in rows] == ["c"]


def test_bigint_unsigned_key_above_2_63(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    keys = [1, 2**63 - 2, 2**63 - 1, 2**63, 2**63 + 1, 2**63 + 7, 2**64 - 2, 2**64 - 1]
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, v INT)",
        many=[("INSERT INTO t VALUES (%s, %s)", [(k, n) for n, k in enumerate(keys)])],
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    assert replica.max_key(schema) == (2**64 - 1,)
    for size in (1, 3):
        rows, _ = walk(replica, schema, size)
        assert [k for k, _ in rows] == [(k,) for k in keys]
    rows, _ = walk(replica, schema, 2, after=(2**63 - 1,), upto=(2**64 - 2,))
    assert [k for k, _ in rows] == [(2**63,), (2**63 + 1,), (2**63 + 7,), (2**64 - 2,)]


def test_datetime6_key(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    base = dt.datetime(2024, 3, 31, 1, 59, 59)
    stamps = [base + dt.timedelta(microseconds=n * 250_001) for n in range(20)]
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (at DATETIME(6) PRIMARY KEY, v INT)",
        many=[("INSERT INTO t VALUES (%s, %s)", [(s, n) for n, s in enumerate(reversed(stamps))])],
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    assert replica.max_key(schema) == (stamps[-1],)
    rows, chunks = walk(replica, schema, 3)
    assert [k for k, _ in rows] == [(s.isoformat(sep=" "),) for s in stamps]
    assert chunks[0].last_raw_key == (stamps[2],)  # microseconds survive the round trip
    rows, _ = walk(replica, schema, 3, after=(stamps[4],), upto=(stamps[9],))
    assert [k for k, _ in rows] == [(s.isoformat(sep=" "),) for s in stamps[5:10]]


def test_condition_filters_chunks_and_max_key(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (id INT PRIMARY KEY, region CHAR(2), name VARCHAR(20))",
        many=[
            (
                "INSERT INTO t VALUES (%s, %s, %s)",
                [(i, "EU" if i % 3 else "US", f"n{i}%") for i in range(1, 101)],
            )
        ],
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    assert replica.max_key(schema) == (100,)
    assert replica.max_key(schema, "region = 'EU'") == (100,)
    assert replica.max_key(schema, "region = 'US'") == (99,)
    rows, _ = walk(replica, schema, 7, condition="region = 'EU'")
    assert [k for k, _ in rows] == [(i,) for i in range(1, 101) if i % 3]
    assert {r["region"] for _, r in rows} == {"EU"}
    rows, _ = walk(replica, schema, 5, condition="name LIKE 'n1%' OR name LIKE '%9_'")  # names end in '%'
    assert [k for k, _ in rows] == sorted(
        {(i,) for i in range(1, 101) if str(i).startswith("1") or str(i).endswith("9")}
    )
    assert replica.max_key(schema, "region = 'XX'") is None


def test_condition_that_could_break_out_is_refused(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE t (id INT PRIMARY KEY, region CHAR(2))",
        "CREATE TABLE x (id INT PRIMARY KEY)",
    )
    schema = replica.schema(TableId(fresh_db, "t"))
    for condition in (
        "region = 'EU'; DROP TABLE x",
        "region = 'EU') OR (1=1",
        "1=1 -- ",
        "region = 'EU' /*",
        "id IN (SELECT id FROM x)",
    ):
        with pytest.raises(FilterError):
            replica.select_chunk(schema, None, (10,), 10, condition)
        with pytest.raises(FilterError):
            replica.max_key(schema, condition)
    assert TableId(fresh_db, "x") in replica.tables()


def test_condition_naming_an_unknown_column_is_refused_before_the_server(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    on_primary(pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY)")
    schema = replica.schema(TableId(fresh_db, "t"))
    with pytest.raises(FilterError, match="nope is not a column"):
        replica.select_chunk(schema, None, (1,), 10, "nope = 1")


def test_condition_naming_a_column_dropped_since_is_a_schema_error(
    pair: ReplicaPair, fresh_db: str, replica: Replica
) -> None:
    """The shape in hand still has the column; the server says it is gone: a schema change."""
    on_primary(pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY, gone INT)")
    schema = replica.schema(TableId(fresh_db, "t"))
    on_primary(pair, fresh_db, "ALTER TABLE t DROP COLUMN gone")
    with pytest.raises(SchemaError, match="Unknown column"):
        replica.select_chunk(schema, None, (1,), 10, "gone = 1")


# --------------------------------------------------------------------------- preflight


def test_preflight_of_the_healthy_replica(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    on_primary(
        pair,
        fresh_db,
        "CREATE TABLE ok (id INT PRIMARY KEY)",
        "CREATE TABLE nopk (id INT NOT NULL, v INT)",
    )
    ok, nopk, gone = TableId(fresh_db, "ok"), TableId(fresh_db, "nopk"), TableId(fresh_db, "gone")
    assert replica.preflight([ok]) == []
    assert replica.preflight([ok, nopk], {nopk: ("id",)}) == []
    problems = replica.preflight([ok, nopk, gone])
    assert [str(p) for p in problems] == [
        f"table {nopk} is without a primary key; gtidsnap needs a primary key or a configured surrogate key: "
        f"add a PRIMARY KEY to {nopk}, or configure a surrogate key for it: a unique NOT NULL column set",
        f"table {gone} is missing on the replica; gtidsnap needs every configured table to exist: "
        "check the name (schema.table) or remove it from the configured tables",
    ]


def test_facts_read_from_the_replica(pair: ReplicaPair, fresh_db: str, replica: Replica) -> None:
    on_primary(pair, fresh_db, "CREATE TABLE t (b INT NOT NULL, a INT NOT NULL, PRIMARY KEY (a, b))")
    table = TableId(fresh_db, "t")
    facts = replica.facts([table])
    assert (facts.flavor, facts.version) == (replica.flavor, replica.version)
    assert facts.user == "gtidsnap@%"
    assert facts.variables["binlog_format"] == "ROW"
    # MySQL lets REPLICATION CLIENT run SHOW REPLICA STATUS; MariaDB wants SLAVE MONITOR, which we lack.
    assert facts.is_replica is (True if pair.flavor == "mysql" else None)
    assert facts.tables[table].exists and facts.tables[table].primary_key == ("a", "b")
    assert not any("PASSWORD" in g.upper() or "*" in g.split(" TO ")[-1] for g in facts.grants), facts.grants


def test_password_hashes_are_stripped_from_grants() -> None:
    mariadb = (
        "GRANT SELECT ON *.* TO `u`@`%` IDENTIFIED BY PASSWORD '*C777E693DD3F596C84365A42B38E96781AD3DE1C'"
    )
    assert strip_password(mariadb) == "GRANT SELECT ON *.* TO `u`@`%`"
    via = (
        "GRANT USAGE ON *.* TO `u`@`%` IDENTIFIED VIA ed25519 USING 'ZIgUREUg5PVgQ6LskhXmO' WITH GRANT OPTION"
    )
    assert strip_password(via) == "GRANT USAGE ON *.* TO `u`@`%` WITH GRANT OPTION"
    assert strip_password("GRANT SELECT ON *.* TO `u`@`%`") == "GRANT SELECT ON *.* TO `u`@`%`"


@pytest.fixture
def weak_user(pair: ReplicaPair) -> Iterator[ConnectionSettings]:
    """A user with SELECT only, made on the primary (it replicates), dropped after the test."""
    name, password = f"weak_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    with pair.primary() as conn:
        with conn.cursor() as cur:
            cur.execute(f"CREATE USER '{name}'@'%%' IDENTIFIED BY %s", (password,))
            cur.execute(f"GRANT SELECT ON *.* TO '{name}'@'%'")
        pair.wait_replicated(conn)
    try:
        yield ConnectionSettings(pair.host, pair.replica_port, name, Secret(password))
    finally:
        with pair.primary() as conn, conn.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def test_preflight_names_missing_grants(
    pair: ReplicaPair, fresh_db: str, weak_user: ConnectionSettings
) -> None:
    on_primary(pair, fresh_db, "CREATE TABLE t (id INT PRIMARY KEY)")
    with Replica(weak_user) as weak:
        problems = weak.preflight([TableId(fresh_db, "t")])
    client = "BINLOG MONITOR" if pair.flavor == "mariadb" else "REPLICATION CLIENT"
    who = f"'{weak_user.user}'@'%'"
    assert [str(p) for p in problems] == [
        f"privilege {client} is not granted to {who}; "
        f"gtidsnap needs it on *.* to read the executed GTID set: GRANT {client} ON *.* TO {who}",
        f"privilege REPLICATION SLAVE is not granted to {who}; "
        f"gtidsnap needs it on *.* to stream the binlog: GRANT REPLICATION SLAVE ON *.* TO {who}",
    ]


# --------------------------------------------------------------------------- read-only


def test_nothing_was_ever_written_on_the_replica(pair: ReplicaPair) -> None:
    """Every transaction in the replica's binlog came from the primary: none originated on the replica."""
    with pair.replica_reader() as conn, conn.cursor() as cur:
        if pair.flavor == "mysql":
            cur.execute("SELECT @@server_uuid, @@global.gtid_executed")
            own, executed = cur.fetchone()
            assert own not in str(executed), executed
        else:
            cur.execute("SELECT @@server_id, @@global.gtid_binlog_state")
            own, state = cur.fetchone()
            servers = {int(g.split("-")[1]) for g in str(state).split(",") if g}
            assert own not in servers, state


@pytest.mark.parametrize(
    ("tls", "version", "expected"),
    [
        (TlsMode.DISABLED, (1, 2), {"ssl_disabled": True}),
        (TlsMode.DISABLED, (1, 1), {"ssl_disabled": True}),
        (TlsMode.PREFERRED, (1, 2), {}),  # PyMySQL 1.2's own default is "TLS if offered"
        (TlsMode.PREFERRED, (1, 1), {"ssl": {"verify_mode": False, "check_hostname": False}}),
        (TlsMode.REQUIRED, (1, 2), {"ssl_verify_cert": True, "ssl_ca": "/ca.pem"}),
        (TlsMode.REQUIRED, (1, 1), {"ssl_verify_cert": True, "ssl_ca": "/ca.pem"}),
        (
            TlsMode.VERIFY_IDENTITY,
            (1, 1),
            {"ssl_verify_cert": True, "ssl_verify_identity": True, "ssl_ca": "/ca.pem"},
        ),
    ],
)
def test_pymysql_kwargs_spell_out_each_tls_mode(
    tls: TlsMode, version: tuple[int, int], expected: dict[str, Any]
) -> None:
    settings = ConnectionSettings("127.0.0.1", 1, "u", Secret("p"), tls=tls, ca=Path("/ca.pem"))
    kwargs = settings.pymysql_kwargs(pymysql_version=version)
    base = {"host": "127.0.0.1", "port": 1, "user": "u", "password": "p", "connect_timeout": 10}
    assert kwargs == {**base, **expected}


def test_a_client_certificate_goes_with_a_verifying_mode() -> None:
    settings = ConnectionSettings(
        "127.0.0.1", 1, "u", Secret("p"), tls=TlsMode.VERIFY_IDENTITY, cert=Path("/c.pem"), key=Path("/k.pem")
    )
    kwargs = settings.pymysql_kwargs(pymysql_version=(1, 1))
    assert kwargs["ssl_cert"] == "/c.pem" and kwargs["ssl_key"] == "/k.pem" and kwargs["ssl_verify_identity"]
