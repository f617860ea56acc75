"""The CPUs gtidsnap may run on, and the processes it starts by default from them (chunk readers;
binlog decoders, :mod:`gtidsnap.config.settings`)."""

from __future__ import annotations

import os

MAX_DEFAULT_READERS = 8  # the default never opens more reader connections than this on a replica


def default_readers() -> int:
    """Chunk reader processes by default: one per CPU this process may run on but one, which the
    engine's thread and Spark's JVM share (0 on one CPU: chunks are read on the engine's thread), at
    most ``MAX_DEFAULT_READERS``. Measured on 2 CPUs (a 1M-row snapshot into Delta, same hour): a
    second reader made it ~14% faster and the snapshot's processes 77 MB larger (a reader is Python,
    PyMySQL and pyarrow: ~77 MB whatever it reads), past the 300 MB they are held to."""
    return min(MAX_DEFAULT_READERS, usable_cpus() - 1)


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
