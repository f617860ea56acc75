"""The Delta sink's position in a checkpoint: the last batch committed, the staged snapshot files no
mirror holds for sure yet, and the changelog appends waiting for that checkpoint
(:mod:`gtidsnap.sinks.delta.changelog_appends`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gtidsnap.core.errors import SinkError
from gtidsnap.core.ports import HeldSeq
from gtidsnap.sinks.delta import staging
from gtidsnap.sinks.delta.changelog_appends import APPENDS_KEY, LogAppend, parse_appends

POSITION_KEY = "delta_batch"
STAGED_KEY = "staged"


@dataclass(frozen=True)
class SinkPosition:
    batch: int | None  # None: no checkpoint yet
    staged: list[staging.StagedFile] = field(default_factory=list)
    appends: list[LogAppend] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        position: dict[str, Any] = {POSITION_KEY: self.batch}
        if self.staged:
            position[STAGED_KEY] = [f.to_json() for f in self.staged]
        if self.appends:
            position[APPENDS_KEY] = [a.to_json() for a in self.appends]
        return position

    def staged_held(self) -> HeldSeq | None:
        """The greatest ``_seq`` of the staged snapshot files named (rows of the output)."""
        top = max(self.staged, key=lambda f: f.last_seq, default=None)
        return HeldSeq(top.last_seq, top.path) if top is not None else None


def parse_position(committed: Any) -> SinkPosition:
    """A checkpoint's sink position (None: no checkpoint), or a clear error if another sink wrote it."""
    if committed is None:
        return SinkPosition(None)
    if isinstance(committed, dict) and isinstance(committed.get(POSITION_KEY), int):
        try:
            staged = [staging.StagedFile.from_json(f) for f in committed.get(STAGED_KEY) or []]
        except (KeyError, TypeError, ValueError) as exc:
            raise SinkError(f"the checkpoint's staged snapshot files are not readable: {exc}") from None
        return SinkPosition(int(committed[POSITION_KEY]), staged, parse_appends(committed))
    raise SinkError(
        f"the checkpoint's sink position {committed!r} was not written by the Delta sink (was sink.type "
        "changed?): use the checkpoint that belongs to this output, or a new checkpoint and sink.path"
    )


def appends_of(committed: Any) -> Sequence[LogAppend]:
    """The changelog appends a saved position names (none: not a Delta sink's position)."""
    return parse_appends(committed) if isinstance(committed, dict) else []
