"""Which replica of source.hosts a run reads: the preferred one that serves, a lagging one waited for,
a lost one tried again for retry_for_s, then the next (fake replicas, a fake clock)."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest

from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.errors import CheckpointError, FatalSourceError, SourceError
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.source_identity import Shown, TransactionStamp
from gtidsnap.source.connection import ConnectionSettings, Secret
from gtidsnap.source.replica_set import ReplicaSet

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def at(port: int) -> ConnectionSettings:
    return ConnectionSettings("127.0.0.1", port, "gtidsnap", Secret("pw"))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeReplica:
    """A replica whose applied set grows by ``catch_up`` transactions a second of the fake clock."""

    flavor = "mysql"

    def __init__(self, settings: ConnectionSettings, applied: int, clock: Clock, catch_up: int = 0) -> None:
        self.settings, self._applied, self.clock, self.catch_up = settings, applied, clock, catch_up
        self.closed = False

    def describe(self) -> str:
        return f"the mysql replica {self.settings.describe()}"

    def applied(self) -> GtidSet:
        return parse_gtid_set("mysql", f"{U}:1-{self._applied + int(self.catch_up * self.clock.now)}")

    def purged(self) -> GtidSet:
        return parse_gtid_set("mysql", "")

    def identity(self) -> str:
        return f"uuid-of-{self.settings.port}"

    def close(self) -> None:
        self.closed = True


class Servers:
    """What answers at each port: a replica's applied count, or None (nothing listens)."""

    def __init__(self, clock: Clock, **ports: Any) -> None:
        self.clock, self.ports, self.calls = clock, ports, []
        self.back_at: dict[int, float] = {}  # port -> fake time it answers again

    def connect(self, settings: ConnectionSettings) -> Any:
        self.calls.append(settings.port)
        spec = self.ports.get(f"p{settings.port}")
        if spec is None or self.clock.now < self.back_at.get(settings.port, 0.0):
            raise SourceError(f"cannot connect to the replica {settings.describe()}: refused")
        applied, catch_up = spec if isinstance(spec, tuple) else (spec, 0)
        return FakeReplica(settings, applied, self.clock, catch_up)


def replica_set(servers: Servers, *ports: int, retry: float = 10, catch_up: float = 30) -> ReplicaSet:
    clock = servers.clock
    return ReplicaSet(
        [at(p) for p in ports], retry, catch_up, servers.connect, clock.sleep, lambda: clock.now
    )


def resumed(processed: str) -> Checkpoint:
    return Checkpoint("mysql", parse_gtid_set("mysql", processed), 1, None)


RESUMED = resumed(f"{U}:1-100")


def test_the_first_replica_that_serves_is_chosen_in_order() -> None:
    servers = Servers(Clock(), p1=None, p2=100, p3=200)
    chosen = replica_set(servers, 1, 2, 3).serving(RESUMED)
    assert chosen.settings.port == 2 and servers.calls == [1, 2]


def test_a_first_run_takes_the_preferred_replica() -> None:
    servers = Servers(Clock(), p1=5, p2=200)
    assert replica_set(servers, 1, 2).serving(None).settings.port == 1


