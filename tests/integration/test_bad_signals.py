"""Bad signals sent to a running gtidsnap through the real Kafka topic, on the real replicas.

Each message is one a careless or hostile writer to the signal topic could send. For each, the
checkpoint's signal history must record it once, refused with a reason that names the problem (or, for
a filter the server itself rejects, done, with the table's snapshot failed with the server's message);
and a row written on the primary right after it must come out of the stream: one message must never
stop or stall gtidsnap. At the end the output replays to the source, ``gtidsnap status`` prints every
id as written (markup included) and the checkpoint has stayed small.
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gtidsnap.cli.app import main
from gtidsnap.config.settings import SignalSettings
from gtidsnap.core.commands import Shutdown
from gtidsnap.core.model import TableId
from gtidsnap.run import SignalHook, build_engine
from gtidsnap.signals.notifier import Notifier, tail
from gtidsnap.signals.protocol import MAX_MESSAGE_BYTES
from gtidsnap.source.replica import Replica
from tests.integration.cdc import check_invariants, execute, make_config, source_rows
from tests.integration.fixtures.db_servers import ReplicaPair, fresh_database
from tests.integration.fixtures.kafka_server import KafkaBroker
from tests.integration.test_signals import (
    CONNECTOR,
    WAIT_S,
    Running,
    history,
    produce_raw,
    progress,
    records,
    running,
    send,
)

pytestmark = pytest.mark.integration

EXEC = "execute-snapshot"
KEY = CONNECTOR.encode()
LONG_NAME = "x" * 60  # a table whose name a backtracking regex engine would choke on
FLOOD = 10_000  # signals sent at once
FLOOD_LAG_S = 1.0  # a row written meanwhile comes out within this (0.05-0.42 s; ~15 s when one turn took all)


def start(data: Any, signal_id: str | None = None) -> dict[str, Any]:
    return {"id": signal_id or f"bad-{uuid.uuid4().hex[:8]}", "type": EXEC, "data": data}


def bad_signals(db: str) -> list[tuple[str, bytes | Any, str]]:
    """(name, message value (bytes as sent, else JSON), what the refusal must say)."""
    orders = f"{db}.orders"

    def filtered(table: str, condition: Any, collections: list[str] | None = None) -> dict[str, Any]:
        conditions = [{"data-collection": table, "filter": condition}]
        return start({"data-collections": collections or [orders], "additional-conditions": conditions})

    return [
        ("not json", b"{type: pause}", "not JSON"),
        ("empty", b"", "empty"),
        ("not utf-8", b'{"type": "\xff"}', "not UTF-8"),
        ("array", [orders], "not a JSON object"),
        ("string", "pause-snapshot", "not a JSON object"),
        ("no type", {"id": "n1", "data": {}}, 'no "type"'),
        ("unknown type", {"id": "n2", "type": "explode"}, 'unknown "type"'),
        ("type a number", {"id": "n3", "type": 7}, 'unknown "type" 7'),
        ("id a number", {"id": 5, "type": "pause-snapshot"}, '"id" must be a non-empty string'),
        ("id blank", {"id": "  ", "type": "pause-snapshot"}, '"id" must be a non-empty string'),
        ("id huge", {"id": "i" * 5000, "type": "pause-snapshot"}, "at most 128"),
        ("id forging a log line", {"id": "x\nERROR forged", "type": "pause-snapshot"}, "control characters"),
        ("id clearing a screen", {"id": "\x1b[2J", "type": "pause-snapshot"}, "control characters"),
        (
            "message huge",
            start({"data-collections": [orders], "pad": "p" * MAX_MESSAGE_BYTES}),
            "at most 65,536",
        ),
        ("no data", {"id": "n4", "type": EXEC}, 'has no "data"'),
        ("data an array", {"id": "n5", "type": EXEC, "data": [orders]}, 'has an array as "data"'),
        ("no collections", start({}), "data-collections must be a non-empty list"),
        ("collections empty", start({"data-collections": []}), "non-empty list"),
        ("collections a string", start({"data-collections": orders}), "non-empty list"),
        ("collection a number", start({"data-collections": [orders, 3]}), "data-collections[1]"),
        ("unknown data field", start({"data-collections": [orders], "table": "x"}), "unknown field(s)"),
        (
            "blocking snapshot",
            start({"data-collections": [orders], "type": "BLOCKING"}),
            "only takes INCREMENTAL",
        ),
        ("surrogate key", start({"data-collections": [orders], "surrogate-key": "v"}), "surrogate-key"),
        ("regex broken", start({"data-collections": [f"{db}.(orders"]}), "not a valid regular expression"),
        ("regex back-reference", start({"data-collections": [f"{db}\\.(o)\\1"]}), "RE2"),
        ("regex look-ahead", start({"data-collections": [f"{db}\\.(?=o).*"]}), "RE2"),
        ("regex catastrophic", start({"data-collections": [f"{db}\\.(x+x+)+y"]}), "matches no table"),
        ("selector huge", start({"data-collections": [f"{db}." + "a" * 600]}), "at most 512"),
        ("system table", start({"data-collections": ["mysql.user"]}), "system schema"),
        ("system pattern", start({"data-collections": ["mysql\\..*"]}), "matches no table"),
        ("table missing", start({"data-collections": [f"{db}.nosuch"]}), "does not exist"),
        ("a view", start({"data-collections": [f"{db}.vw"]}), "is a view"),
        ("no primary key", start({"data-collections": [f"{db}.nokey"]}), "no primary key"),
        ("filter outside the request", filtered(f"{db}.other", "v > 1"), "not in the request"),
        ("filter syntax", filtered(orders, "v = = 1"), "not one valid MySQL condition"),
        ("filter two statements", filtered(orders, "v > 1; DROP TABLE orders"), "';' is not allowed"),
        ("filter subquery", filtered(orders, "id IN (SELECT id FROM mysql.user)"), "subqueries"),
        ("filter other table", filtered(orders, "mysql.user.id > 1"), "another table"),
        ("filter sleep", filtered(orders, "SLEEP(10) = 0"), "SLEEP"),
        ("filter benchmark", filtered(orders, "BENCHMARK(10000000, MD5('x')) = 0"), "BENCHMARK"),
        ("filter lock", filtered(orders, "GET_LOCK('x', 10) = 1"), "GET_LOCK"),
        ("filter file", filtered(orders, "LOAD_FILE('/etc/passwd') IS NULL"), "LOAD_FILE"),
        ("filter unknown function", filtered(orders, "nosuchfunc(id) = 1"), "nosuchfunc"),
        ("filter user variable", filtered(orders, "id > @x"), "variable"),
        ("filter system variable", filtered(orders, "id > @@port"), "variable"),
        ("filter comment", filtered(orders, "id > 1 -- and more"), "comment"),
        ("filter hint comment", filtered(orders, "id > 1 /*! OR 1=1 */"), "comment"),
        ("filter unknown column", filtered(orders, "nope > 1"), "nope is not a column"),
        ("filter huge", filtered(orders, "id > 1 AND " * 500 + "1=1"), "4096"),
        ("filter not a string", filtered(orders, 5), "both strings"),
        (
            "filters not a list",
            start({"data-collections": [orders], "additional-conditions": "v > 1"}),
            "must be a list",
        ),
        (
            "stop by pattern",
            {"id": "n6", "type": "stop-snapshot", "data": {"data-collections": [f"{db}\\..*"]}},
            "not patterns",
        ),
        (
            "stop data a string",
            {"id": "n7", "type": "stop-snapshot", "data": orders},
            'has a string as "data"',
        ),
    ]


def test_no_bad_signal_stops_or_stalls_the_stream(
    mariadb_pair: ReplicaPair,
    kafka_broker: KafkaBroker,
    kafka_topic: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pair = mariadb_pair
    with fresh_database(pair) as db:
        execute(
            pair,
            db,
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, v INT NOT NULL, region VARCHAR(4) NOT NULL)",
            "CREATE VIEW vw AS SELECT id, v FROM orders",
            "CREATE TABLE nokey (a INT)",
            f"CREATE TABLE `{LONG_NAME}` (id INT PRIMARY KEY)",
            many=[
                ("INSERT INTO orders VALUES (%s, 0, %s)", [(i, "EU" if i % 2 else "US") for i in range(20)])
            ],
        )
        orders = TableId(db, "orders")
        cases = bad_signals(db)
        next_key = iter(range(1000, 10_000))
        with running(pair, tmp_path, kafka_broker, kafka_topic, tables=[orders]) as run:

            def streamed_after(what: str) -> None:
                """A row written now must come out of the stream: nothing stopped or stalled it."""
                key = next(next_key)
                execute(pair, db, f"INSERT INTO orders VALUES ({key}, 1, 'EU')")
                run.wait(
                    f"row {key} streamed after {what}",
                    lambda: any(r["key"] == [key] for r in records(tmp_path)),
                )

            for i, (name, value, reason) in enumerate(cases):
                produce_raw(kafka_broker, kafka_topic, [(KEY, value)])
                seen = run.wait(
                    f"{name} in the signal history", lambda i=i: len(h := history(tmp_path)) > i and h
                )
                outcome = seen[i].outcome
                assert outcome.startswith("refused: ") and reason in outcome, f"{name}: {outcome}"
                assert "\n" not in outcome and len(outcome) <= 520, f"{name}: the stored reason is not short"
                streamed_after(name)

            # A filter that passes every check but that the server rejects: that snapshot fails with the
            # server's message; the stream goes on.
            server = start(
                {
                    "data-collections": [str(orders)],
                    "additional-conditions": [
                        {"data-collection": str(orders), "filter": "id + 9223372036854775807 > 0"}
                    ],
                },
                signal_id="server-refuses",
            )
            produce_raw(kafka_broker, kafka_topic, [(KEY, server)])
            failed = run.wait(
                "the filtered snapshot to fail", lambda: (p := progress(tmp_path, str(orders))) and p.error
            )
            assert "out of range" in failed, failed
            streamed_after("a filter the server rejects")

            # A flood: 10,000 requests that each need the catalog (a pattern that matches no table). Drained
            # in one loop turn they stalled the stream ~15 s; a turn takes a bounded share of them now.
            flood = {"type": EXEC, "data": {"data-collections": [f"{db}\\.nomatch_.*"]}}
            produce_raw(kafka_broker, kafka_topic, [(KEY, flood)] * FLOOD)
            run.wait("the flood to reach the engine", lambda: run.engine.commands.qsize() > FLOOD // 10)
            started = time.monotonic()
            streamed_after("a flood of 10,000 requests")
            lag = time.monotonic() - started
            print(f"stream lag under a flood of {FLOOD:,} signals: {lag:.2f} s", file=sys.__stderr__)
            assert lag < FLOOD_LAG_S, f"a flood of {FLOOD:,} signals stalled the stream {lag:.1f} s"

            # An id made of markup: acted on, and shown as written by `gtidsnap status`.
            produce_raw(kafka_broker, kafka_topic, [(KEY, {"id": "[/]", "type": "pause-snapshot"})])
            run.wait("the markup id", lambda: any(h.id == "[/]" for h in history(tmp_path)))
            streamed_after("a markup id")

        assert (tmp_path / "checkpoint.json").stat().st_size < 64_000, "a bad signal bloated the checkpoint"
        capsys.readouterr()
        with pytest.raises(SystemExit) as status:
            main(["status", "--checkpoint", str(tmp_path / "checkpoint.json")])
        shown = capsys.readouterr()
        assert status.value.code == 0, shown.err
        assert "[/]" in shown.out and "Traceback" not in shown.err
        # Only the rows written during the run were streamed (the one snapshot asked for failed).
        streamed = [r for r in records(tmp_path) if r["key"][0] >= 1000]
        for seq, r in enumerate(streamed, start=1):
            r["seq"] = seq
        after = {k: row for k, row in source_rows(pair, db, "orders").items() if k[0] >= 1000}
        check_invariants(streamed, {str(orders): after})
        assert len(cases) >= 45


SLOW_ROWS = 40  # rows on which the filter below takes ~0.1 s each (PCRE's match limit): ~4 s a query
SLOW_FILTER = "v REGEXP '^(a+)+$'"  # passes every check; backtracks on 'aaa…a!'
STREAM_LAG_S = 1.0


def test_a_slow_filter_delays_its_snapshot_never_the_stream(
    mariadb_pair: ReplicaPair, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
) -> None:
    """The snapshot's greatest key and its chunk ends run its filter over the table: ~4 s each here.
    They used to run on the engine's thread, and the stream stood still meanwhile (up to
    ``statement_timeout_s`` each); now a row written during the snapshot comes out within a second."""
    pair = mariadb_pair
    with fresh_database(pair) as db:
        execute(
            pair,
            db,
            "CREATE TABLE words (id BIGINT PRIMARY KEY, v VARCHAR(64) NOT NULL)",
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, v INT NOT NULL, region VARCHAR(4) NOT NULL)",
            many=[
                (
                    "INSERT INTO words VALUES (%s, %s)",
                    [(i, "a" * 26 + "!" if i % 4 else "aaa") for i in range(1, SLOW_ROWS * 4 // 3 + 1)],
                )
            ],
        )
        words, orders = TableId(db, "words"), TableId(db, "orders")
        with running(pair, tmp_path, kafka_broker, kafka_topic, tables=[orders]) as run:
            request = {
                "data-collections": [str(words)],
                "additional-conditions": [{"data-collection": str(words), "filter": SLOW_FILTER}],
            }
            produce_raw(kafka_broker, kafka_topic, [(KEY, start(request, signal_id="slow-filter"))])
            run.wait("the filtered snapshot to start", lambda: progress(tmp_path, str(words)))
            lags: list[float] = []
            key = 1000
            while not (p := progress(tmp_path, str(words))) or not p.done:
                key += 1
                written = time.monotonic()
                execute(pair, db, f"INSERT INTO orders VALUES ({key}, 1, 'EU')")
                run.wait(f"row {key}", lambda key=key: any(r["key"] == [key] for r in records(tmp_path)))
                lags.append(time.monotonic() - written)
                assert len(lags) < 500, "the filtered snapshot never ended"
            snapshot = [r for r in records(tmp_path) if r["table"] == str(words)]
        print(
            f"stream lag while a slow filter planned its snapshot: max {max(lags):.2f} s of {len(lags)} rows"
        )
        assert p.error is None, p.error
        assert sorted(r["key"][0] for r in snapshot) == [
            i for i in range(1, SLOW_ROWS * 4 // 3 + 1) if i % 4 == 0
        ]
        assert len(lags) >= 5, "the snapshot was over before the stream could be measured"
        assert max(lags) < STREAM_LAG_S, f"a slow filter stalled the stream {max(lags):.1f} s"


def test_notifications_on_the_signal_topic_are_never_read_as_signals(
    mariadb_pair: ReplicaPair, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
) -> None:
    """The issue: with ``notifications_topic`` equal to the signal topic, one ``snapshot pause`` made the
    topic grow 4 -> 9 -> 13 -> 17 every 8 s, each answer read as a signal, refused and answered. The config
    refuses that pair now (test_bad_input); should notifications reach a signal topic anyway (a Config built
    in code, as here, or another instance's), the consumer never acts on one: a pause and then a resume get
    one answer each, and the history holds those two signals only (the resume is read after the pause's
    answer, so by then the answer was read and skipped)."""
    config = replace(
        make_config(mariadb_pair, tmp_path, heartbeat_s=0.1),
        signals=SignalSettings(
            bootstrap=kafka_broker.bootstrap,
            topic=kafka_topic,
            connector=CONNECTOR,
            notifications_topic=kafka_topic,
        ),
    )
    hook = SignalHook(config.signals)
    notifier = Notifier(config.signals).start()  # what runner refuses: built here on purpose
    with Replica(config.source) as replica:
        run = Running(build_engine(config, replica, on_started=hook, notifier=notifier), hook)
        run.thread.start()
        try:
            run.wait("the signal consumer", lambda: hook.consumer and hook.consumer.assigned.is_set())
            pause = send(kafka_broker, kafka_topic, "pause")
            assert run.done(tmp_path, pause) == "done"
            answered = run.wait(
                "the pause's answer on the topic",
                lambda: [
                    n
                    for n in tail(config.signals, 100)
                    if n.get("additionalData", {}).get("signal_id") == pause
                ],
            )
            assert [n["type"] for n in answered] == ["PAUSED"]
            resume = send(kafka_broker, kafka_topic, "resume")
            assert run.done(tmp_path, resume) == "done"
        finally:
            run.engine.commands.put(Shutdown())
            run.thread.join(WAIT_S)
            hook.stop()
            notifier.stop()
    assert run.error is None, run.error
    assert [(h.id, h.outcome) for h in history(tmp_path)] == [(pause, "done"), (resume, "done")]
