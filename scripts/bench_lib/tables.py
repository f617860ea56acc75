"""The benchmark's tables in the database ``bench`` of each primary, loaded once and reused.

Every table has the issue's shape: ``id BIGINT`` primary key, ``VARCHAR(64)``, ``INT``, ``DATETIME``,
``DECIMAL(12,2)``, ``TEXT`` (ids 1..N, a body of 40 to 160 characters). A table counts as loaded
when ``bench.loaded`` names it with its row count and the current :data:`SPEC`; anything else is
dropped and loaded again: the first rows with multi-row INSERTs, then by doubling with
``INSERT ... SELECT`` on the primary, in transactions of at most :data:`TX_ROWS` rows.
"""

from __future__ import annotations

import logging
import time

from bench_lib.env import DATABASE, Pair

log = logging.getLogger("bench.tables")

SPEC = "v1"  # change when the shape or the content changes: loaded tables are then rebuilt
TX_ROWS = 200_000  # rows per loading transaction (a replica applies huge row events slowly)
SEED_ROWS = 100_000  # rows sent from Python before doubling on the server
COLUMNS = "id, name, n, ts, amount, body"
_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit", "sed", "eiusmod")


def create_sql(table: str) -> str:
    return (
        f"CREATE TABLE {DATABASE}.{table} (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(64) NOT NULL, "
        "n INT NOT NULL, ts DATETIME NOT NULL, amount DECIMAL(12,2) NOT NULL, body TEXT)"
    )


def row(i: int) -> tuple[object, ...]:
    """Row ``i``, deterministic."""
    words = 6 + i % 20
    body = " ".join(_WORDS[(i + k) % len(_WORDS)] for k in range(words))
    stamp = f"2026-{1 + i % 12:02d}-{1 + i % 28:02d} {i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}"
    return (i, f"customer-{i % 100_003}", i % 1_000_003, stamp, f"{(i * 7919) % 10_000_000 / 100:.2f}", body)


def insert_rows(pair: Pair, table: str, first: int, last: int, batch: int = 5_000) -> None:
    """Rows ``first..last`` with multi-row INSERTs (PyMySQL's executemany), one transaction per batch."""
    with pair.primary() as conn, conn.cursor() as cur:
        for start in range(first, last + 1, batch):
            cur.executemany(
                f"INSERT INTO {DATABASE}.{table} ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s)",
                [row(i) for i in range(start, min(last, start + batch - 1) + 1)],
            )


def _loaded(pair: Pair, table: str) -> int | None:
    with pair.primary() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {DATABASE}.loaded (name VARCHAR(64) PRIMARY KEY, "
            "row_count BIGINT NOT NULL, spec VARCHAR(16) NOT NULL)"
        )
        cur.execute(f"SELECT row_count, spec FROM {DATABASE}.loaded WHERE name = %s", (table,))
        found = cur.fetchone()
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            (DATABASE, table),
        )
        exists = bool(cur.fetchone()[0])
    if found is None or found[1] != SPEC or not exists:
        return None
    return int(found[0])


def ensure_table(pair: Pair, table: str, rows: int) -> float:
    """``bench.<table>`` with ``rows`` rows on the primary and the replica; seconds spent loading (0 if
    it was there already)."""
    if _loaded(pair, table) == rows:
        pair.wait_replicated()
        return 0.0
    started = time.monotonic()
    log.info("%s: loading %s.%s with %d rows", pair.flavor, DATABASE, table, rows)
    with pair.primary() as conn, conn.cursor() as cur:
        cur.execute(f"DELETE FROM {DATABASE}.loaded WHERE name = %s", (table,))
        cur.execute(f"DROP TABLE IF EXISTS {DATABASE}.{table}")
        cur.execute(create_sql(table))
    seed = min(rows, SEED_ROWS)
    insert_rows(pair, table, 1, seed)
    have = seed
    with pair.primary() as conn, conn.cursor() as cur:
        while have < rows:  # copy ids 1..k to have+1..have+k, in transactions of TX_ROWS
            copy = min(have, rows - have)
            for lo in range(1, copy + 1, TX_ROWS):
                hi = min(copy, lo + TX_ROWS - 1)
                cur.execute(
                    f"INSERT INTO {DATABASE}.{table} ({COLUMNS}) SELECT id + %s, name, n, ts, amount, body "
                    f"FROM {DATABASE}.{table} WHERE id BETWEEN %s AND %s",
                    (have, lo, hi),
                )
            have += copy
        cur.execute(f"INSERT INTO {DATABASE}.loaded VALUES (%s, %s, %s)", (table, rows, SPEC))
    pair.wait_replicated()
    took = time.monotonic() - started
    log.info("%s: %s.%s loaded and replicated in %.0f s", pair.flavor, DATABASE, table, took)
    return took


def recreate_empty(pair: Pair, table: str) -> None:
    """A fresh empty ``bench.<table>`` (for the inserting writer of the latency measurement)."""
    with pair.primary() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
        cur.execute(f"DROP TABLE IF EXISTS {DATABASE}.{table}")
        cur.execute(create_sql(table))
    pair.wait_replicated()