def test_a_lagging_replica_is_waited_for_and_said_so(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    servers = Servers(clock, p1=(70, 2))  # 30 behind, 2 transactions a second: 15 s
    chosen = replica_set(servers, 1, catch_up=60).serving(RESUMED)
    assert chosen.settings.port == 1 and 15 <= clock.now <= 16
    lines = [r.getMessage() for r in caplog.records if "behind the checkpoint" in r.getMessage()]
    assert lines[0].startswith("the mysql replica gtidsnap@127.0.0.1:1 is 30 transaction(s) behind")
    assert 3 <= len(lines) <= 5, "a line every few seconds"


def test_a_replica_behind_for_longer_than_the_wait_gives_way_to_the_next() -> None:
    servers = Servers(Clock(), p1=(50, 0), p2=100)
    chosen = replica_set(servers, 1, 2, catch_up=5).serving(RESUMED)
    assert chosen.settings.port == 2


def test_only_lagging_replicas_is_a_retryable_error_never_advice_to_start_over() -> None:
    servers = Servers(Clock(), p1=(50, 0))
    with pytest.raises(SourceError) as raised:
        replica_set(servers, 1, catch_up=5).serving(RESUMED)
    assert raised.value.retryable and "50 transaction(s)" in str(raised.value)
    assert "start over" not in str(raised.value) and "snapshot the tables again" not in str(raised.value)


def test_another_servers_checkpoint_is_a_checkpoint_error() -> None:
    other = resumed("8a94f357-aab4-11df-86ab-c80aa9429562:1-3")
    servers = Servers(Clock(), p1=100, p2=100)
    with pytest.raises(CheckpointError, match=r"no replica of source\.hosts can continue"):
        replica_set(servers, 1, 2).serving(other)


def test_a_lost_replica_that_comes_back_within_retry_for_s_is_kept() -> None:
    clock = Clock()
    servers = Servers(clock, p1=100, p2=100)
    servers.back_at[1] = 4.0
    chosen = replica_set(servers, 1, 2, retry=10).serving(RESUMED, lost=at(1))
    assert chosen.settings.port == 1 and 4.0 <= clock.now <= 6.0 and 2 not in servers.calls


def test_a_lost_replica_that_stays_away_gives_way_after_retry_for_s() -> None:
    clock = Clock()
    servers = Servers(clock, p1=100, p2=100)
    servers.back_at[1] = 1e9
    chosen = replica_set(servers, 1, 2, retry=3).serving(RESUMED, lost=at(1))
    assert chosen.settings.port == 2 and 3.0 <= clock.now <= 3.5


def test_what_the_failed_part_already_retried_counts_toward_retry_for_s() -> None:
    clock = Clock()
    servers = Servers(clock, p1=100, p2=100)
    servers.back_at[1] = 1e9
    chosen = replica_set(servers, 1, 2, retry=30).serving(RESUMED, lost=at(1), retried_s=30)
    assert chosen.settings.port == 2 and clock.now == 0.0 and servers.calls == [1, 2]


def test_a_replica_that_refused_for_good_is_not_asked_again() -> None:
    servers = Servers(Clock(), p1=100, p2=100)
    chosen = replica_set(servers, 1, 2).serving(RESUMED, lost=at(1), retry_lost=False)
    assert chosen.settings.port == 2 and servers.calls == [2]


def test_no_replica_names_each_and_why() -> None:
    servers = Servers(Clock(), p1=None, p2=(10, 0))
    with pytest.raises(SourceError) as raised:
        replica_set(servers, 1, 2, catch_up=1).serving(RESUMED)
    text = str(raised.value)
    assert (
        "gtidsnap@127.0.0.1:1: cannot connect" in text
        and "gtidsnap@127.0.0.1:2: it has not executed 90" in text
    )


STAMP = TransactionStamp(f"{U}:100", 1, 1_700_000_000)


def test_a_replica_whose_binlog_holds_another_transaction_is_passed_over_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its GTIDs serve, its binlog says another primary's history: the next replica serves; alone, it
    is a CheckpointError naming it (the same command again would not pass)."""
    shown = {1: Shown(TransactionStamp(f"{U}:100", 1, 1_000_000_000)), 2: Shown(STAMP)}
    asked: list[tuple[int, TransactionStamp, str]] = []

    def shown_at(settings: ConnectionSettings, stamp: TransactionStamp, processed: GtidSet) -> Shown:
        asked.append((settings.port, stamp, str(processed)))
        return shown[settings.port]

    monkeypatch.setattr("gtidsnap.source.replica_set.shown_at", shown_at)
    checkpoint = replace(RESUMED, last_transaction=STAMP)
    servers = Servers(Clock(), p1=100, p2=100)
    assert replica_set(servers, 1, 2).serving(checkpoint).settings.port == 2
    assert asked == [(1, STAMP, f"{U}:1-100"), (2, STAMP, f"{U}:1-100")]
    with pytest.raises(CheckpointError, match="another primary's history"):
        replica_set(Servers(Clock(), p1=100), 1).serving(checkpoint)
    assert replica_set(Servers(Clock(), p1=100), 1).serving(RESUMED).settings.port == 1, "no stamp: not read"
    assert len(asked) == 3


def test_a_mysql_replica_that_cannot_show_it_is_accepted_by_its_gtids(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("gtidsnap.source.replica_set.shown_at", lambda *a: Shown(None, "purged"))
    checkpoint = replace(RESUMED, last_transaction=STAMP)
    with caplog.at_level(logging.INFO, "gtidsnap.source.replica_set"):
        assert replica_set(Servers(Clock(), p1=100), 1).serving(checkpoint).settings.port == 1
    assert "cannot show the checkpoint's last transaction" in caplog.text and "(purged)" in caplog.text


class PurgedReplica(FakeReplica):
    """A replica that applied everything but purged the binlogs holding what comes after 100."""

    def purged(self) -> GtidSet:
        return parse_gtid_set("mysql", f"{U}:1-150")


def test_purged_binlogs_everywhere_are_not_retryable() -> None:
    """Nothing of that changes by itself: the run must not end with "the same command again is safe"."""
    servers = Servers(Clock(), p1=200)
    set_ = ReplicaSet([at(1)], 10, 30, lambda s: PurgedReplica(s, 200, Clock()), Clock().sleep, lambda: 0.0)
    with pytest.raises(FatalSourceError, match="purged binlogs") as raised:
        set_.serving(RESUMED)
    assert not raised.value.retryable and servers.calls == []


def test_a_lost_replica_that_refused_for_good_and_no_other_is_not_retryable() -> None:
    servers = Servers(Clock(), p1=100)
    with pytest.raises(FatalSourceError) as raised:
        replica_set(servers, 1).serving(RESUMED, lost=at(1), retry_lost=False, lost_why="binlog purged")
    assert not raised.value.retryable
    assert "gtidsnap@127.0.0.1:1 refused the binlog stream: binlog purged" in str(raised.value)


def test_a_refusal_beside_a_replica_that_does_not_answer_stays_retryable() -> None:
    servers = Servers(Clock(), p2=None)
    with pytest.raises(SourceError) as raised:
        replica_set(servers, 1, 2).serving(RESUMED, lost=at(1), retry_lost=False, lost_why="purged")
    assert raised.value.retryable, "the one that does not answer may come back"
