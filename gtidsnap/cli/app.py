"""``gtidsnap``: the command line. A thin layer of typer + rich over the library, which never prints.

Exit codes: 0 done, 1 the replica or the input is not usable (the message says why; a second line
says when the same command again may pass), 2 usage error.

Text from users (table names, paths, signal ids, server messages) is printed as plain text, never as
rich markup: a table called ``db.[/x]`` prints as itself. An unexpected exception prints one line
naming it; ``--verbose`` (anywhere on the command line) shows the traceback instead.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from gtidsnap.cli.check_command import check
from gtidsnap.cli.checkpoint_commands import checkpoint_app
from gtidsnap.cli.failures import config_of, fail, table_args
from gtidsnap.cli.options import CheckpointOpt, ConfigOpt, HostOpt, PortOpt, UserOpt
from gtidsnap.cli.output import EscapedLog, err, error_line, out, printable, say
from gtidsnap.cli.snapshot_commands import snapshot_app
from gtidsnap.cli.verify_command import verify
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.errors import GtidsnapError
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext, TableProgress
from gtidsnap.core.run_stats import RunStats, decoders_line, throughput_line

if TYPE_CHECKING:
    pass

app = typer.Typer(
    name="gtidsnap",
    help="Read-only GTID watermark snapshots of MySQL/MariaDB replicas, merged with the binlog stream.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,  # main() prints one line instead (the traceback with --verbose)
)
app.add_typer(
    snapshot_app,
    name="snapshot",
    help="Start, stop, pause or resume snapshots of a running gtidsnap through its Kafka signal topic.",
)
app.add_typer(checkpoint_app, name="checkpoint", help="Show the checkpoint, or edit it deliberately.")
app.command()(check)
app.command()(verify)
log = logging.getLogger("gtidsnap")

SNAPSHOT_FAILED = 3  # exit status of a run that ended with a snapshot it was asked for failed


def _setup_logging(verbose: bool) -> None:
    level = logging.DEBUG if verbose else logging.INFO
    handler: logging.Handler
    if err.is_terminal:
        handler = RichHandler(console=err, show_path=False)
        fmt = "%(message)s"
    else:
        handler = logging.StreamHandler(sys.stderr)
        fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    handler.addFilter(EscapedLog())  # a forged line or a terminal escape never reaches the log
    logging.basicConfig(level=level, format=fmt, handlers=[handler], force=True)
    for noisy in ("pymysqlreplication", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


WAITING_SHOWN_S = 1.0  # a window open longer than this shows as waiting for the stream


def stream_wait_note(stats: RunStats, now: float | None = None) -> str:
    """Why a snapshot is slow when it is: its chunk waits for the stream to reach the high watermark
    (under heavy writes the snapshot advances at the stream's pace). Empty when it is not waiting."""
    waiting = stats.window_waiting_s(now)
    if waiting < WAITING_SHOWN_S:
        return ""
    return f"chunk waits {waiting:.0f}s for the stream"


class _Display:
    """Progress per table: rich bars on a terminal, a log line every few seconds otherwise."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.tasks: dict[TableId, TaskID] = {}
        self._last_line = 0.0
        if err.is_terminal:
            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn(
                    "{task.fields[rows]:>10,} rows  {task.fields[chunks]:>6,} chunks  {task.fields[state]}"
                ),
                TimeElapsedColumn(),
                console=err,
            )

    def __call__(self, context: SnapshotContext, stats: RunStats) -> None:
        note = "; ".join(
            filter(None, [stream_wait_note(stats), throughput_line(stats.readers), decoders_line(stats)])
        )
        if self.progress is not None:
            current = context.current()
            for t in context.tables:
                self._bar(t, note if current is not None and t is current else "")
        elif time.monotonic() - self._last_line > 2.0 or not context.pending():
            self._last_line = time.monotonic()
            for t in context.pending()[:1]:
                log.info(
                    "snapshot %s: %d rows in %d chunks%s; windows waited %.0fs for the stream so far",
                    t.table,
                    t.rows,
                    t.chunks,
                    f" ({note})" if note else "",
                    stats.window_wait_s + stats.window_waiting_s(),
                )

    def _bar(self, t: TableProgress, note: str) -> None:
        assert self.progress is not None
        state = t.state
        if note:
            state = f"{state}: {note}"
        state = escape(printable(state))
        if t.table not in self.tasks:
            self.tasks[t.table] = self.progress.add_task(
                escape(printable(str(t.table))), total=None, rows=0, chunks=0, state=state
            )
        task = self.tasks[t.table]
        self.progress.update(task, rows=t.rows, chunks=t.chunks, state=state)
        if t.done:
            self.progress.update(task, total=1, completed=1)


@app.command()
def run(
    config: ConfigOpt = None,
    snapshot: Annotated[
        list[str] | None, typer.Option("--snapshot", "-s", help="Snapshot this db.table (repeatable).")
    ] = None,
    until_caught_up: Annotated[
        bool,
        typer.Option(
            help="Exit 0 once the snapshots are done and the stream reached the replica's executed set."
        ),
    ] = False,
    host: HostOpt = None,
    port: PortOpt = None,
    user: UserOpt = None,
    chunk_size: Annotated[int | None, typer.Option(help="Rows per chunk (snapshot.chunk_size).")] = None,
    readers: Annotated[
        int | None,
        typer.Option(
            help="Chunk reader processes (snapshot.readers; default one per CPU but one); "
            "0: on the engine's thread."
        ),
    ] = None,
    reader_pool: Annotated[
        str | None,
        typer.Option(
            help="Where chunks are read: processes, or spark (splits as Spark tasks on sink.spark_master;"
            " snapshot.reader_pool)."
        ),
    ] = None,
    sink_path: Annotated[str | None, typer.Option(help="Output path (sink.path).")] = None,
    checkpoint: CheckpointOpt = None,
    signals_bootstrap: Annotated[
        str | None,
        typer.Option(help="Kafka HOST:PORT of the signal topic; enables signals (signals.bootstrap)."),
    ] = None,
    signals_topic: Annotated[str | None, typer.Option(help="Signal topic (signals.topic).")] = None,
    metrics_listen: Annotated[
        str | None,
        typer.Option(help="HOST:PORT serving /metrics, /healthz, /readyz (metrics.listen; default: none)."),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Stream the replica's binlog, snapshotting the tables asked for, with exact resume after a crash."""
    from gtidsnap.run import run_engine

    _setup_logging(verbose)
    cfg = config_of(
        config,
        **{
            "source.host": host,
            "source.port": port,
            "source.user": user,
            "snapshot.chunk_size": chunk_size,
            "snapshot.readers": readers,
            "snapshot.reader_pool": reader_pool,
            "sink.path": sink_path,
            "checkpoint.path": str(checkpoint) if checkpoint else None,
            "signals.bootstrap": signals_bootstrap,
            "signals.topic": signals_topic,
            "metrics.listen": metrics_listen,
        },
    )
    tables = table_args(snapshot or [], "--snapshot")
    display = _Display()
    # Spark's own banners and warnings go to a file beside the checkpoint (on screen with --verbose)
    spark_log = None if verbose else cfg.checkpoint_path.parent / "spark.log"
    try:
        if display.progress is not None:
            with display.progress:
                stats = run_engine(cfg, None, tables, until_caught_up, display, spark_log)
        else:
            stats = run_engine(cfg, None, tables, until_caught_up, display, spark_log)
    except GtidsnapError as exc:
        fail(exc)
    except KeyboardInterrupt:
        say(err, "interrupted: resume with the same command (the checkpoint is kept)")
        raise typer.Exit(130) from None
    elapsed = time.monotonic() - stats.started_at
    pauses = sorted(stats.chunk_pause_s)
    p50 = pauses[len(pauses) // 2] * 1000 if pauses else 0.0
    by_reader = (
        f"; {len(stats.readers)} chunk reader(s): {throughput_line(stats.readers)}" if stats.readers else ""
    )
    say(
        out,
        f"done: {stats.records:,} records ({stats.snapshot_rows:,} snapshot rows in {stats.chunks:,} chunks) "
        f"in {elapsed:.1f}s; binlog paused per chunk p50 {p50:.1f} ms; output {cfg.sink.path}{by_reader}",
    )
    if stats.failed:  # the output lacks those tables' rows: never an exit 0 a pipeline takes for success
        for table, reason in sorted(stats.failed.items()):
            say(err, printable(f"snapshot of {table} failed: {reason}"))
        error_line(
            f"{len(stats.failed)} snapshot(s) failed: {', '.join(sorted(stats.failed))}; their rows are not "
            "in the output (their changes are): fix the cause, then the same command reads them again"
        )
        raise typer.Exit(SNAPSHOT_FAILED)


@app.command()
def status(
    config: ConfigOpt = None,
    checkpoint: CheckpointOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="The same facts as one JSON object on stdout, for scripts.")
    ] = False,
) -> None:
    """Show progress from the checkpoint (no connection to the replica needed)."""
    from gtidsnap.run import read_checkpoint

    cfg = config_of(config, **{"checkpoint.path": str(checkpoint) if checkpoint else None})
    try:
        cp = read_checkpoint(cfg)
    except GtidsnapError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(status_json(cfg.checkpoint_path, cp), indent=2))
        return
    if cp is None:
        say(out, f"no checkpoint at {cfg.checkpoint_path}: gtidsnap has not run with this config yet")
        return
    say(out, f"source flavour: {cp.flavor}   records emitted: {cp.next_seq - 1:,}")
    say(out, f"processed: {cp.processed or '(nothing)'}")
    if cp.replica is not None:
        say(out, printable(f"replica: {cp.replica.where} since {cp.replica.since} ({cp.replica.why})"))
        if cp.replica.retention:
            line = printable(f"binlog retention: {cp.replica.retention}")
            say(out, (line, "yellow") if cp.replica.retention_low else line)
    table = Table("table", "state", "chunks", "rows", "last key", "note", title="snapshots")
    for t in cp.context.tables:
        state = t.state
        last = ", ".join(map(str, t.last_key)) if t.last_key else ""
        cells = (str(t.table), state, f"{t.chunks:,}", f"{t.rows:,}", last, t.error or t.condition or "")
        table.add_row(*(Text(printable(c)) for c in cells))
    if cp.context.paused:
        say(out, ("snapshots are paused", "yellow"))
    out.print(table)
    history = cp.signals.history
    if history:
        signals = Table("id", "type", "offset", "outcome", title="signals")
        for h in history:
            fields = (h.id or "-", h.type, str(h.offset), h.outcome)
            signals.add_row(*(Text(printable(c)) for c in fields))
        out.print(signals)


