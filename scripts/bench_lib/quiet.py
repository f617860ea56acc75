"""Wait for a quiet machine before a measured run.

After a million row changes the servers keep working for a while (InnoDB purges the old row versions
on the primary and on each replica): a run measured meanwhile shares the 2 cores with them, and on
this machine a busy sibling core also makes each CPU-second do less. Seen: the same code measured
13 us a change, then 17-20 us the next minute. Every measured run waits until the whole machine is
idle (from /proc/stat), so runs and peers are compared on the same footing, not in the order they ran.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("bench.quiet")

QUIET_BELOW = 0.08  # the share of all CPUs busy that counts as quiet (idle servers and Kafka: ~0.02)
MOST_S = 300.0  # then the run goes ahead, with a warning


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is counted in user already
    return total - idle, total


def busy_share(over_s: float = 1.0) -> float:
    """The share of all CPUs busy over the next ``over_s`` seconds."""
    busy0, total0 = _cpu_times()
    time.sleep(over_s)
    busy1, total1 = _cpu_times()
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_quiet(what: str, below: float = QUIET_BELOW, most_s: float = MOST_S) -> float:
    """Wait until the machine is quiet (two seconds in a row under ``below``); the seconds waited."""
    started = time.monotonic()
    calm = 0
    while True:
        share = busy_share()
        calm = calm + 1 if share < below else 0
        waited = time.monotonic() - started
        if calm >= 2:
            if waited > 3:
                log.info("%s: waited %.0f s for a quiet machine", what, waited)
            return round(waited, 1)
        if waited > most_s:
            busy = share * 100
            log.warning("%s: still %.0f%% busy after %.0f s; measured anyway", what, busy, waited)
            return round(waited, 1)
