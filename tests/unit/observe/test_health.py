"""Liveness and readiness from plain facts (observe/health)."""

from __future__ import annotations

from dataclasses import replace

from gtidsnap.observe.health import HealthFacts, liveness, readiness

OK = HealthFacts(
    now=1000.0,
    tick_at=999.9,
    stall_after_s=60.0,
    replica_error=None,
    last_event_at=999.0,
    heartbeat_s=1.0,
    probe_interval_s=5.0,
    checkpoint_age_s=0.5,
    behind=3,
)


def test_a_turning_loop_is_alive_and_a_stuck_one_is_not() -> None:
    assert liveness(OK) == [] and readiness(OK) == []
    stuck = replace(OK, tick_at=900.0)
    assert liveness(stuck) == [
        "the engine's loop has not turned for 100 s (limit metrics.stall_after_s = 60 s)"
    ]
    assert readiness(stuck)[0] == liveness(stuck)[0], "a stuck loop is not ready either"


def test_not_ready_names_each_cause() -> None:
    assert readiness(replace(OK, replica_error="cannot connect")) == [
        "the replica does not answer: cannot connect"
    ]
    assert readiness(replace(OK, last_event_at=960.0)) == [
        "the binlog stream has delivered nothing (not even a heartbeat) for 40 s"
    ]
    assert readiness(replace(OK, last_event_at=960.0, heartbeat_s=20.0)) == [], "3 heartbeats' time"
    assert readiness(replace(OK, last_event_at=960.0, probe_interval_s=30.0)) == [], "2 probes' time"
    assert liveness(replace(OK, tick_at=None)) == [], "starting (Spark, say): not turning yet, not stuck"
    assert readiness(replace(OK, checkpoint_age_s=120.0)) == [
        "no checkpoint for 120 s while the replica has transactions to stream (3)"
    ]
    assert readiness(replace(OK, checkpoint_age_s=None, behind=None)) == [
        "no checkpoint saved yet while the replica has transactions to stream (unknown)"
    ]


def test_an_old_checkpoint_with_nothing_to_do_is_ready() -> None:
    assert readiness(replace(OK, checkpoint_age_s=600.0, behind=0)) == []