def status_json(path: Path, cp: Checkpoint | None) -> dict[str, Any]:
    """``status --json``: what the tables show, as plain JSON (``checkpoint`` null before a first run)."""
    if cp is None:
        return {"checkpoint": str(path), "exists": False}
    snapshots = [
        {
            "table": str(t.table),
            "state": t.state,
            "chunks": t.chunks,
            "rows": t.rows,
            "last_key": [str(v) for v in t.last_key] if t.last_key else None,
            "condition": t.condition,
            "error": t.error,
        }
        for t in cp.context.tables
    ]
    return {
        "checkpoint": str(path),
        "exists": True,
        "flavor": cp.flavor,
        "records_emitted": cp.next_seq - 1,
        "processed": str(cp.processed),
        "replica": cp.replica.to_json() if cp.replica is not None else None,
        "paused": cp.context.paused,
        "snapshots": snapshots,
        "signals": [h.to_json() for h in cp.signals.history],
        "notifications_waiting": len(cp.signals.notes.outbox),
    }


def main(argv: list[str] | None = None) -> None:
    """The ``gtidsnap`` command: errors of ours are one line (printed where they happen); anything
    unexpected is one line too, naming the exception, unless ``--verbose``/``-v`` asks for the traceback."""
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=args)
    except Exception as exc:
        if "--verbose" in args or "-v" in args:
            raise
        error_line(
            f"unexpected {type(exc).__name__}: {' '.join(str(exc).split())[:500]} "
            "(run again with --verbose for the traceback, and please report it)",
        )
        raise SystemExit(1) from None
