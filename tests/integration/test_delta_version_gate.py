"""The Delta version gate on real Spark + Delta: the JVM's Delta is the tested one, and on another
version the sink's fast paths through Delta's internal API step aside for Spark's own APPEND and MERGE,
with one WARNING naming both versions and the same output.

"Another version" is the tested-version constant pointing elsewhere (the JVM's jars are the ones
scripts/spark-deps.sh resolves): the gate compares the two, so the sink takes the path a JVM with other
jars takes. The same scenario (a fresh mirror's snapshot rows, new keys, a MERGE of changes alone, the
changelogs committed after their checkpoints, the points table, a stop before a checkpoint's changelog
commits and one before a checkpoint) runs once on each path; the output must be the same, commit for
commit."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.sinks.delta import DeltaSink, changelog_path, jvm_delta, list_tables, mirror_path
from gtidsnap.sinks.delta.consistent_points import points_path
from gtidsnap.sinks.delta.spark_session import default_delta_jars_dir
from tests.integration.test_delta_sink import ITEMS, ORDERS, SCHEMAS, change, read, row

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

UNTESTED = "4.3.0"  # what the tested-version constant says in the "another version" run
GATE_LINE = "is loaded in this JVM, but gtidsnap is tested with"


def test_the_jvm_loads_the_tested_delta(spark: SparkSession) -> None:
    """The jars scripts/spark-deps.sh resolves are the tested Delta: the gate leaves the fast paths on."""
    jars = sorted(p.name for p in default_delta_jars_dir().glob("delta-spark_*.jar"))
    assert jars and all(name.endswith(f"-{jvm_delta.TESTED_DELTA_VERSION}.jar") for name in jars), jars
    assert jvm_delta.delta_version(spark) == jvm_delta.TESTED_DELTA_VERSION
    assert jvm_delta.delta_gate(spark).fast_paths


def opened(spark: SparkSession, root: Path, position: Any) -> DeltaSink:
    """A sink as an engine drives it (checkpoints reported: changelogs committed once checkpointed),
    mirrors updated by each batch, snapshot rows appended at once."""
    settings = SinkSettings(
        type="delta",
        path=str(root),
        app_id="gate-app",
        merge_interval_s=0.0,
        snapshot_rows=1,
        changelog_snapshot_rows=True,
    )
    sink = DeltaSink(settings, lambda: spark, lambda table: SCHEMAS[table])
    sink.report_checkpoints()
    sink.open(position)
    return sink


def saved(position: Any, next_seq: int) -> Checkpoint:
    return Checkpoint("mariadb", parse_gtid_set("mariadb", f"0-1-{next_seq - 1}"), next_seq, position)


def run_scenario(spark: SparkSession, root: Path) -> None:
    sink = opened(spark, root, None)
    # batch 1: a fresh mirror's snapshot rows (appended at once) and new keys
    sink.write([change("r", k, None, row(k, f"chunk {k}"), fresh=True) for k in range(1, 5)])
    sink.write([change("c", 5, None, row(10, "ten")), change("c", 6, None, row(1, "item"), ITEMS)])
    first = sink.commit()
    sink.checkpointed(first, saved(first, 7))
    # batch 2: changes of held keys (a MERGE of changes alone) and a new key
    sink.write([change("u", 7, row(1, "chunk 1"), row(1, "one")), change("d", 8, row(2, "chunk 2"), None)])
    sink.write([change("c", 9, None, row(11, "eleven")), change("u", 10, row(10, "ten"), row(10, "TEN"))])
    sink.write([change("u", 11, row(1, "item"), row(1, "item!"), ITEMS)])
    second = sink.commit()
    sink.checkpointed(second, saved(second, 12))
    # batch 3: its checkpoint is saved, then the run stops before its changelog commits
    sink.write(
        [change("u", 12, row(3, "chunk 3"), row(3, "three")), change("c", 13, None, row(2, "i2"), ITEMS)]
    )
    third = sink.commit()
    sink.close()
    # the next run commits them; its batch 4 reaches the mirror but not a checkpoint
    sink = opened(spark, root, third)
    sink.write([change("d", 14, row(1, "one"), None), change("u", 15, row(4, "chunk 4"), row(4, "lost"))])
    assert sink.commit()["delta_batch"] == 4
    sink.close()
    # the run after undoes batch 4 and replays other records
    sink = opened(spark, root, third)
    sink.write([change("d", 14, row(1, "one"), None), change("u", 15, row(2, "i2"), row(2, "i2!"), ITEMS)])
    fifth = sink.commit()
    assert fifth["delta_batch"] == 5, "batch 4 was used by the stopped run"
    sink.checkpointed(fifth, saved(fifth, 16))
    sink.close()


def commits(path: str) -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(operation, user metadata, operation parameters, operation metrics) of each commit of a
    table, in order, read from its log."""
    found = []
    for file in sorted((Path(path) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        meta = json.loads(info.get("userMetadata") or "{}")
        found.append(
            (
                info["operation"],
                meta,
                info.get("operationParameters") or {},
                info.get("operationMetrics") or {},
            )
        )
    return found


def by_transaction_api(path: str) -> list[str]:
    """The commits of a table made through Delta's transaction API, not by Spark: a WRITE without
    Spark's output metrics, a MERGE without Spark's predicates (its rewrite of the files)."""
    made = []
    for operation, meta, parameters, metrics in commits(path):
        if operation == "WRITE" and "numOutputRows" not in metrics:
            made.append(f"WRITE {meta}")
        if operation == "MERGE" and parameters.get("matchedPredicates") in (None, "[]"):
            made.append(f"MERGE {meta}")
    return made


def output_of(spark: SparkSession, root: Path) -> dict[str, Any]:
    """What a consumer reads of the output: each table's rows and its commits (operation, user
    metadata), the recorded points."""
    tables = {f"{t.table}:{t.kind}": t.path for t in list_tables(spark, str(root))}
    rows = {
        name: sorted((tuple(r) for r in spark.read.format("delta").load(path).collect()), key=repr)
        for name, path in tables.items()
    }
    logs = {name: [(op, meta) for op, meta, _, _ in commits(path)] for name, path in tables.items()}
    points = read(spark, points_path(str(root)), "batch", "gtid_set", "next_seq", "pending_snapshot_rows")
    return {"rows": rows, "commits": logs, "points": points}


def every_table(spark: SparkSession, root: Path) -> list[str]:
    return [t.path for t in list_tables(spark, str(root))] + [points_path(str(root))]


def test_an_untested_delta_is_reported_and_served_by_spark(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gtidsnap.sinks.delta")
    tested, untested = tmp_path / "tested", tmp_path / "untested"
    run_scenario(spark, tested)
    assert not [r for r in caplog.records if GATE_LINE in r.getMessage()], "the tested Delta: no line"
    fast = [c for path in every_table(spark, tested) for c in by_transaction_api(path)]
    assert any(c.startswith("WRITE") for c in fast) and any(c.startswith("MERGE") for c in fast), fast

    monkeypatch.setattr(jvm_delta, "TESTED_DELTA_VERSION", UNTESTED)
    monkeypatch.setattr(jvm_delta, "_WARNED", set())
    run_scenario(spark, untested)
    lines = [r for r in caplog.records if GATE_LINE in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].levelno == logging.WARNING
    found = jvm_delta.delta_version(spark)
    assert f"Delta Lake {found} is loaded" in lines[0].getMessage()
    assert f"tested with Delta Lake {UNTESTED}:" in lines[0].getMessage()
    internal = {path: by_transaction_api(path) for path in every_table(spark, untested)}
    assert not {p: c for p, c in internal.items() if c}, "committed through Delta's internal API"

    # the same output, commit for commit, as on the fast paths
    assert output_of(spark, untested) == output_of(spark, tested)
    orders, items = mirror_path(str(untested), ORDERS), mirror_path(str(untested), ITEMS)
    assert read(spark, orders, "id", "name", "_seq") == [
        (3, "three", 12),
        (4, "chunk 4", 4),
        (10, "TEN", 10),
        (11, "eleven", 9),
    ]
    assert read(spark, items, "id", "name", "_seq") == [(1, "item!", 11), (2, "i2!", 15)]
    logged = [r[0] for r in read(spark, changelog_path(str(untested), ORDERS), "_seq")]
    assert logged == [1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 14], "each checkpointed record once, batch 4's none"
    assert [r[0] for r in read(spark, changelog_path(str(untested), ITEMS), "_seq")] == [6, 11, 13, 15]
    batches = [r[0] for r in read(spark, points_path(str(untested)), "batch")]
    assert batches == [1, 2, 5]
    left = sorted(p.name for p in Path(changelog_path(str(untested), ORDERS)).glob("*.parquet"))
    named = {
        json.loads(line)["add"]["path"]
        for file in (Path(changelog_path(str(untested), ORDERS)) / "_delta_log").glob("*.json")
        for line in file.read_text(encoding="utf-8").splitlines()
        if '"add"' in line
    }
    unnamed = [name for name in left if name not in named]
    assert len(unnamed) == 1, f"only batch 4's file, never checkpointed, is in no commit: {unnamed}"
