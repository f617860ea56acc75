"""A table of wide rows snapshotted with a large ``snapshot.chunk_size``: its chunks are kept to the
budget by the replica's estimate of its rows' size, the log says so once, and the output is exact."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest

from gtidsnap.core.model import TableId
from gtidsnap.run import build_engine
from gtidsnap.snapshot import chunk_budget
from gtidsnap.source.replica import Replica
from tests.integration.cdc import check_invariants, execute, make_config, read_records, source_rows
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration

ROWS = 2000
BUDGET = 2**20  # 1 MiB here, so a few MB of rows make several chunks


def test_wide_rows_are_read_in_chunks_kept_to_the_budget(
    pair: ReplicaPair,
    fresh_db: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(chunk_budget, "CHUNK_BYTES_BUDGET", BUDGET)
    execute(
        pair,
        fresh_db,
        "CREATE TABLE t (id BIGINT PRIMARY KEY, v INT NOT NULL, payload TEXT)",
        many=[("INSERT INTO t VALUES (%s, 0, %s)", [(i, f"{i:08d}" * 375) for i in range(ROWS)])],
    )
    table = TableId(fresh_db, "t")
    config = make_config(pair, tmp_path, [table], chunk_size=100_000)
    with Replica(config.source) as replica:
        deadline = time.monotonic() + 90  # InnoDB's statistics follow the rows in the background
        while (estimate := replica.avg_row_length(table)) is None or estimate < 1500:
            assert time.monotonic() < deadline, f"the estimate stayed {estimate} for {ROWS} rows of ~3 KB"
            time.sleep(0.5)
        with caplog.at_level(logging.INFO, "gtidsnap.snapshot.chunk_budget"):
            build_engine(config, replica).run(snapshot=[table], until_caught_up=True)
    size = max(chunk_budget.MIN_BUDGETED_ROWS, BUDGET // estimate)
    told = [r.getMessage() for r in caplog.records if r.name == "gtidsnap.snapshot.chunk_budget"]
    assert told == [
        f"{table}: chunks of {size:,} rows, not snapshot.chunk_size = 100,000: its rows are ~{estimate:,} "
        "bytes each by the server's estimate (AVG_ROW_LENGTH), and a reader holds a chunk whole, so "
        "chunks are kept to ~1 MiB of rows (at least 100 rows)"
    ]
    (progress,) = json.loads((tmp_path / "checkpoint.json").read_text())["context"]["tables"]
    assert progress["done"] and not progress["error"] and progress["rows"] == ROWS
    assert progress["chunks"] == math.ceil(ROWS / size)
    check_invariants(read_records(tmp_path), {f"{fresh_db}.t": source_rows(pair, fresh_db, "t")})
