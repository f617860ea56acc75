"""Binlog retention headroom (pure): which file a checkpoint needs, and when it expires."""

from __future__ import annotations

import pytest

from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.core.retention import BinlogFile, Headroom, duration, headroom, with_snapshot

DAY = 86_400.0


@pytest.mark.parametrize(
    ("before", "expire_s", "expected"),
    [
        (["0-1-5", "0-1-10", "0-1-20"], DAY, ("f1", DAY - 100)),  # needs f1, last written when f2 began
        (["0-1-5", "0-1-10", "0-1-20"], 0, ("f1", None)),  # binlogs never expire
        (["0-1-5", "0-1-10"], DAY, ("f1", None)),  # the file being written
        (["0-1-13"], DAY, (None, None)),  # the oldest starts past the checkpoint: purged already
        (["", "0-1-12", "0-1-30"], DAY, ("f1", DAY - 100)),  # a file that starts exactly at it
    ],
)
def test_the_needed_file_and_its_headroom(
    before: list[str], expire_s: float, expected: tuple[str | None, float | None]
) -> None:
    """File i started at 1000 + 100 i; now is 1300; the checkpoint processed 0-1-12."""
    files = [BinlogFile(f"f{i}", 1000 + 100 * i, parse_gtid_set("mariadb", b)) for i, b in enumerate(before)]
    found = headroom(files, parse_gtid_set("mariadb", "0-1-12"), expire_s, now=1300.0)
    assert (found.needed, found.seconds) == expected


def test_lines_say_what_to_do_and_warn_below_the_threshold() -> None:
    line, low = Headroom("binlog.000007", 3 * 3600, DAY).line(6 * 3600)
    assert low and line.startswith("binlog.000007, the oldest binlog the checkpoint needs, expires in 3.0 h")
    assert "keep the run going, or keep binlogs longer" in line
    line, low = Headroom("binlog.000007", 30 * 3600, DAY).line(6 * 3600)
    assert not low and line.endswith("expires in 1.2 days")
    assert Headroom(None, None, DAY).line(1)[1], "purged already is always a warning"
    assert Headroom("b", -5, DAY).line(1)[1]
    assert not Headroom("b", None, 0).line(1)[1]


@pytest.mark.parametrize(
    ("seconds", "text"), [(42, "42 s"), (300, "5 min"), (5400, "1.5 h"), (90_061, "1.0 days")]
)
def test_durations_read_as_people_say_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_snapshot_that_outlasts_the_binlog_it_needs_is_a_warning() -> None:
    found = Headroom("binlog.000007", 2 * 3600, DAY)
    line, low = with_snapshot(*found.line(60), found, 3600)
    assert not low and line.endswith("; the snapshot's estimated 1.0 h left fits")
    line, low = with_snapshot(*found.line(60), found, 3 * 3600)
    assert low and "the snapshot's estimated 3.0 h left outlasts it" in line
    assert with_snapshot("x", False, found, None) == ("x", False), "no snapshot, or no rate yet"
    never = Headroom("binlog.000007", None, 0)
    assert with_snapshot(*never.line(60), never, 10 * DAY)[1] is False
