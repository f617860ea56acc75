"""kill -9 of the real ``gtidsnap run`` writing Delta Lake, on a real MariaDB replica while a writer
runs on the primary: at random moments, and at each instant of a Delta commit (``GTIDSNAP_TEST_CRASH_AT``,
gtidsnap/core/crashpoints.py).

After the restarts each mirror must equal its source table, each changelog must hold every record once
(no ``_seq`` twice; replayed in ``_seq`` order they pass check_invariants: nothing lost, no rewind), no
table may see a batch number twice, no changelog may ever hold a batch above the checkpoint or lose a
row (a Structured Streaming reader of it sees each row once), and each mirror batch a crash left beyond
its checkpoint must be undone by one commit that puts back the rows of the version before it. Every CLI
start costs a Spark JVM and cold Delta operations (tens of seconds on 2 cores), so the tests start few.
The Delta log is read directly (history, rows at a version); the final output through the run's
``spark`` session, as consumers do.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta import changelog_path, mirror_path
from gtidsnap.sinks.delta.spark_session import default_delta_jars_dir
from tests.integration.cdc import (
    REPO,
    Writer,
    changelog_record,
    check_invariants,
    cli_env,
    create_table,
    gtidsnap_cmd,
    source_rows,
)
from tests.integration.fixtures.db_servers import ReplicaPair

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

TABLES = ("a", "b")  # sorted: a batch writes a (mirror, changelog), then b
RUN_TIMEOUT_S = 240.0
COMMIT_FILE = re.compile(r"\d{20}\.json")


# ----------------------------------------------------------------------------- the CLI


@dataclass
class DeltaCli:
    """``gtidsnap run --snapshot <tables> --until-caught-up`` into Delta under ``out``, as a subprocess.

    Each process leads its own process group, so a kill takes its Spark JVM at the same instant, and no
    JVM of a dead run is left to share the tables with the next run. Logs: ``out/run-N.log``.
    """

    pair: ReplicaPair
    db: str
    out: Path
    settings: dict[str, str] = field(default_factory=dict)
    runs: int = 0

    @property
    def root(self) -> str:
        return str(self.out / "delta")

    @property
    def checkpoint(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / "checkpoint.json").read_text(encoding="utf-8"))
        return data

    def env(self, **more: str) -> dict[str, str]:
        return {
            **cli_env(self.pair),
            "GTIDSNAP_SINK_TYPE": "delta",
            # cli_env drops GTIDSNAP_*: name the jars folder the test's own Spark uses
            "GTIDSNAP_DELTA_JARS": str(default_delta_jars_dir()),
            # no PYSPARK_SUBMIT_ARGS: its --driver-java-options would replace the driver's own JVM
            # options (C1 only with a 48 MB code cache, which a catalog run filled)
            **self.settings,
            **more,
        }

    def start(
        self, snapshot: bool = True, forever: bool = False, **more: str
    ) -> tuple[subprocess.Popen[bytes], Path]:
        """``snapshot`` False: no ``--snapshot`` (``capture.tables`` names what streams); ``forever``:
        no ``--until-caught-up``, so the run ends only at a crash point (or its timeout)."""
        args = gtidsnap_cmd(
            "run",
            *(arg for t in TABLES for arg in ("--snapshot", f"{self.db}.{t}") if snapshot),
            *([] if forever else ["--until-caught-up"]),
            "--sink-path",
            self.root,
            "--checkpoint",
            str(self.out / "checkpoint.json"),
        )
        return self._spawn(args, "run", more)

    def run(self, snapshot: bool = True, forever: bool = False, **more: str) -> tuple[int, str]:
        """Run to the end; the return code and the log."""
        return self._finish(*self.start(snapshot, forever, **more), f"run {self.runs}")

    def mirror_job(self, **more: str) -> tuple[int, str]:
        """One pass of ``spark/mirror_job.py`` over the output, as a subprocess: its code and log."""
        script = str(REPO / "spark" / "mirror_job.py")
        args = [
            sys.executable,
            script,
            "--path",
            self.root,
            "--checkpoint",
            str(self.out / "checkpoint.json"),
        ]
        return self._finish(*self._spawn(args, "mirror-job", more), f"mirror job {self.runs}")

    def _spawn(
        self, args: list[str], name: str, more: dict[str, str]
    ) -> tuple[subprocess.Popen[bytes], Path]:
        self.runs += 1
        log = self.out / f"{name}-{self.runs}.log"
        with log.open("wb") as sink:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                args,
                env=self.env(**more),
                cwd=self.out,  # Spark's scratch files (spark-warehouse, ...) stay in the test's folder
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return proc, log

    @staticmethod
    def _finish(proc: subprocess.Popen[bytes], log: Path, what: str) -> tuple[int, str]:
        try:
            code = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            pytest.fail(f"{what} did not end within {RUN_TIMEOUT_S:.0f}s:\n{tail(read(log))}")
        finally:
            kill_group(proc)
        return code, read(log)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the CLI and its Spark JVM at once (a no-op once all are gone)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def read(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")


def tail(log: str, lines: int = 40) -> str:
    return "\n".join(log.splitlines()[-lines:])


# ----------------------------------------------------------------------------- reading Delta


def delta_tables(root: str, db: str) -> dict[str, str]:
    """Name -> path of every Delta table the run writes: ``a``, ``a.changelog``, ``b``, ..."""
    paths: dict[str, str] = {}
    for t in TABLES:
        paths[t] = mirror_path(root, TableId(db, t))
        paths[f"{t}.changelog"] = changelog_path(root, TableId(db, t))
    return paths


def log_actions(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(version, action) of every commit file of a Delta table, oldest first (none: no table)."""
    log = Path(path) / "_delta_log"
    for file in sorted(log.glob("*.json")) if log.is_dir() else ():
        if COMMIT_FILE.fullmatch(file.name):
            for line in file.read_text(encoding="utf-8").splitlines():
                yield int(file.stem), json.loads(line)


