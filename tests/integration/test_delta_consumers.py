"""The Delta tables as their consumers read them, on real servers and Spark + Delta: every table of a
captured table exists before its first change, so a Structured Streaming reader can start with the
capture; every table reads at one recorded point, with no transaction half applied."""

from __future__ import annotations

import dataclasses
import itertools
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.commands import Shutdown
from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.run import build_engine
from gtidsnap.sinks.delta.consistent_points import ConsistentRead, read_as_of, recorded_points
from gtidsnap.sinks.delta.layout import KEY_PROPERTY, changelog_path, history_path, mirror_path
from gtidsnap.source.replica import Replica
from tests.integration.cdc import create_table, execute, gtidsnap_cmd, make_config, source_rows, wait_for
from tests.integration.fixtures.db_servers import ReplicaPair
from tests.integration.test_delta_engine import (
    DeltaCli,
    committed_batches,
    kill_group,
    read,
    tail,
    wait_for_log,
)
from tests.integration.test_verify import verify

pytestmark = pytest.mark.integration


def properties(spark: SparkSession, path: str) -> dict[str, str]:
    row = DeltaTable.forPath(spark, path).detail().select("properties").first()
    assert row is not None
    return dict(row[0])


def test_every_table_exists_before_its_first_change(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """A table snapshotted on a quiet source and one only captured (no snapshot, no row yet): their
    mirrors, changelogs and histories exist once the run has their shapes, with their properties; a
    Structured Streaming query of a changelog started then gets the first change when it comes."""
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "a", 30)
    execute(pair, db, "CREATE TABLE b (id BIGINT PRIMARY KEY, v INT NOT NULL, payload VARCHAR(64))")
    a, b = TableId(db, "a"), TableId(db, "b")
    root = str(tmp_path / "delta")
    config = make_config(pair, tmp_path, [a, b], chunk_size=10)
    sink = SinkSettings(type="delta", path=root, history=True, batch_ms=500)
    config = dataclasses.replace(config, sink=sink)
    failed: list[BaseException] = []
    with Replica(config.source) as replica:
        engine = build_engine(config, replica, spark_factory=lambda: spark)

        def run() -> None:
            try:
                engine.run(snapshot=[a])
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=run, name="engine", daemon=True)
        thread.start()
        query: Any = None
        try:
            paths = [f(root, t) for t in (a, b) for f in (mirror_path, changelog_path, history_path)]

            def all_there() -> bool:
                assert not failed, failed
                return all(DeltaTable.isDeltaTable(spark, p) for p in paths)

            wait_for("the tables of a and b", all_there, timeout_s=120)
            for table in (a, b):
                mirror = properties(spark, mirror_path(root, table))
                assert mirror.get("delta.enableChangeDataFeed") == "true" and mirror[KEY_PROPERTY] == '["id"]'
                assert properties(spark, changelog_path(root, table))[KEY_PROPERTY] == '["id"]'
                assert properties(spark, history_path(root, table))[KEY_PROPERTY] == '["id"]'
            assert spark.read.format("delta").load(changelog_path(root, b)).count() == 0
            seen: list[tuple[int, str]] = []
            query = (
                spark.readStream.format("delta")
                .load(changelog_path(root, b))
                .writeStream.foreachBatch(
                    lambda rows, _: seen.extend((r["id"], r["_op"]) for r in rows.collect())
                )
                .option("checkpointLocation", str(tmp_path / "feed"))
                .start()
            )
            execute(pair, db, "INSERT INTO b VALUES (7, 1, 'first')")
            wait_for("the first change of b in its changelog's stream", lambda: seen == [(7, "c")], 120)
        finally:
            if query is not None:
                query.stop()
            engine.commands.put(Shutdown())
            thread.join(120)
    assert not failed, failed


# --------------------------------------------------------------------------- one consistent point

PAIRED = "CREATE TABLE `{}` (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)"


