"""The checkpoint value: everything needed to resume exactly, saved after the sink's commit.

Order of a commit: the sink makes its records durable and reports its position; then this file is
replaced atomically (:mod:`gtidsnap.engine.checkpoint_store`). A crash before that leaves the
previous checkpoint, whose sink position is older: the sink drops the extra output on restart and
the stream replays it from the checkpoint's GTID set. Nothing is lost, nothing is doubled.

A checkpoint is only continued on a replica that can continue it (:func:`resume_problem`, by
:mod:`gtidsnap.core.replica_choice`): the same flavour, every transaction it processed applied there,
and none of those it still needs purged.
Anything else (another server, a rebuilt replica) would resume silently at a wrong place, so it stops
with what happened and what to do; so does a replica of another primary whose GTIDs are numbered alike,
told by the stamp of the last transaction (:mod:`.source_identity`), and a file edited by hand, told by
its digest (:mod:`.checkpoint_edits`). A file that is not a checkpoint (a folder, not JSON, a JSON
array, a field of the wrong type) is a :class:`CheckpointError` naming the problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, get_args

from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.json_fields import typed_field
from gtidsnap.core.model import Flavor
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.replica_choice import Behind, Refused, ReplicaPosition, Verdict, judge, short
from gtidsnap.core.signal_ledger import SignalLedger
from gtidsnap.core.source_identity import TransactionStamp

FORMAT_VERSION = 1
MAX_RECORD_SEQ = 2**63 - 1  # the greatest sequence number: Delta's _seq is a LONG
FLAVORS: tuple[str, ...] = get_args(Flavor)


@dataclass(frozen=True)
class ReplicaInUse:
    """Which replica the run that wrote a checkpoint read, since when (UTC, ISO 8601) and why that one,
    for ``status`` and the log; never read back to decide anything."""

    where: str
    since: str
    why: str
    retention: str = ""  # the binlog retention headroom, as last measured (:mod:`.retention`)
    retention_low: bool = False  # below source.retention_warn_s

    @classmethod
    def now(cls, where: str, why: str) -> ReplicaInUse:
        return cls(where, datetime.now(UTC).isoformat(timespec="seconds"), why)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"where": self.where, "since": self.since, "why": self.why}
        if self.retention:
            data |= {"retention": self.retention, "retention_low": self.retention_low}
        return data

    @classmethod
    def from_json(cls, data: Any) -> ReplicaInUse | None:
        if not isinstance(data, dict):
            return None
        where, since, why, retention = (str(data.get(k, "")) for k in ("where", "since", "why", "retention"))
        return cls(where, since, why, retention, data.get("retention_low") is True)


@dataclass(frozen=True)
class Edit:
    """A deliberate change an operator made (``gtidsnap checkpoint set``): when (UTC, ISO 8601), by whom
    (the OS user) and what, kept in the checkpoint's history (:mod:`.checkpoint_edits`)."""

    at: str
    by: str
    change: str

    def to_json(self) -> dict[str, str]:
        return {"at": self.at, "by": self.by, "change": self.change}

    @classmethod
    def from_json(cls, data: Any) -> Edit:
        if not isinstance(data, dict):
            raise ValueError("an entry of history is not an object")
        return cls(*(str(data.get(k, "")) for k in ("at", "by", "change")))


