"""Acceptance scenarios 15-18 and 21: snapshots steered through a real Kafka signal topic, on a real
replica. The engine runs in a thread (or the real CLI in a subprocess) with the signal consumer; each
test sends messages, and waits, bounded in time, for what the checkpoint records of them."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import Producer

from gtidsnap.config.loading import SignalSettings, SnapshotSettings
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.commands import Shutdown
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import TableProgress
from gtidsnap.core.signal_ledger import SignalOutcome
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.engine.loop import Engine
from gtidsnap.run import SignalHook, build_engine
from gtidsnap.signals import consumer as signals_module
from gtidsnap.signals.kafka import send_signal
from gtidsnap.signals.protocol import build_message
from gtidsnap.source.replica import Replica
from tests.integration.cdc import (
    REPO,
    check_invariants,
    cli_env,
    create_table,
    execute,
    gtidsnap_cmd,
    make_config,
    source_rows,
    wait_for,
)
from tests.integration.fixtures.db_servers import ReplicaPair
from tests.integration.fixtures.kafka_server import KafkaBroker, run_kafka_script

pytestmark = pytest.mark.integration

CONNECTOR = "gtidsnap-it"
WAIT_S = 30.0
T = TypeVar("T")


# ----------------------------------------------------------------------------- helpers


@pytest.fixture
def db(mariadb_pair: ReplicaPair) -> Iterator[str]:
    """A fresh database on the MariaDB pair only (the signal path does not depend on the flavour)."""
    name = f"s_{uuid.uuid4().hex[:12]}"
    execute(mariadb_pair, "mysql", f"CREATE DATABASE `{name}`")
    try:
        yield name
    finally:
        execute(mariadb_pair, "mysql", f"DROP DATABASE IF EXISTS `{name}`")


def load(out: Path) -> Checkpoint | None:
    return CheckpointStore(out / "checkpoint.json").load()


def history(out: Path) -> list[SignalOutcome]:
    cp = load(out)
    return list(cp.signals.history) if cp is not None else []


def outcomes(out: Path, signal_id: str) -> list[str]:
    return [h.outcome for h in history(out) if h.id == signal_id]


def progress(out: Path, table: str) -> TableProgress | None:
    """The latest snapshot of ``table`` recorded in the checkpoint (a table may be snapshotted twice)."""
    cp = load(out)
    found = [t for t in cp.context.tables if str(t.table) == table] if cp is not None else []
    return found[-1] if found else None


def records(out: Path) -> list[dict[str, Any]]:
    """Complete lines of the output, read while gtidsnap may be writing it."""
    path = out / "changes.jsonl"
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def snapshot_keys(out: Path, table: str) -> list[Any]:
    return [r["key"][0] for r in records(out) if r["snapshot"] and r["table"] == table]


def settings(bootstrap: str, topic: str) -> SignalSettings:
    return SignalSettings(bootstrap=bootstrap, topic=topic, connector=CONNECTOR)


def send(kafka: KafkaBroker, topic: str, kind: str, tables: Sequence[str] = (), **kw: Any) -> str:
    """Send a signal the way ``gtidsnap snapshot ...`` does; returns its id."""
    signal_id = kw.pop("signal_id", None) or f"{kind}-{uuid.uuid4().hex[:8]}"
    send_signal(settings(kafka.bootstrap, topic), build_message(kind, tables, kw.get("filters"), signal_id))
    return signal_id


def produce_raw(kafka: KafkaBroker, topic: str, messages: Sequence[tuple[bytes | None, Any]]) -> None:
    """Messages as anyone may write them: ``value`` bytes as they are, anything else as JSON."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    for key, value in messages:
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        producer.produce(topic, key=key, value=raw)
    assert producer.flush(WAIT_S) == 0, "not every message was delivered"


