"""One run per checkpoint and output (engine/run_lock): the holder named, taken over after kill -9."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gtidsnap.core.errors import ConfigError
from gtidsnap.run.run_lock import RunLock

HOLD = """
import sys, time
from pathlib import Path
from gtidsnap.run.run_lock import RunLock
with RunLock([Path(sys.argv[1])]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_holder_is_refused_naming_the_first_and_takes_over_after_kill_9(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.json"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(checkpoint)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(ConfigError) as refused:
            RunLock([checkpoint]).acquire()
        text = str(refused.value)
        assert (
            f"{checkpoint} is in use by another gtidsnap run (pid {holder.pid} on {socket.gethostname()}"
            in text
        )
        assert f"lock {checkpoint}.lock" in text and "stop that run first" in text
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    started = time.monotonic()
    with RunLock([checkpoint]) as lock:
        assert time.monotonic() - started < 1.0, "a dead holder's lock is free at once: nothing to wait out"
        held = json.loads((tmp_path / "checkpoint.json.lock").read_text())
        assert held["pid"] == os.getpid() and held["host"] == socket.gethostname() and held["since"]
        assert lock.paths == [tmp_path / "checkpoint.json.lock"]


def test_every_path_or_none_is_held(tmp_path: Path) -> None:
    first = RunLock([tmp_path / "out" / "changes.jsonl"]).acquire()
    try:
        both = RunLock([tmp_path / "checkpoint.json", tmp_path / "out" / "changes.jsonl"])
        with pytest.raises(ConfigError, match=r"changes\.jsonl is in use by another gtidsnap run \(pid "):
            both.acquire()  # also within one process: a second engine on the same output
        with RunLock([tmp_path / "checkpoint.json"]):
            pass  # the first path was let go when the second was refused
    finally:
        first.release()
    with RunLock([tmp_path / "checkpoint.json", tmp_path / "out" / "changes.jsonl"]):
        pass


def test_a_lock_file_that_cannot_be_made_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ConfigError, match=r"cannot create the lock file .*file/checkpoint\.json\.lock: "):
        RunLock([tmp_path / "file" / "checkpoint.json"]).acquire()


def test_a_holder_that_has_not_written_its_name_yet_is_still_named(tmp_path: Path) -> None:
    """Two runs started together: the holder takes the lock and writes who it is a moment later; the
    one refused meanwhile waits for that line instead of reporting a holder that said nothing."""
    import fcntl
    import threading

    checkpoint = tmp_path / "checkpoint.json"
    lock = tmp_path / "checkpoint.json.lock"
    with lock.open("a+", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken, nothing written yet
        line = json.dumps({"host": "elsewhere", "pid": 4242, "since": "2026-12-02T00:00:00+00:00"})
        late = threading.Timer(0.2, lambda: (held.write(line + "\n"), held.flush()))
        late.start()
        try:
            with pytest.raises(ConfigError) as refused:
                RunLock([checkpoint]).acquire()
        finally:
            late.join()
    assert "(pid 4242 on elsewhere since 2026-12-02T00:00:00+00:00;" in str(refused.value)


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    """The issue: ``ln -sf victim.txt cp.json.lock`` made a run overwrite victim.txt with its holder."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "cp.json.lock").symlink_to("victim.txt")
    with pytest.raises(ConfigError) as refused:
        RunLock([tmp_path / "cp.json"]).acquire()
    said = str(refused.value)
    assert f"the lock file {tmp_path / 'cp.json.lock'} is a symbolic link (to victim.txt)" in said, said
    assert "remove the link" in said and victim.read_text() == "precious\n"
