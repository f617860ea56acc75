"""kill -9 of the real ``gtidsnap run`` writing Delta Lake, on a real MariaDB replica while a writer
runs on the primary: at random moments, and at each instant of a Delta commit (``GTIDSNAP_TEST_CRASH_AT``,
gtidsnap/crashpoints.py).

After the restarts each mirror must equal its source table, each changelog must hold every record once
(no ``_seq`` twice; replayed in ``_seq`` order they pass check_invariants: nothing lost, no rewind), no
table may see a batch number twice, and each batch a crash left beyond its checkpoint must be undone by
one commit that puts back the rows of the version before it. Every CLI start costs a Spark JVM and cold
Delta operations (tens of seconds on 2 cores), so the tests start few. The Delta log is read directly
(history, rows at a version); the final output through the run's ``spark`` session, as consumers do.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest

from gtidsnap.model import TableId
from gtidsnap.sinks.delta import changelog_path, mirror_path
from gtidsnap.spark_session import default_delta_jars_dir
from tests.integration.cdc import (
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
            # as the `spark` fixture: C1 only roughly halves a cold JVM's first Delta operations
            "PYSPARK_SUBMIT_ARGS": "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell",
            **self.settings,
            **more,
        }

    def start(self, **more: str) -> tuple[subprocess.Popen[bytes], Path]:
        self.runs += 1
        log = self.out / f"run-{self.runs}.log"
        args = gtidsnap_cmd(
            "run",
            *(arg for t in TABLES for arg in ("--snapshot", f"{self.db}.{t}")),
            "--until-caught-up",
            "--sink-path",
            self.root,
            "--checkpoint",
            str(self.out / "checkpoint.json"),
        )
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

    def run(self, **more: str) -> tuple[int, str]:
        """Run to the end; the return code and the log."""
        proc, log = self.start(**more)
        try:
            code = proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            pytest.fail(f"run {self.runs} did not end within {RUN_TIMEOUT_S:.0f}s:\n{tail(read(log))}")
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


def rows_at(path: str, version: int) -> list[tuple[Any, ...]]:
    """The rows of a Delta table at ``version`` (its schema's columns), sorted: the Parquet files the log
    has live then, read with pyarrow. Exact for these tables, which have no deletion vectors and no
    column mapping (checked), and far cheaper than a Spark job per version."""
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
            assert not action["add"].get("deletionVector"), f"{path} v{v}: a deletion vector"
            live.add(action["add"]["path"])
        if "remove" in action:
            live.discard(action["remove"]["path"])
    rows = [
        tuple(r.get(c) for c in columns)
        for f in sorted(live)
        for r in pq.read_table(Path(path) / unquote(f)).to_pylist()
    ]
    return sorted(rows, key=repr)


def check_batches(histories: dict[str, list[tuple[int, str, dict[str, Any]]]]) -> int:
    """Per table, batch numbers only grow (none applied twice, none reused after an undo); and every
    undo goes through the data (a MERGE of the mirror, a DELETE of the changelog), not RESTORE.
    Returns the number of undo commits."""
    undos = 0
    for name, commits in histories.items():
        batches = [meta["gtidsnap_batch"] for _, _, meta in commits if "gtidsnap_batch" in meta]
        assert batches == sorted(set(batches)), f"{name}: batches {batches} repeat or go back"
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
    for t in TABLES:
        table = TableId(db, t)
        mirror = spark.read.format("delta").load(mirror_path(root, table)).collect()
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
        stale = [
            (r["id"], r["_seq"], last.get(r["id"]))
            for r in mirror
            if (r["_seq"], r["_op"]) != last.get(r["id"])
        ]
        assert not stale, (
            f"mirror {table}: rows not at their last changelog record (id, _seq, last): {stale[:5]}"
        )
    records.sort(key=lambda r: r["seq"])
    assert any(r["snapshot"] for r in records) and any(not r["snapshot"] for r in records)
    check_invariants(records, expected)
    return len(records)


# ----------------------------------------------------------------------------- random kills


def wait_for_line(proc: subprocess.Popen[bytes], log: Path, text: str, timeout: float = 120) -> bool:
    """Wait until ``text`` is in the log (True) or the process has ended (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in read(log):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.1)
    pytest.fail(f"no {text!r} within {timeout:.0f}s:\n{tail(read(log))}")


def test_kill_9_at_random_moments_then_restart(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """Scenario 19 with the Delta sink: the CLI (and its JVM) is killed at random moments after its sink
    opened, mostly inside Delta commits of two tables, while a writer runs; each restart recovers and
    resumes; the final Delta output is complete, has every record once, and never went back."""
    pair, db = mariadb_pair, maria_db
    for t in TABLES:
        create_table(pair, db, t, 300)
    cli = DeltaCli(
        pair, db, tmp_path, {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20", "GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS": "100"}
    )
    writer = Writer(pair, db, list(TABLES), seed=17, transactions=100_000, pause_s=0.1).start()
    rnd = random.Random(23)
    kills: list[str] = []  # where each kill landed, by the run's own log
    try:
        for _ in range(8):
            if len(kills) >= 3:
                break
            proc, log = cli.start()
            try:
                if wait_for_line(proc, log, "Delta sink at "):
                    time.sleep(rnd.uniform(0.0, 16.0))
                if proc.poll() is None:
                    kill_group(proc)
                    text = read(log)
                    kills.append(
                        f"run {cli.runs}: {text.count(' undone back to version ')} tables undone at open, "
                        f"{text.count('gtidsnap.sinks.delta: batch ')} batches committed before the kill"
                    )
                else:
                    assert proc.returncode == 0, tail(read(log))
            finally:
                kill_group(proc)
    finally:
        writer.stop()
    writer.join()
    assert len(kills) >= 3, f"only {len(kills)} kills landed mid-run: {kills}"
    code, final_log = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(final_log)

    histories = {name: history(path) for name, path in delta_tables(cli.root, db).items()}
    undos = check_batches(histories)
    count = check_output(spark, pair, db, cli.root)
    print(f"kills: {kills}; undo commits: {undos}; records: {count}")


# ----------------------------------------------------------------------------- precise crashes

ALL = frozenset({"a", "a.changelog", "b", "b.changelog"})

# One run per crash, each run first recovering from the crash before (a JVM start costs seconds: this
# takes 5 runs where a fresh start per crash would take 8). Each batch holds a and b (sorted: a's
# mirror, a's changelog, b's ...): the writer touches both all the time. The instants of a commit are
# then: after a's mirror, after a's changelog = before b, after b's mirror, after b's changelog =
# between commit and checkpoint ("before a" leaves nothing to undo; "delta-after-changelog:1" is the
# instant of "delta-before-table:2"). Checkpoint passes also count empty commits: a resumed run makes
# one at once, before its first batch.
STEPS = [
    # (crash point, N, Delta tables holding the crashed batch, the batch before it was checkpointed)
    ("delta-after-mirror", 1, {"a"}, False),  # first batch: a's mirror; its changelog not even created
    ("delta-before-table", 2, {"a", "a.changelog"}, False),  # a written, b not
    ("delta-after-mirror", 4, {"a", "a.changelog", "b"}, True),  # second batch, over the first's rows
    ("between-commit-and-checkpoint", 2, ALL, False),  # the whole batch
]


def test_kill_9_at_each_point_of_a_delta_commit(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    """Runs SIGKILL themselves at each instant of a Delta commit (GTIDSNAP_TEST_CRASH_AT), in turn, while
    a writer runs. Each crash leaves its batch on exactly the tables intended; the next start undoes it
    on exactly those, each in one commit that puts back the rows of the version before it (read back by
    time travel), and never reuses its number; the last run finishes and the output is exact."""
    pair, db = mariadb_pair, maria_db
    for t in TABLES:
        create_table(pair, db, t, 200)
    # chunks 100 ms apart: a snapshot (redone from scratch while the checkpoint has none) outlasts the
    # first batch, so a run has a second one
    cli = DeltaCli(
        pair, db, tmp_path, {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20", "GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS": "100"}
    )
    paths = delta_tables(cli.root, db)
    writer = Writer(pair, db, list(TABLES), seed=29, transactions=100_000, pause_s=0.2).start()
    crashes: list[tuple[str, int, dict[str, int]]] = []  # (crash, checkpoint batch, table -> version)
    try:
        for point, nth, crashed, after_checkpointed in STEPS:
            crash = f"{point}:{nth}"
            code, log = cli.run(GTIDSNAP_TEST_CRASH_AT=crash)
            assert code == -signal.SIGKILL, f"the run did not die at {crash}: exit {code}\n{tail(log)}"
            checkpoint_batch = cli.checkpoint["sink_position"]["delta_batch"]
            histories = {name: history(path) for name, path in paths.items()}
            batch = max(m.get("gtidsnap_batch", 0) for c in histories.values() for _, _, m in c)
            assert batch > checkpoint_batch, f"{crash}: no batch beyond the checkpoint's {checkpoint_batch}"
            holding = {
                name: version
                for name, commits in histories.items()
                for version, _, meta in commits
                if meta.get("gtidsnap_batch") == batch
            }
            assert set(holding) == crashed, f"{crash}: batch {batch} reached {sorted(holding)}"
            if after_checkpointed:
                assert checkpoint_batch == batch - 1, f"{crash}: batch {batch - 1} was not checkpointed"
            crashes.append((crash, checkpoint_batch, holding))
    finally:
        writer.stop()
    writer.join()
    code, log = cli.run(GTIDSNAP_SINK_BATCH_MS="5000")
    assert code == 0, tail(log)

    histories = {name: history(path) for name, path in paths.items()}
    for crash, checkpoint_batch, holding in crashes:
        for name, version in holding.items():
            undo = {v: (op, meta) for v, op, meta in histories[name]}.get(version + 1)
            wanted = {"gtidsnap_undo": {"to_version": version - 1, "checkpoint_batch": checkpoint_batch}}
            assert undo is not None and undo[1] == wanted, (
                f"{crash}: {name} v{version + 1} is {undo}, not the undo"
            )
            before = rows_at(paths[name], version - 1)
            assert rows_at(paths[name], version + 1) == before, (
                f"{crash}: the undo of {name} did not put back the rows of its version {version - 1}"
            )
            if crash == "delta-after-mirror:4":
                assert before, f"{crash}: {name} had rows before the crashed batch (its undo restores them)"
    check_batches(histories)
    check_output(spark, pair, db, cli.root)