class Running:
    """An engine with its signal consumer, in a thread; :meth:`wait` fails at once if the engine died."""

    def __init__(self, engine: Engine, hook: SignalHook) -> None:
        self.engine, self.hook = engine, hook
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="engine", daemon=True)

    def _run(self) -> None:
        try:
            self.engine.run()
        except BaseException as exc:  # reported by guard()/stop()
            self.error = exc

    def guard(self) -> None:
        if not self.thread.is_alive():
            raise AssertionError(f"the engine stopped: {self.error!r}") from self.error

    def wait(
        self, what: str | Callable[[], str], check: Callable[[], T | None], timeout_s: float = WAIT_S
    ) -> T:
        return wait_for(what, check, timeout_s, self.guard)

    def done(self, out: Path, signal_id: str, timeout_s: float = WAIT_S) -> str:
        """The outcome of signal ``signal_id`` once the checkpoint records it."""

        def what() -> str:
            c = self.hook.consumer
            state = (
                "no consumer"
                if c is None
                else (
                    f"consumer alive={c.alive}, {c.received} received, {c.rebuilds} rebuilds, "
                    f"last poll {time.monotonic() - c.polled_at:.1f}s ago"
                )
            )
            return f"signal {signal_id} in the checkpoint ({state})"

        return self.wait(what, lambda: outcomes(out, signal_id), timeout_s)[0]


@contextmanager
def running(
    pair: ReplicaPair,
    out: Path,
    kafka: KafkaBroker,
    topic: str,
    tables: Sequence[TableId] = (),
    chunk_size: int = 100,
    chunk_delay_s: float = 0.0,
    heartbeat_s: float = 0.1,  # the engine looks at its commands at least this often
) -> Iterator[Running]:
    """The engine as `gtidsnap run` wires it (runner.build_engine + the signal hook), until Shutdown."""
    config = replace(
        make_config(pair, out, tables, chunk_size, heartbeat_s),
        snapshot=SnapshotSettings(chunk_size=chunk_size, chunk_delay_s=chunk_delay_s),
        signals=settings(kafka.bootstrap, topic),
    )
    hook = SignalHook(config.signals)
    with Replica(config.source) as replica:
        run = Running(build_engine(config, replica, on_started=hook), hook)
        run.thread.start()
        try:
            run.wait(
                "the signal consumer to be assigned",
                lambda: hook.consumer and hook.consumer.assigned.is_set(),
            )
            yield run
        finally:
            run.engine.commands.put(Shutdown())
            run.thread.join(WAIT_S)
            hook.stop()
    assert not run.thread.is_alive(), "the engine did not stop on Shutdown"
    assert run.error is None, f"the engine failed: {run.error!r}"
    assert hook.consumer is None


def create_orders(pair: ReplicaPair, db: str, rows: int = 40) -> None:
    execute(
        pair,
        db,
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, v INT NOT NULL, region VARCHAR(4) NOT NULL)",
        many=[("INSERT INTO orders VALUES (%s, 0, %s)", [(i, "EU" if i % 2 else "US") for i in range(rows)])],
    )


# ----------------------------------------------------------------------------- scenario 15


