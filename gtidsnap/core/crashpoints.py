"""Named instants where a crash test can kill the process (``GTIDSNAP_TEST_CRASH_AT=name:N``).

Random kills almost never land between two particular writes; these let a test hit exactly the
instant it wants (the N-th time ``name`` is passed) with SIGKILL, so nothing after it runs. Unset in
production: then each call is one environment lookup.
"""

from __future__ import annotations

import os
import signal

_counts: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this process the N-th time it passes ``name`` when the environment asks for it."""
    spec = os.environ.get("GTIDSNAP_TEST_CRASH_AT", "")
    if not spec.startswith(name + ":"):
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] == int(spec.rsplit(":", 1)[1]):
        os.kill(os.getpid(), signal.SIGKILL)
