"""Where records go. A sink makes its writes durable on ``commit`` and reports a position that the
checkpoint stores with the processed GTID set, so a restart can drop whatever came after it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gtidsnap.records import Record


class Sink(Protocol):
    def open(self, committed: Any) -> None:
        """Start from the position of the last checkpoint (None: nothing committed yet)."""

    def write(self, records: Sequence[Record]) -> None:
        """Take records; they become durable only at the next ``commit``."""

    def commit(self) -> Any:
        """Make everything written durable; return the JSON-able position to checkpoint."""

    def close(self) -> None: ...
