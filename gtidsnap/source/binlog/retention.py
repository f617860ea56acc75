"""Reading what binlog retention depends on: the replica's binlog files, the GTID set before each, when
the file after the one a checkpoint needs was started, and the expiry setting (judged by
:mod:`gtidsnap.core.retention`).

The set before a file is its second event (MySQL Previous_gtids, MariaDB Gtid_list), read with
``SHOW BINLOG EVENTS IN 'file' LIMIT 2`` (REPLICATION SLAVE / BINLOG MONITOR, which gtidsnap has). Files
are ordered, so the one a checkpoint needs is found by bisection: a handful of statements on a replica
with hundreds of files. When a file was started: on MySQL its Format_description event's time (the
file's creation); MariaDB stamps that event with the server's start, so there it is the time of the
file's first transaction (a short GTID-mode binlog dump from the set before the file), which on a
replica idle at the rotation is later than the rotation: the headroom it gives is then a little long.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import FormatDescriptionEvent, MariadbGtidEvent

from gtidsnap.core.errors import SourceError
from gtidsnap.core.gtid import GtidSet, MariadbGtidSet, parse_gtid_set
from gtidsnap.core.retention import BinlogFile, Headroom, headroom
from gtidsnap.source.replica import Replica

_MARIADB_LIST = re.compile(r"\d+-\d+-\d+")


def set_before(replica: Replica, name: str) -> GtidSet:
    """The GTID set before ``name``'s first transaction, from its header events."""
    for event_type, info in replica.binlog_head(name):
        if event_type == "Previous_gtids":
            return parse_gtid_set("mysql", info.replace("\n", ""))
        if event_type == "Gtid_list":
            return parse_gtid_set("mariadb", ",".join(_MARIADB_LIST.findall(info)))
    raise SourceError(f"{name} on {replica.describe()} does not start with the GTID set before it")


def started_at(replica: Replica, name: str, before: GtidSet) -> float:
    """When ``name`` was started (epoch seconds; see the module doc); now when that cannot be told yet."""
    flavor = str(replica.flavor)
    position: dict[str, object] = {"log_file": name, "log_pos": 4, "resume_stream": True}
    wanted: list[type] = [FormatDescriptionEvent]
    if isinstance(before, MariadbGtidSet):
        position, wanted = {"auto_position": before.as_position()}, [MariadbGtidEvent]
    reader = BinLogStreamReader(
        connection_settings=replica.settings.pymysql_kwargs(),
        server_id=random.randint(100_000, 2**31 - 1),
        blocking=False,
        is_mariadb=flavor == "mariadb",
        only_events=wanted,
        **position,
    )
    try:
        for event in reader:
            return float(event.timestamp)
    except Exception as exc:  # a file purged meanwhile, a lost connection: the caller says so
        raise SourceError(f"cannot read when {name} started on {replica.describe()}: {exc}") from exc
    finally:
        reader.close()
    return time.time()  # no transaction in it yet: it was started just now


def replica_headroom(
    replica: Replica,
    processed: GtidSet,
    before: Callable[[Replica, str], GtidSet] = set_before,
    started: Callable[[Replica, str, GtidSet], float] = started_at,
    now: Callable[[], float] = time.time,
) -> Headroom:
    """The headroom of a checkpoint that processed ``processed`` on ``replica``."""
    names, expire_s = replica.binlog_names(), replica.binlog_expire_s()
    if not names:
        return Headroom(None, None, expire_s)
    sets: dict[int, GtidSet] = {}

    def at(i: int) -> GtidSet:
        if i not in sets:
            sets[i] = before(replica, names[i])
        return sets[i]

    if not at(0) <= processed:
        return Headroom(None, None, expire_s)
    low, high = 0, len(names) - 1  # the needed file is the last whose set before is within processed
    while low < high:
        middle = (low + high + 1) // 2
        if at(middle) <= processed:
            low = middle
        else:
            high = middle - 1
    files = [BinlogFile(names[low], 0.0, at(low))]
    if low + 1 < len(names) and expire_s > 0:
        following = at(low + 1)
        files.append(BinlogFile(names[low + 1], started(replica, names[low + 1], following), following))
    return headroom(files, processed, expire_s, now())
