"""/metrics from a real engine's counters (observe/metrics), and the HTTP endpoint (observe/server)."""

from __future__ import annotations

import logging
import random
import socket
import struct
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from gtidsnap.core.model import TableId
from gtidsnap.core.run_stats import DurationHistogram
from gtidsnap.engine.loop import Engine
from gtidsnap.observe.metrics import METRIC_SAMPLE_NAMES, RunCollector, RunView
from gtidsnap.observe.probe import ProbeFacts
from gtidsnap.observe.server import MonitoringServer
from tests.fakes import T, World, jsonl_engine


def finished_engine(tmp: Path, rows: int = 40, writes: int = 30) -> Engine:
    world = World(random.Random(3), rows=rows, writes=writes)
    engine = jsonl_engine(world, tmp)
    engine.run(snapshot=[T], until_caught_up=True)
    return engine


def view_of(engine: Engine, facts: ProbeFacts) -> RunView:
    probe: Any = SimpleNamespace(facts=facts, failures=2)
    return RunView(engine, probe, "127.0.0.1:3306", "mysql", stall_after_s=60.0, heartbeat_s=1.0)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(server: MonitoringServer, path: str, accept: str = "") -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://{server.address}{path}", headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_each_decoder_process_has_its_rows_and_restarts_are_counted(tmp_path: Path) -> None:
    engine = finished_engine(tmp_path)
    engine.stats.decoded, engine.stats.decoder_restarts = [1200, 900], 1
    facts = ProbeFacts(time.monotonic(), None, 0, time.time(), {T: 35})
    server = MonitoringServer("127.0.0.1:0", view_of(engine, facts)).start()
    try:
        got = samples(scrape(server, "/metrics")[2])
    finally:
        server.stop()
    assert got["gtidsnap_decoder_rows_total", (("decoder", "1"),)] == 1200
    assert got["gtidsnap_decoder_rows_total", (("decoder", "2"),)] == 900
    assert got["gtidsnap_decoder_restarts_total", ()] == 1


def test_the_metrics_say_what_the_engine_did(tmp_path: Path) -> None:
    engine = finished_engine(tmp_path)
    facts = ProbeFacts(time.monotonic(), None, 0, time.time(), {T: 35})
    server = MonitoringServer("127.0.0.1:0", view_of(engine, facts)).start()
    try:
        status, kind, text = scrape(server, "/metrics")
    finally:
        server.stop()
    assert status == 200 and kind.startswith("text/plain")
    got = samples(text)
    names = {name for name, _ in got}
    assert names <= METRIC_SAMPLE_NAMES, (
        f"samples not listed for docs/monitoring: {names - METRIC_SAMPLE_NAMES}"
    )
    stats = engine.stats
    table = str(T)
    assert got["gtidsnap_records_total", (("op", "r"), ("table", table))] == stats.snapshot_rows == 40
    streamed = sum(v for (name, labels), v in got.items() if name == "gtidsnap_records_total") - 40
    assert streamed == sum(n for (_, _, op), n in stats.changes.items() if op != "r") > 0
    assert got["gtidsnap_snapshot_rows", (("table", table),)] == 40
    assert got["gtidsnap_snapshot_rows_estimated", (("table", table),)] == 40, "never below the rows read"
    assert got["gtidsnap_snapshot_tables", (("state", "done"),)] == 1
    assert got["gtidsnap_snapshot_chunks_total", ()] == stats.chunks > 0
    assert got["gtidsnap_stream_events_total", ()] == stats.events > 0
    assert (
        got["gtidsnap_source_lag_seconds", ()] == 0.0 and got["gtidsnap_source_transactions_behind", ()] == 0
    )
    assert got["gtidsnap_batch_commit_duration_seconds_count", ()] == stats.commits.count > 0
    assert got["gtidsnap_errors_total", (("kind", "replica_probe"),)] == 2
    assert got["gtidsnap_replica_info", (("flavor", "mysql"), ("replica", "127.0.0.1:3306"))] == 1
    assert 0 <= got["gtidsnap_checkpoint_age_seconds", ()] < 60


def test_lag_is_the_newest_committed_source_time_while_behind(tmp_path: Path) -> None:
    engine = finished_engine(tmp_path, rows=4, writes=0)
    now = time.time()
    engine.stats.committed_source_ts = int(now) - 30
    behind = view_of(engine, ProbeFacts(time.monotonic(), None, 5, now - 600, {}))
    assert 29 <= (behind.lag_s() or 0) <= 32
    recently_caught_up = view_of(engine, ProbeFacts(time.monotonic(), None, 5, now - 2, {}))
    assert 1.5 <= (recently_caught_up.lag_s() or 0) <= 4, "changes of tables not captured are no lag"
    assert view_of(engine, ProbeFacts(time.monotonic(), None, None, None, {})).lag_s() is None