@dataclass(frozen=True)
class Checkpoint:
    """What was fully processed, where the output stands, and the snapshot context."""

    flavor: str
    processed: GtidSet
    next_seq: int
    sink_position: Any
    context: SnapshotContext = field(default_factory=SnapshotContext)
    signals: SignalLedger = field(default_factory=SignalLedger)
    replica: ReplicaInUse | None = None
    # The identities of the replicas it was written on (MySQL server UUID, MariaDB server id): their own
    # writes, errant transactions, are excused on another replica (:mod:`.replica_choice`).
    origins: tuple[str, ...] = ()
    # The last transaction it processed, as its primary wrote it (None: none streamed yet, or written by
    # an earlier version): a replica of another primary is told by it (:mod:`.source_identity`).
    last_transaction: TransactionStamp | None = None
    history: tuple[Edit, ...] = ()  # deliberate edits (``gtidsnap checkpoint set``), oldest first

    def to_json(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"replica": self.replica.to_json()} if self.replica is not None else {}
        if self.origins:
            extra["origins"] = list(self.origins)
        if self.last_transaction is not None:
            extra["last_transaction"] = self.last_transaction.to_json()
        if self.history:
            extra["history"] = [e.to_json() for e in self.history]
        return extra | {
            "format": FORMAT_VERSION,
            "flavor": self.flavor,
            "processed": str(self.processed),
            "next_seq": self.next_seq,
            "sink_position": self.sink_position,
            "context": self.context.to_json(),
            "signals": self.signals.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> Checkpoint:
        """The checkpoint in ``data``; ValueError names the first field that is not as written."""
        if not isinstance(data, dict):
            raise ValueError(f"it holds {type(data).__name__ if data is not None else 'null'}, not an object")
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"format {data.get('format')!r} is not {FORMAT_VERSION}")
        flavor = typed_field(data, "flavor", str)
        if flavor not in FLAVORS:
            raise ValueError(f"flavor {flavor!r} is not one of {', '.join(FLAVORS)}")
        next_seq = typed_field(data, "next_seq", int)
        if next_seq < 1:
            raise ValueError(f"next_seq {next_seq} is not positive")
        if next_seq > MAX_RECORD_SEQ:
            raise ValueError(
                f"field 'next_seq' is {next_seq}, past the greatest sequence number {MAX_RECORD_SEQ} "
                "(a 64-bit LONG)"
            )
        try:
            context = SnapshotContext.from_json(typed_field(data, "context", dict))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"context is not a snapshot context ({type(exc).__name__}: {exc})") from None
        return cls(
            flavor=flavor,
            processed=parse_gtid_set(flavor, typed_field(data, "processed", str)),
            next_seq=next_seq,
            sink_position=data.get("sink_position"),
            context=context,
            signals=SignalLedger.from_json(typed_field(data, "signals", dict, {})),
            replica=ReplicaInUse.from_json(data.get("replica")),
            origins=tuple(str(o) for o in typed_field(data, "origins", list, [])),
            last_transaction=_stamp(flavor, data.get("last_transaction")),
            history=tuple(Edit.from_json(e) for e in typed_field(data, "history", list, [])),
        )


def _stamp(flavor: str, data: Any) -> TransactionStamp | None:
    """The checkpoint's last transaction (None: it names none), its GTID of the checkpoint's flavour."""
    if data is None:
        return None
    stamp = TransactionStamp.from_json(data)
    parse_gtid_set(flavor, stamp.gtid)  # a GtidParseError is a ValueError naming it
    return stamp


def resume_problem(
    checkpoint: Checkpoint, flavor: str, executed: GtidSet, purged: GtidSet, where: str
) -> str | None:
    """Why the replica at ``where`` cannot continue ``checkpoint`` now (None: it can), by
    :func:`gtidsnap.core.replica_choice.judge`. ``executed`` is what the replica has applied (see
    :class:`~gtidsnap.core.replica_choice.ReplicaPosition`); ``purged`` the transactions its binlog no
    longer holds. A replica behind the checkpoint gets a line that says so, not advice to start over. Pure."""
    return problem_of(resume_verdict(checkpoint, flavor, executed, purged, where), where)


def resume_verdict(
    checkpoint: Checkpoint, flavor: str, applied: GtidSet, purged: GtidSet, where: str, identity: str = ""
) -> Verdict:
    """:func:`gtidsnap.core.replica_choice.judge` of the replica at ``where`` for ``checkpoint``."""
    position = ReplicaPosition(where, flavor, applied, purged, identity)
    return judge(checkpoint.flavor, checkpoint.processed, position, checkpoint.origins)


def problem_of(verdict: Verdict, where: str) -> str | None:
    """What stops a run on a replica with ``verdict`` (None: nothing)."""
    if isinstance(verdict, Refused):
        return verdict.reason
    if isinstance(verdict, Behind):
        return (
            f"{where} has not executed {verdict.transactions:,} transaction(s) the checkpoint processed "
            f"({short(verdict.missing)}) yet: it lags behind the replica the checkpoint was written on; "
            "wait for it to catch up (source.catch_up_timeout_s), or use a replica that has them "
            "(source.hosts)"
        )
    return None
