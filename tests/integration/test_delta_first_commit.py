"""kill -9 during a table's first Delta commit, through the real CLI on the real MariaDB replica.

A table's first commit creates it (an empty version 0) and then merges into it. A kill right after the
creation leaves an empty table; a kill inside the creation leaves a ``_delta_log`` folder that holds no
committed version (a temporary file, an empty ``_staged_commits``), on which Delta refuses to create the
table again (DELTA_TABLE_NOT_FOUND), so every restart failed. The named crash points
``delta-after-create`` and ``delta-before-create`` hit the instants around the creation; the JVM's own
instant inside it cannot be named, so the test leaves behind exactly what such a kill leaves (seen by
killing Spark at random during creations) and restarts on it. After the restarts the output must be
exact (``check_output``: mirrors equal the sources, every changelog record once, no rewind).
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta import changelog_path
from tests.integration.cdc import Writer, create_table
from tests.integration.fixtures.db_servers import ReplicaPair
from tests.integration.test_delta_engine import TABLES, DeltaCli, check_output, delta_tables, tail

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def committed_tables(root: str, db: str) -> set[str]:
    """The Delta tables of the run that have a committed version."""
    return {
        name
        for name, path in delta_tables(root, db).items()
        if any(Path(path, "_delta_log").glob("0" * 20 + ".json"))
    }


def leave_an_uncommitted_log(table_path: str) -> None:
    """What a SIGKILL inside Delta's creation of a table leaves: the log folder, no version in it."""
    log = Path(table_path) / "_delta_log"
    (log / "_staged_commits").mkdir(parents=True)
    (log / f".00000000000000000000.json.{uuid.uuid4()}.tmp").write_bytes(b"")


def test_kill_9_around_and_inside_a_tables_first_commit(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, spark: SparkSession
) -> None:
    pair, db = mariadb_pair, maria_db
    for t in TABLES:
        create_table(pair, db, t, 60)
    cli = DeltaCli(pair, db, tmp_path, {"GTIDSNAP_SNAPSHOT_CHUNK_SIZE": "20"})
    writer = Writer(pair, db, list(TABLES), seed=41, transactions=100_000, pause_s=0.1).start()
    try:
        # 1. right after the first table (a's mirror) was created, before anything was merged into it
        code, log = cli.run(GTIDSNAP_TEST_CRASH_AT="delta-after-create:1")
        assert code == -signal.SIGKILL, f"run 1 did not die after the creation: exit {code}\n{tail(log)}"
        assert committed_tables(cli.root, db) == {"a"}, "run 1 created exactly a's mirror"
        # 2. the restart merges into the empty mirror; killed before creating the next table (a's changelog)
        code, log = cli.run(GTIDSNAP_TEST_CRASH_AT="delta-before-create:1")
        assert code == -signal.SIGKILL, f"run 2 did not die before a creation: exit {code}\n{tail(log)}"
        assert committed_tables(cli.root, db) == {"a"}, "run 2 died before creating a's changelog"
        # 3. as if that kill had landed inside Delta's creation of a's changelog
        leave_an_uncommitted_log(changelog_path(cli.root, TableId(db, "a")))
    finally:
        writer.stop()
    writer.join()
    code, log = cli.run(GTIDSNAP_SINK_BATCH_MS="3000")
    assert code == 0, f"the restart on an uncommitted _delta_log failed: exit {code}\n{tail(log)}"
    assert "without any committed version" in log, "the leftover log was not noticed"
    for marker in ("NativeCodeLoader", "Using incubator modules", "log4j"):
        assert marker not in log, f"Spark's own output reached gtidsnap's ({marker})"
    spark_log = (tmp_path / "spark.log").read_text(encoding="utf-8")
    assert "Using incubator modules" in spark_log, "Spark's output goes to spark.log beside the checkpoint"
    assert committed_tables(cli.root, db) == {"a", "a.changelog", "b", "b.changelog"}
    check_output(spark, pair, db, cli.root)
