"""The replicas a run may read (``source.hosts``), and which one serves it now.

Every replica of one primary can continue a checkpoint (GTID sets are the same everywhere), so a run is
not tied to one server: :meth:`ReplicaSet.serving` connects to the preferred replica that can serve the
checkpoint (:func:`gtidsnap.core.replica_choice.judge`), waiting for one that lags
(``source.catch_up_timeout_s``, a line every few seconds). After a replica is lost mid-run it is tried
again for ``source.retry_for_s`` (a restart brings it back with nothing to move), then the others in
their configured order. The run itself restarts its engine from the checkpoint on the replica chosen:
open windows are read again, the stream resumes from the checkpoint's GTID set, and the output drops
what the lost run wrote past the checkpoint, as after a crash (:mod:`gtidsnap.run`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from gtidsnap.core.checkpoint import Checkpoint, resume_verdict
from gtidsnap.core.errors import CheckpointError, FatalSourceError, SourceError
from gtidsnap.core.replica_choice import (
    Behind,
    Refused,
    Serves,
    Verdict,
    behind_line,
    short,
)
from gtidsnap.core.source_identity import identity_problem
from gtidsnap.source.binlog.transaction_stamps import shown_at
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.replica import Replica

log = logging.getLogger(__name__)

BEHIND_LINE_EVERY_S = 5.0  # how often a replica being waited for is reported
FIRST_PAUSE_S, LONGEST_PAUSE_S = 0.2, 2.0  # between attempts to reach a lost replica again


class ReplicaSet:
    """The configured replicas, the preferred first; see the module doc."""

    def __init__(
        self,
        replicas: Sequence[ConnectionSettings],
        retry_for_s: float,
        catch_up_timeout_s: float,
        connect: Callable[[ConnectionSettings], Replica] = Replica,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replicas = tuple(replicas)
        self.retry_for_s = retry_for_s
        self.catch_up_timeout_s = catch_up_timeout_s
        self._connect = connect
        self._sleep, self._clock = sleep, clock

    def serving(
        self,
        resumed: Checkpoint | None,
        first: Replica | None = None,
        lost: ConnectionSettings | None = None,
        retry_lost: bool = True,
        retried_s: float = 0.0,
        lost_why: str = "",
    ) -> Replica:
        """A connected replica that can serve ``resumed``. ``first``: one already connected, judged first;
        ``lost``: the replica that just failed, tried again for what is left of ``retry_for_s`` after
        ``retried_s`` (at least once; never when not ``retry_lost``: it refused for good) before the
        others (``lost_why``: how it refused). Raises SourceError (retryable) naming each replica and why it
        cannot serve; when every one refuses for good, CheckpointError (the checkpoint belongs to another
        server) or FatalSourceError (not retryable: purged binlogs, a refused stream)."""
        problems: dict[str, Refused | str] = {}
        order = list(self.replicas)
        if first is not None:
            order = [first.settings, *(r for r in order if r != first.settings)]
        if lost is not None:
            order = [r for r in order if r != lost]
            if retry_lost:
                found = self._lost_comes_back(lost, resumed, problems, self.retry_for_s - retried_s)
                if found is not None:
                    return found
            else:
                why = f"{lost.describe()} refused the binlog stream" + (f": {lost_why}" if lost_why else "")
                problems[lost.describe()] = Refused(why, start_over=False)
        for settings in order:
            if first is not None and settings == first.settings:
                replica, first = first, None
            else:
                try:
                    replica = self._connect(settings)
                except SourceError as exc:
                    problems[settings.describe()] = str(exc)
                    self._passed_over(settings, problems)
                    continue
            verdict = self._caught_up(replica, resumed)
            if isinstance(verdict, Serves):
                return replica
            replica.close()
            problems[settings.describe()] = (
                verdict if isinstance(verdict, Refused) else self._behind_text(verdict)
            )
            self._passed_over(settings, problems)
        raise _no_replica(problems)

    def _passed_over(self, settings: ConnectionSettings, problems: dict[str, Refused | str]) -> None:
        """Say why a replica is passed over (with one replica, the error raised says it)."""
        if len(self.replicas) > 1:
            problem = problems[settings.describe()]
            why = problem.reason if isinstance(problem, Refused) else problem
            log.warning("the replica %s cannot serve the run (%s); trying the next", settings.describe(), why)

    def _lost_comes_back(
        self,
        lost: ConnectionSettings,
        resumed: Checkpoint | None,
        problems: dict[str, Refused | str],
        for_s: float,
    ) -> Replica | None:
        """The lost replica, once it answers again within ``for_s`` and serves ``resumed``."""
        deadline = self._clock() + for_s
        pause = FIRST_PAUSE_S
        while True:
            try:
                replica = self._connect(lost)
            except SourceError as exc:
                problems[lost.describe()] = f"did not come back within {self.retry_for_s:g}s ({exc})"
            else:
                verdict = judge_now(replica, resumed)
                if isinstance(verdict, Serves):
                    return replica
                replica.close()
                problems[lost.describe()] = (
                    verdict if isinstance(verdict, Refused) else self._behind_text(verdict)
                )
                return None  # back, but behind or refusing: the others may serve at once
            if self._clock() >= deadline:
                return None
            self._sleep(min(pause, max(0.0, deadline - self._clock())))
            pause = min(pause * 2, LONGEST_PAUSE_S)

    def _behind_text(self, behind: Behind) -> str:
        return (
            f"it has not executed {behind.transactions:,} transaction(s) the checkpoint processed "
            f"({short(behind.missing)}) after {self.catch_up_timeout_s:g}s of waiting: it lags, or its "
            "replication stopped; wait for it (source.catch_up_timeout_s), or use another (source.hosts)"
        )

    def _caught_up(self, replica: Replica, resumed: Checkpoint | None) -> Verdict:
        """The replica's verdict, waiting up to ``catch_up_timeout_s`` while it is only behind."""
        verdict = judge_now(replica, resumed)
        started = last_line = self._clock()
        while isinstance(verdict, Behind) and self._clock() - started < self.catch_up_timeout_s:
            if self._clock() - last_line >= BEHIND_LINE_EVERY_S or last_line == started:
                log.warning("%s; waiting", behind_line(replica.describe(), verdict, self._clock() - started))
                last_line = self._clock()
            self._sleep(min(0.5, self.catch_up_timeout_s))
            verdict = judge_now(replica, resumed)
        return verdict