def history(path: str) -> list[tuple[int, str, dict[str, Any]]]:
    """(version, operation, user metadata) of every commit, oldest first: read from the Delta log (each
    commit file has one ``commitInfo`` action), which needs no Spark job."""
    return [
        (version, str(info["operation"]), json.loads(info.get("userMetadata") or "{}"))
        for version, action in log_actions(path)
        if (info := action.get("commitInfo")) is not None
    ]


def rows_at(path: str, version: int, spark: SparkSession) -> list[tuple[Any, ...]]:
    """The rows of a Delta table at ``version`` (its schema's columns), sorted: the Parquet files the log
    has live then, read with pyarrow, far cheaper than a Spark job per version. Exact for a table
    without column mapping (checked) and deletion vectors; a table with deletion vectors in its log (a
    mirror's MERGEs write them) is read by ``spark`` at that version instead, always, so two versions'
    rows compare as the same Python values."""
    if any(action.get("add", {}).get("deletionVector") for _, action in log_actions(path)):
        frame = spark.read.format("delta").option("versionAsOf", version).load(path)
        return sorted((tuple(r.values()) for r in frame.toArrow().to_pylist()), key=repr)
    live: set[str] = set()
    columns: list[str] = []
    for v, action in log_actions(path):
        if v > version:
            break
        if "metaData" in action:
            meta = action["metaData"]
            assert meta.get("configuration", {}).get("delta.columnMapping.mode", "none") == "none"
            columns = [f["name"] for f in json.loads(meta["schemaString"])["fields"]]
        if "add" in action:
            live.add(action["add"]["path"])
        if "remove" in action:
            live.discard(action["remove"]["path"])
    rows = [
        tuple(r.get(c) for c in columns)
        for f in sorted(live)
        for r in _instants_alike(pq.read_table(Path(path) / unquote(f))).to_pylist()
    ]
    return sorted(rows, key=repr)


def _instants_alike(table: pa.Table) -> pa.Table:
    """Spark writes a TIMESTAMP as INT96 (pyarrow reads nanoseconds with no zone), pyarrow's files of
    the mirror (gtidsnap.sinks.delta.mirror.file_appends) as microseconds in UTC: the same instants,
    read alike."""
    int96 = pa.timestamp("ns")
    for i, column in enumerate(table.schema):
        if column.type == int96:
            table = table.set_column(i, column.name, table.column(i).cast(pa.timestamp("us", tz="UTC")))
    return table


def check_batches(histories: dict[str, list[tuple[int, str, dict[str, Any]]]]) -> int:
    """Per table and writer, batch numbers only grow (none applied twice, none reused after an undo); every
    undo goes through the data (a MERGE of the mirror, a DELETE of the changelog), not RESTORE.
    Returns the number of undo commits."""
    undos = 0
    for name, commits in histories.items():
        # per writer (the sink's app id; the APPENDs of staged snapshot rows are a second one)
        for app in {meta.get("app_id") for _, _, meta in commits if "gtidsnap_batch" in meta}:
            batches = [
                m["gtidsnap_batch"] for _, _, m in commits if "gtidsnap_batch" in m and m.get("app_id") == app
            ]
            assert batches == sorted(set(batches)), f"{name} ({app}): batches {batches} repeat or go back"
        # a mirror's background updates take checkpointed batches only: their numbers never go back
        taken = [m["gtidsnap_mirror"] for _, _, m in commits if "gtidsnap_mirror" in m]
        assert taken == sorted(taken), f"{name}: background updates {taken} go back"
        for version, operation, meta in commits:
            if "gtidsnap_undo" in meta:
                undos += 1
                wanted = "DELETE" if name.endswith(".changelog") else "MERGE"
                assert operation == wanted, f"{name} v{version}: undo by {operation}, not by {wanted}"
    return undos


