"""parse_signal: every good message shape becomes its engine command; every bad one becomes a refusal
with a reason (never an exception, so the engine records its offset); other instances' keys are skipped.
Also build_message (what the CLI sends) and the CLI's --print, which need no broker."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from gtidsnap.cli.app import app
from gtidsnap.core.commands import (
    PauseSnapshots,
    ResumeSnapshots,
    SignalReceived,
    StartSnapshot,
    StopSnapshot,
)
from gtidsnap.core.errors import SignalError
from gtidsnap.core.model import TableId
from gtidsnap.signals.consumer import LagWatch
from gtidsnap.signals.protocol import build_message, parse_signal

CONNECTOR = "shop-replica"


def parse(message: Any, key: bytes | None = CONNECTOR.encode(), offset: int = 7) -> SignalReceived:
    value = message if isinstance(message, bytes) else json.dumps(message).encode()
    result = parse_signal(key, value, 0, offset, CONNECTOR)
    assert result is not None
    assert (result.partition, result.offset) == (0, offset)
    return result


def refused(message: Any) -> str:
    result = parse(message)
    assert result.command is None and result.error is not None, result
    return result.error


# ----------------------------------------------------------------------------- good messages


def test_execute_snapshot_with_names_regexes_and_filters() -> None:
    result = parse(
        {
            "id": "s1",
            "type": "execute-snapshot",
            "data": {
                "data-collections": ["db.orders", "db\\.audit_.*", "db.orders"],
                "type": "INCREMENTAL",
                "additional-conditions": [{"data-collection": "db.orders", "filter": " region = 'EU' "}],
            },
        }
    )
    assert result.error is None and result.id == "s1" and result.kind == "execute-snapshot"
    assert result.command == StartSnapshot(
        selectors=("db.orders", "db\\.audit_.*"), conditions={"db.orders": "region = 'EU'"}
    )


def test_execute_snapshot_minimal_debezium_form_without_id_or_type() -> None:
    result = parse({"type": "execute-snapshot", "data": {"data-collections": ["db.t"]}})
    assert result.error is None and result.id is None
    assert result.command == StartSnapshot(selectors=("db.t",))


def test_execute_snapshot_type_is_case_insensitive_and_legacy_single_condition() -> None:
    result = parse(
        {
            "id": "s2",
            "type": "execute-snapshot",
            "data": {"data-collections": ["db.t"], "type": "incremental", "additional-condition": "v > 1"},
        }
    )
    assert result.command == StartSnapshot(selectors=("db.t",), condition="v > 1")


def test_empty_surrogate_key_is_accepted() -> None:
    result = parse({"type": "execute-snapshot", "data": {"data-collections": ["db.t"], "surrogate-key": ""}})
    assert result.error is None


@pytest.mark.parametrize(
    ("data", "tables"),
    [
        (None, None),
        ({}, None),
        ({"data-collections": []}, None),
        (
            {"data-collections": ["db.a", "db\\.b"], "type": "INCREMENTAL"},
            (TableId("db", "a"), TableId("db", "b")),
        ),
    ],
)
def test_stop_snapshot_named_tables_or_all(data: dict[str, Any] | None, tables: Any) -> None:
    message: dict[str, Any] = {"id": "x", "type": "stop-snapshot"}
    if data is not None:
        message["data"] = data
    result = parse(message)
    assert result.error is None and result.command == StopSnapshot(tables)
    if data is None:
        assert parse({**message, "data": None}).command == StopSnapshot(None), "null data: no data"


@pytest.mark.parametrize(
    ("kind", "command"), [("pause-snapshot", PauseSnapshots()), ("resume-snapshot", ResumeSnapshots())]
)
def test_pause_and_resume_with_or_without_data(kind: str, command: Any) -> None:
    assert parse({"id": "p", "type": kind}).command == command
    assert parse({"id": "p", "type": kind, "data": {}}).command == command


def test_unknown_top_level_fields_are_ignored() -> None:
    assert parse({"type": "pause-snapshot", "source": "ops"}).command == PauseSnapshots()


# ----------------------------------------------------------------------------- key filtering


@pytest.mark.parametrize("key", [None, b"", b"other", b"shop-replica2", b"SHOP-REPLICA"])
def test_messages_for_other_instances_are_skipped(key: bytes | None) -> None:
    value = json.dumps({"type": "pause-snapshot"}).encode()
    assert parse_signal(key, value, 0, 1, CONNECTOR) is None
    assert parse_signal(key, b"not json", 0, 1, CONNECTOR) is None  # not ours: not even refused


# ----------------------------------------------------------------------------- bad messages

EXEC = "execute-snapshot"
BAD: dict[str, tuple[Any, str]] = {
    "empty value": (b"", "empty"),
    "not json": (b"{type: pause}", "not JSON"),
    "not utf-8": (b'{"type": "\xff"}', "not UTF-8"),
    "json array": ([1, 2], "is an array, not a JSON object"),
    "json string": ("pause-snapshot", "is a string, not a JSON object"),
    "no type": ({"id": "a"}, 'no "type"'),
    "unknown type": ({"type": "explode"}, 'unknown "type" "explode"'),
    "type not a string": ({"type": 5}, 'unknown "type" 5'),
    "id not a string": ({"id": 5, "type": "pause-snapshot"}, '"id" must be a non-empty string'),
    "empty id": ({"id": " ", "type": "pause-snapshot"}, '"id" must be a non-empty string'),
    "id with a newline": ({"id": "a\nERROR x", "type": "pause-snapshot"}, '"id" "a\\nERROR x" holds control'),
    "id with an escape": ({"id": "\x1b[2J", "type": "pause-snapshot"}, '"id" "\\u001b[2J" holds control'),
    "execute without data": ({"type": EXEC}, 'has no "data"'),
    "data not an object": ({"type": EXEC, "data": ["db.t"]}, 'has an array as "data"'),
    "stop data not an object": ({"type": "stop-snapshot", "data": "db.t"}, 'has a string as "data"'),
    "missing data-collections": ({"type": EXEC, "data": {}}, "data-collections must be a non-empty list"),
    "empty data-collections": ({"type": EXEC, "data": {"data-collections": []}}, "non-empty list"),
    "data-collections a string": ({"type": EXEC, "data": {"data-collections": "db.t"}}, "non-empty list"),
    "data-collections a number": (
        {"type": EXEC, "data": {"data-collections": ["db.t", 3]}},
        "data-collections[1] must be a non-empty string",
    ),
    "invalid regex": (
        {"type": EXEC, "data": {"data-collections": ["db.(x"]}},
        "not a valid regular expression",
    ),
    "unknown data field": (
        {"type": EXEC, "data": {"data-collections": ["db.t"], "data-colections": ["db.u"]}},
        "unknown field(s) in data: data-colections",
    ),
    "blocking snapshot": (
        {"type": EXEC, "data": {"data-collections": ["db.t"], "type": "BLOCKING"}},
        'data.type "BLOCKING" is not supported',
    ),
    "surrogate key": (
        {"type": EXEC, "data": {"data-collections": ["db.t"], "surrogate-key": "ts"}},
        "surrogate-key is not supported",
    ),
    "conditions not a list": (
        {"type": EXEC, "data": {"data-collections": ["db.t"], "additional-conditions": {"db.t": "v > 1"}}},
        "additional-conditions must be a list",
    ),
    "condition not an object": (
        {"type": EXEC, "data": {"data-collections": ["db.t"], "additional-conditions": ["v > 1"]}},
        "additional-conditions[0] must be an object",
    ),
    "condition without filter": (
        {
            "type": EXEC,
            "data": {"data-collections": ["db.t"], "additional-conditions": [{"data-collection": "db.t"}]},
        },
        'needs "data-collection" and "filter"',
    ),
    "condition filter not a string": (
        {
            "type": EXEC,
            "data": {
                "data-collections": ["db.t"],
                "additional-conditions": [{"data-collection": "db.t", "filter": 1}],
            },
        },
        'needs "data-collection" and "filter"',
    ),
    "condition table not db.table": (
        {
            "type": EXEC,
            "data": {
                "data-collections": ["db.t"],
                "additional-conditions": [{"data-collection": "t", "filter": "v>1"}],
            },
        },
        "must be written schema.table",
    ),
    "condition unknown field": (
        {
            "type": EXEC,
            "data": {
                "data-collections": ["db.t"],
                "additional-conditions": [{"data-collection": "db.t", "filter": "v>1", "fliter": "x"}],
            },
        },
        "unknown field(s) fliter",
    ),
    "two filters for one table": (
        {
            "type": EXEC,
            "data": {
                "data-collections": ["db.t"],
                "additional-conditions": [
                    {"data-collection": "db.t", "filter": "v > 1"},
                    {"data-collection": "db.t", "filter": "v < 9"},
                ],
            },
        },
        "a second filter for db.t",
    ),
    "stop with a pattern": (
        {"type": "stop-snapshot", "data": {"data-collections": ["db\\.audit_.*"]}},
        "not patterns",
    ),
    "stop unknown field": (
        {"type": "stop-snapshot", "data": {"tables": ["db.t"]}},
        "unknown field(s) in data",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_message_is_refused_with_a_reason(case: str) -> None:
    message, reason = BAD[case]
    assert reason in refused(message)


def test_refusal_keeps_what_could_be_read() -> None:
    result = parse({"id": "r1", "type": "explode"}, offset=41)
    assert (result.id, result.kind, result.offset) == ("r1", "explode", 41)
    assert parse(b"nope").kind == "?" and parse(b"nope").id is None


@pytest.mark.parametrize(
    "condition",
    [
        "1=1) OR (1=1",  # closes the parenthesis the query puts around it
        "region = 'EU'; DROP TABLE x",
        "region = 'EU' -- ",
        "region = 'EU' # x",
        "region = 'EU' /* x */",
        "region = 'E\\' OR 1=1",
        "region = 'EU",
        "(region = 'EU'",
        "   ",
    ],
)
def test_filter_that_could_break_out_of_the_select_is_refused(condition: str) -> None:
    for data in (
        {
            "data-collections": ["db.t"],
            "additional-conditions": [{"data-collection": "db.t", "filter": condition}],
        },
        {"data-collections": ["db.t"], "additional-condition": condition},
    ):
        reason = refused({"id": "f", "type": EXEC, "data": data})
        assert "filter for db.t" in reason or "additional-condition" in reason


def test_safe_filters_pass_unchanged() -> None:
    condition = "region IN ('EU', 'it''s') AND (v > 1 OR name LIKE 'a%')"
    data = {
        "data-collections": ["db.t"],
        "additional-conditions": [{"data-collection": "db.t", "filter": condition}],
    }
    result = parse({"type": EXEC, "data": data})
    assert isinstance(result.command, StartSnapshot) and result.command.conditions == {"db.t": condition}


# ----------------------------------------------------------------------------- what the CLI sends


def test_build_message_round_trips_through_the_parser() -> None:
    message = build_message("start", ["db.orders", "db\\.audit_.*"], {"db.orders": "region = 'EU'"}, "m1")
    assert message == {
        "id": "m1",
        "type": "execute-snapshot",
        "data": {
            "data-collections": ["db.orders", "db\\.audit_.*"],
            "type": "INCREMENTAL",
            "additional-conditions": [{"data-collection": "db.orders", "filter": "region = 'EU'"}],
        },
    }
    result = parse(message)
    assert result.command == StartSnapshot(
        selectors=("db.orders", "db\\.audit_.*"), conditions={"db.orders": "region = 'EU'"}
    )
    assert parse(build_message("stop", [], signal_id="m2")).command == StopSnapshot(None)
    assert parse(build_message("stop-snapshot", ["db.a"])).command == StopSnapshot((TableId("db", "a"),))
    assert parse(build_message("pause")).command == PauseSnapshots()
    assert parse(build_message("resume")).command == ResumeSnapshots()
    assert build_message("pause")["id"] != build_message("pause")["id"], "a fresh id per message"


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("start", []), "at least one table"),
        (("start", ["db.("]), "not a valid regular expression"),
        (("start", ["db.t"], {"db.t": "1=1) OR (1=1"}), "not one valid MySQL condition"),
        (("start", ["db.t"], {"db.u": "v > 1"}), "which is not in the request"),
        (("start", ["db\\.a.*"], {"db.b": "v > 1"}), "which is not in the request"),
        (("stop", ["db.t"], {"db.t": "v > 1"}), "filters only go with"),
        (("stop", ["db\\.t.*"]), "not patterns"),
        (("pause", ["db.t"]), "takes no table names"),
        (("explode", []), "unknown signal"),
    ],
)
def test_build_message_refuses_what_the_consumer_would_refuse(args: tuple[Any, ...], reason: str) -> None:
    with pytest.raises(SignalError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        build_message(*args)


def test_cli_print_writes_the_message_without_a_broker() -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["snapshot", "start", "db.orders", "--filter", "db.orders=region = 'EU'", "--id", "c1", "--print"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == build_message(
        "start", ["db.orders"], {"db.orders": "region = 'EU'"}, "c1"
    )
    stop = runner.invoke(app, ["snapshot", "stop", "--print", "--id", "c2"])
    assert json.loads(stop.stdout) == {"id": "c2", "type": "stop-snapshot", "data": {}}
    bad = runner.invoke(app, ["snapshot", "start", "db.t", "--filter", "no-equals-sign", "--print"])
    assert bad.exit_code == 2 and "TABLE=CONDITION" in bad.output
    unsafe = runner.invoke(app, ["snapshot", "start", "db.t", "--filter", "db.t=1; DROP TABLE t", "--print"])
    assert unsafe.exit_code == 2 and "';'" in unsafe.output


def test_cli_send_without_a_configured_broker_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GTIDSNAP_SIGNALS_BOOTSTRAP", raising=False)
    result = CliRunner().invoke(app, ["snapshot", "pause"])
    assert result.exit_code == 1 and "bootstrap" in result.output


# ----------------------------------------------------------------------------- the consumer's lag watch


def test_lag_watch_fires_only_after_a_partition_stays_behind_without_reads() -> None:
    watch = LagWatch(stall_s=10.0)
    assert not watch.stalled(0, None, 0, 0, now=0.0), "an empty topic is never behind"
    assert not watch.stalled(0, 5, 0, 5, now=1.0), "read up to the end"
    assert not watch.stalled(0, 5, 0, 6, now=2.0), "one message waits: not yet stalled"
    assert not watch.stalled(0, 5, 0, 6, now=11.9)
    assert watch.stalled(0, 5, 0, 6, now=12.0), "behind for 10 s with nothing read"


def test_lag_watch_forgets_when_a_message_is_read_or_the_end_is_reached() -> None:
    watch = LagWatch(stall_s=10.0)
    assert not watch.stalled(0, 5, 0, 6, now=0.0)
    watch.read(0)
    assert not watch.stalled(0, 6, 0, 7, now=10.0), "progress since: the clock starts again"
    assert not watch.stalled(0, 7, 0, 7, now=15.0)
    assert not watch.stalled(0, 7, 0, 8, now=21.0)
    assert watch.stalled(0, 7, 0, 8, now=31.0)


def test_lag_watch_counts_from_the_oldest_kept_message() -> None:
    watch = LagWatch(stall_s=1.0)
    assert not watch.stalled(0, 3, 10, 10, now=0.0), "offset 3 was deleted by retention; nothing left"
    assert not watch.stalled(1, None, 4, 6, now=0.0) and watch.stalled(1, None, 4, 6, now=1.0)


def test_stream_wait_note_shows_a_window_waiting_for_the_stream() -> None:
    """Under heavy writes a chunk's window waits for the stream: progress says so after a second."""
    from gtidsnap.cli.app import stream_wait_note
    from gtidsnap.core.run_stats import RunStats

    stats = RunStats()
    assert stream_wait_note(stats) == ""
    stats.window_opened_at = 100.0
    assert stream_wait_note(stats, now=100.5) == ""
    assert stream_wait_note(stats, now=104.2) == "chunk waits 4s for the stream"


def test_a_notification_is_never_read_as_a_signal() -> None:
    """Debezium's notification shape, keyed by the connector as gtidsnap writes its answers: not a signal
    (from a producer that sets no gtidsnap-notification header, say), so never refused and answered."""
    answer = {
        "id": "gtidsnap-5f0c2a91d3e4-12",
        "aggregateType": "Incremental Snapshot",
        "type": "PAUSED",
        "additionalData": {"connector_name": "gtidsnap", "signal_id": "d1"},
        "timestamp": 1764300000000,
    }
    assert parse_signal(b"gtidsnap", json.dumps(answer).encode(), 0, 7, "gtidsnap") is None
