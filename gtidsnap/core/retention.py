"""Binlog retention headroom: how long until the replica purges the oldest binlog a checkpoint still needs.

A replica purges a binlog file once it is older than its expiry (``binlog_expire_logs_seconds``, or
``expire_logs_days``), counted from when the file was last written: when the next file was started.
The oldest file a checkpoint needs is the last one that starts at or before the checkpoint's position
(each file starts with the GTID set before it: MySQL's Previous_gtids, MariaDB's Gtid_list). Once it
is purged the checkpoint can no longer be continued on that replica: the most common cause of forced
full resyncs in CDC tools. gtidsnap streams while it snapshots, so its checkpoint keeps moving; this
says how safe a stopped or lagging run is. Pure: the files and their times come from
:mod:`gtidsnap.source.binlog.retention`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gtidsnap.core.gtid import GtidSet


@dataclass(frozen=True)
class BinlogFile:
    """One binlog file as its first events tell: its name, when it was started (epoch seconds) and the
    GTID set before its first transaction."""

    name: str
    started: float
    before: GtidSet


@dataclass(frozen=True)
class Headroom:
    """The oldest binlog the checkpoint needs, and the seconds until it expires (None: it does not:
    no expiry is set, or it is the file being written)."""

    needed: str | None  # None: even the oldest file starts past the checkpoint (its binlogs are gone)
    seconds: float | None
    expire_s: float

    def line(self, warn_below_s: float) -> tuple[str, bool]:
        """A sentence for the log, ``check`` and ``status``, and whether it is a warning."""
        if self.needed is None:
            return "the binlog the checkpoint needs is purged already: it cannot be continued here", True
        if self.expire_s <= 0:
            return f"binlogs never expire on this replica (the oldest needed is {self.needed})", False
        if self.seconds is None:
            return (
                f"the binlog the checkpoint needs ({self.needed}) is the one being written; it expires "
                f"{duration(self.expire_s)} after the next one starts",
                False,
            )
        if self.seconds <= 0:
            return (
                f"{self.needed}, which the checkpoint needs, is past its expiry and may be purged any time",
                True,
            )
        low = self.seconds < warn_below_s
        return (
            f"{self.needed}, the oldest binlog the checkpoint needs, expires in {duration(self.seconds)}"
            + (
                f" (below source.retention_warn_s = {duration(warn_below_s)}): keep the run going, or keep "
                "binlogs longer"
                if low
                else ""
            ),
            low,
        )


def headroom(files: Sequence[BinlogFile], processed: GtidSet, expire_s: float, now: float) -> Headroom:
    """Where the checkpoint that processed ``processed`` stands against the replica's binlog expiry.
    ``files`` in order, oldest first (a prefix may be all that was read: the file after the needed one
    must be in it when there is one)."""
    needed_at = None
    for i, f in enumerate(files):
        if f.before <= processed:
            needed_at = i
    if needed_at is None:
        return Headroom(None, None, expire_s)
    needed = files[needed_at]
    if expire_s <= 0 or needed_at + 1 >= len(files):
        return Headroom(needed.name, None, expire_s)
    last_written = files[needed_at + 1].started
    return Headroom(needed.name, last_written + expire_s - now, expire_s)


def duration(seconds: float) -> str:
    """``90061`` -> ``1.0 days``; ``5400`` -> ``1.5 h``; ``42`` -> ``42 s``."""
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} days"
    if seconds >= 3_600:
        return f"{seconds / 3_600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def with_snapshot(line: str, low: bool, found: Headroom, left_s: float | None) -> tuple[str, bool]:
    """The headroom's line with how the snapshot under way compares (its estimated time left, ``left_s``:
    rows left by the server's estimate over the rate measured): one that outlasts the binlog the
    checkpoint needs is a warning too. The stream keeps the checkpoint moving while it snapshots, so it
    matters if the run stops, or its stream stalls, before the snapshot ends."""
    if left_s is None:
        return line, low
    if found.seconds is None or found.seconds > left_s:
        return f"{line}; the snapshot's estimated {duration(left_s)} left fits", low
    return (
        f"{line}; the snapshot's estimated {duration(left_s)} left outlasts it: should the run stop before "
        "the snapshot ends, the checkpoint could not be continued here",
        True,
    )
