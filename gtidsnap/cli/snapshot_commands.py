"""``gtidsnap snapshot start|stop|pause|resume``: send a signal to a running (or stopped) gtidsnap.

The messages go to the Kafka signal topic of the config's ``[signals]`` section, keyed by its
``connector``; gtidsnap acts on each exactly once, even if it is started only later. ``--print`` writes
the message instead, for another producer (kcat, a Kafka UI). Exit codes: 0 sent, 1 not sent (the
broker is unreachable or refused it), 2 usage error (the message would be refused by gtidsnap).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gtidsnap.cli.output import err, error_line, say
from gtidsnap.config.loading import SignalSettings, load_config
from gtidsnap.core.errors import GtidsnapError, SignalError
from gtidsnap.core.notifications import FAILED, IGNORED, REFUSED, TABLE_SCAN_COMPLETED
from gtidsnap.signals.kafka import send_signal
from gtidsnap.signals.notifier import end_offsets, follow
from gtidsnap.signals.protocol import build_message

snapshot_app = typer.Typer(
    help="Start, stop, pause or resume snapshots through the Kafka signal topic.",
    no_args_is_help=True,
    add_completion=False,
)

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML config file; GTIDSNAP_* variables and flags override it."),
]
IdOpt = Annotated[
    str | None, typer.Option("--id", help="Signal id (default: a new UUID); a repeated id is ignored.")
]
PrintOpt = Annotated[
    bool, typer.Option("--print", help="Write the message as JSON to stdout instead of sending it.")
]
BootstrapOpt = Annotated[
    str | None, typer.Option("--bootstrap", help="Kafka bootstrap servers, HOST:PORT (signals.bootstrap).")
]
TopicOpt = Annotated[str | None, typer.Option("--topic", help="Signal topic (signals.topic).")]
ConnectorOpt = Annotated[
    str | None, typer.Option("--connector", help="Message key, the instance's name (signals.connector).")
]
MAX_WAIT_S = 86_400.0  # --wait: a day at most (a snapshot's COMPLETED may take hours)
WaitOpt = Annotated[
    float | None,
    typer.Option(
        "--wait",
        help="Wait up to this many seconds (more than 0, at most a day) for the signal's notifications "
        "(signals.notifications_topic) and print each as a JSON line: until COMPLETED for start, the answer "
        "for the others.",
    ),
]


def _send(
    kind: str,
    tables: list[str],
    filters: list[str],
    signal_id: str | None,
    print_only: bool,
    config: Path | None,
    bootstrap: str | None,
    topic: str | None,
    connector: str | None,
    wait_s: float | None = None,
) -> None:
    if wait_s is not None and not (math.isfinite(wait_s) and 0 < wait_s <= MAX_WAIT_S):
        _fail(
            f"--wait {wait_s!r} must be more than 0 and at most {MAX_WAIT_S:.0f} seconds; nothing was sent", 2
        )
    parsed: dict[str, str] = {}
    for item in filters:
        table, eq, condition = item.partition("=")
        if not eq or not table.strip() or not condition.strip():
            _fail(f"--filter {item!r} must be written TABLE=CONDITION, e.g. shop.orders=\"region = 'EU'\"", 2)
        if table.strip() in parsed:
            _fail(f"--filter names {table.strip()} twice; combine the conditions with AND", 2)
        parsed[table.strip()] = condition.strip()
    try:
        message = build_message(kind, tables, parsed, signal_id)
    except SignalError as exc:
        _fail(str(exc), 2)
    if print_only:
        if wait_s is not None:
            _fail("--wait needs the signal sent; --print only writes it", 2)
        typer.echo(json.dumps(message))
        return
    try:
        cfg = load_config(
            config,
            overrides={
                "signals.bootstrap": bootstrap,
                "signals.topic": topic,
                "signals.connector": connector,
            },
        )
        if wait_s is not None and not cfg.signals.notifications_topic:
            _fail("--wait needs signals.notifications_topic (the topic gtidsnap answers signals on)", 2)
        start = end_offsets(cfg.signals) if wait_s is not None else {}
        send_signal(cfg.signals, message)
    except GtidsnapError as exc:
        _fail(str(exc), 1)
    say(
        err,
        f"sent {message['type']} id={message['id']} to {cfg.signals.topic} on {cfg.signals.bootstrap} "
        f"(key {cfg.signals.connector})",
    )
    if wait_s is not None:
        _wait(cfg.signals, str(message["id"]), str(message["type"]), start, wait_s)


def _wait(settings: SignalSettings, signal_id: str, kind: str, start: dict[int, int], wait_s: float) -> None:
    """Print the signal's notifications; exit 2 when refused, 3 when a table's snapshot failed, 1 when
    the last one does not come within ``wait_s``."""
    failed = False
    try:
        for note in follow(settings, signal_id, start, kind, wait_s):
            typer.echo(json.dumps(note))
            data = note.get("additionalData", {})
            failed = failed or (note.get("type") == TABLE_SCAN_COMPLETED and data.get("status") == FAILED)
            if note.get("type") in (REFUSED, IGNORED):
                _fail(f"gtidsnap answered {note['type']}: {data.get('reason', '')}", 2)
    except TimeoutError as exc:
        _fail(
            f"{exc}: is gtidsnap running with signals.notifications_topic = {settings.notifications_topic}?",
            1,
        )
    except GtidsnapError as exc:
        _fail(str(exc), 1)
    if failed:
        _fail("a table's snapshot failed (see its TABLE_SCAN_COMPLETED above)", 3)


def _fail(text: str, code: int) -> NoReturn:
    error_line(text)
    raise typer.Exit(code)


@snapshot_app.command()
def start(
    tables: Annotated[
        list[str], typer.Argument(help="db.table names, or regular expressions matched in full.")
    ],
    filter_: Annotated[
        list[str] | None,
        typer.Option("--filter", help="TABLE=CONDITION: snapshot only the rows matching it (repeatable)."),
    ] = None,
    signal_id: IdOpt = None,
    print_only: PrintOpt = False,
    config: ConfigOpt = None,
    bootstrap: BootstrapOpt = None,
    topic: TopicOpt = None,
    connector: ConnectorOpt = None,
    wait_s: WaitOpt = None,
) -> None:
    """Snapshot these tables (execute-snapshot); a snapshot already running is not restarted."""
    _send("start", tables, filter_ or [], signal_id, print_only, config, bootstrap, topic, connector, wait_s)


@snapshot_app.command()
def stop(
    tables: Annotated[
        list[str] | None, typer.Argument(help="db.table names to stop; none: every snapshot.")
    ] = None,
    signal_id: IdOpt = None,
    print_only: PrintOpt = False,
    config: ConfigOpt = None,
    bootstrap: BootstrapOpt = None,
    topic: TopicOpt = None,
    connector: ConnectorOpt = None,
    wait_s: WaitOpt = None,
) -> None:
    """Stop snapshots (stop-snapshot): rows already read stay in the output; streaming goes on."""
    _send("stop", tables or [], [], signal_id, print_only, config, bootstrap, topic, connector, wait_s)


@snapshot_app.command()
def pause(
    signal_id: IdOpt = None,
    print_only: PrintOpt = False,
    config: ConfigOpt = None,
    bootstrap: BootstrapOpt = None,
    topic: TopicOpt = None,
    connector: ConnectorOpt = None,
    wait_s: WaitOpt = None,
) -> None:
    """Pause every snapshot (pause-snapshot); streaming goes on."""
    _send("pause", [], [], signal_id, print_only, config, bootstrap, topic, connector, wait_s)


@snapshot_app.command()
def resume(
    signal_id: IdOpt = None,
    print_only: PrintOpt = False,
    config: ConfigOpt = None,
    bootstrap: BootstrapOpt = None,
    topic: TopicOpt = None,
    connector: ConnectorOpt = None,
    wait_s: WaitOpt = None,
) -> None:
    """Resume paused snapshots (resume-snapshot)."""
    _send("resume", [], [], signal_id, print_only, config, bootstrap, topic, connector, wait_s)