class PairedWriter:
    """Transactions that touch two tables at once, in a thread: each sets ``v`` of the same keys of
    ``x`` and ``y`` to its own number, inserts a key into both, or deletes one from both. At any point
    of the stream the two tables hold the same keys with the same ``v``: a read that sees a
    transaction applied to one and not the other breaks it."""

    def __init__(self, pair: ReplicaPair, db: str, keys: int, seed: int) -> None:
        self.pair, self.db, self.rnd = pair, db, random.Random(seed)
        self.keys, self.next_key = list(range(keys)), keys
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paired-writer", daemon=True)
        self.transactions = 0

    def start(self) -> PairedWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        if self.error is not None:
            raise self.error
        with self.pair.primary() as primary:
            self.pair.wait_replicated(primary)

    def _run(self) -> None:
        try:
            with self.pair.primary(self.db) as conn, conn.cursor() as cur:
                conn.autocommit(False)
                n = 0
                while not self._stop.is_set():
                    n += 1
                    roll = self.rnd.random()
                    if roll < 0.15:
                        key, self.next_key = self.next_key, self.next_key + 1
                        self.keys.append(key)
                        statements = [f"INSERT INTO `{t}` VALUES ({key}, {n})" for t in ("x", "y")]
                    elif roll < 0.25 and len(self.keys) > 10:
                        key = self.keys.pop(self.rnd.randrange(len(self.keys)))
                        statements = [f"DELETE FROM `{t}` WHERE id = {key}" for t in ("x", "y")]
                    else:
                        some = ",".join(str(k) for k in self.rnd.sample(self.keys, min(5, len(self.keys))))
                        statements = [f"UPDATE `{t}` SET v = {n} WHERE id IN ({some})" for t in ("x", "y")]
                    for statement in self.rnd.sample(statements, 2):  # either table first
                        cur.execute(statement)
                    conn.commit()
                    self.transactions = n
                    time.sleep(0.02 + 0.04 * self.rnd.random())  # ~25 a second
        except BaseException as exc:  # raised by stop()
            self.error = exc


def joined(at: ConsistentRead, db: str) -> tuple[dict[int, int], dict[int, int]]:
    x, y = ({r["id"]: r["v"] for r in at.tables[f"{db}.{t}"].select("id", "v").collect()} for t in ("x", "y"))
    return x, y