def test_openmetrics_on_request_health_and_readiness(tmp_path: Path) -> None:
    engine = finished_engine(tmp_path, rows=4, writes=0)
    facts = ProbeFacts(time.monotonic(), None, 0, time.time(), {})
    view = view_of(engine, facts)
    server = MonitoringServer("127.0.0.1:0", view).start()
    try:
        status, kind, text = scrape(server, "/metrics", "application/openmetrics-text; version=1.0.0")
        assert status == 200 and kind.startswith("application/openmetrics-text")
        assert any(f.name == "gtidsnap_records" for f in openmetrics_families(text))
        engine.stats.tick_at = time.monotonic()
        assert scrape(server, "/healthz")[::2] == (200, "ok\n")
        assert scrape(server, "/readyz")[::2] == (200, "ok\n")
        engine.stats.tick_at = time.monotonic() - 120
        status, _, body = scrape(server, "/healthz")
        assert status == 503 and "has not turned for 120 s" in body
        engine.stats.tick_at = time.monotonic()
        view.probe = SimpleNamespace(
            facts=ProbeFacts(time.monotonic(), "Connection refused", None), failures=3
        )  # type: ignore[assignment]
        status, _, body = scrape(server, "/readyz")
        assert status == 503 and "the replica does not answer: Connection refused" in body
        assert scrape(server, "/healthz")[0] == 200, "a replica away is no reason to restart gtidsnap"
        assert scrape(server, "/nope")[0] == 404
    finally:
        server.stop()


def test_a_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    engine = finished_engine(tmp_path, rows=1, writes=0)
    view = view_of(engine, ProbeFacts())
    first = MonitoringServer("127.0.0.1:0", view).start()
    try:
        try:
            MonitoringServer(first.address, view)
        except Exception as exc:
            assert f"metrics.listen = '{first.address}': cannot serve there" in str(exc)
        else:
            raise AssertionError("a second server on a taken port")
    finally:
        first.stop()


def test_duration_histogram_buckets_are_cumulative() -> None:
    durations = DurationHistogram(bounds=(0.1, 1.0))
    for seconds in (0.05, 0.1, 0.5, 3.0):
        durations.observe(seconds)
    assert durations.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert durations.count == 4 and abs(durations.sum_s - 3.65) < 1e-9
    assert DurationHistogram(bounds=(1.0,)).cumulative() == [("1.0", 0), ("+Inf", 0)]


def test_a_delta_sinks_mirrors_show_their_waiting_changes_and_merges(tmp_path: Path) -> None:
    engine = finished_engine(tmp_path, rows=2, writes=0)
    merges = DurationHistogram()
    for seconds in (0.4, 3.0):
        merges.observe(seconds)
    waiting = {T: (120, time.monotonic() - 42.0), TableId("shop", "idle"): (0, None)}
    keeper = SimpleNamespace(merges=merges, mirror_facts=lambda: waiting)
    engine.sink = SimpleNamespace(_keeper=keeper)  # type: ignore[assignment]
    got = samples(generate_latest(registry_of(view_of(engine, ProbeFacts()))).decode())
    assert got["gtidsnap_mirror_changes_waiting", (("table", str(T)),)] == 120
    assert 41 <= got["gtidsnap_mirror_freshness_seconds", (("table", str(T)),)] <= 45
    assert got["gtidsnap_mirror_freshness_seconds", (("table", "shop.idle"),)] == 0
    assert got["gtidsnap_mirror_merge_duration_seconds_count", ()] == 2
    assert got["gtidsnap_mirror_merge_duration_seconds_bucket", (("le", "0.5"),)] == 1
    assert got["gtidsnap_mirror_merge_duration_seconds_sum", ()] == 3.4


def registry_of(view: RunView) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(view))
    return registry


def test_the_documented_ipv6_form_binds(tmp_path: Path) -> None:
    """``[::1]:port`` is how the README writes an IPv6 listen address; it failed at bind (an IPv4 socket)."""
    view = view_of(finished_engine(tmp_path, rows=1, writes=0), ProbeFacts())
    server = MonitoringServer("[::1]:0", view).start()
    try:
        assert server.address.startswith("[::1]:")
        assert scrape(server, "/metrics")[0] == 200
    finally:
        server.stop()


def test_requests_that_fail_are_logged_once_with_a_count_never_a_traceback_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    """300 clients that hang up mid-request (a reset): the standard library printed a traceback for each
    into the run's log. Now one WARNING line a kind, and the count when the server stops."""
    view = view_of(finished_engine(tmp_path, rows=1, writes=0), ProbeFacts())
    server = MonitoringServer("127.0.0.1:0", view).start()
    host, port = server.address.rsplit(":", 1)
    try:
        with caplog.at_level(logging.WARNING, logger="gtidsnap.observe"):
            for _ in range(300):
                client = socket.create_connection((host, int(port)))
                client.sendall(b"GET /metr")  # half a request line, then a reset
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
            deadline = time.monotonic() + 10
            while not caplog.records and time.monotonic() < deadline:
                time.sleep(0.05)
            assert scrape(server, "/healthz")[0] in (200, 503), "it still serves"
    finally:
        with caplog.at_level(logging.WARNING, logger="gtidsnap.observe"):
            server.stop()
    lines = [r.getMessage() for r in caplog.records]
    assert "Traceback" not in capfd.readouterr().err
    assert 1 <= len(lines) <= 3, lines
    assert lines[0].startswith("monitoring endpoint: a request failed: ConnectionResetError"), lines
    assert any("more like it in the last" in line for line in lines[1:]), lines
