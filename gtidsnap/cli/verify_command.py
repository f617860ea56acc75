"""``gtidsnap verify``: compare tables on the replica with their Delta mirrors, range by range at
consistent points, while gtidsnap runs (see :mod:`gtidsnap.verify.verifier` for how).

Exit codes: 0 every table is the same, 1 a difference was found (the first ones are printed) or the
comparison could not be made (the message says why), 2 usage error.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gtidsnap.cli.output import err, error_line, out, printable, say
from gtidsnap.config.loading import load_config, parse_table_name
from gtidsnap.core.errors import GtidsnapError

if TYPE_CHECKING:
    from gtidsnap.verify.verifier import VerifyReport

log = logging.getLogger("gtidsnap")


def verify(
    tables: Annotated[list[str], typer.Argument(help="The db.table(s) to compare with their mirrors.")],
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="TOML config file; GTIDSNAP_* variables and flags override it."),
    ] = None,
    sink_path: Annotated[str | None, typer.Option(help="The Delta output's path (sink.path).")] = None,
    checkpoint: Annotated[
        Path | None, typer.Option("--checkpoint", help="The output's checkpoint file (checkpoint.path).")
    ] = None,
    range_rows: Annotated[int, typer.Option(help="Rows of a key range read and compared at once.")] = 50_000,
    show: Annotated[int, typer.Option(help="How many differing keys to print per table.")] = 10,
    wait: Annotated[
        float, typer.Option(help="Seconds to wait for the output to pass a range's position.")
    ] = 120.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per table on stdout.")] = False,
    hashes: Annotated[
        bool,
        typer.Option(
            "--hash/--no-hash",
            help="Compare ranges by a hash on both sides where the table allows it (integer keys, no FLOAT, "
            "DOUBLE, JSON, TIME, BIT or spatial column), reading rows only where they differ.",
        ),
    ] = True,
) -> None:
    """Compare tables on the replica with their Delta mirrors at consistent points; exit 1 on a difference."""
    from gtidsnap.sinks.delta.layout import absolute_root
    from gtidsnap.source.replica import Replica
    from gtidsnap.verify.verifier import MirrorVerifier

    if range_rows < 1 or show < 0 or not (math.isfinite(wait) and 0 < wait <= 86_400):
        error_line("--range-rows must be at least 1, --show at least 0, --wait more than 0 and at most 86400")
        raise typer.Exit(2)
    try:
        where = str(checkpoint) if checkpoint is not None else None
        cfg = load_config(config, overrides={"sink.path": sink_path, "checkpoint.path": where})
        names = [parse_table_name(t, "verify") for t in tables]
    except GtidsnapError as exc:
        error_line(str(exc))
        raise typer.Exit(2) from None
    if cfg.sink.type != "delta":
        error_line(f"verify compares Delta mirrors; sink.type is {cfg.sink.type!r}")
        raise typer.Exit(2)
    if not cfg.sink.changelog:
        error_line(
            "verify reads the changelogs to know which keys changed while it reads: sink.changelog is off"
        )
        raise typer.Exit(2)
    from gtidsnap.engine.checkpoint_store import CheckpointStore
    from gtidsnap.sinks.delta.catalog_names import sink_spark_session

    reports: list[VerifyReport] = []
    try:
        root = absolute_root(cfg.sink.path)
        log_file = cfg.checkpoint_path.parent / "spark-verify.log"
        spark = sink_spark_session(cfg.sink, root, "gtidsnap-verify", log_file)
        with Replica(cfg.source) as replica:
            verifier = MirrorVerifier(
                spark,
                absolute_root(cfg.sink.path),
                replica,
                CheckpointStore(cfg.checkpoint_path),
                range_rows,
                wait,
                hashes=hashes,
            )
            for table in names:
                report = verifier.verify(table)
                reports.append(report)
                _print(report, show, as_json)
    except GtidsnapError as exc:
        error_line(str(exc))
        raise typer.Exit(1) from None
    if any(not r.same for r in reports):
        raise typer.Exit(1)


def _print(report: VerifyReport, show: int, as_json: bool) -> None:
    differences = report.differences
    if as_json:
        print(
            json.dumps(
                {
                    "table": str(report.table),
                    "same": report.same,
                    "source_rows": report.source_rows,
                    "ranges": report.ranges,
                    "by_hash": report.by_hash,
                    "ranges_read_row_by_row": report.read_ranges if report.by_hash else report.ranges,
                    "differences": len(differences),
                    "not_compared_changing": report.changing,
                    "first": [d.describe(report.key) for d in differences[:show]],
                },
                default=str,
            ),
            flush=True,
        )
        return
    table = printable(str(report.table))
    summary = f"{report.source_rows} rows in {report.ranges} ranges"
    if report.by_hash:
        summary += f" by hash, {report.read_ranges} read row by row"
    if report.changing:
        summary += f"; {report.changing} keys changed while read twice, not compared"
    if report.same:
        say(out, (f"{table}: ", "bold"), ("same", "green"), f" ({summary})")
        return
    say(err, (f"{table}: ", "bold"), (f"{len(differences)} differences", "bold red"), f" ({summary})")
    for d in differences[:show]:
        say(err, "  ", printable(d.describe(report.key)))
