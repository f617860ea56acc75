"""Acceptance scenario 28: a run watched from outside. The real CLI serves /metrics, /healthz and
/readyz while a writer runs on the primary; the values move as rows flow (snapshot rows reach the
table's count, lag returns to 0 once caught up), the text parses with prometheus_client's parsers,
/readyz fails while the replica's server process is stopped (SIGSTOP) and /healthz while the engine's
loop is held (a test hook); every signal gets its notifications on a real Kafka topic, with its id,
exactly once, through kill -9."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from gtidsnap.config.settings import MetricsSection, SignalSettings
from gtidsnap.core.commands import Shutdown
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.run_stats import RunStats
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.observe.monitoring import Monitoring
from gtidsnap.run import build_engine
from gtidsnap.signals.notifier import tail
from gtidsnap.source.replica import Replica
from tests.integration.cdc import REPO, Writer, cli_env, create_table, gtidsnap_cmd, make_config, wait_for
from tests.integration.fixtures.db_servers import STATE_DIR, ReplicaPair
from tests.integration.fixtures.kafka_server import KafkaBroker

pytestmark = pytest.mark.integration

WAIT_S = 60.0
T = TypeVar("T")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(what: str, check: Callable[[], T | None], timeout_s: float = WAIT_S, guard: Any = None) -> T:
    return wait_for(what, check, timeout_s, guard)


def get(address: str, path: str, accept: str = "") -> tuple[int, str]:
    """Status and body of GET ``path``; (0, why) when nothing answers."""
    request = urllib.request.Request(f"http://{address}{path}", headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def scrape(address: str) -> Samples:
    status, text = get(address, "/metrics")
    if status != 200:
        return {}
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of a family's samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def server_pid(pair: ReplicaPair) -> int:
    return int((STATE_DIR / f"{pair.flavor}-replica" / "mysqld.pid").read_text().strip())


@contextmanager
def stopped_server(pid: int) -> Iterator[None]:
    """The replica's server process stopped (SIGSTOP): it accepts nothing and answers nothing."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_scrape_during_a_run_under_a_writer(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    db = fresh_db
    create_table(pair, db, "snap", 3000)
    create_table(pair, db, "busy", 200)
    (tmp_path / "c.toml").write_text(
        f'[capture]\ntables = ["{db}.busy"]\n[snapshot]\nchunk_size = 100\nchunk_delay_ms = 100\n'
        f'[metrics]\nprobe_interval_s = 0.5\n[sink]\npath = "{tmp_path}/changes.jsonl"\n'
    )
    address = f"127.0.0.1:{free_port()}"
    args = ["run", "-c", str(tmp_path / "c.toml"), "--snapshot", f"{db}.snap", "--metrics-listen", address]
    args += ["--checkpoint", str(tmp_path / "checkpoint.json"), "-v"]
    writer = Writer(pair, db, ["busy"], seed=7, transactions=100_000, pause_s=0.01).start()
    with (tmp_path / "run.log").open("wb") as log_file:
        proc = subprocess.Popen(
            gtidsnap_cmd(*args), env=cli_env(pair), cwd=REPO, stdout=log_file, stderr=log_file
        )

    def alive() -> None:
        assert proc.poll() is None, f"gtidsnap run exited with {proc.returncode}: see {tmp_path}/run.log"

    snap = f"{db}.snap"
    try:
        first = wait("a first scrape", lambda: scrape(address), guard=alive)
        assert value(
            first, "gtidsnap_replica_info", replica=f"127.0.0.1:{pair.replica_port}", flavor=pair.flavor
        )
        reading = wait(
            "the snapshot seen part way",
            lambda: (
                (s := scrape(address))
                and 0 < (value(s, "gtidsnap_snapshot_rows", table=snap) or 0) < 3000
                and s
            ),
            guard=alive,
        )
        assert value(reading, "gtidsnap_snapshot_tables", state="reading") == 1
        done = wait(
            "the snapshot's rows to reach the table's count",
            lambda: (s := scrape(address)) and value(s, "gtidsnap_snapshot_tables", state="done") == 1 and s,
            guard=alive,
        )
        assert value(done, "gtidsnap_snapshot_rows", table=snap) == 3000
        assert (value(done, "gtidsnap_snapshot_rows_estimated", table=snap) or 0) >= 3000, "never below"
        assert value(done, "gtidsnap_records_total", table=snap, op="r") == 3000
        busy_before = total(done, "gtidsnap_records_total", table=f"{db}.busy")
        behind = wait(
            "the writer's changes counted, and how far behind",
            lambda: (
                (s := scrape(address))
                and total(s, "gtidsnap_records_total", table=f"{db}.busy") > busy_before
                and value(s, "gtidsnap_source_transactions_behind") is not None
                and s
            ),
            guard=alive,
        )
        assert value(behind, "gtidsnap_source_lag_seconds") is not None
        assert get(address, "/healthz") == (200, "ok\n") and get(address, "/readyz") == (200, "ok\n")
        status, text = get(address, "/metrics", "application/openmetrics-text; version=1.0.0")
        assert status == 200 and any(f.name == "gtidsnap_records" for f in openmetrics_families(text))

        writer.stop()
        writer.join()
        caught_up = wait(
            "lag 0 and nothing behind once the writer stopped",
            lambda: (
                (s := scrape(address))
                and value(s, "gtidsnap_source_transactions_behind") == 0
                and value(s, "gtidsnap_source_lag_seconds") == 0
                and s
            ),
            timeout_s=30,
            guard=alive,
        )
        assert value(caught_up, "gtidsnap_checkpoint_age_seconds") is not None
        assert (value(caught_up, "gtidsnap_batch_commit_duration_seconds_count") or 0) > 0

        with stopped_server(server_pid(pair)):
            status, body = wait(
                "/readyz to fail with the replica stopped",
                lambda: (r := get(address, "/readyz"))[0] == 503 and r,
                timeout_s=30,
                guard=alive,
            )
            assert "the replica does not answer" in body
        wait("/readyz to pass again", lambda: get(address, "/readyz")[0] == 200, timeout_s=60, guard=alive)
        after = scrape(address)
        assert (value(after, "gtidsnap_errors_total", kind="replica_probe") or 0) >= 1
    finally:
        writer.stop()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(WAIT_S)
    assert code == 130, (tmp_path / "run.log").read_text()[-3000:]
    assert get(address, "/metrics")[0] == 0, "the endpoint ends with the run"


