"""``gtidsnap check``: is each replica of the config (``source.hosts``, or ``host`` and ``port``) ready for
read-only capture, and can it continue the checkpoint? Every problem with its fix, then the binlog
retention headroom. Exit codes: 0 ready, 1 not (the lines say why), 2 usage error.

A replica that does not answer within ``source.connect_timeout_s`` is an error when it is the only one,
a warning among several (a run passes it over, as it does); replicas of different flavours in one list
are refused (they cannot be of one primary); a checkpoint a replica cannot continue (binlogs it needs
purged, another server's history) makes it not ready, as the run would find.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import typer

from gtidsnap.cli.failures import config_of, fail, table_args
from gtidsnap.cli.options import CheckpointOpt, ConfigOpt, HostOpt, PortOpt, UserOpt
from gtidsnap.cli.output import err, error_line, out, printable, say
from gtidsnap.config.loading import Config
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.errors import GtidsnapError
from gtidsnap.core.model import TableId
from gtidsnap.core.replica_choice import START_OVER

if TYPE_CHECKING:
    from gtidsnap.source.connection import ConnectionSettings
    from gtidsnap.source.replica import Replica

PURGED_ADVICE = (
    "another replica that still has those binlogs can continue it (source.hosts); keep binlogs longer "
    f"(binlog_expire_logs_seconds / expire_logs_days), or {START_OVER}"
)


def check(
    config: ConfigOpt = None,
    host: HostOpt = None,
    port: PortOpt = None,
    user: UserOpt = None,
    table: Annotated[
        list[str] | None, typer.Option("--table", "-t", help="Also check this db.table.")
    ] = None,
    checkpoint: CheckpointOpt = None,
) -> None:
    """Check that the replica (each of source.hosts) is ready for read-only capture and can continue the
    checkpoint; list every problem with its fix."""
    cfg = config_of(
        config,
        **{
            "source.host": host,
            "source.port": port,
            "source.user": user,
            "checkpoint.path": str(checkpoint) if checkpoint else None,
        },
    )
    tables = list(dict.fromkeys([*cfg.tables, *table_args(table or [], "--table")]))
    try:
        resumed = _checkpoint_of(cfg)
        names = _name_problems(cfg, tables)
    except GtidsnapError as exc:
        raise fail(exc) from exc
    several = len(cfg.replicas) > 1
    outcomes = [_check_replica(cfg, replica, tables, resumed, several) for replica in cfg.replicas]
    flavors = {o.flavor: o.where for o in outcomes if o.flavor is not None}
    failed = False
    if len(flavors) > 1:
        error_line(
            "source.hosts mixes servers of different flavours ("
            + ", ".join(f"{f} at {w}" for f, w in sorted(flavors.items()))
            + "): the replicas of a run must be of one primary; list only those"
        )
        failed = True
    for problem in names:
        error_line(problem)
        failed = True
    if any(o.flavor is not None and not o.ready for o in outcomes):
        failed = True
    if several and not any(o.ready for o in outcomes):
        if all(o.flavor is None for o in outcomes):
            error_line("no replica of source.hosts answers: see the lines above")
        failed = True
    if failed:
        raise typer.Exit(1)


@dataclass(frozen=True)
class _Checked:
    """What ``check`` found on one replica: its flavour (None: it did not answer) and whether it is ready."""

    where: str  # user@host:port
    flavor: str | None
    ready: bool


def _check_replica(
    cfg: Config,
    settings: ConnectionSettings,
    tables: list[TableId],
    checkpoint: Checkpoint | None,
    several: bool,
) -> _Checked:
    """One replica checked and its findings printed: its problems, or whether it can continue the
    checkpoint (:func:`gtidsnap.source.replica_set.judge_now`), then its binlog retention headroom. One
    that does not answer within ``source.connect_timeout_s`` is an error alone, a warning among several
    (a run passes it over)."""
    from gtidsnap.core.checkpoint import problem_of
    from gtidsnap.core.replica_choice import Behind, Refused
    from gtidsnap.source.replica import Replica
    from gtidsnap.source.replica_set import judge_now

    try:
        with Replica(settings) as replica:
            problems = replica.preflight(tables, dict(cfg.surrogate_keys))
            where = f"{replica.flavor} {'.'.join(map(str, replica.version))} at {settings.describe()}"
            flavor = str(replica.flavor)
            verdict = judge_now(replica, checkpoint) if not problems else None
            refused = isinstance(verdict, Refused)
            retention, low, gone = (
                _retention(cfg, replica, checkpoint) if not problems and not refused else ("", False, False)
            )
    except GtidsnapError as exc:
        if not several:
            raise fail(exc) from exc
        say(
            err,
            (
                printable(f"warning: {settings.describe()} does not answer: {exc}; a run passes it over"),
                "yellow",
            ),
        )
        return _Checked(settings.describe(), None, False)
    if problems:
        error_line(f"{len(problems)} problem(s) on {where}:")
        for p in problems:
            say(err, f"  - {printable(str(p))}")
        return _Checked(settings.describe(), flavor, False)
    if isinstance(verdict, Refused) or gone:
        why = verdict.reason if isinstance(verdict, Refused) else f"{retention}; {PURGED_ADVICE}"
        error_line(f"not ready: checkpoint {cfg.checkpoint_path} cannot be continued on {where}: {why}")
        return _Checked(settings.describe(), flavor, False)
    say(out, ("ok", "green"), f": {where} is ready for gtidsnap ({len(tables)} table(s) checked)")
    if isinstance(verdict, Behind):
        say(out, (printable(problem_of(verdict, replica.describe()) or ""), "yellow"))
    say(out, (f"binlog retention: {retention}", "yellow" if low else ""))
    return _Checked(settings.describe(), flavor, True)


def _checkpoint_of(cfg: Config) -> Checkpoint | None:
    from gtidsnap.run import read_checkpoint

    return read_checkpoint(cfg) if cfg.checkpoint_path.exists() else None


def _name_problems(cfg: Config, tables: list[TableId]) -> list[str]:
    """The captured tables' names in a catalog (``sink.database``) that a metastore would refuse."""
    if cfg.sink.type != "delta" or not cfg.sink.database:
        return []
    from gtidsnap.sinks.delta.catalog_names import TableNames

    names = TableNames.of(cfg.sink)
    found = [names.problem(t) for t in tables] if names is not None else []
    return [p for p in found if p is not None]


def _retention(cfg: Config, replica: Replica, checkpoint: Checkpoint | None) -> tuple[str, bool, bool]:
    """The binlog retention headroom of the checkpoint (or, before a first run, of where one would
    start) as ``check`` reports it, whether it is low, and whether the binlog the checkpoint needs is
    gone already (the replica cannot continue it)."""
    from gtidsnap.source.binlog.retention import replica_headroom

    processed = checkpoint.processed if checkpoint is not None else replica.applied()
    headroom = replica_headroom(replica, processed)
    line, low = headroom.line(cfg.retention_warn_s)
    return line, low, checkpoint is not None and headroom.needed is None and bool(replica.binlog_names())
