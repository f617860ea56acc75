"""What other threads (the CLI, the signal consumer) ask of the engine: plain, immutable commands put
on :attr:`gtidsnap.engine.loop.Engine.commands` and applied by the engine's loop between its steps."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gtidsnap.core.model import TableId


@dataclass(frozen=True)
class StartSnapshot:
    """Snapshot ``tables``, plus every table matched by ``selectors`` (a ``db.table`` name, or a regular
    expression matched in full against ``db.table`` names of the replica's catalog). ``conditions``
    maps ``db.table`` to an extra WHERE condition for that table's chunks."""

    tables: tuple[TableId, ...] = ()
    condition: str | None = None
    selectors: tuple[str, ...] = ()
    conditions: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StopSnapshot:
    tables: tuple[TableId, ...] | None = None  # None: every snapshot


@dataclass(frozen=True)
class PauseSnapshots:
    pass


@dataclass(frozen=True)
class ResumeSnapshots:
    pass


@dataclass(frozen=True)
class SetChunkSize:
    rows: int


@dataclass(frozen=True)
class SetChunkDelay:
    seconds: float


@dataclass(frozen=True)
class Shutdown:
    pass


@dataclass(frozen=True)
class SignalReceived:
    """A message of the signal topic, consumed at ``partition``/``offset``. Applied at most once per
    ``id`` and recorded with its offset in the checkpoint, so after a restart the consumer resumes
    right after the last signal acted on (or refused) and nothing is acted on twice."""

    partition: int
    offset: int
    id: str | None
    kind: str
    command: Command | None
    error: str | None = None


Command = (
    StartSnapshot
    | StopSnapshot
    | PauseSnapshots
    | ResumeSnapshots
    | SetChunkSize
    | SetChunkDelay
    | Shutdown
    | SignalReceived
)
