"""The options several commands share, written once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="TOML config file; GTIDSNAP_* variables and flags override it."),
]
HostOpt = Annotated[str | None, typer.Option("--host", help="Replica host (source.host).")]
PortOpt = Annotated[int | None, typer.Option("--port", help="Replica port (source.port).")]
UserOpt = Annotated[str | None, typer.Option("--user", help="Replica user (source.user).")]
CheckpointOpt = Annotated[
    Path | None, typer.Option("--checkpoint", help="Checkpoint file (checkpoint.path).")
]