def test_execute_snapshot_one_table_a_regex_and_a_filter(
    mariadb_pair: ReplicaPair, db: str, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
) -> None:
    pair = mariadb_pair
    create_orders(pair, db)
    create_table(pair, db, "audit_1", 10)
    create_table(pair, db, "audit_2", 15)
    create_table(pair, db, "other", 5)
    orders, a1, a2 = f"{db}.orders", f"{db}.audit_1", f"{db}.audit_2"
    with running(pair, tmp_path, kafka_broker, kafka_topic) as run:
        one = send(kafka_broker, kafka_topic, "start", [orders])
        assert run.done(tmp_path, one) == "done"
        run.wait("orders snapshotted", lambda: (p := progress(tmp_path, orders)) and p.done)
        assert sorted(snapshot_keys(tmp_path, orders)) == list(range(40))

        regex = send(kafka_broker, kafka_topic, "start", [f"{db}\\.audit_.*"])
        assert run.done(tmp_path, regex) == "done"
        run.wait(
            "audit tables snapshotted", lambda: all((p := progress(tmp_path, t)) and p.done for t in (a1, a2))
        )
        assert len(snapshot_keys(tmp_path, a1)) == 10 and len(snapshot_keys(tmp_path, a2)) == 15
        assert progress(tmp_path, f"{db}.other") is None and not snapshot_keys(tmp_path, f"{db}.other")

        eu = send(kafka_broker, kafka_topic, "start", [orders], filters={orders: "region = 'EU'"})
        assert run.done(tmp_path, eu) == "done"
        run.wait("orders snapshotted again", lambda: (p := progress(tmp_path, orders)) and p.done)
        again = snapshot_keys(tmp_path, orders)[40:]
        assert again == list(range(1, 40, 2)), "only the EU rows, in key order"
        assert progress(tmp_path, orders).condition == "`region` = 'EU'"  # type: ignore[union-attr]

        # a filter on a table matched by the regex of the same request
        both = send(kafka_broker, kafka_topic, "start", [f"{db}\\.audit_.*"], filters={a2: "id < 10"})
        assert run.done(tmp_path, both) == "done"
        run.wait("audit tables again", lambda: all((p := progress(tmp_path, t)) and p.done for t in (a1, a2)))
        assert len(snapshot_keys(tmp_path, a1)) == 20 and snapshot_keys(tmp_path, a2)[15:] == [0, 2, 4, 6, 8]

        # the tables are captured now: the stream carries their changes too
        execute(
            pair, db, "UPDATE orders SET v = 1 WHERE id = 3", "INSERT INTO audit_1 VALUES (999, 1, 'new')"
        )
        run.wait(
            "the stream's changes",
            lambda: (
                {(r["table"], r["key"][0]) for r in records(tmp_path) if not r["snapshot"]}
                >= {(orders, 3), (a1, 999)}
            ),
        )
    expected = {t: source_rows(pair, db, t.split(".")[1]) for t in (orders, a1, a2)}
    check_invariants(records(tmp_path), expected)


def test_signals_on_both_flavours(
    pair: ReplicaPair, fresh_db: str, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
) -> None:
    create_orders(pair, fresh_db, rows=20)
    orders = f"{fresh_db}.orders"
    with running(pair, tmp_path, kafka_broker, kafka_topic, chunk_size=3) as run:
        signal_id = send(kafka_broker, kafka_topic, "start", [orders], filters={orders: "region = 'US'"})
        assert run.done(tmp_path, signal_id) == "done"
        run.wait("orders snapshotted", lambda: (p := progress(tmp_path, orders)) and p.done)
    assert snapshot_keys(tmp_path, orders) == list(range(0, 20, 2))


# ----------------------------------------------------------------------------- scenario 16


