"""The monitoring docs in docs/monitoring: alert rules that promtool accepts and whose unit tests
(alerts_test.yml) pass, a Grafana dashboard whose queries parse, and alerts and panels that name only
metrics gtidsnap exposes (gtidsnap.observe.metrics.METRIC_SAMPLE_NAMES).

promtool comes from Debian's prometheus package, unpacked by scripts/promtool.sh (run by scripts/setup)
into <state dir>/promtool/bin. A missing promtool fails these tests; they are never skipped."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "docs" / "monitoring"
ALERTS = MONITORING / "alerts.yml"
ALERTS_TEST = MONITORING / "alerts_test.yml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
STATE_DIR = Path(os.environ.get("GTIDSNAP_STATE_DIR", str(ROOT / ".state")))
PROMTOOL = STATE_DIR / "promtool" / "bin" / "promtool"
PROMTOOL_TIMEOUT_S = 120.0

METRIC = re.compile(r"\bgtidsnap_[a-z0-9_]+")
ALERT = re.compile(r"^\s*- alert:\s*(\S+)\s*$", re.MULTILINE)
EXPR = re.compile(r"^\s*expr:\s*(.*?)\s*$", re.MULTILINE)
SERIES = re.compile(r"^\s*- series:\s*'([a-zA-Z_:][a-zA-Z0-9_:]*)", re.MULTILINE)
BLOCK_SCALAR = re.compile(r"^[|>][-+]?$")
REQUIRED_ALERTS = {
    "GtidsnapLagHigh",
    "GtidsnapCheckpointStalled",
    "GtidsnapSnapshotFailed",
    "GtidsnapDown",
    "GtidsnapLoopStuck",
    "GtidsnapMirrorStale",
    "GtidsnapErrors",
}
# Grafana's variables, as values promtool can parse: durations for $__rate_interval, $__range, ...
GRAFANA_VARIABLES = ((re.compile(r"\$__[a-z_]+"), "1m"), (re.compile(r"\$instance\b"), ".+"))
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


@pytest.fixture(scope="module")
def sample_names() -> frozenset[str]:
    from gtidsnap.observe.metrics import METRIC_SAMPLE_NAMES

    names: frozenset[str] = METRIC_SAMPLE_NAMES
    return names


def promtool(*args: str) -> str:
    """Runs the installed promtool from the repo root; fails (never skips) when it is not installed."""
    if not (PROMTOOL.is_file() and os.access(PROMTOOL, os.X_OK)):
        pytest.fail(
            f"promtool is not installed at {PROMTOOL}: run scripts/setup (or scripts/promtool.sh install)",
            pytrace=False,
        )
    done = subprocess.run(
        [str(PROMTOOL), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"promtool {' '.join(args)} exited {done.returncode}:\n{output}"
    return output


def alert_names() -> list[str]:
    return ALERT.findall(ALERTS.read_text(encoding="utf-8"))


def alert_exprs() -> list[str]:
    exprs = EXPR.findall(ALERTS.read_text(encoding="utf-8"))
    multi_line = [e for e in exprs if BLOCK_SCALAR.match(e)]
    assert not multi_line, f"keep every expr: of {ALERTS.name} on one line (this test reads them as lines)"
    return exprs


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def panels(container: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those inside (collapsed) rows."""
    for panel in container.get("panels", []):
        yield panel
        yield from panels(panel)


