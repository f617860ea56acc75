"""The needed binlog found by bisection, reading few files (a fake replica's files)."""

from __future__ import annotations

from typing import Any

import pytest

from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.source.binlog.retention import replica_headroom

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


class Files:
    """``count`` files; file i holds transactions 10 i + 1 .. 10 i + 10 and started at 1000 + i."""

    def __init__(self, count: int, expire_s: float = 3600.0) -> None:
        self.names = [f"binlog.{i:06d}" for i in range(count)]
        self.expire_s = expire_s
        self.read: list[str] = []

    def binlog_names(self) -> list[str]:
        return self.names

    def binlog_expire_s(self) -> float:
        return self.expire_s

    def before(self, replica: Any, name: str) -> GtidSet:
        self.read.append(name)
        i = int(name.rsplit(".", 1)[1])
        return parse_gtid_set("mysql", f"{U}:1-{10 * i}" if i else "")

    def started(self, replica: Any, name: str, before: GtidSet) -> float:
        return 1000.0 + int(name.rsplit(".", 1)[1])


@pytest.mark.parametrize(
    ("count", "done", "needed"), [(500, 1234, 123), (500, 4999, 499), (1, 3, 0), (500, 10, 1)]
)
def test_the_needed_file_is_found_reading_few(count: int, done: int, needed: int) -> None:
    files = Files(count)
    found = replica_headroom(
        files,  # type: ignore[arg-type]
        parse_gtid_set("mysql", f"{U}:1-{done}"),
        files.before,
        files.started,
        now=lambda: 1000.0 + count,
    )
    assert found.needed == files.names[needed]
    assert len(set(files.read)) <= 12, "a bisection, not a scan"
    if needed + 1 < count:
        assert found.seconds == 1000.0 + needed + 1 + 3600 - (1000.0 + count)
    else:
        assert found.seconds is None


def test_a_checkpoint_older_than_every_file_has_lost_its_binlog() -> None:
    files = Files(5)
    files.names = files.names[2:]  # binlog.000000 and 000001 purged: the oldest starts after 1-20
    found = replica_headroom(files, parse_gtid_set("mysql", f"{U}:1-15"), files.before, files.started)  # type: ignore[arg-type]
    assert found.needed is None and found.line(1) == (
        "the binlog the checkpoint needs is purged already: it cannot be continued here",
        True,
    )