def check_output(spark: SparkSession, pair: ReplicaPair, db: str, root: str) -> int:
    """Mirrors equal the source tables; changelogs hold each record once and replay without loss or
    rewind; each mirror row is its key's last changelog record. Returns the number of records."""
    expected = {f"{db}.{t}": source_rows(pair, db, t) for t in TABLES}
    records: list[dict[str, Any]] = []
    unlogged = False  # snapshot rows the changelogs do not hold (sink.changelog_snapshot_rows off)
    for t in TABLES:
        table = TableId(db, t)
        mirror = spark.read.format("delta").load(mirror_path(root, table)).collect()
        twice = sorted(k for k, n in Counter(r["id"] for r in mirror).items() if n > 1)
        assert not twice, f"mirror {table}: keys {twice[:10]} more than once"
        got = {(r["id"],): {"id": r["id"], "v": r["v"], "payload": r["payload"]} for r in mirror}
        want = expected[str(table)]
        missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
        wrong = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
        assert not missing and not extra and not wrong, (
            f"mirror {table}: missing {missing[:5]}, extra {extra[:5]}, "
            f"different {[(got[k], want[k]) for k in wrong[:5]]}"
        )
        changelog = spark.read.format("delta").load(changelog_path(root, table)).collect()
        twice = sorted(s for s, n in Counter(r["_seq"] for r in changelog).items() if n > 1)
        assert not twice, f"changelog of {table}: _seq {twice[:10]} more than once"
        last: dict[int, tuple[int, str]] = {}
        for r in changelog:
            image = {"id": r["id"], "v": r["v"], "payload": r["payload"]}
            records.append(changelog_record(str(table), r, image))
            last[r["id"]] = max(last.get(r["id"], (0, "")), (r["_seq"], r["_op"]))
        # a snapshot row the changelog does not hold (sink.changelog_snapshot_rows is off by default)
        # is newer than every record of its key there; the rest are their key's last record
        stale = [
            (r["id"], r["_seq"], last.get(r["id"]))
            for r in mirror
            if (r["_seq"], r["_op"]) != last.get(r["id"])
            and not (r["_op"] == "r" and r["_seq"] > last.get(r["id"], (0, ""))[0])
        ]
        assert not stale, (
            f"mirror {table}: rows not at their last changelog record (id, _seq, last): {stale[:5]}"
        )
        logged = {r["_seq"] for r in changelog}
        for r in mirror:  # the surviving snapshot rows, which the replay below starts from
            if r["_op"] == "r" and r["_seq"] not in logged:
                unlogged = True
                row = {**r.asDict(), "_snapshot": True}
                records.append(
                    changelog_record(str(table), row, {"id": r["id"], "v": r["v"], "payload": r["payload"]})
                )
    records.sort(key=lambda r: r["seq"])
    # (snapshot rows every change overwrote since are in neither table: callers check the snapshot's way in)
    assert any(not r["snapshot"] for r in records), "no streamed change reached the output"
    # every _seq is there only when the changelogs hold the snapshot rows too
    every_seq = not unlogged and any(r["snapshot"] for r in records)
    check_invariants(records, expected, every_seq=every_seq)
    return len(records)


# ----------------------------------------------------------------------------- random kills

BATCH_LINE = re.compile(r"gtidsnap\.sinks\.delta: batch (\d+): \d+ records of (\d+) tables")
KILLS_WANTED = 3
STARTS_AT_MOST = 20  # a bound on the number of runs: each start is a JVM (tens of seconds)


def committed_batches(log: str) -> list[tuple[int, int]]:
    """(batch, number of tables) of each batch a run finished writing, in order, from its own log (the
    sink logs ``batch N: R records of K tables`` once every table of the batch is written)."""
    return [(int(m[1]), int(m[2])) for m in BATCH_LINE.finditer(log)]


