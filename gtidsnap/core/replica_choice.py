"""Can a replica serve a checkpoint? A pure verdict on what the replica says, per flavour.

A checkpoint's ``processed`` set is portable across every replica of one primary: any replica that has
applied all of it, and still holds in its binlog what comes after, continues it exactly. Three answers:

* :class:`Serves`: it has applied everything the checkpoint processed, and has purged nothing the
  checkpoint still needs.
* :class:`Behind`: it shares the checkpoint's history but has not applied all of it yet: a lagging
  replica, or one whose replication stopped. It is waited for (``source.catch_up_timeout_s``), never a
  reason to start over.
* :class:`Refused`: it cannot continue the checkpoint: another flavour, another history (transactions
  of a source it never applied, or a gap below what it applied from a source), or binlogs purged that
  hold transactions still to be streamed.
  ``start_over`` says whether the checkpoint is unusable anywhere of that kind (another server) or only
  here (purged binlogs: another replica may still serve it).

Errant transactions (a replica's own local writes, under its own server UUID, or on MariaDB a domain
whose newest GTID carries its server id) are streamed like any others, but a sibling never has them:
the checkpoint records the identity of every replica it was written on (``origins``), and what those
wrote themselves is excused on another replica (:class:`Serves` says which), so the checkpoint
continues there and no window waits for them. Only the primary's transactions count for the
watermarks on the new replica; the excused ones are reported in the log.

What "applied" means (:class:`ReplicaPosition`):

* MySQL: ``gtid_executed``, which also holds what a replica provisioned from a backup or a clone was
  given as ``gtid_purged``.
* MariaDB: per domain, the newer of ``gtid_binlog_pos`` and ``gtid_slave_pos``. A replica provisioned
  from a backup (``SET GLOBAL gtid_slave_pos``, then replication) has applied a domain that is idle on
  the primary without ever logging it: its binlog position lacks the domain, its slave position has it.
  The binlog dump accepts a start position with a domain the binlog never logged (measured on 10.11).

Purged: MySQL's ``gtid_purged``; MariaDB has no such set, so the position where the oldest binlog starts
stands in, and a start the server no longer holds is refused by the server itself (error 1236), which
the caller treats as this replica refusing.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gtidsnap.core.gtid import GtidSet

START_OVER = (
    "to start over, move the checkpoint and the output away (or point checkpoint.path and sink.path "
    "elsewhere) and snapshot the tables again"
)


@dataclass(frozen=True)
class ReplicaPosition:
    """What one replica says about its position, read at one moment."""

    where: str  # e.g. "the mariadb replica gtidsnap@127.0.0.1:3306", for messages
    flavor: str
    applied: GtidSet  # every transaction it has applied (see the module doc, per flavour)
    purged: GtidSet  # transactions its binlog no longer holds
    identity: str = ""  # who writes its own transactions: server UUID (MySQL), server id (MariaDB)


@dataclass(frozen=True)
class Serves:
    """The replica continues the checkpoint exactly. ``excused``: errant transactions of a replica the
    checkpoint was written on (its own writes) that this one does not have and never will: they were
    streamed, they stay in the checkpoint, and nothing waits for them here."""

    excused: GtidSet | None = None
    # Its own errant transactions the checkpoint has not streamed and its binlog no longer holds: they
    # are not asked for (only the primary's count), and a run here starts past them.
    skipped: GtidSet | None = None


@dataclass(frozen=True)
class Behind:
    """The replica shares the checkpoint's history but has not applied ``missing`` yet."""

    missing: GtidSet

    @property
    def transactions(self) -> int:
        return self.missing.count()


@dataclass(frozen=True)
class Refused:
    """The replica cannot continue the checkpoint; ``reason`` says why and what to do."""

    reason: str
    start_over: bool  # True: the checkpoint belongs to another server; False: only this replica fails


Verdict = Serves | Behind | Refused


def judge(
    checkpoint_flavor: str,
    processed: GtidSet,
    position: ReplicaPosition,
    origins: Collection[str] = (),
) -> Verdict:
    """Whether the replica at ``position`` can continue a checkpoint that processed ``processed``.
    ``origins``: the identities (MySQL server UUID, MariaDB server id) of the replicas the checkpoint was
    written on: transactions they wrote themselves (errant transactions) are not asked of this one."""
    where = position.where
    if checkpoint_flavor != position.flavor:
        return Refused(
            f"the checkpoint was written for a {checkpoint_flavor} source but {where} is "
            f"{position.flavor}: it belongs to another server; {START_OVER}",
            start_over=True,
        )
    missing = processed - position.applied
    errant = missing.only(source for source, origin in missing.origins().items() if origin in origins)
    if missing - errant:
        return _missing_verdict(missing - errant, position)
    needed = position.applied - processed
    lost = needed - (needed - position.purged)
    own = lost.only(source for source, origin in lost.origins().items() if origin == position.identity)
    lost = lost - own
    if lost:
        return Refused(
            f"{where} has purged binlogs that hold transactions the checkpoint has not streamed yet "
            f"({short(lost)}): those changes can no longer be read there; another replica that still has "
            "them can continue the checkpoint (source.hosts); keep binlogs longer "
            f"(binlog_expire_logs_seconds / expire_logs_days), or {START_OVER}",
            start_over=False,
        )
    return Serves(errant if errant else None, own if own else None)


def _missing_verdict(missing: GtidSet, position: ReplicaPosition) -> Behind | Refused:
    """Lag, or another history? Transactions of a source the replica applies, all numbered above what
    it applied from that source, are still to come (a replica applies each source in order): it lags.
    A source it never applied, or a hole below what it applied, is history it does not share."""
    applied_top = position.applied.max_per_source()
    missing_low = missing.min_per_source()
    unknown = [source for source in missing_low if source not in applied_top]
    holes = [s for s, low in missing_low.items() if s in applied_top and low <= applied_top[s]]
    if not unknown and not holes:
        return Behind(missing)
    why = (
        "it was written against another server, or the replica was rebuilt or reset since"
        if unknown
        else "its history diverges from the checkpoint's (it went past transactions it never applied)"
    )
    return Refused(
        f"the checkpoint has processed transactions that {position.where} has not executed "
        f"({short(missing)}): {why}; continuing would skip or repeat changes; {START_OVER}",
        start_over=True,
    )


def behind_line(where: str, behind: Behind, waited_s: float) -> str:
    """The log line of a replica being waited for."""
    return (
        f"{where} is {behind.transactions:,} transaction(s) behind the checkpoint "
        f"({short(behind.missing)}); waited {waited_s:.0f}s so far"
    )


def short(gtids: GtidSet, limit: int = 200) -> str:
    """A GTID set for a message, cut at ``limit`` characters."""
    text = str(gtids)
    return text if len(text) <= limit else text[: limit - 3] + "..."
