"""The driver's JVM options by default: C1 only needs a code cache that a long run cannot fill."""

import re
from pathlib import Path

import pytest

from gtidsnap.sinks.delta.spark_session import _default_conf


def _code_cache_mb(options: str) -> int:
    match = re.search(r"-XX:ReservedCodeCacheSize=(\d+)m", options)
    assert match, f"no code cache size in {options!r}"
    return int(match.group(1))


def test_c1_only_gets_the_code_cache_tiered_compilation_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GTIDSNAP_JVM_OPTS", raising=False)
    options = _default_conf([Path("/jars/delta.jar")])["spark.driver.extraJavaOptions"]
    assert "-XX:TieredStopAtLevel=1" in options
    # C1 alone reserves 48 MB, which a run with a catalog and histories filled.
    assert _code_cache_mb(options) >= 240


def test_the_environment_replaces_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GTIDSNAP_JVM_OPTS", "-Xmx2g")
    assert _default_conf([Path("/jars/delta.jar")])["spark.driver.extraJavaOptions"] == "-Xmx2g"