def wait_for_log(proc: subprocess.Popen[bytes], log: Path, done: Callable[[str], bool], what: str) -> bool:
    """Wait until ``done(log text)`` (True) or the process has ended (False); the time bound is a hang
    guard, failing with what was awaited and the log's tail."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        if done(read(log)):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    pytest.fail(f"hang guard: {RUN_TIMEOUT_S:.0f}s passed awaiting {what}:\n{tail(read(log))}")


def test_kill_9_at_random_moments_then_restart(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """Scenario 19 with the Delta sink: the CLI (and its JVM) is killed at random moments after its sink
    opened, mostly inside Delta commits of two tables, while a writer runs; each restart recovers and
    resumes; the final Delta output is complete, has every record once, and never went back.

    A kill lands only if the run is still going, and how long a run lasts depends on the machine and its
    load (a resumed run that has only the writer's backlog to catch up commits one batch and ends), so
    runs start again until KILLS_WANTED kills have landed mid-run, at most STARTS_AT_MOST starts. The
    moment: a random instant of the first seconds after the sink opened, when its first batch commits
    (a cold Delta commit of two tables takes several seconds). A Structured Streaming query reads the
    changelogs after each run, as a consumer would: it never fails and sees each row once."""
    pair, db = mariadb_pair, maria_db
    for t in TABLES:
        create_table(pair, db, t, 300)
    cli = DeltaCli(
        pair, db, tmp_path, {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20", "GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS": "100"}
    )
    readers = ChangelogReaders(spark, delta_tables(cli.root, db), tmp_path / "streams")
    writer = Writer(pair, db, list(TABLES), seed=17, transactions=100_000, pause_s=0.1).start()
    rnd = random.Random(23)
    kills: list[str] = []  # where each kill landed, by the run's own log
    finished: list[int] = []  # runs that ended on their own before their kill
    try:
        while len(kills) < KILLS_WANTED:
            assert cli.runs < STARTS_AT_MOST, (
                f"only {len(kills)} of {KILLS_WANTED} kills landed mid-run in {cli.runs} starts "
                f"(runs {finished} ended first): {kills}"
            )
            proc, log = cli.start()
            try:
                if wait_for_log(proc, log, lambda text: "Delta sink at " in text, "the sink to open"):
                    time.sleep(rnd.uniform(0.0, 8.0))  # a random instant, mostly inside the first commit
                if proc.poll() is None:
                    kill_group(proc)
                    text = read(log)
                    kills.append(
                        f"run {cli.runs}: {text.count(' undone back to version ')} tables undone at open, "
                        f"{len(committed_batches(text))} batches committed before the kill"
                    )
                else:
                    assert proc.returncode == 0, tail(read(log))
                    finished.append(cli.runs)
            finally:
                kill_group(proc)
            readers.catch_up()
    finally:
        writer.stop()
    writer.join()
    code, final_log = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(final_log)
    readers.catch_up()

    histories = {name: history(path) for name, path in delta_tables(cli.root, db).items()}
    undos = check_batches(histories)
    count = check_output(spark, pair, db, cli.root)
    streamed = readers.check()
    print(f"kills: {kills}; ended first: {finished}; undos: {undos}; records: {count}; streamed {streamed}")


# ----------------------------------------------------------------------------- precise crashes

RUNS_PER_STEP = 3  # a crash can land outside its step's intent (see landing()); it is then tried again


@dataclass(frozen=True)
class Landing:
    """Where a crash fell: the checkpoint's batch, the mirrors holding a batch above it (name -> first
    and last version of it: undone at the next start), and the changelogs the checkpoint's batch still
    has to reach (committed at the next start)."""

    crash: str
    checkpoint_batch: int
    above: dict[str, tuple[int, int]]
    pending: frozenset[str]
    logged: frozenset[str]  # the changelogs holding the checkpoint's batch already


# A batch writes each table's changelog rows as a file (delta-after-changelog), then (sink.merge_interval_s
# 0) updates each mirror (delta-after-mirror), then the checkpoint is saved (between-commit-and-checkpoint
# before it) and only then the changelog files are committed (delta-before-changelog-commit before each).
# Each step wants one landing; should its crash fall elsewhere (a batch of one table), it runs again.
STEPS: list[tuple[str, Callable[[Landing], bool]]] = [
    ("delta-after-changelog:1", lambda w: not w.above and not w.pending),  # a file no commit names
    ("delta-after-mirror:3", lambda w: bool(w.above)),  # a mirror above the checkpoint: undone
    ("between-commit-and-checkpoint:2", lambda w: len(w.above) == len(TABLES)),
    # the checkpoint saved, a's changelog committed, b's not: committed at the next start, not undone
    ("delta-before-changelog-commit:2", lambda w: bool(w.pending) and bool(w.logged)),
]


def batch_holders(
    histories: dict[str, list[tuple[int, str, dict[str, Any]]]], batch: int
) -> dict[str, tuple[int, int]]:
    """The tables holding ``batch``: their first and last version of it (a mirror may take two commits
    of a batch: the APPEND of its staged snapshot rows, and its MERGE)."""
    held: dict[str, tuple[int, int]] = {}
    for name, commits in histories.items():
        versions = [version for version, _, meta in commits if meta.get("gtidsnap_batch") == batch]
        if versions:
            held[name] = (min(versions), max(versions))
    return held


def landing(cli: DeltaCli, crash: str, paths: dict[str, str]) -> Landing:
    """What the crash ``crash`` left, from the checkpoint and the Delta logs: no changelog ever holds a
    batch above the checkpoint (it is committed only once its checkpoint is saved); mirrors may."""
    position = cli.checkpoint["sink_position"]
    checkpoint_batch = int(position["delta_batch"])
    histories = {name: history(path) for name, path in paths.items()}
    top = max((m.get("gtidsnap_batch", 0) for c in histories.values() for _, _, m in c), default=0)
    for batch in range(checkpoint_batch + 1, top + 1):
        logged = sorted(name for name in batch_holders(histories, batch) if "." in name)
        assert not logged, f"{crash}: {logged} hold batch {batch}, above the checkpoint's {checkpoint_batch}"
    # the batch the crash cut is the newest (an undone batch's number is never used again)
    above = batch_holders(histories, top) if top > checkpoint_batch else {}
    named = {f"{a['table'][1]}.changelog" for a in position.get("changelog_appends", [])}
    assert all(a["batch"] == checkpoint_batch for a in position.get("changelog_appends", [])), position
    logged = frozenset(n for n in named if n in batch_holders(histories, checkpoint_batch))
    return Landing(crash, checkpoint_batch, above, frozenset(named - logged), logged)


class ChangelogReaders:
    """A Structured Streaming query over each changelog as a consumer runs one (``readStream`` of the
    Delta table, no ``skipChangeCommits``), started again after each gtidsnap run with ``availableNow``
    and its own checkpoint, so each start reads what was committed since: a commit that removed rows
    would fail it. Everything it saw is kept, to be compared with the tables at the end."""

    def __init__(self, spark: SparkSession, paths: dict[str, str], folder: Path) -> None:
        self.spark, self.folder = spark, folder
        self.paths = {name: path for name, path in paths.items() if name.endswith(".changelog")}
        self.seen: dict[str, list[tuple[Any, ...]]] = {name: [] for name in self.paths}
        self.batches: dict[str, list[int]] = {name: [] for name in self.paths}

    def catch_up(self) -> None:
        for name, path in self.paths.items():
            if not (Path(path) / "_delta_log" / f"{0:020d}.json").exists():
                continue  # not created yet

            def collect(frame: Any, batch_id: int, name: str = name) -> None:
                self.batches[name].append(batch_id)
                self.seen[name].extend(tuple(r) for r in frame.select("_seq", "_op", "id").collect())

            query = (
                self.spark.readStream.format("delta")
                .load(path)
                .writeStream.foreachBatch(collect)
                .option("checkpointLocation", str(self.folder / name))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination(RUN_TIMEOUT_S)
            assert query.exception() is None, f"the stream of {name} failed: {query.exception()}"
            assert not query.isActive, f"the stream of {name} did not finish within {RUN_TIMEOUT_S:.0f}s"

    def check(self) -> int:
        """Each changelog's stream saw every row of the table once; returns how many rows it saw."""
        for name, path in self.paths.items():
            batches = self.batches[name]
            assert batches == sorted(set(batches)), f"{name}: stream batches {batches} repeat"
            table = self.spark.read.format("delta").load(path).select("_seq", "_op", "id").collect()
            twice = [r for r, n in Counter(self.seen[name]).items() if n > 1]
            assert not twice, f"the stream of {name} saw rows twice: {twice[:5]}"
            assert sorted(self.seen[name]) == sorted(tuple(r) for r in table), (
                f"the stream of {name} saw {len(self.seen[name])} rows, the table holds {len(table)}"
            )
        return sum(map(len, self.seen.values()))