def panel_exprs() -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) of every panel target."""
    return [
        (panel.get("title", "?"), target.get("refId", "?"), target["expr"])
        for panel in panels(dashboard())
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def unknown_metrics(expr: str, known: frozenset[str]) -> list[str]:
    return sorted(set(METRIC.findall(expr)) - known)


def test_the_alert_rules_pass_promtool_check_rules() -> None:
    names = alert_names()
    output = promtool("check", "rules", "--lint=all", "--lint-fatal", str(ALERTS.relative_to(ROOT)))
    assert f"SUCCESS: {len(names)} rules found" in output, output


def test_the_alert_rules_pass_their_promtool_unit_tests() -> None:
    output = promtool("test", "rules", str(ALERTS_TEST.relative_to(ROOT)))
    assert "SUCCESS" in output, output


def test_the_unit_tests_cover_lag_and_a_stalled_checkpoint() -> None:
    tested = set(re.findall(r"^\s*alertname:\s*(\S+)", ALERTS_TEST.read_text(encoding="utf-8"), re.MULTILINE))
    assert {"GtidsnapLagHigh", "GtidsnapCheckpointStalled"} <= tested


def test_every_required_alert_is_there_with_for_severity_summary_and_description() -> None:
    text = ALERTS.read_text(encoding="utf-8")
    names = alert_names()
    assert len(names) == len(set(names)), f"duplicate alert names: {names}"
    assert set(names) >= REQUIRED_ALERTS, f"missing: {sorted(REQUIRED_ALERTS - set(names))}"
    assert len(alert_exprs()) == len(names), "one expr: per alert"
    blocks = re.split(r"^\s*- alert:", text, flags=re.MULTILINE)[1:]
    for name, block in zip(names, blocks, strict=True):
        for key in ("for:", "severity:", "summary:", "description:"):
            assert re.search(rf"^\s*{key}", block, re.MULTILINE), f"{name} has no {key}"


def test_the_alerts_name_only_metrics_gtidsnap_exposes(sample_names: frozenset[str]) -> None:
    exprs = alert_exprs()
    assert exprs
    unknown = {expr: wrong for expr in exprs if (wrong := unknown_metrics(expr, sample_names))}
    assert not unknown, f"alerts.yml names metrics gtidsnap does not expose: {unknown}"


def test_the_alert_unit_tests_feed_metrics_gtidsnap_exposes(sample_names: frozenset[str]) -> None:
    series = SERIES.findall(ALERTS_TEST.read_text(encoding="utf-8"))
    assert series
    unknown = sorted(set(series) - sample_names - {"up"})
    assert not unknown, f"alerts_test.yml feeds series gtidsnap does not expose: {unknown}"


def test_the_dashboard_has_a_titled_panel_per_unique_id_and_a_prometheus_variable() -> None:
    board = dashboard()
    assert board["schemaVersion"] == 39
    every = list(panels(board))
    assert every
    assert all("id" in p for p in every), "a panel without an id"
    ids = [p["id"] for p in every]
    assert all(isinstance(i, int) for i in ids), ids
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    untitled = [p.get("id") for p in every if not str(p.get("title", "")).strip()]
    assert not untitled, f"panels without a title: {untitled}"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    for panel in every:
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat"}, panel["title"]
        assert panel.get("targets"), f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target.get("datasource", panel.get("datasource")) == DATASOURCE, panel["title"]


def test_the_dashboard_names_only_metrics_gtidsnap_exposes(sample_names: frozenset[str]) -> None:
    exprs = panel_exprs()
    assert exprs
    unknown = {
        f"{title} ({ref})": wrong
        for title, ref, expr in exprs
        if (wrong := unknown_metrics(expr, sample_names))
    }
    assert not unknown, f"dashboard panels name metrics gtidsnap does not expose: {unknown}"
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            wrong = unknown_metrics(variable["definition"], sample_names)
            assert not wrong, f"dashboard variable {variable['name']} names unknown metrics: {wrong}"


def test_the_dashboard_queries_parse_as_promql(tmp_path: Path) -> None:
    """Each panel query (Grafana's variables replaced) as a recording rule, checked by promtool."""
    rules = []
    for n, (title, ref, expr) in enumerate(panel_exprs()):
        for variable, value in GRAFANA_VARIABLES:
            expr = variable.sub(value, expr)
        assert "$" not in expr, f"{title} ({ref}): a Grafana variable this test does not know: {expr}"
        rules.append({"record": f"dashboard:query_{n}:{ref}", "expr": expr})
    rules_file = tmp_path / "dashboard-rules.yml"  # JSON is YAML
    rules_file.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
    output = promtool("check", "rules", str(rules_file))
    assert f"SUCCESS: {len(rules)} rules found" in output, output
