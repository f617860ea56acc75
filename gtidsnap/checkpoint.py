"""The checkpoint: everything needed to resume exactly, written atomically after the sink's commit.

Order of a commit: the sink makes its records durable and reports its position; then this file is
replaced atomically (write, fsync, rename, fsync the folder). A crash before the rename leaves the
previous checkpoint, whose sink position is older: the sink drops the extra output on restart and
the stream replays it from the checkpoint's GTID set. Nothing is lost, nothing is doubled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gtidsnap.errors import ConfigError
from gtidsnap.gtid import GtidSet, parse_gtid_set
from gtidsnap.plan import SnapshotContext

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Checkpoint:
    """What was fully processed, where the output stands, and the snapshot context."""

    flavor: str
    processed: GtidSet
    next_seq: int
    sink_position: Any
    context: SnapshotContext = field(default_factory=SnapshotContext)
    signals: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "flavor": self.flavor,
            "processed": str(self.processed),
            "next_seq": self.next_seq,
            "sink_position": self.sink_position,
            "context": self.context.to_json(),
            "signals": self.signals,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Checkpoint:
        if data.get("format") != FORMAT_VERSION:
            raise ConfigError(f"checkpoint format {data.get('format')!r} is not {FORMAT_VERSION}")
        return cls(
            flavor=data["flavor"],
            processed=parse_gtid_set(data["flavor"], data["processed"]),
            next_seq=int(data["next_seq"]),
            sink_position=data["sink_position"],
            context=SnapshotContext.from_json(data["context"]),
            signals=dict(data.get("signals", {})),
        )


class CheckpointStore:
    """One JSON file, replaced atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Checkpoint | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            return Checkpoint.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"checkpoint {self.path} is unreadable ({exc}); restore it or move it away"
            ) from exc

    def save(self, checkpoint: Checkpoint) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(checkpoint.to_json(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
