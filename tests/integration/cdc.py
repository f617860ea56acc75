"""Support for the acceptance tests: running gtidsnap against a real replica, a concurrent writer
on the primary, and the checks of the invariants (complete, no rewind, nothing twice).

The writer makes "no rewind" checkable on a real server: every row carries ``v``, the number of the
writer transaction that last wrote it (transactions commit in that order), and a deleted key is
never inserted again. So, per key, ``v`` must never decrease along the output, and nothing may
follow a delete.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pymysql
import pytest

from gtidsnap.config.cpus import default_readers
from gtidsnap.config.loading import Config, SinkSettings, SnapshotSettings
from gtidsnap.core.model import TableId
from gtidsnap.core.run_stats import RunStats
from gtidsnap.engine.loop import Engine
from gtidsnap.run import build_engine
from gtidsnap.source.connection import ConnectionSettings, Secret
from gtidsnap.source.replica import Replica
from tests.integration.fixtures.db_servers import READER, ReplicaPair

REPO = Path(__file__).resolve().parents[2]
# Chunk reader processes in the scenarios: the default (one per CPU but one), at least 2 so that readers
# race each other (the default is 1 on CI's 2 cores); the scenarios written for a reader count ask for
# theirs (0 to 4).
READERS = max(2, default_readers())


T = TypeVar("T")


def wait_for(
    what: str | Callable[[], str], check: Callable[[], T | None], timeout_s: float = 30.0, guard: Any = None
) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if guard is not None:
            guard()
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            faulthandler.dump_traceback(all_threads=True)  # where each thread is, in the captured stderr
            text = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {text}", pytrace=False)
        time.sleep(0.05)


def reader_settings(pair: ReplicaPair) -> ConnectionSettings:
    return ConnectionSettings(pair.host, pair.replica_port, READER[0], Secret(READER[1]))


def make_config(
    pair: ReplicaPair,
    out: Path,
    tables: Sequence[TableId] = (),
    chunk_size: int = 100,
    heartbeat_s: float = 0.5,
    readers: int = READERS,
) -> Config:
    return Config(
        source=reader_settings(pair),
        tables=tuple(tables),
        snapshot=SnapshotSettings(chunk_size=chunk_size, readers=readers),
        heartbeat_s=heartbeat_s,
        sink=SinkSettings(type="jsonl", path=str(out / "changes.jsonl")),
        checkpoint_path=out / "checkpoint.json",
        checkpoint_interval_s=0.2,
    )


def run_engine(
    pair: ReplicaPair,
    out: Path,
    snapshot: Sequence[TableId],
    *,
    tables: Sequence[TableId] = (),
    chunk_size: int = 100,
    heartbeat_s: float = 0.5,
    readers: int = READERS,
) -> RunStats:
    """One in-process ``gtidsnap run --until-caught-up``."""
    config = make_config(pair, out, [*tables, *snapshot], chunk_size, heartbeat_s, readers)
    with Replica(config.source) as replica:
        engine: Engine = build_engine(config, replica)
        return engine.run(snapshot=snapshot, until_caught_up=True)


def read_records(out: Path) -> list[dict[str, Any]]:
    path = out / "changes.jsonl"
    return (
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []
    )


# ----------------------------------------------------------------------------- source side


def execute(
    pair: ReplicaPair, db: str, *statements: str, many: Iterable[tuple[str, Sequence[Any]]] = ()
) -> None:
    """Run statements on the primary (one transaction each), then wait until the replica has them."""
    with pair.primary(db or None) as conn:
        with conn.cursor() as cur:
            for s in statements:
                cur.execute(s)
            for sql, rows in many:
                cur.executemany(sql, list(rows))
        pair.wait_replicated(conn)


def create_table(pair: ReplicaPair, db: str, name: str, rows: int, *, start: int = 0, step: int = 2) -> None:
    """``id BIGINT PK, v INT, payload VARCHAR``, with ``rows`` rows at keys start, start+step, ..."""
    execute(
        pair,
        db,
        f"CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, v INT NOT NULL, payload VARCHAR(64))",
        many=[
            (f"INSERT INTO `{name}` VALUES (%s, 0, %s)", [(start + i * step, f"p{i}") for i in range(rows)])
        ],
    )


def source_rows(pair: ReplicaPair, db: str, table: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The replica's rows, normalised exactly as gtidsnap normalises them, by key."""
    with pair.primary() as primary:
        pair.wait_replicated(primary)
    with Replica(reader_settings(pair)) as replica:
        schema = replica.schema(TableId(db, table))
    with pair.replica_reader(db) as conn, conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        rows = [schema.normalize_row(r) for r in cur.fetchall()]
    return {tuple(r[c] for c in schema.key): r for r in rows}


