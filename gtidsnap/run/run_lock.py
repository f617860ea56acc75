"""One run per checkpoint and per output: an OS lock on a file beside each, naming its holder.

Two runs on one checkpoint would both resume from it and both write the output: records twice, a
checkpoint each overwrites. ``fcntl.flock`` on ``<checkpoint>.lock`` (and ``<output>.lock`` for a local
output) is held for the whole run; the file says who holds it (host, pid, since when), so a second run
is refused naming the first. The operating system drops the lock when its holder dies, however it
dies (kill -9 included), so a restart after a crash takes over at once: no lease to wait out. The
lock covers runs on one host and local filesystems, where ``flock`` holds (not NFS, not object stores).
A symbolic link where a lock file goes is refused, never followed (:mod:`gtidsnap.engine.safe_files`): a
link planted there made a run write its holder's line into the file it pointed at.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from gtidsnap.core.errors import ConfigError
from gtidsnap.engine.safe_files import open_no_follow

SUFFIX = ".lock"


class RunLock:
    """Held from :meth:`acquire` (or ``with``) until :meth:`release`; refused with a
    :class:`ConfigError` naming the holder when another process holds it."""

    def __init__(self, guarded: Sequence[Path]) -> None:
        self.paths = [p.with_name(p.name + SUFFIX) for p in guarded]
        self._files: list[IO[str]] = []

    def acquire(self) -> Self:
        try:
            for path in self.paths:
                self._files.append(_lock(path))
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        files, self._files = self._files, []
        for file in files:
            with contextlib.suppress(OSError):
                fcntl.flock(file, fcntl.LOCK_UN)
            file.close()

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()


def holder() -> dict[str, object]:
    """Who this process is, as the lock file says it."""
    since = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": since}


def _lock(path: Path) -> IO[str]:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_no_follow(path, os.O_RDWR | os.O_CREAT, "lock file")  # never truncated before it is ours
        file = os.fdopen(fd, "r+", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot create the lock file {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = _holder_text(file)
        file.close()
        guarded = path.with_name(path.name.removesuffix(SUFFIX))
        raise ConfigError(
            f"{guarded} is in use by another gtidsnap run ({_who(text)}; lock {path}): stop that run "
            "first, or give this one its own checkpoint and output"
        ) from None
    except OSError as exc:
        file.close()
        raise ConfigError(
            f"cannot lock {path} ({exc.strerror}): is its filesystem one flock works on?"
        ) from None
    file.seek(0)
    file.truncate()
    file.write(json.dumps(holder()) + "\n")
    file.flush()
    return file


def _holder_text(file: IO[str], wait_s: float = 1.0) -> str:
    """The holder's line; a holder that has just taken the lock writes it a moment later (two runs
    started together), so an unreadable line is read again for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        file.seek(0)
        text = file.read()
        if _named(text) is not None or time.monotonic() >= deadline:
            return text
        time.sleep(0.05)


def _named(text: str) -> str | None:
    """Who the lock file's line names; None: no complete line of a holder (yet)."""
    try:
        held = json.loads(text)
        return f"pid {held['pid']} on {held['host']} since {held['since']}"
    except (ValueError, KeyError, TypeError):
        return None


def _who(text: str) -> str:
    return _named(text) or "its holder did not say who it is"
