"""The low watermark waits until the stream's transactions are visible to a new read (low_watermark)."""

from __future__ import annotations

import logging

import pytest

from gtidsnap.core.gtid import GtidSet, MysqlGtidSet
from gtidsnap.source.low_watermark import FIRST_PAUSE_S, LONGEST_PAUSE_S, LowWatermark, applied_covering

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def s(text: str) -> GtidSet:
    return MysqlGtidSet.parse(text)


class Scripted:
    """Answers executed_and_visible() from a script; the last answer repeats."""

    flavor = "mariadb"

    def __init__(self, *answers: tuple[str, str]) -> None:
        self.answers = [(s(e), s(v)) for e, v in answers]
        self.reads = 0

    def describe(self) -> str:
        return "the scripted replica"

    def executed_and_visible(self) -> tuple[GtidSet, GtidSet]:
        self.reads += 1
        return self.answers[min(self.reads, len(self.answers)) - 1]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def watermark(replica: Scripted, clock: Clock, timeout_s: float = 5.0) -> LowWatermark:
    return LowWatermark(replica, timeout_s, sleep=clock.sleep, clock=lambda: clock.now)  # type: ignore[arg-type]


def test_a_visible_stream_reads_lw_in_one_round_trip() -> None:
    replica, clock = Scripted((f"{U}:1-9", f"{U}:1-8")), Clock()
    assert watermark(replica, clock).read(s(f"{U}:1-8")) == s(f"{U}:1-9")
    assert replica.reads == 1 and clock.pauses == []


def test_it_waits_with_growing_pauses_until_what_the_stream_processed_is_visible() -> None:
    replica = Scripted(*[(f"{U}:1-9", f"{U}:1-7")] * 4, (f"{U}:1-10", f"{U}:1-9"))
    clock = Clock()
    lw = watermark(replica, clock)
    assert lw.read(s(f"{U}:1-9")) == s(f"{U}:1-10"), "the executed set of the read that saw it visible"
    assert replica.reads == 5 and lw.waits == 1
    assert clock.pauses == [FIRST_PAUSE_S * 2**i for i in range(4)]


def test_pauses_stop_growing() -> None:
    replica = Scripted(*[(f"{U}:1-9", f"{U}:1-7")] * 20, (f"{U}:1-9", f"{U}:1-9"))
    clock = Clock()
    watermark(replica, clock, timeout_s=60).read(s(f"{U}:1-9"))
    assert max(clock.pauses) == LONGEST_PAUSE_S


def test_a_visible_set_that_never_covers_the_stream_is_given_up_once_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replica, clock = Scripted((f"{U}:1-8", f"{U}:1-5")), Clock()
    lw = watermark(replica, clock, timeout_s=1.0)
    with caplog.at_level(logging.WARNING, logger="gtidsnap.source.low_watermark"):
        first = lw.read(s(f"{U}:1-9"))
    assert first == s(f"{U}:1-9"), "lw covers what the stream processed, so a window can open on it"
    assert clock.now >= 1.0 and "without waiting" in caplog.text and "scripted replica" in caplog.text
    reads, pauses = replica.reads, len(clock.pauses)
    assert lw.read(s(f"{U}:1-9")) == s(f"{U}:1-9")
    assert replica.reads == reads + 1 and len(clock.pauses) == pauses, "later reads do not wait"


class ExecutedOnly:
    def __init__(self, *answers: str) -> None:
        self.answers = [s(a) for a in answers]
        self.reads = 0

    def executed(self) -> GtidSet:
        self.reads += 1
        return self.answers[min(self.reads, len(self.answers)) - 1]


def test_a_restart_waits_for_the_executed_set_to_list_what_was_streamed() -> None:
    replica, clock = ExecutedOnly(f"{U}:1-7", f"{U}:1-7", f"{U}:1-9"), Clock()
    got = applied_covering(
        replica.executed, lambda e: s(f"{U}:1-9") <= e, sleep=clock.sleep, clock=lambda: clock.now
    )  # type: ignore[arg-type]
    assert got == s(f"{U}:1-9") and replica.reads == 3


def test_a_restart_against_a_replica_that_never_lists_it_gets_the_last_read_after_the_timeout() -> None:
    replica, clock = ExecutedOnly(f"{U}:1-7"), Clock()
    got = applied_covering(
        replica.executed,
        lambda e: s(f"{U}:1-9") <= e,
        timeout_s=2.0,
        sleep=clock.sleep,
        clock=lambda: clock.now,
    )
    assert got == s(f"{U}:1-7") and 2.0 <= clock.now < 2.0 + LONGEST_PAUSE_S * 2
