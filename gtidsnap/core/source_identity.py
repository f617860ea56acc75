"""Is a replica's history the checkpoint's? The stamp of the last transaction a checkpoint processed,
and the verdict on what a replica's binlog shows at that GTID (pure).

A GTID set says which transactions were applied, not whose they are: two unrelated MariaDB primaries
with the same domain and server id number their transactions alike, so a replica of the other one, a
little ahead, passes every GTID check (:mod:`.replica_choice`) and would be streamed into this output.
So a checkpoint records a :class:`TransactionStamp` of the last transaction it processed: its GTID,
the server id and the time (seconds) in its GTID event's header, which every replica of one primary
logs alike (they are the primary's; a replica's own binlog offsets and checksums are not). Before a run
continues a checkpoint on a replica, the replica's binlog is read from just before that GTID
(:mod:`gtidsnap.source.binlog.transaction_stamps`) and :func:`identity_problem` judges what it shows:

* the same stamp: the same history;
* another transaction at that GTID: another primary's history, refused for good;
* nothing (the binlog no longer holds it, or never did: a replica restored from a backup taken after
  it): on MySQL the GTID names its primary's server UUID, which stands as the proof; on MariaDB nothing
  else can tell, so it is refused, saying how an operator who knows it is a replica of the same primary
  accepts it (``gtidsnap checkpoint set --forget-source``).

A checkpoint without a stamp (a first run that streamed nothing yet, or one written by an earlier
version) is continued anywhere the GTIDs allow; the first transaction streamed gives it one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gtidsnap.core.gtid import Gtid, GtidSet, MariadbGtid, MariadbGtidSet, MysqlGtid

ANOTHER_PRIMARY = "another primary's history"
FORGET_SOURCE = "gtidsnap checkpoint set --forget-source"


@dataclass(frozen=True)
class TransactionStamp:
    """The last transaction a checkpoint processed, as its primary wrote it. ``before``: on MariaDB, the
    domain's position just before it (where a binlog dump starts to read it; "" when it was the
    domain's first); on MySQL the checkpoint's set without it does that."""

    gtid: str
    server_id: int
    timestamp: int
    before: str = ""

    def to_json(self) -> dict[str, Any]:
        fields = ("gtid", "server_id", "timestamp", "before")
        return {name: getattr(self, name) for name in fields}

    @classmethod
    def from_json(cls, data: Any) -> TransactionStamp:
        """ValueError names what is not as written."""
        if not isinstance(data, dict):
            raise ValueError("last_transaction is not an object")
        gtid, before = data.get("gtid"), data.get("before", "")
        server_id, timestamp = data.get("server_id"), data.get("timestamp")
        if not isinstance(gtid, str) or not isinstance(before, str):
            raise ValueError("last_transaction's gtid and before must be text")
        if type(server_id) is not int or type(timestamp) is not int:
            raise ValueError("last_transaction's server_id and timestamp must be whole numbers")
        return cls(gtid, server_id, timestamp, before)

    def same_transaction(self, other: TransactionStamp) -> bool:
        return (self.gtid, self.server_id, self.timestamp) == (other.gtid, other.server_id, other.timestamp)

    def describe(self) -> str:
        written = datetime.fromtimestamp(self.timestamp, UTC).isoformat(timespec="seconds")
        return f"{self.gtid} (server id {self.server_id}, written {written})"


def stamp_of(gtid: Gtid, server_id: int, timestamp: int, before: GtidSet) -> TransactionStamp:
    """The stamp of a transaction the stream handed out; ``before``: the processed set just before it."""
    position = ""
    if isinstance(gtid, MariadbGtid) and isinstance(before, MariadbGtidSet):
        position = before.only([gtid.domain]).as_position()
    return TransactionStamp(str(gtid), server_id, timestamp, position)


def dump_start(stamp: TransactionStamp, processed: GtidSet) -> GtidSet | None:
    """Where a binlog dump starts so that the stamped transaction comes first of its source: the
    checkpoint's set without it (MySQL), or with its domain at ``before`` (MariaDB). None: no such
    start (the domain's first transaction: a dump without the domain starts at the oldest binlog)."""
    if isinstance(processed, MariadbGtidSet):
        gtid = MariadbGtid.parse(stamp.gtid)
        if not stamp.before:
            return None
        others = processed - processed.only([gtid.domain])
        return others | MariadbGtidSet.parse(stamp.before)
    return processed - type(processed).empty().add(MysqlGtid.parse(stamp.gtid))


@dataclass(frozen=True)
class Shown:
    """What a replica's binlog showed at the stamped GTID: its stamp, or why it showed none."""

    stamp: TransactionStamp | None
    why: str = ""


def identity_problem(recorded: TransactionStamp, shown: Shown, flavor: str, where: str) -> str | None:
    """Why ``where`` may not continue a checkpoint whose last transaction is ``recorded`` (None: it
    may), from what its binlog ``shown``; see the module doc."""
    if shown.stamp is not None and shown.stamp.same_transaction(recorded):
        return None
    if shown.stamp is not None:
        return (
            f"{where} holds {ANOTHER_PRIMARY}: its binlog has another transaction at {recorded.gtid} "
            f"({shown.stamp.describe()}) than the one the checkpoint processed ({recorded.describe()}): it "
            "replicates another primary whose GTIDs are numbered alike; continuing would stream that "
            "primary's changes into this output. Point source.hosts at a replica of the checkpoint's primary"
        )
    if flavor == "mysql":
        return None  # the GTID names the primary's server UUID
    return (
        f"{where} cannot show the transaction the checkpoint processed last, {recorded.describe()} "
        f"({shown.why}), and MariaDB GTIDs alone cannot tell {ANOTHER_PRIMARY} from this one: refused. "
        "Use a replica whose binlog still holds it (source.hosts); if you know this replica is of the "
        f"checkpoint's primary, run `{FORGET_SOURCE}` once and start again"
    )
