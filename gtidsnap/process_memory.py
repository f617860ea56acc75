"""Memory habits of gtidsnap's own processes (the engine's and each chunk reader's), set as they start:
they decide a snapshot's resident memory more than its rows do (measured in docs/benchmarks.md).

- **Few malloc arenas, large blocks mapped.** glibc gives each thread that allocates its own arena
  (up to 8 per core) and keeps the pages freed in it: the engine's threads (committer, mirror keeper,
  Arrow's) left a 1M-row snapshot into Delta ~70 MB larger. And once a large block is freed, glibc
  raises the size from which it maps blocks apart (up to 32 MB), so Arrow's buffers of a few MB then
  come from the heap, which keeps their pages: a fixed 1 MB threshold returns each to the system when
  freed (~20 MB less at a snapshot's end, for ~4% of its time).
- **No pandas.** pyarrow imports pandas at a process's first ``pa.array`` of Python values (to ask
  whether they are a pandas Series), and pyspark at its first Py4J call (to know whether it may offer
  pandas conversions); gtidsnap never needs it, and pandas with its numpy extensions costs ~40 MB.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import sys

ARENAS = 2
MMAP_THRESHOLD = 1 << 20  # bytes: larger blocks are mapped apart, and unmapped when freed
_M_ARENA_MAX = -8  # mallopt's parameters (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3


class WithoutPandas(importlib.abc.MetaPathFinder):
    """Refuses ``import pandas``: its callers (pyarrow, pyspark) take the ImportError as "no pandas"."""

    def find_spec(self, fullname: str, path: object, target: object = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError("gtidsnap's processes do without pandas")


def lean_process() -> None:
    """This process with glibc's malloc set as above (elsewhere a no-op) and without pandas (unless it
    is already imported); call it before the process starts threads."""
    if "pandas" not in sys.modules and not any(isinstance(f, WithoutPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, WithoutPandas())
    if sys.platform.startswith("linux"):
        try:
            # the process's own symbols, libc's among them (find_library would run ldconfig each start)
            libc = ctypes.CDLL(None)
            libc.mallopt(_M_ARENA_MAX, ARENAS)
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        except (OSError, AttributeError):  # a libc without mallopt (musl): its own allocator's habits
            pass
