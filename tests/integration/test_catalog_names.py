"""Tables by name (``sink.database``) in the embedded metastore, on MariaDB only (names are the Delta
side's alone: the source's flavour changes nothing in them, and each flavour costs four JVM starts):
gtidsnap runs twice
(snapshot, then changes) with ``sink.database = "{db}"`` and ``sink.history = true``; then a consumer's
own Spark application (a process of its own, as the embedded metastore wants one at a time) reads the
mirror, the changelog and the history by name, streams the changelog by name, and reads the current
state by name, each equal to what the source holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cdc import REPO, create_table, execute, source_rows
from tests.integration.fixtures.db_servers import ReplicaPair
from tests.integration.test_delta_engine import TABLES, DeltaCli, tail

pytestmark = pytest.mark.integration

CONSUMER = """
import json, sys
from gtidsnap import current_state_of
from gtidsnap.config.loading import SinkSettings
from gtidsnap.sinks.delta.catalog_names import sink_spark_session

root, db = sys.argv[1], sys.argv[2]
spark = sink_spark_session(SinkSettings(type="delta", path=root, database="{db}"), root, "consumer")
seen = {"tables": sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN `{db}`").collect())}
for t in ("a", "b"):
    mirror = spark.table(f"`{db}`.`{t}`")
    seen[t] = sorted([r.id, r.v, r.payload] for r in mirror.collect())
    seen[t + "_changelog"] = spark.table(f"`{db}`.`{t}__changelog`").count()
    history = spark.table(f"`{db}`.`{t}__history`")
    seen[t + "_current"] = sorted([r.id, r.v, r.payload] for r in history.where("is_current").collect())
    seen[t + "_versions"] = history.count()
    query = (
        spark.readStream.table(f"`{db}`.`{t}__changelog`").writeStream.format("memory")
        .queryName(f"feed_{t}").trigger(availableNow=True).start()
    )
    query.awaitTermination()
    seen[t + "_streamed"] = spark.table(f"feed_{t}").count()
    state = current_state_of(spark, f"`{db}`.`{t}`")
    seen[t + "_state"] = sorted([r.id, r.v, r.payload] for r in state.collect())
print("SEEN " + json.dumps(seen))
"""


def python(cli: DeltaCli, *args: str) -> subprocess.CompletedProcess[str]:
    """A Python process of its own (a consumer, a Spark job) in the CLI's environment."""
    return subprocess.run(
        [sys.executable, *args],
        env=cli.env(),
        cwd=cli.out,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_consumers_read_every_table_by_name(mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path) -> None:
    pair, db = mariadb_pair, maria_db
    for t in TABLES:
        create_table(pair, db, t, 50)
    cli = DeltaCli(
        pair,
        db,
        tmp_path,
        {
            "GTIDSNAP_SINK_DATABASE": "{db}",
            "GTIDSNAP_SINK_HISTORY": "true",
            "GTIDSNAP_SINK_MERGE_INTERVAL_S": "2",
        },
    )
    code, log = cli.run()
    assert code == 0, tail(log)
    for t in TABLES:
        execute(
            pair,
            db,
            f"UPDATE `{t}` SET v = v + 1 WHERE id < 20",
            f"DELETE FROM `{t}` WHERE id BETWEEN 20 AND 29",
            f"INSERT INTO `{t}` VALUES (1001, 5, 'new'), (1003, 6, 'newer')",
        )
    code, log = cli.run(snapshot=False, GTIDSNAP_CAPTURE_TABLES=",".join(f"{db}.{t}" for t in TABLES))
    assert code == 0, tail(log)

    done = python(cli, "-c", CONSUMER, cli.root, db)
    lines = [line for line in done.stdout.splitlines() if line.startswith("SEEN ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    seen = json.loads(lines[-1][5:])
    assert seen["tables"] == sorted(f"{t}{s}" for t in TABLES for s in ("", "__changelog", "__history"))
    for t in TABLES:
        want = sorted([r["id"], r["v"], r["payload"]] for r in source_rows(pair, db, t).values())
        assert seen[t] == want, f"mirror {t} by name"
        assert seen[f"{t}_state"] == want, f"current state of {t} by name"
        assert seen[f"{t}_current"] == want, f"the history's current versions of {t}"
        # 50 snapshot rows (ids 0, 2, ..., 98), 10 updated (a version more each), 5 deleted (closed), 2 new
        assert seen[f"{t}_versions"] == 50 + 10 + 2, f"history of {t}"
        assert seen[f"{t}_streamed"] == seen[f"{t}_changelog"] == 50 + 10 + 5 + 2, f"changelog of {t}"

    # the maintenance job by name, its catalog from the config
    config = tmp_path / "gtidsnap.toml"
    config.write_text(f'[sink]\ntype = "delta"\npath = "{cli.root}"\ndatabase = "{{db}}"\n', encoding="utf-8")
    maintenance = str(REPO / "spark" / "maintenance.py")
    done = python(cli, maintenance, "--config", str(config), "--no-vacuum", "--name", f"{db}.a__changelog")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{db}.a (changelog) at " in done.stdout and "OPTIMIZE" in done.stdout, done.stdout
    assert f"{db}.b" not in done.stdout and "(mirror)" not in done.stdout, done.stdout