@dataclass
class Writer:
    """Random committed transactions on the primary, in a thread, while gtidsnap runs."""

    pair: ReplicaPair
    db: str
    tables: Sequence[str]
    seed: int
    transactions: int = 200
    max_rows_per_tx: int = 5
    pause_s: float = 0.002
    every_table: bool = False  # each transaction also changes at least one row of every table
    deleted: set[tuple[str, int]] = field(default_factory=set)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.rnd = random.Random(self.seed)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stopping = threading.Event()
        self.next_key = 10**6

    def start(self) -> Writer:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """End after the transaction under way (``transactions`` is then an upper bound); join() next."""
        self._stopping.set()

    def join(self, timeout: float = 120) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the writer did not finish"
        if self.error is not None:
            raise self.error
        with self.pair.primary() as primary:
            self.pair.wait_replicated(primary)

    def _run(self) -> None:
        try:
            with self.pair.primary(self.db) as conn:
                conn.autocommit(False)
                with conn.cursor() as cur:
                    keys: dict[str, list[int]] = {}
                    for t in self.tables:
                        cur.execute(f"SELECT id FROM `{t}`")
                        keys[t] = [r[0] for r in cur.fetchall()]
                    conn.commit()
                    for v in range(1, self.transactions + 1):
                        if self._stopping.is_set():
                            break
                        self._transaction(cur, keys, v)
                        conn.commit()
                        time.sleep(self.pause_s * self.rnd.random())
        except BaseException as exc:  # reported by join()
            self.error = exc

    def _transaction(self, cur: Any, keys: dict[str, list[int]], v: int) -> None:
        touched: set[tuple[str, int]] = set()
        for _ in range(self.rnd.randint(1, self.max_rows_per_tx)):
            self._change(cur, keys, v, self.rnd.choice(list(self.tables)), touched)
        for t in self.tables if self.every_table else ():
            for _ in range(1000):  # a try can pick a key already used; a new key comes soon
                if any(name == t for name, _ in touched):
                    break
                self._change(cur, keys, v, t, touched)
            else:
                raise AssertionError(f"writer transaction {v} found no row of {t} to change")

    def _change(
        self, cur: Any, keys: dict[str, list[int]], v: int, t: str, touched: set[tuple[str, int]]
    ) -> None:
        """Insert, update or delete one row of ``t`` (nothing when the key drawn cannot be used)."""
        live = keys[t]
        action = self.rnd.random()
        if action < 0.35 or not live:
            # inside the snapshot's range (odd keys between the even initial ones) or above it
            key = (
                self.rnd.randrange(1, max(3, 2 * len(live)), 2) if self.rnd.random() < 0.6 else self.next_key
            )
            self.next_key += 1
            if (t, key) in self.deleted or key in live or (t, key) in touched:
                return
            cur.execute(f"INSERT INTO `{t}` VALUES (%s, %s, %s)", (key, v, f"i{v}"))
            live.append(key)
        else:
            key = self.rnd.choice(live)
            if (t, key) in touched:
                return
            if action < 0.8:
                cur.execute(f"UPDATE `{t}` SET v = %s, payload = %s WHERE id = %s", (v, f"u{v}", key))
            else:
                cur.execute(f"DELETE FROM `{t}` WHERE id = %s", (key,))
                live.remove(key)
                self.deleted.add((t, key))
        touched.add((t, key))


# ----------------------------------------------------------------------------- checks


