"""One run per output on an object store: a lease, since no OS lock holds there.

A local output is guarded by ``flock`` (:mod:`gtidsnap.run.run_lock`). An output at ``s3a://``,
``abfss://`` or any other URI cannot be: two runs with different checkpoints would both write its Delta
tables. So a run holds a lease there: the file ``_gtidsnap_owner.json`` at the output's root (Spark and
gtidsnap's table listing skip it) names the run (host, pid, since when) and when it last renewed it,
every third of ``sink.owner_lease_s``. A run that finds the lease held by another run, renewed within
the lease, is refused, naming it; a holder that died (kill -9 included) stops renewing, and the next
run takes over once the lease has run out: it waits for that, saying so, for up to one lease.

Object stores have no compare-and-swap here, so two runs starting in the same instant could both see
no holder: each writes the lease, waits a moment and reads it back, and the one that finds another's
name in it gives way.

Clocks: a lease's ``renewed`` is the holder's clock. One a little ahead of ours (up to one lease) is
waited out as usual, at most two leases; one further ahead, or not a time at all (``1e400`` reads as
infinity), is a clock problem: the run is refused naming the holder and both clocks, never left to wait
for ever (or fail on an OverflowError). On a local filesystem (``file:``) the lease file is read and
written without following a symbolic link and replaced atomically (:mod:`gtidsnap.engine.safe_files`);
on an object store a write is one whole object.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Self

import pyarrow.fs as pafs

from gtidsnap.core.errors import ConfigError
from gtidsnap.engine.safe_files import open_no_follow, replace_atomically
from gtidsnap.run.run_lock import holder
from gtidsnap.sinks.delta.staging import output_filesystem

log = logging.getLogger(__name__)

LEASE_FILE = "_gtidsnap_owner.json"
SETTLE_S = 1.0  # between writing the lease and reading it back (two runs starting together)


class OutputLease:
    """Held from :meth:`acquire` until :meth:`release`; a thread renews it."""

    def __init__(
        self,
        root: str,
        lease_s: float,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.root = root.rstrip("/")
        self.uri = f"{self.root}/{LEASE_FILE}"
        self.lease_s, self.clock, self.sleep = lease_s, clock, sleep
        self.me = {**holder(), "run": f"{holder()['host']}:{holder()['pid']}:{clock():.6f}"}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> Self:
        found = self._read()
        waited = False
        while found is not None and found.get("run") != self.me["run"]:
            self._check_clock(found)
            if not self._live(found):
                break
            if waited:
                ago = self.clock() - float(found["renewed"])
                raise ConfigError(
                    f"the output {self.root} is written by another gtidsnap run ({_who(found)}; lease "
                    f"{self.uri} renewed {ago:.0f}s ago): stop that run first, or give this one its own "
                    "output"
                )
            left = float(found["renewed"]) + self.lease_s - self.clock()
            log.warning(
                "the output's lease is held by %s: waiting %.0fs for it to run out", _who(found), left
            )
            self.sleep(max(0.0, left) + 0.1)
            waited, found = True, self._read()
        self._write()
        self.sleep(SETTLE_S)
        found = self._read()
        if found is None or found.get("run") != self.me["run"]:
            raise ConfigError(
                f"the output {self.root} was taken by another gtidsnap run starting at the same time "
                f"({_who(found or {})}): stop that run first, or give this one its own output"
            )
        self._thread = threading.Thread(target=self._renew, name="gtidsnap-lease", daemon=True)
        self._thread.start()
        return self

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        found = self._read()
        if found is not None and found.get("run") == self.me["run"]:
            filesystem, path = output_filesystem(self.uri)
            filesystem.delete_file(path)

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _check_clock(self, found: dict[str, Any]) -> None:
        """Refuse a lease renewed further in the future than one lease (or at no time at all): the holder's
        clock and ours disagree, or the file was edited; waiting for it to run out could take for ever."""
        try:
            renewed, now = float(found["renewed"]), self.clock()
        except (KeyError, TypeError, ValueError):
            return  # not a lease gtidsnap wrote: taken (see _live)
        if math.isfinite(renewed) and renewed - now <= self.lease_s:
            return
        raise ConfigError(
            f"the output {self.root} has a lease renewed in the future by another gtidsnap run "
            f"({_who(found)}; lease {self.uri}): it says {_when(renewed)}, this host's clock says "
            f"{_when(now)}, more than sink.owner_lease_s ({self.lease_s:g} s) apart: the clocks of the two "
            "hosts disagree (set both by NTP), or the file was edited; once no run holds the output, delete "
            "the lease file"
        )

    def _live(self, found: dict[str, Any]) -> bool:
        try:
            return self.clock() - float(found["renewed"]) < self.lease_s
        except (KeyError, TypeError, ValueError):
            return False  # not a lease gtidsnap wrote: taken

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            found = self._read()
            if found is not None and found.get("run") != self.me["run"]:
                log.error("the output's lease was taken by %s: another run writes this output", _who(found))
                return
            self._write()

    def _read(self) -> dict[str, Any] | None:
        filesystem, path = output_filesystem(self.uri)
        try:
            if isinstance(filesystem, pafs.LocalFileSystem):  # a link there is refused, never followed
                with os.fdopen(open_no_follow(Path(path), os.O_RDONLY, "output lease"), "rb") as f:
                    raw = f.read()
            else:
                with filesystem.open_input_stream(path) as stream:
                    raw = stream.read()
            data = json.loads(raw.decode("utf-8"))
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def _write(self) -> None:
        filesystem, path = output_filesystem(self.uri)
        filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
        data = json.dumps({**self.me, "renewed": self.clock()}).encode("utf-8")
        if isinstance(filesystem, pafs.LocalFileSystem):
            replace_atomically(Path(path), data, "output lease")
            return
        with filesystem.open_output_stream(path) as stream:  # an object store puts the object whole
            stream.write(data)


def _when(seconds: float) -> str:
    """A lease time for a message: the UTC time, or the number when it is none."""
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return repr(seconds)


def _who(found: dict[str, Any]) -> str:
    try:
        return f"pid {found['pid']} on {found['host']} since {found['since']}"
    except KeyError:
        return "a run that did not say who it is"


def output_lease(path: str, lease_s: float) -> AbstractContextManager[object]:
    """The lease of an output at a URI (``scheme://``); nothing for a local path, which ``flock``
    guards (:func:`gtidsnap.run.failover.guarded_paths`)."""
    return OutputLease(path, lease_s) if "://" in path else contextlib.nullcontext()
