"""The Delta version gate (the comparison and its one WARNING) and the actions a commit writes to a
table's log (as Delta's protocol spells them)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gtidsnap.sinks.delta import jvm_delta
from gtidsnap.sinks.delta.jvm_delta import AddAction, CdcAction, DeltaGate, RemoveAction, Transaction, checked

LINE = "is loaded in this JVM, but gtidsnap is tested with"


@pytest.fixture(autouse=True)
def nothing_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm_delta, "_WARNED", set())


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if LINE in r.getMessage()]


def test_the_tested_version_keeps_the_fast_paths_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gtidsnap.sinks.delta")
    assert checked("4.4.0", "4.4.0", "app-1").fast_paths
    assert lines(caplog) == []


@pytest.mark.parametrize("found", ["4.4.1", "4.3.0", "5.0.0", "4.4.0-SNAPSHOT", "4.4"])
def test_any_other_version_turns_them_off_with_one_warning_naming_both(
    found: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gtidsnap.sinks.delta")
    for _ in range(3):  # a session's start and every sink opened on it: one line
        assert not checked(found, "4.4.0", "app-1").fast_paths
    [line] = lines(caplog)
    assert line.levelno == logging.WARNING and line.name == "gtidsnap.sinks.delta"
    text = line.getMessage()
    assert f"Delta Lake {found} is loaded in this JVM" in text and "tested with Delta Lake 4.4.0:" in text
    assert "Spark's own APPEND and MERGE" in text and "\n" not in text


def test_each_jvm_says_it_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gtidsnap.sinks.delta")
    checked("4.5.0", "4.4.0", "app-1")
    checked("4.5.0", "4.4.0", "app-2")  # another JVM (a Spark application) started in this process
    checked("4.5.0", "4.4.0", "app-1")
    assert len(lines(caplog)) == 2


def test_an_unreadable_version_is_not_the_tested_one(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="gtidsnap.sinks.delta")
    gate = checked(None, "4.4.0", "app-1")
    assert gate == DeltaGate(None, "4.4.0") and not gate.fast_paths
    [line] = lines(caplog)
    assert "a Delta Lake whose version is not readable is loaded" in line.getMessage()


def test_the_tested_version_is_the_one_the_jars_are_resolved_at() -> None:
    """spark/pom.xml pins the jars scripts/spark-deps.sh resolves: the constant is that version."""
    pom = (Path(__file__).resolve().parents[4] / "spark" / "pom.xml").read_text(encoding="utf-8")
    assert f"<delta.version>{jvm_delta.TESTED_DELTA_VERSION}</delta.version>" in pom


def test_actions_as_the_log_spells_them() -> None:
    add = AddAction("part-1.parquet", 10, 1_700_000_000_000, '{"numRecords":2}')
    assert add.to_log() == {
        "add": {
            "path": "part-1.parquet",
            "partitionValues": {},
            "size": 10,
            "modificationTime": 1_700_000_000_000,
            "dataChange": True,
            "stats": '{"numRecords":2}',
        }
    }
    assert "stats" not in AddAction("p", 1, 2).to_log()["add"]
    logged = {"path": "part-1.parquet", "size": 10, "stats": "{}", "tags": {"a": "b"}, "modificationTime": 5}
    assert RemoveAction.of(logged, 99).to_log() == {
        "remove": {
            "path": "part-1.parquet",
            "deletionTimestamp": 99,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {},
            "size": 10,
            "stats": "{}",
            "tags": {"a": "b"},
        }
    }
    assert set(RemoveAction.of({"path": "p", "size": 1}, 2).to_log()["remove"]) == {
        "path",
        "deletionTimestamp",
        "dataChange",
        "extendedFileMetadata",
        "partitionValues",
        "size",
    }
    assert CdcAction("_change_data/c.parquet", 7).to_log() == {
        "cdc": {"path": "_change_data/c.parquet", "partitionValues": {}, "size": 7, "dataChange": False}
    }
    assert Transaction("app", 3, 42).to_log() == {"txn": {"appId": "app", "version": 3, "lastUpdated": 42}}
