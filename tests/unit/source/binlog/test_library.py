"""The binlog libraries' gate (source/binlog/library.py): the tested versions are the installed and pinned
ones; nothing is patched at import; on another version one WARNING names it, the fast paths stay off (the
libraries' own parses and connections serve), ``/metrics`` says which are on; a library without a method
the value fixes replace is refused with an error naming it. The same with real other releases, end to
end: tests/integration/test_binlog_library_gate.py."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pymysql
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pymysqlreplication.event import QueryEvent
from pymysqlreplication.row_event import RowsEvent, TableMapEvent, WriteRowsEvent

from gtidsnap.observe.metrics import RunCollector, RunView
from gtidsnap.observe.probe import ProbeFacts
from gtidsnap.source.binlog import library, rows_events, table_maps, transaction_events, values
from gtidsnap.source.binlog.library import FAST_PATHS, TESTED_VERSIONS, DumpConnection, GuardedConnect
from tests.fakes import T, World, jsonl_engine

ROOT = Path(__file__).resolve().parents[4]
OTHER = {"mysql-replication": "1.0.18", "PyMySQL": "1.2.4"}


@pytest.fixture
def fresh_gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No stream started in this process yet; the tested state again after."""
    library.uninstall()
    yield
    monkeypatch.undo()
    library.uninstall()


def untested(monkeypatch: pytest.MonkeyPatch, found: dict[str, str | None]) -> None:
    monkeypatch.setattr(library, "installed_versions", lambda: found)


def fast_paths_installed() -> dict[str, bool]:
    return {
        "table_maps": TableMapEvent.__init__ is table_maps._cached_init,
        "transaction_events": QueryEvent.__init__ is transaction_events._query_init,
        "rows_events": WriteRowsEvent.__init__ is not rows_events._library_inits[WriteRowsEvent],
    }


def test_the_installed_versions_are_the_tested_and_pinned_ones() -> None:
    assert dict(library.installed_versions()) == dict(TESTED_VERSIONS)
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = {p.split("==")[0].lower(): p.split("==")[1] for p in pins if "==" in p}
    assert {n.lower(): v for n, v in TESTED_VERSIONS.items()}.items() <= pinned.items()
    assert library.library_gate().paths == dict.fromkeys(FAST_PATHS, True)


def test_nothing_is_patched_at_import() -> None:
    """Importing every binlog module leaves the libraries as shipped; a stream's start installs."""
    probe = """
import gtidsnap.source.binlog.stream, gtidsnap.source.replica, gtidsnap.observe.metrics
from pymysqlreplication import json_binary
from pymysqlreplication.event import GtidEvent, QueryEvent
from pymysqlreplication.row_event import RowsEvent, TableMapEvent, WriteRowsEvent
owners = [f.__module__ for f in (TableMapEvent.__init__, QueryEvent.__init__, GtidEvent.__init__,
          WriteRowsEvent.__init__, RowsEvent._RowsEvent__read_time2, json_binary.parse_opaque)]
assert all(o.startswith("pymysqlreplication") for o in owners), owners
from gtidsnap.source.binlog import library
assert library.installed() is None
library.install()
assert TableMapEvent.__init__.__module__ == "gtidsnap.source.binlog.table_maps"
assert RowsEvent._RowsEvent__read_time2.__module__ == "gtidsnap.source.binlog.values"
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_tested_versions_take_every_fast_path(fresh_gate: None, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        gate = library.install()
    assert not gate.untested and all(gate.paths.values())
    assert all(fast_paths_installed().values())
    assert not caplog.records


def test_another_version_is_named_once_and_served_by_the_libraries_own_parses(
    fresh_gate: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    untested(monkeypatch, OTHER)
    with caplog.at_level(logging.WARNING):
        gate = library.install()
        assert library.install() == gate  # a second stream in the process: no second line
    assert gate.untested == ("mysql-replication",)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(lines) == 1, lines
    assert "mysql-replication 1.0.18 (tested: 1.0.17)" in lines[0]
    assert "(table_maps, transaction_events, rows_events, frame_packets)" in lines[0]  # chunk_rows: PyMySQL's
    assert not any(fast_paths_installed().values())
    assert gate.paths == {**dict.fromkeys(FAST_PATHS, False), "chunk_rows": True}
    # the value fixes are correctness, on any version that has what they replace
    assert RowsEvent._RowsEvent__read_time2 is values._read_time2
    # the dump connection is PyMySQL's own, so frame_packets never reads its socket
    connect = GuardedConnect()
    made: list[type] = []
    monkeypatch.setattr(
        pymysql.connections.Connection, "__init__", lambda self, **kw: made.append(type(self))
    )
    connect(host="127.0.0.1", port=1)
    assert made == [pymysql.connections.Connection]


def test_an_untested_pymysql_leaves_every_fast_path(
    fresh_gate: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    untested(monkeypatch, {"mysql-replication": "1.0.17", "PyMySQL": None})
    with caplog.at_level(logging.WARNING):
        gate = library.install()
    assert gate.paths == dict.fromkeys(FAST_PATHS, False)
    assert "PyMySQL (not found) (tested: 1.2.4)" in caplog.records[0].getMessage()


def test_back_on_the_tested_version_the_fast_paths_return(
    fresh_gate: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    untested(monkeypatch, OTHER)
    library.install()
    monkeypatch.undo()
    assert all(library.install().paths.values()) and all(fast_paths_installed().values())
    made: list[type] = []
    monkeypatch.setattr(
        pymysql.connections.Connection, "__init__", lambda self, **kw: made.append(type(self))
    )
    GuardedConnect()(host="127.0.0.1", port=1)
    assert made == [DumpConnection]


def test_a_library_without_a_method_the_value_fixes_replace_is_refused(
    fresh_gate: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(RowsEvent, "_RowsEvent__read_date")
    with pytest.raises(
        RuntimeError, match=r"has no _RowsEvent__read_date, which gtidsnap replaces to decode"
    ):
        library.install()
    assert library.installed() is None


def test_metrics_say_which_fast_paths_are_on(
    fresh_gate: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    engine = jsonl_engine(World(random.Random(3), rows=5, writes=5), tmp_path)
    engine.run(snapshot=[T], until_caught_up=True)
    probe: Any = SimpleNamespace(facts=ProbeFacts(time.monotonic(), None, 0, time.time(), {}), failures=0)
    view = RunView(engine, probe, "127.0.0.1:3306", "mysql", stall_after_s=60.0, heartbeat_s=1.0)

    def fast_paths() -> dict[str, float]:
        registry = CollectorRegistry()
        registry.register(RunCollector(view))
        text = generate_latest(registry).decode()
        return {
            s.labels["path"]: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "gtidsnap_binlog_fast_path"
        }

    assert fast_paths() == {}  # no stream started
    untested(monkeypatch, OTHER)
    library.install()
    assert fast_paths() == {**dict.fromkeys(FAST_PATHS, 0.0), "chunk_rows": 1.0}
    monkeypatch.undo()
    library.install()
    assert fast_paths() == dict.fromkeys(FAST_PATHS, 1.0)