def test_healthz_fails_while_the_loop_is_held(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path
) -> None:
    pair = mariadb_pair
    create_table(pair, maria_db, "t", 10)
    address = f"127.0.0.1:{free_port()}"
    config = replace(
        make_config(pair, tmp_path, [TableId(maria_db, "t")]),
        metrics=MetricsSection(listen=address, stall_after_s=1.5, probe_interval_s=0.5),
    )
    hold, held = threading.Event(), threading.Event()

    def progress(context: SnapshotContext, stats: RunStats) -> None:  # the hook: runs on the loop's thread
        if hold.is_set():
            held.set()
            while hold.is_set():
                time.sleep(0.05)

    with Replica(config.source) as replica:
        engine = build_engine(config, replica, on_progress=progress)
        monitoring = Monitoring(config, replica, engine)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                engine.run()
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        try:
            wait(
                "/healthz and /readyz",
                lambda: get(address, "/healthz")[0] == get(address, "/readyz")[0] == 200,
            )
            hold.set()
            wait("the loop held", held.is_set)
            _, body = wait("/healthz to fail", lambda: (r := get(address, "/healthz"))[0] == 503 and r)
            assert "the engine's loop has not turned for" in body and "metrics.stall_after_s = 1.5 s" in body
            assert get(address, "/readyz")[0] == 503
            hold.clear()
            wait("/healthz to pass again", lambda: get(address, "/healthz")[0] == 200)
        finally:
            hold.clear()
            engine.commands.put(Shutdown())
            thread.join(WAIT_S)
            monitoring.stop()
    assert not errors, errors


