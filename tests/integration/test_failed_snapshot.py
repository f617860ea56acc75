"""A snapshot the server refuses fails alone and loudly, and is read again when asked for again: a run
never reports a success it did not have (the command line's exit status 3 is in tests/unit/cli)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gtidsnap.core.commands import StartSnapshot
from gtidsnap.core.model import TableId
from gtidsnap.run import build_engine
from gtidsnap.source.replica import Replica
from tests.integration.cdc import create_table, make_config, read_records, run_engine
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration

OVERFLOW = "id + 9223372036854775807 > 0"  # passes every check of ours; the server refuses BIGINT overflow


def test_a_refused_snapshot_is_reported_and_read_again_when_named_again(
    mariadb_pair: ReplicaPair, maria_db: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pair, db = mariadb_pair, maria_db
    create_table(pair, db, "a", 50)
    create_table(pair, db, "b", 40)
    a, b = TableId(db, "a"), TableId(db, "b")
    config = make_config(pair, tmp_path, [a, b], chunk_size=10)
    with Replica(config.source) as replica, caplog.at_level(logging.ERROR, "gtidsnap.engine.loop"):
        engine = build_engine(config, replica)
        engine.commands.put(StartSnapshot((a,), condition=OVERFLOW))  # as a signal with a filter asks
        stats = engine.run(snapshot=[b], until_caught_up=True)
    assert list(stats.failed) == [str(a)], stats.failed
    assert "out of range" in stats.failed[str(a)], stats.failed
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(m.startswith(f"snapshot of {a} stopped: ") for m in errors), errors
    snapshotted = [r["table"] for r in read_records(tmp_path) if r["snapshot"]]
    assert sorted(set(snapshotted)) == [str(b)] and len(snapshotted) == 40

    # the same tables named again, as a user runs the same command once the cause is fixed: the failed
    # snapshot is read in full, the finished one is not read again
    stats = run_engine(pair, tmp_path, [a, b], chunk_size=10)
    assert stats.failed == {} and stats.snapshot_rows == 50
    snapshotted = [r["table"] for r in read_records(tmp_path) if r["snapshot"]]
    assert snapshotted.count(str(a)) == 50 and snapshotted.count(str(b)) == 40
