"""How a command fails: one ``error:`` line (a problem a line for an error that lists several), then,
only for an error that may pass by itself (``retryable``: a server or the output unreachable, a disk
full), the hint that the same command again is safe; never after a configuration error, a refusal or a
checkpoint that cannot be continued, which would fail the same way again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gtidsnap.cli.output import err, error_line, say
from gtidsnap.config.loading import Config, load_config, parse_table_name
from gtidsnap.core.errors import GtidsnapError, PrerequisiteError
from gtidsnap.core.model import TableId

RETRY_HINT = "this may pass: the same command again is safe (gtidsnap run resumes from its checkpoint)"


def fail(exc: BaseException | str, code: int = 1) -> typer.Exit:
    """Print the error and return the exit to raise (raised here too, so callers may ignore it). An
    error whose type says a retry may help (``retryable``: a server or the output unreachable) says so."""
    error_line(str(exc), lines=isinstance(exc, PrerequisiteError))  # its problems a line each
    if isinstance(exc, GtidsnapError) and exc.retryable:
        say(err, RETRY_HINT)
    raise typer.Exit(code)


def config_of(config: Path | None, **flags: Any) -> Config:
    try:
        return load_config(config, overrides=flags)
    except GtidsnapError as exc:
        raise fail(exc) from exc


def table_args(names: list[str], option: str) -> list[TableId]:
    try:
        return [parse_table_name(n, option) for n in names]
    except GtidsnapError as exc:
        raise fail(exc, 2) from None
