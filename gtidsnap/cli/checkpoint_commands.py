"""``gtidsnap checkpoint show|set``: the checkpoint read, and the deliberate edits an operator makes.

A checkpoint edited by hand is refused by every run (its content no longer matches its digest:
:mod:`gtidsnap.core.checkpoint_edits`); ``set`` makes the edits operators need, digests the checkpoint
again and records in its history what changed, when and by whom (the OS user). It holds the
checkpoint's run lock meanwhile, so it never races a run. Exit codes: 0 done, 1 refused (the message
says why), 2 usage error.
"""

from __future__ import annotations

import getpass
import json
import os
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from gtidsnap.cli.output import err, error_line, out, printable, say
from gtidsnap.config.loading import Config, load_config
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.checkpoint_edits import Digest, edited_by_hand, forget_source, now_utc, skip_transactions
from gtidsnap.core.errors import GtidsnapError
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.run.run_lock import RunLock

checkpoint_app = typer.Typer(
    help="Show the checkpoint, or make a deliberate edit to it (recorded in its history).",
    no_args_is_help=True,
    add_completion=False,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML config file; GTIDSNAP_* variables and flags override it."),
]
CheckpointOpt = Annotated[
    Path | None, typer.Option("--checkpoint", help="Checkpoint file (checkpoint.path).")
]
DIGEST_SAYS = {
    Digest.MATCHES: "its content matches its digest",
    Digest.MISSING: "no digest (written by an earlier version; the next run adds one)",
    Digest.DIFFERS: "CHANGED BY HAND: its content does not match its digest, so runs refuse it",
}


def _fail(text: str, code: int = 1) -> NoReturn:
    error_line(text)
    raise typer.Exit(code)


def _store(config: Path | None, checkpoint: Path | None) -> CheckpointStore:
    try:
        path = str(checkpoint) if checkpoint else None
        cfg: Config = load_config(config, overrides={"checkpoint.path": path})
    except GtidsnapError as exc:
        _fail(str(exc))
    return CheckpointStore(cfg.checkpoint_path)


@checkpoint_app.command()
def show(
    config: ConfigOpt = None,
    checkpoint: CheckpointOpt = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="The checkpoint as one JSON object on stdout, with its digest's verdict."
        ),
    ] = False,
) -> None:
    """Print the checkpoint as it is on disk, one edited by hand too: the processed GTID set, the next
    record number, the output's position, the last transaction processed (server id and time, which
    tell its primary), the replica, the history of deliberate edits, and whether its content matches its
    digest. Needs no connection."""
    store = _store(config, checkpoint)
    try:
        found = store.load_as_written()
    except GtidsnapError as exc:
        _fail(str(exc))
    if as_json:
        shown: dict[str, Any] = {"checkpoint": str(store.path), "exists": found is not None}
        if found is not None:
            shown |= {"digest": found[1].value, **found[0].to_json()}
        typer.echo(json.dumps(shown, indent=2))
        return
    if found is None:
        say(out, printable(f"no checkpoint at {store.path}: gtidsnap has not run with this config yet"))
        return
    cp, digest = found
    style = "red" if digest is Digest.DIFFERS else ""
    say(out, printable(f"checkpoint {store.path}: "), (DIGEST_SAYS[digest], style))
    for line in _lines(cp):
        say(out, printable(line))


def _lines(cp: Checkpoint) -> list[str]:
    stamp = cp.last_transaction
    last = "none recorded yet (the source is checked from the first transaction streamed)"
    if stamp is not None:
        last = stamp.describe()
    lines = [
        f"flavour: {cp.flavor}   next record: seq {cp.next_seq:,} ({cp.next_seq - 1:,} emitted)",
        f"processed: {cp.processed or '(nothing)'}",
        f"output position: {json.dumps(cp.sink_position)}",
        f"last transaction: {last}",
    ]
    if cp.replica is not None:
        lines.append(f"replica: {cp.replica.where} since {cp.replica.since} ({cp.replica.why})")
    if cp.origins:
        lines.append(f"written on: {', '.join(cp.origins)}")
    lines.append(f"snapshots: {len(cp.context.tables)} table(s) (gtidsnap status shows them)")
    lines.append("history: " + ("no deliberate edit" if not cp.history else f"{len(cp.history)} edit(s)"))
    lines.extend(f"  {e.at} by {e.by}: {e.change}" for e in cp.history)
    return lines


@checkpoint_app.command("set")
def set_(
    config: ConfigOpt = None,
    checkpoint: CheckpointOpt = None,
    skip: Annotated[
        list[str] | None,
        typer.Option(
            "--skip",
            help="Count this GTID as processed, so the stream starts past it: a poison transaction the "
            "stream cannot read (its changes will be missing from the output). The next transaction after "
            "the checkpoint only (MariaDB: the domain's next seq); repeat for several.",
        ),
    ] = None,
    forget: Annotated[
        bool,
        typer.Option(
            "--forget-source",
            help="Forget the last transaction's stamp, so the next run accepts the replica its GTIDs allow "
            "(one of the same primary that cannot show that transaction any more) and records a new one.",
        ),
    ] = False,
) -> None:
    """Make a deliberate edit to the checkpoint (never while a run holds it): it is digested again, and
    the change, when and by whom (the OS user) are recorded in its history (``gtidsnap checkpoint show``).
    A checkpoint changed by hand is not edited: restore it first."""
    if not skip and not forget:
        _fail("nothing to set: give --skip GTID or --forget-source (see gtidsnap checkpoint set --help)", 2)
    store = _store(config, checkpoint)
    try:
        with RunLock([store.path]):
            found = store.load_as_written()
            if found is None:
                _fail(f"no checkpoint at {store.path}: there is nothing to edit")
            cp, digest = found
            if digest is Digest.DIFFERS:
                _fail(edited_by_hand(store.path))
            by, at = _os_user(), now_utc()
            edited = skip_transactions(cp, list(skip), by, at) if skip else cp
            edited = forget_source(edited, by, at) if forget else edited
            store.save(edited)
    except ValueError as exc:
        _fail(f"checkpoint {store.path} not changed: {exc}")
    except GtidsnapError as exc:
        _fail(str(exc))
    for change in edited.history[-(bool(skip) + forget) :]:
        said = f"checkpoint {store.path}: {change.change} (by {change.by}, recorded in its history)"
        say(err, printable(said))


def _os_user() -> str:
    """Who runs this: the OS user (its uid when the system has no name for it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