def test_pause_resume_and_stop_one_table_or_all(
    mariadb_pair: ReplicaPair, db: str, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
) -> None:
    pair = mariadb_pair
    for name in ("a", "b", "c"):
        create_table(pair, db, name, 30)
    create_table(pair, db, "big", 300)
    a, b, c, big = (f"{db}.{n}" for n in ("a", "b", "c", "big"))
    k = kafka_broker

    def snapshot_rows() -> int:
        return sum(1 for r in records(tmp_path) if r["snapshot"])

    def stays(count: Callable[[], int], seconds: float = 0.7) -> int:
        time.sleep(0.3)  # output committed with the signal, or just after it
        before = count()
        time.sleep(seconds)
        assert count() == before, "snapshot rows were read while they should not have been"
        return before

    # on an idle source a chunk is taken about every heartbeat: 300 rows / 10 take a few seconds
    with running(pair, tmp_path, k, kafka_topic, chunk_size=10, chunk_delay_s=0.05, heartbeat_s=0.05) as run:
        assert run.done(tmp_path, send(k, kafka_topic, "pause")) == "done"
        assert run.done(tmp_path, send(k, kafka_topic, "start", [a, b, c])) == "done"
        cp = load(tmp_path)
        assert cp is not None and cp.context.paused
        assert [(str(t.table), t.started) for t in cp.context.tables] == [(a, False), (b, False), (c, False)]
        assert stays(snapshot_rows) == 0, "paused: nothing is read"

        assert run.done(tmp_path, send(k, kafka_topic, "stop", [a])) == "done"
        assert [str(t.table) for t in load(tmp_path).context.tables] == [b, c]  # type: ignore[union-attr]
        assert run.done(tmp_path, send(k, kafka_topic, "stop")) == "done"
        assert load(tmp_path).context.tables == ()  # type: ignore[union-attr]
        assert run.done(tmp_path, send(k, kafka_topic, "resume")) == "done"
        assert not load(tmp_path).context.paused  # type: ignore[union-attr]
        assert stays(snapshot_rows, 0.4) == 0, "every snapshot was stopped"

        assert run.done(tmp_path, send(k, kafka_topic, "start", [b])) == "done"
        run.wait("b snapshotted", lambda: (p := progress(tmp_path, b)) and p.done)
        assert len(snapshot_keys(tmp_path, b)) == 30 and snapshot_rows() == 30

        # pause and resume in the middle of a table (30 chunks of 10 rows)
        send(k, kafka_topic, "start", [big])
        run.wait("big started", lambda: len(snapshot_keys(tmp_path, big)) >= 30)
        assert run.done(tmp_path, send(k, kafka_topic, "pause")) == "done"
        paused_at = stays(lambda: len(snapshot_keys(tmp_path, big)))
        assert paused_at < 300
        assert run.done(tmp_path, send(k, kafka_topic, "resume")) == "done"
        run.wait("big snapshotted", lambda: (p := progress(tmp_path, big)) and p.done)
        assert snapshot_keys(tmp_path, big) == list(range(0, 600, 2)), "resumed where it paused"

        # stop one running table
        send(k, kafka_topic, "start", [big])
        run.wait("big started again", lambda: len(snapshot_keys(tmp_path, big)) >= 330)
        assert run.done(tmp_path, send(k, kafka_topic, "stop", [big])) == "done"
        stopped_at = stays(lambda: len(snapshot_keys(tmp_path, big)))
        assert stopped_at < 600, "the second snapshot of big was stopped before its end"
        assert progress(tmp_path, big).done  # type: ignore[union-attr]  # the first one stays listed
        assert not load(tmp_path).context.pending()  # type: ignore[union-attr]
    assert len(snapshot_keys(tmp_path, a)) == 0 and len(snapshot_keys(tmp_path, c)) == 0


# ----------------------------------------------------------------------------- scenario 17