def check_invariants(
    records: list[dict[str, Any]],
    expected: dict[str, dict[tuple[Any, ...], dict[str, Any]]],
    added_defaults: dict[str, Any] | None = None,
    every_seq: bool = True,
) -> None:
    """Complete (replay == source), ordered (seq), no rewind (v per key), nothing emitted twice.

    ``added_defaults``: columns added by a DDL, with their defaults. A row not changed since the DDL
    has no change event carrying the column (an ALTER writes no row events); a consumer fills in the
    default, as documented in the README, and so does this replay. ``every_seq`` False: the records
    may skip numbers (snapshot rows a Delta mirror no longer holds and its changelog never did)."""
    seqs = [r["seq"] for r in records]
    if every_seq:
        assert seqs == list(range(1, len(seqs) + 1)), "seq must be 1, 2, 3, ... with no gap and no repeat"
    else:
        assert seqs == sorted(set(seqs)), "seq must only grow, with no repeat"
    seen_changes: set[tuple[Any, ...]] = set()
    version: dict[tuple[str, tuple[Any, ...]], int] = {}
    gone: set[tuple[str, tuple[Any, ...]]] = set()
    replay: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {t: {} for t in expected}
    for r in records:
        table, key = r["table"], tuple(r["key"])
        if table not in expected:
            continue
        ident = (table, key)
        if not r["snapshot"]:
            change = (r["gtid"], table, key, r["op"])
            assert change not in seen_changes, f"binlog change emitted twice: {change}"
            seen_changes.add(change)
        assert ident not in gone, f"{ident} came back after its delete: {r}"
        if r["op"] == "d":
            gone.add(ident)
            replay[table].pop(key, None)
            continue
        v = r["after"].get("v")
        if v is not None:
            assert v >= version.get(ident, -1), f"{ident} went back from v={version[ident]} to v={v} ({r})"
            version[ident] = v
        replay[table][key] = r["after"]
    for table, rows in expected.items():
        missing = rows.keys() - replay[table].keys()
        extra = replay[table].keys() - rows.keys()
        assert not missing and not extra, f"{table}: missing {sorted(missing)[:5]}, extra {sorted(extra)[:5]}"
        for key, row in rows.items():
            replayed = {**(added_defaults or {}), **replay[table][key]}
            assert replayed == row, f"{table} {key}: output {replay[table][key]} != source {row}"


# ----------------------------------------------------------------------------- the real CLI


def cli_env(pair: ReplicaPair) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTIDSNAP_")}
    env.update(
        {
            "GTIDSNAP_SOURCE_HOST": pair.host,
            "GTIDSNAP_SOURCE_PORT": str(pair.replica_port),
            "GTIDSNAP_SOURCE_USER": READER[0],
            "GTIDSNAP_SOURCE_PASSWORD": READER[1],
            "GTIDSNAP_BINLOG_HEARTBEAT_S": "0.5",
            "GTIDSNAP_CHECKPOINT_INTERVAL_S": "0.2",
            "GTIDSNAP_SNAPSHOT_READERS": str(READERS),
        }
    )
    return env


def run_args(out: Path, *tables: str) -> list[str]:
    """``run --snapshot <each table> --until-caught-up`` with its checkpoint and JSON lines in ``out``."""
    snapshots = [arg for table in tables for arg in ("--snapshot", table)]
    places = ["--checkpoint", str(out / "checkpoint.json"), "--sink-path", str(out / "changes.jsonl")]
    return ["run", *snapshots, "--until-caught-up", *places]


def gtidsnap_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gtidsnap", *args]


def changelog_record(table: str, row: Any, image: dict[str, Any]) -> dict[str, Any]:
    """A Delta changelog row (``_op``, ``_seq``, ...) as the record :func:`check_invariants` reads;
    ``image`` is its data columns, the before image of a delete."""
    deleted = row["_op"] == "d"
    return {
        "table": table,
        "key": [row["id"]],
        "op": row["_op"],
        "seq": row["_seq"],
        "gtid": row["_gtid"],
        "snapshot": row["_snapshot"],
        "after": None if deleted else image,
        "before": image if deleted else None,
    }
