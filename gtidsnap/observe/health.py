"""Liveness and readiness (pure): plain facts in, the problems found out (none: healthy, ready).

``/healthz`` asks whether the process should be restarted: only when the engine's loop has not turned
for ``stall_after_s`` (a stuck loop never recovers by itself). ``/readyz`` asks whether it does its job
now: the replica answers, the binlog stream delivers (events or heartbeats), and the checkpoint
advances, or there is nothing to do. A slow snapshot is neither unhealthy nor unready.
"""

from __future__ import annotations

from dataclasses import dataclass

BINLOG_QUIET_S = 30.0  # no event nor heartbeat this long (and 3 heartbeats): the stream is not delivering


@dataclass(frozen=True)
class HealthFacts:
    """What the endpoint sees at one moment (monotonic seconds)."""

    now: float
    tick_at: float | None  # the loop's last turn (None: starting, not turning yet)
    stall_after_s: float
    replica_error: str | None  # the last probe's error (None: it answered)
    last_event_at: float  # when the stream was last seen delivering (events or heartbeats)
    heartbeat_s: float
    probe_interval_s: float  # how often the probe looks whether the stream delivered
    checkpoint_age_s: float | None  # since the last checkpoint was saved (None: none yet this run)
    behind: int | None  # transactions the replica executed that no checkpoint holds (None: unknown)


def liveness(facts: HealthFacts) -> list[str]:
    """Why the process should be restarted; empty when it is alive."""
    idle = 0.0 if facts.tick_at is None else facts.now - facts.tick_at
    if idle > facts.stall_after_s:
        return [f"the engine's loop has not turned for {idle:.0f} s (limit metrics.stall_after_s = "
                f"{facts.stall_after_s:g} s)"]  # fmt: skip
    return []


def readiness(facts: HealthFacts) -> list[str]:
    """Why the run is not doing its job right now; empty when it is."""
    problems = liveness(facts)
    if facts.replica_error is not None:
        problems.append(f"the replica does not answer: {facts.replica_error}")
    quiet = facts.now - facts.last_event_at
    limit = max(BINLOG_QUIET_S, 3 * facts.heartbeat_s, 2 * facts.probe_interval_s)  # the probe looks
    if quiet > limit:
        problems.append(f"the binlog stream has delivered nothing (not even a heartbeat) for {quiet:.0f} s")
    stale = facts.checkpoint_age_s is None or facts.checkpoint_age_s > facts.stall_after_s
    if stale and facts.behind != 0:
        age = "no checkpoint saved yet" if facts.checkpoint_age_s is None else (
            f"no checkpoint for {facts.checkpoint_age_s:.0f} s")  # fmt: skip
        problems.append(f"{age} while the replica has transactions to stream ({facts.behind or 'unknown'})")
    return problems
