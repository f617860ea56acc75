"""Where records go. A sink makes its writes durable on ``commit`` and reports a position that the
checkpoint stores with the processed GTID set, so a restart can drop whatever came after it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from gtidsnap.records import Record


class Sink(Protocol):
    def open(self, committed: Any) -> None:
        """Start from the position of the last checkpoint (None: nothing committed yet)."""

    def write(self, records: Sequence[Record]) -> None:
        """Take records; they become durable only at the next ``commit``."""

    def commit(self) -> Any:
        """Make everything written durable; return the JSON-able position to checkpoint."""

    def close(self) -> None: ...


@runtime_checkable
class SealingSink(Sink, Protocol):
    """A sink whose commits can run in the background (see :mod:`gtidsnap.committer`)."""

    def seal(self) -> Callable[[], Any]:
        """Take everything written so far as one batch; return the job that commits it and returns its
        position. The job runs in another thread; writes after ``seal`` belong to the next batch."""


@runtime_checkable
class DrainingSink(Sink, Protocol):
    """A sink that defers part of its writes (the Delta mirror's MERGE) past the commits that make
    them durable elsewhere (the changelog)."""

    def drain(self) -> None:
        """The run ends: the next commit also makes every deferred write."""
