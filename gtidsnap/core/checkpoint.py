"""The checkpoint value: everything needed to resume exactly, saved after the sink's commit.

Order of a commit: the sink makes its records durable and reports its position; then this file is
replaced atomically (:mod:`gtidsnap.engine.checkpoint_store`). A crash before that leaves the
previous checkpoint, whose sink position is older: the sink drops the extra output on restart and
the stream replays it from the checkpoint's GTID set. Nothing is lost, nothing is doubled.

A checkpoint is only continued on a replica that can continue it (:func:`resume_problem`): the same
flavour, every transaction it processed executed there, and none of those it still needs purged.
Anything else (another server, a rebuilt replica, a hand-edited file) would resume silently at a
wrong place, so it stops with what happened and what to do. A file that is not a checkpoint (a folder,
not JSON, a JSON array, a field of the wrong type) is a :class:`CheckpointError` naming the problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.json_fields import typed_field
from gtidsnap.core.model import Flavor
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.signal_ledger import SignalLedger

FORMAT_VERSION = 1
MAX_RECORD_SEQ = 2**63 - 1  # the greatest sequence number: Delta's _seq is a LONG
FLAVORS: tuple[str, ...] = get_args(Flavor)
START_OVER = (
    "to start over, move the checkpoint and the output away (or point checkpoint.path and sink.path "
    "elsewhere) and snapshot the tables again"
)


@dataclass(frozen=True)
class Checkpoint:
    """What was fully processed, where the output stands, and the snapshot context."""

    flavor: str
    processed: GtidSet
    next_seq: int
    sink_position: Any
    context: SnapshotContext = field(default_factory=SnapshotContext)
    signals: SignalLedger = field(default_factory=SignalLedger)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "flavor": self.flavor,
            "processed": str(self.processed),
            "next_seq": self.next_seq,
            "sink_position": self.sink_position,
            "context": self.context.to_json(),
            "signals": self.signals.to_json(),
        }

    @classmethod
    def from_json(cls, data: Any) -> Checkpoint:
        """The checkpoint in ``data``; ValueError names the first field that is not as written."""
        if not isinstance(data, dict):
            raise ValueError(f"it holds {type(data).__name__ if data is not None else 'null'}, not an object")
        if data.get("format") != FORMAT_VERSION:
            raise ValueError(f"format {data.get('format')!r} is not {FORMAT_VERSION}")
        flavor = typed_field(data, "flavor", str)
        if flavor not in FLAVORS:
            raise ValueError(f"flavor {flavor!r} is not one of {', '.join(FLAVORS)}")
        next_seq = typed_field(data, "next_seq", int)
        if next_seq < 1:
            raise ValueError(f"next_seq {next_seq} is not positive")
        if next_seq > MAX_RECORD_SEQ:
            raise ValueError(
                f"field 'next_seq' is {next_seq}, past the greatest sequence number {MAX_RECORD_SEQ} "
                "(a 64-bit LONG)"
            )
        try:
            context = SnapshotContext.from_json(typed_field(data, "context", dict))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"context is not a snapshot context ({type(exc).__name__}: {exc})") from None
        return cls(
            flavor=flavor,
            processed=parse_gtid_set(flavor, typed_field(data, "processed", str)),
            next_seq=next_seq,
            sink_position=data.get("sink_position"),
            context=context,
            signals=SignalLedger.from_json(typed_field(data, "signals", dict, {})),
        )


def resume_problem(
    checkpoint: Checkpoint, flavor: str, executed: GtidSet, purged: GtidSet, where: str
) -> str | None:
    """Why the replica at ``where`` cannot continue ``checkpoint`` (None: it can).

    ``executed`` is the replica's executed set now; ``purged`` the transactions its binlog no longer
    holds (MySQL ``gtid_purged``; on MariaDB the position where its oldest binlog starts). Pure."""
    if checkpoint.flavor != flavor:
        return (
            f"the checkpoint was written for a {checkpoint.flavor} source but {where} is {flavor}: "
            f"it belongs to another server; {START_OVER}"
        )
    processed = checkpoint.processed
    if not processed <= executed:
        unknown = processed - executed
        return (
            f"the checkpoint has processed transactions that {where} has not executed ({_short(unknown)}): "
            "it was written against another server, or the replica was rebuilt or reset since; "
            f"continuing would skip or repeat changes; {START_OVER}"
        )
    needed = executed - processed
    lost = needed - (needed - purged)
    if lost:
        return (
            f"{where} has purged binlogs that hold transactions the checkpoint has not streamed yet "
            f"({_short(lost)}): those changes can no longer be read; keep binlogs longer "
            f"(binlog_expire_logs_seconds / expire_logs_days) and {START_OVER}"
        )
    return None


def _short(gtids: GtidSet) -> str:
    text = str(gtids)
    return text if len(text) <= 200 else text[:197] + "..."