def test_signal_sent_while_stopped_is_acted_on_once_across_kill_9(
    mariadb_pair: ReplicaPair, db: str, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
) -> None:
    """The real CLI: `gtidsnap snapshot start` before gtidsnap ever ran, `gtidsnap run` killed with
    SIGKILL after acting on it, restarted twice: each signal acted on exactly once."""
    pair = mariadb_pair
    create_table(pair, db, "t1", 50)
    create_table(pair, db, "t2", 30)
    t1, t2 = f"{db}.t1", f"{db}.t2"
    env = dict(cli_env(pair), GTIDSNAP_SIGNALS_CONNECTOR=CONNECTOR)
    kafka = ["--bootstrap", kafka_broker.bootstrap, "--topic", kafka_topic]
    common = ["--checkpoint", str(tmp_path / "checkpoint.json")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            gtidsnap_cmd(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    def start_run(n: int) -> subprocess.Popen[bytes]:
        args = ["run", "--signals-bootstrap", kafka_broker.bootstrap, "--signals-topic", kafka_topic, *common]
        args += ["--sink-path", str(tmp_path / "changes.jsonl"), "-v"]
        with (tmp_path / f"run{n}.log").open("wb") as log_file:
            return subprocess.Popen(gtidsnap_cmd(*args), env=env, cwd=REPO, stdout=log_file, stderr=log_file)

    def wait(proc: subprocess.Popen[bytes], what: str, check: Callable[[], T | None]) -> T:
        def guard() -> None:
            assert proc.poll() is None, f"gtidsnap run exited with {proc.returncode}: see {tmp_path}/run*.log"

        return wait_for(what, check, guard=guard)

    def marker(proc: subprocess.Popen[bytes]) -> None:
        """Everything sent before this is consumed once this is in the checkpoint (one partition)."""
        signal_id = f"marker-{uuid.uuid4().hex[:8]}"
        cli("snapshot", "resume", "--id", signal_id, "--connector", CONNECTOR, *kafka)
        wait(proc, f"marker {signal_id}", lambda: outcomes(tmp_path, signal_id))

    cli("snapshot", "start", t1, "--id", "s1", "--connector", CONNECTOR, *kafka)  # before the first start
    first = start_run(1)
    try:
        wait(first, "s1 acted on", lambda: outcomes(tmp_path, "s1"))
        wait(first, "t1 snapshotted", lambda: (p := progress(tmp_path, t1)) and p.done)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(WAIT_S)

    cli("snapshot", "start", t2, "--id", "s2", "--connector", CONNECTOR, *kafka)  # while stopped
    second = start_run(2)
    try:
        wait(second, "s2 acted on", lambda: outcomes(tmp_path, "s2"))
        wait(second, "t2 snapshotted", lambda: (p := progress(tmp_path, t2)) and p.done)
        marker(second)
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait(WAIT_S)

    third = start_run(3)
    try:
        marker(third)
        time.sleep(0.5)  # a re-read s1/s2 would have been applied before the marker
    finally:
        third.send_signal(signal.SIGINT)  # a clean stop: the consumer thread is stopped
        assert third.wait(WAIT_S) == 130
    assert outcomes(tmp_path, "s1") == ["done"] and outcomes(tmp_path, "s2") == ["done"]
    assert sorted(snapshot_keys(tmp_path, t1)) == list(range(0, 100, 2)), "t1 read exactly once"
    assert sorted(snapshot_keys(tmp_path, t2)) == list(range(0, 60, 2)), "t2 read exactly once"
    status = cli("status", *common).stdout
    assert "signals" in status and "s1" in status and "s2" in status and "execute-snapshot" in status
    assert "resume-snapshot" in status and "done" in status


# ----------------------------------------------------------------------------- scenario 18

EXEC = "execute-snapshot"


def test_bad_messages_are_logged_skipped_and_the_next_signal_works(
    mariadb_pair: ReplicaPair,
    db: str,
    kafka_broker: KafkaBroker,
    kafka_topic: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    pair = mariadb_pair
    create_orders(pair, db, rows=20)
    execute(pair, db, "CREATE TABLE nokey (a INT, b INT)")
    orders = f"{db}.orders"
    key = CONNECTOR.encode()

    def start(data: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"bad-{uuid.uuid4().hex[:6]}", "type": EXEC, "data": data}

    def filtered(table: str, condition: str, collections: Sequence[str] = (orders,)) -> dict[str, Any]:
        conditions = [{"data-collection": table, "filter": condition}]
        return start({"data-collections": list(collections), "additional-conditions": conditions})

    bad: list[tuple[bytes | None, Any, str]] = [
        (key, b"{this is not json", "not JSON"),
        (key, b"", "empty"),
        (key, [orders], "not a JSON object"),
        (key, {"id": "u1", "type": "explode-snapshot"}, 'unknown "type"'),
        (key, {"id": "u2", "data": {"data-collections": [orders]}}, 'no "type"'),
        (key, {"id": "u3", "type": EXEC}, 'has no "data"'),
        (key, start({}), "data-collections must be a non-empty list"),
        (key, start({"data-collections": orders}), "data-collections must be a non-empty list"),
        (key, start({"data-collections": [orders, 7]}), "data-collections[1]"),
        (key, start({"data-collections": [f"{db}.nosuch"]}), "does not exist on the replica"),
        (key, start({"data-collections": [f"{db}\\.zzz_.*"]}), "matches no table on the replica"),
        (key, start({"data-collections": [f"{db}.(orders"]}), "not a valid regular expression"),
        (key, start({"data-collections": [f"{db}.nokey"]}), "has no primary key"),
        (key, start({"data-collections": [orders], "type": "BLOCKING"}), "only takes INCREMENTAL"),
        (key, filtered(f"{db}.other", "v > 1"), "not in the request"),
        (key, filtered(orders, "1=1) OR (1=1"), "not one valid MySQL condition"),
        (key, filtered(orders, "v > 1; DROP TABLE orders"), "';' is not allowed"),
        (key, filtered(orders, "id IN (SELECT id FROM mysql.user)"), "subqueries are not allowed"),
        (key, filtered(orders, "SLEEP(5) = 0"), "function SLEEP is not allowed"),
        (key, filtered(orders, "nosuch > 1"), "nosuch is not a column of"),
        (key, {"id": 5, "type": "pause-snapshot"}, '"id" must be a non-empty string'),
    ]
    skipped: list[tuple[bytes | None, Any]] = [  # for other instances, or for nobody: not even refused
        (b"another-instance", {"id": "o1", "type": "pause-snapshot"}),
        (None, {"id": "o2", "type": "pause-snapshot"}),
        (b"another-instance", b"not json either"),
    ]
    caplog.set_level(logging.INFO, logger="gtidsnap")
    with running(pair, tmp_path, kafka_broker, kafka_topic, tables=[TableId(db, "orders")]) as run:
        produce_raw(kafka_broker, kafka_topic, [(k, v) for k, v, _ in bad[:9]] + skipped)
        execute(pair, db, "INSERT INTO orders VALUES (100, 1, 'EU')")
        run.wait("streaming amid bad signals", lambda: any(r["key"] == [100] for r in records(tmp_path)))
        produce_raw(kafka_broker, kafka_topic, [(k, v) for k, v, _ in bad[9:]])
        good = send(kafka_broker, kafka_topic, "start", [orders], filters={orders: "region = 'EU'"})
        assert run.done(tmp_path, good) == "done"
        run.wait("orders snapshotted", lambda: (p := progress(tmp_path, orders)) and p.done)
        send(kafka_broker, kafka_topic, "start", [orders], signal_id=good)
        run.wait("the duplicate", lambda: len(outcomes(tmp_path, good)) == 2)
        # a filter the server refuses: the table's snapshot stops with the server's reason, the tool goes on
        sql = send(
            kafka_broker, kafka_topic, "start", [orders], filters={orders: "id + 9223372036854775807 > 0"}
        )
        assert run.done(tmp_path, sql) == "done"
        run.wait("the bad-SQL snapshot to stop", lambda: (p := progress(tmp_path, orders)) and p.error)
        execute(pair, db, "UPDATE orders SET v = 2 WHERE id = 1")
        run.wait(
            "streaming to go on",
            lambda: any(not r["snapshot"] and r["key"] == [1] for r in records(tmp_path)),
        )
        last = send(kafka_broker, kafka_topic, "pause")
        assert run.done(tmp_path, last) == "done"

    seen = history(tmp_path)
    assert [h.offset for h in seen] == sorted(h.offset for h in seen)
    refusals = [h for h in seen if h.outcome.startswith("refused")]
    assert len(refusals) == len(bad), [h.outcome for h in refusals]
    for (_, _, reason), h in zip(bad, refusals, strict=True):
        assert reason in h.outcome, (reason, h)
    assert not {"o1", "o2"} & {h.id for h in seen}, "messages for other instances are skipped"
    assert len(seen) == len(bad) + 4, "the refusals, the good one, its duplicate, the bad-SQL filter, pause"
    assert outcomes(tmp_path, good) == ["done", "ignored: duplicate id"]
    eu = [*range(1, 20, 2), 100]
    assert snapshot_keys(tmp_path, orders) == eu, "the good signal's EU rows, once: not for the duplicate"
    assert "out of range" in progress(tmp_path, orders).error  # type: ignore[operator,union-attr]
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "refused" in r.getMessage()
    ]
    for h in refusals:  # each logged once, with its offset and reason
        logged = [w for w in warnings if f"at offset {h.offset}:" in w]
        assert len(logged) == 1 and h.outcome in logged[0], (h, logged)


# ----------------------------------------------------------------------------- scenario 21


def test_broker_restart_while_running(
    mariadb_pair: ReplicaPair, db: str, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
) -> None:
    """The broker goes away and comes back: streaming never stops, the consumer reconnects by itself,
    a signal sent after the restart is acted on, and the one before is not acted on again.

    The restart is kafka_broker.restart() in its two steps (kafka.sh stop, then start), so that the
    outage lasts while the test checks that streaming goes on."""
    pair = mariadb_pair
    create_table(pair, db, "t", 20)
    create_table(pair, db, "later", 10)
    t, later = f"{db}.t", f"{db}.later"
    with running(pair, tmp_path, kafka_broker, kafka_topic, tables=[TableId(db, "t")]) as run:
        before = send(kafka_broker, kafka_topic, "start", [t])
        assert run.done(tmp_path, before) == "done"
        run.wait("t snapshotted", lambda: (p := progress(tmp_path, t)) and p.done)
        run_kafka_script("stop", 120)
        try:
            execute(pair, db, "INSERT INTO t VALUES (1001, 1, 'during the outage')")
            run.wait(
                "streaming during the outage", lambda: any(r["key"] == [1001] for r in records(tmp_path))
            )
        finally:
            run_kafka_script("start", 300)
        after = send(kafka_broker, kafka_topic, "start", [later])
        assert run.done(tmp_path, after, timeout_s=60) == "done"
        run.wait("later snapshotted", lambda: (p := progress(tmp_path, later)) and p.done)
    assert outcomes(tmp_path, before) == ["done"]
    assert len(snapshot_keys(tmp_path, t)) == 20 and len(snapshot_keys(tmp_path, later)) == 10


def test_no_broker_at_start_does_not_hold_up_streaming(
    mariadb_pair: ReplicaPair, db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A signal broker that is not there: the consumer logs and retries, the engine streams regardless."""
    create_table(mariadb_pair, db, "t", 0)
    config = replace(
        make_config(mariadb_pair, tmp_path, [TableId(db, "t")]),
        signals=SignalSettings(bootstrap="127.0.0.1:1", topic="nowhere", connector=CONNECTOR),
    )
    hook = SignalHook(config.signals)
    caplog.set_level(logging.WARNING, logger="gtidsnap.signals.consumer")
    with Replica(config.source) as replica:
        run = Running(build_engine(config, replica, on_started=hook), hook)
        run.thread.start()
        try:
            execute(mariadb_pair, db, "INSERT INTO t VALUES (1, 1, 'x')")
            run.wait("the insert streamed", lambda: any(r["key"] == [1] for r in records(tmp_path)))
        finally:
            run.engine.commands.put(Shutdown())
            run.thread.join(WAIT_S)
            started = time.monotonic()
            hook.stop()
    assert time.monotonic() - started < 5, "stop() is bounded even while the broker is unreachable"
    assert run.error is None and not run.thread.is_alive()
    assert any("127.0.0.1:1 is not reachable" in r.getMessage() for r in caplog.records)


def test_a_stuck_kafka_consumer_is_rebuilt(
    mariadb_pair: ReplicaPair,
    db: str,
    kafka_broker: KafkaBroker,
    kafka_topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka can leave an assigned partition unread after a broker restart (see LagWatch); a
    partition paused behind the consumer's back stands for that: the lag watch must rebuild it."""
    from confluent_kafka import TopicPartition

    monkeypatch.setattr(signals_module, "WATCH_S", 0.5)
    monkeypatch.setattr(signals_module, "STALL_S", 2.0)
    create_table(mariadb_pair, db, "t", 10)
    with running(mariadb_pair, tmp_path, kafka_broker, kafka_topic) as run:
        consumer = run.hook.consumer
        assert consumer is not None
        poll, stuck = consumer._poll, threading.Event()

        def poll_stuck() -> None:  # on the consumer's thread: its Kafka consumer is not shared
            if not stuck.is_set():
                consumer._consumer.pause([TopicPartition(kafka_topic, 0)])
                stuck.set()
            poll()

        consumer._poll = poll_stuck  # type: ignore[method-assign]
        wait_for("the partition paused", stuck.is_set)
        signal_id = send(kafka_broker, kafka_topic, "start", [f"{db}.t"])
        assert run.done(tmp_path, signal_id) == "done"
        assert consumer.rebuilds == 1