def judge_now(replica: Replica, checkpoint: Checkpoint | None) -> Verdict:
    """Whether ``replica`` can serve ``checkpoint`` as it stands now (a first run: any replica can): by
    its GTIDs, then, once they allow it, by what its binlog holds at the checkpoint's last transaction
    (:mod:`gtidsnap.core.source_identity`: a replica of another primary is refused for good)."""
    if checkpoint is None:
        return Serves()
    flavor, where = str(replica.flavor), replica.describe()
    applied, purged = replica.applied(), replica.purged()
    verdict = resume_verdict(checkpoint, flavor, applied, purged, where, replica.identity())
    stamp = checkpoint.last_transaction
    if not isinstance(verdict, Serves) or stamp is None:
        return verdict
    shown = shown_at(replica.settings, stamp, checkpoint.processed)
    problem = identity_problem(stamp, shown, flavor, where)
    if problem is not None:
        return Refused(problem, start_over=True)
    if shown.stamp is None:
        log.info(
            "%s cannot show the checkpoint's last transaction %s (%s); its GTIDs name the checkpoint's "
            "primary (server UUID): accepted",
            where,
            stamp.gtid,
            shown.why,
        )
    return verdict


def _no_replica(problems: dict[str, Refused | str]) -> Exception:
    """One error naming every replica tried and why it cannot serve the run; retryable only while one of
    them may yet serve (it did not answer, or lags): a refusal (another server's checkpoint, binlogs
    purged, the stream refused) stays one, and the same command again would fail the same way."""
    if len(problems) == 1:
        ((where, problem),) = problems.items()
        if isinstance(problem, Refused):
            return CheckpointError(problem.reason) if problem.start_over else FatalSourceError(problem.reason)
        return SourceError(f"the replica {where} cannot serve the run: {problem}")
    lines = "; ".join(
        f"{where}: {problem.reason if isinstance(problem, Refused) else problem}"
        for where, problem in problems.items()
    )
    refusals = [p for p in problems.values() if isinstance(p, Refused)]
    if refusals and len(refusals) == len(problems):
        if all(p.start_over for p in refusals):
            return CheckpointError(f"no replica of source.hosts can continue the checkpoint: {lines}")
        return FatalSourceError(f"no replica of source.hosts can continue the checkpoint: {lines}")
    return SourceError(f"no replica of source.hosts can serve the run now: {lines}")