def test_consumers_after_kills_history_verify_and_one_point(
    pair: ReplicaPair, fresh_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """Scenarios 32 and 34: under a writer whose transactions touch two tables, gtidsnap (with the
    history) is killed (kill -9) at random instants twice while it snapshots and streams, and once more
    after streaming a while, then runs to the end. Then, as
    consumers read them: ``verify`` passes right away; each history has, per key, versions that never
    overlap, one open version per live key (the source's row), none for a deleted key, times from the
    source; at every recorded point the two mirrors read together hold no transaction half applied
    (once both snapshots are done there, the same keys with the same values); the last point is the
    source's own state."""
    db = fresh_db
    execute(
        pair, db, PAIRED.format("x"), PAIRED.format("y"),
        many=[(f"INSERT INTO `{t}` VALUES (%s, 0)", [(k,) for k in range(400)]) for t in ("x", "y")],
    )  # fmt: skip
    settings = {
        "GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "50",
        "GTIDSNAP_SINK_MERGE_INTERVAL_S": "2",
        "GTIDSNAP_SINK_HISTORY": "true",
    }
    cli = DeltaCli(pair, db, tmp_path, settings)
    places = ["--sink-path", cli.root, "--checkpoint", str(tmp_path / "checkpoint.json")]
    snapshots = ["--snapshot", f"{db}.x", "--snapshot", f"{db}.y"]
    writer = PairedWriter(pair, db, 400, seed=11).start()
    rnd = random.Random(5)
    try:
        for _ in range(2):  # killed mid-snapshot or while streaming, wherever the instant falls
            proc, log = cli._spawn(gtidsnap_cmd("run", *snapshots, *places), "run", {})
            try:
                opened = wait_for_log(proc, log, lambda text: "Delta sink at " in text, "the sink to open")
                assert opened, tail(read(log))
                time.sleep(rnd.uniform(2.0, 10.0))
                assert proc.poll() is None, tail(read(log))
            finally:
                kill_group(proc)
        # then it streams a while under the writer (a point a batch), and is killed once more
        proc, log = cli._spawn(gtidsnap_cmd("run", *places), "run", {})
        try:
            many = wait_for_log(proc, log, lambda text: len(committed_batches(text)) >= 6, "6 batches")
            assert many, tail(read(log))
        finally:
            kill_group(proc)
    finally:
        writer.stop()
    last_run = cli._spawn(gtidsnap_cmd("run", "--until-caught-up", *places), "run", {})
    code, log = cli._finish(*last_run, "the last run")
    assert code == 0, tail(log)
    checked = verify(cli, "x", "y", options=("--json", "--wait", "30"))
    assert checked.returncode == 0, f"{checked.stdout}\n{checked.stderr[-3000:]}"

    source = {k[0]: r["v"] for k, r in source_rows(pair, db, "x").items()}
    for table in ("x", "y"):
        check_history(spark, cli.root, TableId(db, table), source)
    check_points(spark, cli.root, db, source)


def check_history(spark: SparkSession, root: str, table: TableId, source: dict[int, int]) -> None:
    """Per key, the history's versions follow one another in ``_seq`` and in time without overlap,
    each ending when the next record begins and never before it starts; exactly the live keys have an
    open version, with the source's value; each starts at its record's source time (a snapshot row's
    no later)."""
    history = spark.read.format("delta").load(history_path(root, table))
    logged = spark.read.format("delta").load(changelog_path(root, table))
    times = {
        (r["id"], r["_seq"]): r["_source_ts"] for r in logged.select("id", "_seq", "_source_ts").collect()
    }
    versions: dict[int, list[Any]] = {}
    for r in history.collect():
        versions.setdefault(r["id"], []).append(r)
    current = {}
    for key, rows in versions.items():
        rows.sort(key=lambda r: r["valid_from_seq"])
        for earlier, later in itertools.pairwise(rows):
            assert (
                earlier["valid_to_seq"] is not None and earlier["valid_to_seq"] <= later["valid_from_seq"]
            ), f"{table} key {key}: versions overlap: {earlier} then {later}"
            assert earlier["valid_to"] <= later["valid_from"] or later["_op"] == "r", (earlier, later)
        for r in rows:
            assert r["valid_to"] is None or r["valid_to"] >= r["valid_from"], f"ends before it starts: {r}"
            started = times[(key, r["valid_from_seq"])]
            assert r["valid_from"] == started or (r["_op"] == "r" and r["valid_from"] <= started), r
        opened = [r for r in rows if r["is_current"]]
        assert len(opened) <= 1 and all(r["valid_to_seq"] is None for r in opened), (table, key, opened)
        if opened:
            current[key] = opened[0]["v"]
    assert current == source, f"{table}: the open versions are not the source's rows"


def check_points(spark: SparkSession, root: str, db: str, source: dict[int, int]) -> None:
    points = recorded_points(spark, root)
    assert len(points) >= 6, [p.batch for p in points]
    assert [p.batch for p in points] == sorted({p.batch for p in points}, reverse=True), "one a batch"
    sample = [*points[:: max(1, len(points) // 8)], points[-1]]
    checked = 0
    for point in sample:
        try:
            at = read_as_of(spark, root, point.gtid_set)
        except SinkError:
            continue  # no point within this one has the snapshot rows in its mirrors yet
        assert at.point.gtids() <= point.gtids()
        x, y = joined(at, db)
        both = x.keys() & y.keys()
        assert all(x[k] == y[k] for k in both), (at.point, {k: (x[k], y[k]) for k in both if x[k] != y[k]})
        if not at.point.snapshotting:
            assert x.keys() == y.keys(), (at.point, x.keys() ^ y.keys())
        checked += 1
    assert checked >= 3, f"only {checked} of {len(sample)} points read"
    last = read_as_of(spark, root)
    assert last.point.batch == points[0].batch, "the last run ends complete: its point is the newest"
    x, y = joined(last, db)
    assert x == y == source