def crash_cli(
    pair: ReplicaPair, db: str, out: Path, merge_interval_s: str, changelog_snapshot_rows: str | None = None
) -> DeltaCli:
    """Tables a and b of 200 rows, and the CLI that snapshots them with chunks of 20, 100 ms apart (a
    snapshot, redone from scratch while the checkpoint has none, spans batches)."""
    for t in TABLES:
        create_table(pair, db, t, 200)
    return DeltaCli(
        pair,
        db,
        out,
        {
            "GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20",
            "GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS": "100",
            "GTIDSNAP_SINK_MERGE_INTERVAL_S": merge_interval_s,
            # batches as often during the snapshot as after it: the steps count on a snapshot that
            # spans batches (the interval only decides when a batch is sealed, not what it writes)
            "GTIDSNAP_SINK_SNAPSHOT_BATCH_MS": "1000",
            **(
                {"GTIDSNAP_SINK_CHANGELOG_SNAPSHOT_ROWS": changelog_snapshot_rows}
                if changelog_snapshot_rows
                else {}
            ),
        },
    )


def test_kill_9_at_each_point_of_a_delta_commit(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """Runs SIGKILL themselves at each instant of a Delta commit (GTIDSNAP_TEST_CRASH_AT), in turn, while
    a writer runs, and a Structured Streaming query reads the changelogs after each run. No changelog
    ever holds a batch above the checkpoint, and none is ever rewritten (the streams never fail and see
    each row once); a checkpoint saved before its changelog commits gets them at the next start; a
    mirror's batch above the checkpoint is undone in one commit that puts back the rows of the version
    before it (read back by time travel); the last run finishes and the output is exact."""
    pair, db = mariadb_pair, maria_db
    # the mirror is written in every batch (merges not deferred: see the deferred test for those), and
    # the changelogs take snapshot rows too: every batch writes both tables of each table it holds
    cli = crash_cli(pair, db, tmp_path, merge_interval_s="0", changelog_snapshot_rows="true")
    paths = delta_tables(cli.root, db)
    readers = ChangelogReaders(spark, paths, tmp_path / "streams")
    writer = Writer(
        pair, db, list(TABLES), seed=29, transactions=100_000, pause_s=0.2, every_table=True
    ).start()
    landings: list[Landing] = []
    try:
        for crash, intended in STEPS:
            tried: list[str] = []
            for _ in range(RUNS_PER_STEP):
                code, log = cli.run(GTIDSNAP_TEST_CRASH_AT=crash)
                readers.catch_up()
                if code == 0:  # the run finished before its crash point's pass came
                    tried.append(f"run {cli.runs} finished")
                    continue
                assert code == -signal.SIGKILL, f"the run did not die at {crash}: exit {code}\n{tail(log)}"
                where = landing(cli, crash, paths)
                landings.append(where)
                tried.append(f"run {cli.runs}: {where}")
                if intended(where):
                    break
            else:
                pytest.fail(f"{crash} never landed as intended in {RUNS_PER_STEP} runs: {tried}")
    finally:
        writer.stop()
    writer.join()
    code, log = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(log)
    readers.catch_up()

    histories = {name: history(path) for name, path in paths.items()}
    for where in landings:
        for name, (first, last) in where.above.items():
            undo = {v: (op, meta) for v, op, meta in histories[name]}.get(last + 1)
            wanted = {"gtidsnap_undo": {"to_version": first - 1, "checkpoint_batch": where.checkpoint_batch}}
            assert undo is not None and undo[1] == wanted, (
                f"{where.crash}: {name} v{last + 1} is {undo}, not the undo"
            )
            assert rows_at(paths[name], last + 1, spark) == rows_at(paths[name], first - 1, spark), (
                f"{where.crash}: the undo of {name} did not put back the rows of its version {first - 1}"
            )
        for name in where.pending:  # committed by the next start, once
            held = [v for v, _, m in histories[name] if m.get("gtidsnap_batch") == where.checkpoint_batch]
            assert len(held) == 1, f"{where.crash}: {name} holds batch {where.checkpoint_batch} at {held}"
    for name, path in paths.items():
        if name.endswith(".changelog"):
            removing = [v for v, action in log_actions(path) if "remove" in action]
            assert not removing, f"{name}: versions {removing} removed rows from the changelog"
    check_batches(histories)
    check_output(spark, pair, db, cli.root)
    streamed = readers.check()
    print(f"streamed {streamed} changelog rows; crashes: " + "; ".join(map(str, landings)))


# ----------------------------------------------------------------------------- the deferred write path

DEFERRED_STEPS = (
    "delta-mirror-files-written:1",  # fresh snapshot rows written as the mirror's files, not committed
    "delta-after-mirror:2",  # an APPEND of fresh snapshot rows (or a due MERGE)
    "delta-after-changelog:3",  # changes of checkpointed batches still wait for their MERGE ...
    "delta-before-changelog-commit:2",  # a checkpoint saved before its changelog commits: made at start
    "delta-before-catch-up:1",  # ... so the next start MERGEs them from the changelog: killed before
    "delta-after-catch-up:1",  # and after it (the catch-up is a batch: undone, then done again)
    "delta-mirror-rewritten:1",  # a due MERGE's rewritten files written, not committed
    "between-commit-and-checkpoint:2",
    "delta-after-mirror:1",  # by now a due MERGE or the one that drains what waits at the end
)
CAUGHT_UP = re.compile(r"caught up with its changelog from _seq \S+ to \d+")


def test_kill_9_in_the_deferred_write_path(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """The default write path under kill -9: fresh snapshot rows appended to the mirrors, streamed
    changes waiting for a MERGE every 5 s with the changelog as their record, and the catch-up from the
    changelog when a run starts after one that stopped with changes waiting, killed before and after
    it. Each crash point is hit in turn while a writer runs; the final output is exact, no key twice,
    no batch number twice, and the mirrors did take appends and catch-ups."""
    pair, db = mariadb_pair, maria_db
    cli = crash_cli(pair, db, tmp_path, merge_interval_s="5")
    writer = Writer(pair, db, list(TABLES), seed=31, transactions=100_000, pause_s=0.2, every_table=True)
    landed: list[str] = []
    caught_up = 0
    try:
        for step, crash in enumerate(DEFERRED_STEPS):
            if step == 1:
                # the first run snapshots quiet tables: a change streamed before its chunk would make
                # the mirror hold that key, and snapshot rows meeting held keys are MERGEd, never written
                # as files, so the first crash point would wait on timing. The writer runs from the next
                writer.start()
            # runs that stream until their crash point (with --until-caught-up a run that started with
            # little to catch up on could end first); short batches: a restarted run catches up in
            # several, so a crash can come after a checkpointed one whose changes still wait for their
            # MERGE (mirrors update apart)
            code, log = cli.run(
                forever=True,
                GTIDSNAP_TEST_CRASH_AT=crash,
                GTIDSNAP_SINK_BATCH_MS="200",
                GTIDSNAP_SINK_SNAPSHOT_BATCH_MS="200",
            )
            caught_up += len(CAUGHT_UP.findall(log))
            assert code == -signal.SIGKILL, (
                f"run {cli.runs} did not die at {crash} (landed: {landed}): exit {code}\n{tail(log)}"
            )
            landed.append(crash)
    finally:
        writer.stop()
    writer.join()
    code, final_log = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(final_log)
    caught_up += len(CAUGHT_UP.findall(final_log))

    histories = {name: history(path) for name, path in delta_tables(cli.root, db).items()}
    check_batches(histories)
    appends = [  # staged rows in (early APPENDs of new keys, before any, leave gtidsnap_staged_seq at -1)
        v
        for name in TABLES
        for v, op, meta in histories[name]
        if op == "WRITE" and "gtidsnap_mirror" in meta and meta.get("gtidsnap_staged_seq", -1) >= 0
    ]
    assert appends, "no mirror took fresh snapshot rows by APPEND (in the background)"
    assert caught_up >= 1, "no run caught a mirror up from its changelog"
    check_output(spark, pair, db, cli.root)


def test_kill_9_in_the_early_append_of_new_keys(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """A mirror created by the run holds only the keys the run wrote, so the changes of any other key
    go in by APPEND each batch, not at the MERGE. A run that streams the tables (no snapshot: nothing
    else writes the mirrors first, so the crash point comes in the first batch with a change) is killed
    once those rows are data files, before their commit. The files are never committed: the next run
    catches the mirrors up from the changelogs, snapshots the tables into mirrors that already hold
    streamed keys, and the output is exact."""
    pair, db = mariadb_pair, maria_db
    cli = crash_cli(pair, db, tmp_path, merge_interval_s="5")
    cli.settings["GTIDSNAP_CAPTURE_TABLES"] = ",".join(f"{db}.{t}" for t in TABLES)
    paths = delta_tables(cli.root, db)
    writer = Writer(
        pair, db, list(TABLES), seed=41, transactions=100_000, pause_s=0.2, every_table=True
    ).start()
    try:
        crash = "delta-new-keys-written:1"
        code, log = cli.run(False, True, GTIDSNAP_TEST_CRASH_AT=crash, GTIDSNAP_SINK_BATCH_MS="200")
        assert code == -signal.SIGKILL, f"the streaming run did not die at {crash}: exit {code}\n{tail(log)}"
        early = [
            (name, v) for name in TABLES for v, _, meta in history(paths[name]) if "gtidsnap_mirror" in meta
        ]
        assert not early, f"an early APPEND was committed before the kill: {early}"
        code, log = cli.run(GTIDSNAP_SINK_BATCH_MS="200")
        assert code == 0, tail(log)
        assert CAUGHT_UP.search(log), f"the run after the kill caught no mirror up:\n{tail(log)}"
    finally:
        writer.stop()
    writer.join()
    code, log = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(log)
    check_batches({name: history(path) for name, path in paths.items()})
    check_output(spark, pair, db, cli.root)


# ----------------------------------------------------------------------------- the mirror job

# (who, crash point): gtidsnap with sink.mirror = job, or spark/mirror_job.py. gtidsnap's instants are
# counted in batches that hold records or in changelog commits, never in batches: how many batches of no
# record a run makes depends on timing, and a count of them once left the changelogs empty for the job.
MIRROR_JOB_STEPS = (
    # the second batch with records written, not checkpointed: its changelog files in no commit, which
    # the job never sees; the first one's (both tables: each transaction of the writer changes both) is
    ("gtidsnap", "delta-batch-with-records-written:2"),
    ("job", "mirror-job-after-create:1"),  # killed once mirror a exists
    ("job", "mirror-job-after-write:1"),  # killed after the first load (APPEND) of a
    # a batch checkpointed, a's changelog commit made, b's not (tables go in order): made at start
    ("gtidsnap", "delta-before-changelog-commit:2"),
    ("job", "mirror-job-before-write:2"),  # a MERGEd, b created: killed before b's first load
    ("job", "mirror-job-after-write:1"),  # nothing new for a: killed after b's first load
    ("gtidsnap", "delta-batch-with-records-written:1"),
    ("job", ""),  # a whole pass: both MERGEd
)


def test_kill_9_in_the_mirror_job(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """sink.mirror = job: gtidsnap writes the changelogs only and spark/mirror_job.py keeps the mirrors,
    each killed in turn at its own instants while a writer runs. The job never reads past gtidsnap's
    checkpoint (no changelog holds a batch beyond it), resumes from what its
    mirror commits say, and the final mirrors are exact, no key twice."""
    pair, db = mariadb_pair, maria_db
    cli = crash_cli(pair, db, tmp_path, merge_interval_s="5")
    cli.settings["GTIDSNAP_SINK_MIRROR"] = "job"
    paths = delta_tables(cli.root, db)
    writer = Writer(
        pair, db, list(TABLES), seed=37, transactions=100_000, pause_s=0.2, every_table=True
    ).start()
    passes: list[str] = []
    try:
        for who, crash in MIRROR_JOB_STEPS:
            if who == "gtidsnap":
                # chunks 300 ms apart: the snapshot spans several batches even when the run's first
                # batch is slow (a warming JVM), so the N-th commit a step names always comes
                code, log = cli.run(GTIDSNAP_TEST_CRASH_AT=crash, GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS="300")
                assert code == -signal.SIGKILL, f"gtidsnap did not die at {crash}: exit {code}\n{tail(log)}"
                continue
            code, log = cli.mirror_job(GTIDSNAP_TEST_CRASH_AT=crash)
            assert code == (-signal.SIGKILL if crash else 0), (
                f"mirror job ({crash}): exit {code}\n{tail(log)}"
            )
            final = cli.checkpoint["next_seq"]
            for t in (t for t in TABLES if Path(paths[t], "_delta_log").exists()):
                top = spark.read.format("delta").load(paths[t]).agg({"_seq": "max"}).first()
                assert top is not None and (top[0] or 0) < final, (
                    f"mirror {t} holds _seq {top} past the checkpoint's next_seq {final}"
                )
            passes.append(f"{crash or 'whole pass'}: {[t for t in TABLES if Path(paths[t]).exists()]}")
    finally:
        writer.stop()
    writer.join()
    code, log = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(log)
    code, log = cli.mirror_job()
    assert code == 0, tail(log)
    histories = {name: history(path) for name, path in paths.items()}
    check_batches(histories)
    for t in TABLES:
        jobs = [op for _, op, meta in histories[t] if "gtidsnap_mirror_job" in meta]
        assert jobs[:1] == ["WRITE"] and "MERGE" in jobs, f"mirror {t}: job commits {jobs}"
        assert not any("gtidsnap_batch" in meta for _, _, meta in histories[t]), f"gtidsnap wrote mirror {t}"
    check_output(spark, pair, db, cli.root)
    print("mirror job passes: " + "; ".join(passes))
