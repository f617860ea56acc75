"""The replica probe's arithmetic (observe/probe): transactions behind, and since when the replica has
been ahead of the checkpoint (what bounds the lag when the captured tables are quiet)."""

from __future__ import annotations

import time

from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.observe.probe import ReplicaProbe
from gtidsnap.source.connection import ConnectionSettings, Secret

UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def upto(n: int) -> GtidSet:
    return parse_gtid_set("mysql", f"{UUID}:1-{n}")


def test_behind_and_held_since() -> None:
    position: list[GtidSet | None] = [None]
    probe = ReplicaProbe(
        ConnectionSettings("127.0.0.1", 1, "u", Secret("")), 5.0, lambda: position[0], lambda: []
    )
    assert probe._held(upto(10)) == (None, None), "no checkpoint yet: nothing known"
    position[0] = upto(10)
    before = time.time()
    behind, held = probe._held(upto(10))
    assert behind == 0 and held is not None and held >= before, "caught up: held now"
    behind, held = probe._held(upto(15))
    assert behind == 5 and held is not None and held >= before, "held since the last probe it holds"
    first_held = held
    time.sleep(0.01)
    behind, held = probe._held(upto(20))
    assert behind == 10 and held == first_held, "still behind: the same point held"
    position[0] = upto(15)
    behind, held = probe._held(upto(25))
    assert behind == 10 and held is not None and held > first_held, "the checkpoint moved past a probe"
    assert len(probe._samples) == 3, "probes older than the newest held are dropped"
    position[0] = upto(25)
    now = time.time()
    behind, held = probe._held(upto(25))
    assert behind == 0 and held is not None and held >= now and len(probe._samples) == 1
