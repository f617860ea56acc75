"""The snapshot's time left, as the retention watch estimates it: rows left over the rate measured."""

from __future__ import annotations

from pathlib import Path

from gtidsnap.core.model import TableId
from gtidsnap.observe.retention_watch import RetentionWatch
from gtidsnap.source.connection import ConnectionSettings, Secret

T = TableId("shop", "orders")


class Estimates:
    def estimated_rows(self, table: TableId) -> int | None:
        return 10_000 if table == T else None


def test_time_left_is_rows_left_over_the_rate_between_two_measurements(tmp_path: Path) -> None:
    clock = iter([100.0, 110.0, 120.0])
    settings = ConnectionSettings("127.0.0.1", 1, "u", Secret("p"))
    watch = RetentionWatch(settings, tmp_path / "c.json", 60, 300, lambda *a: None, lambda: next(clock))
    replica = Estimates()
    assert watch._snapshot_left_s(replica, [(T, 1_000)]) is None  # type: ignore[arg-type]  # no rate yet
    assert watch._snapshot_left_s(replica, [(T, 2_000)]) == 80.0  # type: ignore[arg-type]  # 100 rows/s
    assert watch._snapshot_left_s(replica, []) is None  # type: ignore[arg-type]  # none under way
