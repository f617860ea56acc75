"""The wiring's warnings about configurations that cost without helping."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from gtidsnap.config.loading import load_config
from gtidsnap.run import wiring
from gtidsnap.snapshot.readers import ProcessChunkReaders


@pytest.mark.parametrize(("readers", "warned"), [(4, False), (5, True), (64, True)])
def test_more_reader_processes_than_two_a_cpu_are_warned_about(
    readers: int, warned: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(wiring, "usable_cpus", lambda: 2)
    config = load_config(None, {"GTIDSNAP_SNAPSHOT_READERS": str(readers)})
    with caplog.at_level(logging.WARNING, "gtidsnap.run.wiring"):
        pool = wiring.chunk_readers(config)
    assert isinstance(pool, ProcessChunkReaders)  # built, not started: no process yet
    messages = [r.getMessage() for r in caplog.records]
    assert bool(messages) is warned, messages
    if warned:
        assert messages == [
            f"snapshot.readers = {readers} on 2 CPU(s): each reader is a process (45-80 MB) and a connection "
            "to the replica, and more than 2 a CPU only add those"
        ]


def test_the_readers_get_the_configured_hung_after() -> None:
    config = load_config(None, {"GTIDSNAP_SNAPSHOT_READERS": "2"})
    config = replace(config, snapshot=replace(config.snapshot, hung_after_s=4.5))
    pool = wiring.chunk_readers(config)
    assert isinstance(pool, ProcessChunkReaders) and pool.hung_after_s == 4.5
    default = wiring.chunk_readers(load_config(None, {"GTIDSNAP_SNAPSHOT_READERS": "2"}))
    assert isinstance(default, ProcessChunkReaders) and default.hung_after_s == 2 * (30 + 30) + 10
