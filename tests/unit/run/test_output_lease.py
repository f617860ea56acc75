"""The lease of an output on an object store (here a file: URI): taken, refused while its holder renews
it, taken over once a dead holder's lease ran out, and given way in a start-up race."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gtidsnap.core.errors import ConfigError
from gtidsnap.run.output_lease import LEASE_FILE, OutputLease, output_lease


class Time:
    def __init__(self) -> None:
        self.now = 1000.0
        self.on_sleep: Any = None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep()


def other(path: Path, renewed: float, run: str = "other") -> None:
    held = {
        "host": "host-b",
        "pid": 4242,
        "since": "2026-11-28T06:20:00+00:00",
        "run": run,
        "renewed": renewed,
    }
    (path / LEASE_FILE).write_text(json.dumps(held))


def lease(root: Path, t: Time, lease_s: float = 30.0) -> OutputLease:
    return OutputLease(f"file://{root}", lease_s, t.clock, t.sleep)


def test_a_free_output_is_taken_and_released(tmp_path: Path) -> None:
    t = Time()
    held = lease(tmp_path, t).acquire()
    data = json.loads((tmp_path / LEASE_FILE).read_text())
    assert data["run"] == held.me["run"] and data["renewed"] == 1000.0
    held.release()
    assert not (tmp_path / LEASE_FILE).exists()


def test_a_live_holder_is_named_and_refused(tmp_path: Path) -> None:
    t = Time()
    other(tmp_path, t.now - 5)
    t.on_sleep = lambda: other(tmp_path, t.now)  # it renews meanwhile
    with pytest.raises(ConfigError) as refused:
        lease(tmp_path, t).acquire()
    text = str(refused.value)
    assert "is written by another gtidsnap run (pid 4242 on host-b since 2026-11-28T06:20:00+00:00" in text
    assert "stop that run first, or give this one its own output" in text


def test_a_holder_that_stopped_renewing_is_taken_over_once_its_lease_ran_out(tmp_path: Path) -> None:
    t = Time()
    other(tmp_path, t.now - 10)  # killed 10 s ago: 20 s of its lease left
    held = lease(tmp_path, t).acquire()
    assert 1020 <= t.now <= 1023 and json.loads((tmp_path / LEASE_FILE).read_text())["run"] == held.me["run"]
    held.release()


def test_a_dead_holders_old_lease_is_taken_at_once(tmp_path: Path) -> None:
    t = Time()
    other(tmp_path, t.now - 600)
    lease(tmp_path, t).acquire().release()
    assert t.now <= 1002, "only the settle pause"


def test_the_run_that_loses_a_start_up_race_gives_way(tmp_path: Path) -> None:
    t = Time()
    t.on_sleep = lambda: other(tmp_path, t.now, run="the-other-one")  # it wrote right after us
    with pytest.raises(ConfigError, match="was taken by another gtidsnap run starting at the same time"):
        lease(tmp_path, t).acquire()


def test_a_local_output_needs_no_lease(tmp_path: Path) -> None:
    with output_lease(str(tmp_path / "delta"), 30):
        assert not (tmp_path / "delta" / LEASE_FILE).exists()


@pytest.mark.parametrize("ahead", [1e9, "1e400", "NaN"])
def test_a_lease_renewed_far_in_the_future_is_a_clock_problem_never_a_wait(
    tmp_path: Path, ahead: Any
) -> None:
    """The issue: ``"renewed": now + 1e9`` made a run wait 1000000009 s for it to run out, and 1e400 (JSON
    reads it as infinity) ended in an OverflowError. Now: refused at once, naming the holder and both
    clocks."""
    t = Time()
    other(tmp_path, 0.0)
    text = (tmp_path / LEASE_FILE).read_text()
    renewed = str(t.now + ahead) if isinstance(ahead, float) else ahead
    (tmp_path / LEASE_FILE).write_text(text.replace('"renewed": 0.0', f'"renewed": {renewed}'))
    with pytest.raises(ConfigError) as refused:
        lease(tmp_path, t).acquire()
    said = str(refused.value)
    assert "a lease renewed in the future by another gtidsnap run (pid 4242 on host-b" in said, said
    assert (
        "this host's clock says 1970-01-01T00:16:40+00:00" in said and "the clocks of the two hosts" in said
    )
    assert t.now == 1000.0, "it did not wait"


def test_a_holder_whose_clock_is_a_little_ahead_is_waited_for_at_most_two_leases(tmp_path: Path) -> None:
    t = Time()
    other(tmp_path, t.now + 20)  # its clock 20 s ahead of ours, within one lease: it may be alive
    held = lease(tmp_path, t).acquire()
    assert (
        t.now <= 1000 + 2 * 30 + 2
        and json.loads((tmp_path / LEASE_FILE).read_text())["run"] == held.me["run"]
    )
    held.release()


def test_a_lease_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / LEASE_FILE).symlink_to(victim)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        lease(tmp_path, Time()).acquire()
    assert victim.read_text() == "mine"


def test_the_lease_is_written_whole_through_a_fresh_file(tmp_path: Path) -> None:
    """A link planted at the temporary name is replaced, not written through."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / f"{LEASE_FILE}.tmp").symlink_to(victim)
    held = lease(tmp_path, Time()).acquire()
    assert victim.read_text() == "mine" and not (tmp_path / f"{LEASE_FILE}.tmp").exists()
    held.release()