def test_every_signal_gets_its_notifications_once_across_kill_9(
    mariadb_pair: ReplicaPair, maria_db: str, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "t1", 3000)
    create_table(pair, db, "t2", 300)
    topic, notes = f"signals-{uuid.uuid4().hex[:8]}", f"notes-{uuid.uuid4().hex[:8]}"
    connector = f"c-{uuid.uuid4().hex[:6]}"
    env = dict(
        cli_env(pair),
        GTIDSNAP_SIGNALS_BOOTSTRAP=kafka_broker.bootstrap,
        GTIDSNAP_SIGNALS_TOPIC=topic,
        GTIDSNAP_SIGNALS_CONNECTOR=connector,
        GTIDSNAP_SIGNALS_NOTIFICATIONS_TOPIC=notes,
        GTIDSNAP_SNAPSHOT_CHUNK_SIZE="50",
        GTIDSNAP_SNAPSHOT_CHUNK_DELAY_MS="100",  # t1 takes ~6 s: signals and kills land mid-snapshot
    )
    common = ["--checkpoint", str(tmp_path / "checkpoint.json")]
    runs: list[subprocess.Popen[bytes]] = []

    def cli(*args: str, expect: int = 0) -> str:
        done = subprocess.run(
            gtidsnap_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == expect, done.stderr[-3000:]
        return done.stdout

    def start_run(crash_at: str = "") -> subprocess.Popen[bytes]:
        args = ["run", *common, "--sink-path", str(tmp_path / "changes.jsonl"), "-v"]
        run_env = dict(env, GTIDSNAP_TEST_CRASH_AT=crash_at) if crash_at else env
        with (tmp_path / f"run{len(runs) + 1}.log").open("wb") as log_file:
            runs.append(
                subprocess.Popen(gtidsnap_cmd(*args), env=run_env, cwd=REPO, stdout=log_file, stderr=log_file)
            )
        return runs[-1]

    def on_topic() -> list[dict[str, Any]]:
        settings = SignalSettings(bootstrap=kafka_broker.bootstrap, topic=notes, connector=connector)
        return [n for n in tail(settings, 100_000) if n["additionalData"]["connector_name"] == connector]

    def of(signal_id: str) -> list[str]:
        return [n["type"] for n in on_topic() if n["additionalData"]["signal_id"] == signal_id]

    def table_progress(table: str) -> int:
        cp = CheckpointStore(tmp_path / "checkpoint.json").load()
        found = [t for t in cp.context.tables if str(t.table) == table] if cp is not None else []
        return found[-1].rows if found and not found[-1].done else 0

    try:
        cli("snapshot", "start", f"{db}.t1", "--id", "s1")
        cli("snapshot", "start", f"{db}.t2", "--id", "s2")
        # kill -9 right after the broker took the first notifications, before a checkpoint drops them
        first = start_run("notifications-delivered:1")
        assert first.wait(WAIT_S) == -signal.SIGKILL, (tmp_path / "run1.log").read_text()[-3000:]
        assert of("s1")[:1] == ["STARTED"]

        second = start_run()
        paused = [
            json.loads(line) for line in cli("snapshot", "pause", "--id", "s3", "--wait", "60").splitlines()
        ]
        assert [n["type"] for n in paused] == ["PAUSED"] and paused[0]["additionalData"]["signal_id"] == "s3"
        resumed = cli("snapshot", "resume", "--id", "s4", "--wait", "60")
        assert json.loads(resumed)["type"] == "RESUMED"
        refused = cli("snapshot", "start", f"{db}.nope", "--id", "s5", "--wait", "60", expect=2)
        assert json.loads(refused)["type"] == "REFUSED"
        wait("t1 part way", lambda: table_progress(f"{db}.t1") > 0, guard=lambda: second.poll() is None)
        second.send_signal(signal.SIGKILL)
        second.wait(WAIT_S)

        third = start_run()
        wait("s1 and s2 completed", lambda: "COMPLETED" in of("s1") and "COMPLETED" in of("s2"),
                 guard=lambda: third.poll() is None)  # fmt: skip
        again = cli("snapshot", "pause", "--id", "s3", "--wait", "60", expect=2)
        assert json.loads(again)["type"] == "IGNORED", "a repeated id is answered, and not acted on"
    finally:
        for proc in runs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(WAIT_S)
    got = on_topic()
    ids = Counter(n["id"] for n in got)
    assert all(count == 1 for count in ids.values()), f"sent twice: {[i for i, c in ids.items() if c > 1]}"
    numbers = sorted(int(n["id"].rpartition("-")[2]) for n in got)
    assert numbers == list(range(1, len(numbers) + 1)), "none lost: numbered without a gap"
    for signal_id, table in (("s1", f"{db}.t1"), ("s2", f"{db}.t2")):
        mine = [n for n in got if n["additionalData"]["signal_id"] == signal_id]
        kinds = [n["type"] for n in mine]
        assert kinds[0] == "STARTED" and kinds[-1] == "COMPLETED" and kinds.count("STARTED") == 1, kinds
        ends = [n["additionalData"] for n in mine if n["type"] == "TABLE_SCAN_COMPLETED"]
        assert [(e["data_collection"], e["status"]) for e in ends] == [(table, "SUCCEEDED")]
        assert all(n["aggregateType"] == "Incremental Snapshot" for n in mine)
    assert "IN_PROGRESS" in of("s1"), "t1's progress was reported"
    assert of("s3") == ["PAUSED", "IGNORED"] and of("s4") == ["RESUMED"] and of("s5") == ["REFUSED"]
