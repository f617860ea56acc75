"""What became of the signals, kept in the checkpoint: per partition the next offset to read, the ids
acted on (a repeat is ignored), and the last outcomes (``gtidsnap status`` shows them).

The engine records every signal here exactly once, next to the snapshot state it produced; the
consumer resumes each partition at its recorded offset. One typed owner for what engine, checkpoint,
run and CLI read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gtidsnap.core.commands import Command, SignalReceived
from gtidsnap.core.errors import GtidsnapError, stored_reason
from gtidsnap.core.notifications import NO_TOPIC, NotificationLog, signal_key
from gtidsnap.core.plan import SnapshotContext

HISTORY_KEPT = 100  # outcomes kept for `gtidsnap status`
IDS_KEPT = 1_000  # ids of signals acted on, to ignore a repeat (each at most 128 characters)


@dataclass(frozen=True)
class SignalOutcome:
    """One signal and what became of it: done, ignored (a repeat), or refused with the reason."""

    id: str | None
    type: str
    partition: int
    offset: int
    outcome: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "partition": self.partition,
            "offset": self.offset,
            "outcome": self.outcome,
        }


@dataclass
class SignalLedger:
    offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset to read
    ids: list[str] = field(default_factory=list)
    history: list[SignalOutcome] = field(default_factory=list)
    notes: NotificationLog = field(default_factory=NotificationLog)  # the notifications topic's outbox

    def consumed(self, partition: int, offset: int) -> bool:
        """Was this message recorded before (a restart reads from the recorded offsets, so only a
        consumer that raced ahead of a checkpoint sees one again)?"""
        return offset < self.offsets.get(partition, 0)

    def repeated(self, signal_id: str | None) -> bool:
        return signal_id is not None and signal_id in self.ids

    def record(self, outcome: SignalOutcome) -> None:
        """The signal's outcome; its id is kept only when it was acted on (a refused one may be sent
        again, corrected)."""
        if outcome.id is not None and outcome.outcome == "done":
            self.ids.append(outcome.id)
            del self.ids[:-IDS_KEPT]
        self.offsets[outcome.partition] = outcome.offset + 1
        self.history.append(outcome)
        del self.history[:-HISTORY_KEPT]

    def act_once(
        self,
        signal: SignalReceived,
        act: Callable[[Command], None],
        context: Callable[[], SnapshotContext] = SnapshotContext,
    ) -> SignalOutcome | None:
        """Act on ``signal`` unless it repeats an id acted on; record what became of it, and its answer
        on the notifications outbox (``context``: the snapshot context, read around the act), and
        return that (None: consumed before a restart, nothing to do). ``act`` raising a GtidsnapError
        refuses the signal with the error's message."""
        if self.consumed(signal.partition, signal.offset):
            return None
        before = context()
        if signal.error is not None:
            outcome = f"refused: {stored_reason(signal.error)}"
        elif self.repeated(signal.id):
            outcome = "ignored: duplicate id"
        else:
            try:
                if signal.command is not None:
                    act(signal.command)
                outcome = "done"
            except GtidsnapError as exc:
                outcome = f"refused: {stored_reason(str(exc))}"
        recorded = SignalOutcome(signal.id, signal.kind, signal.partition, signal.offset, outcome)
        self.record(recorded)
        key = signal_key(signal.id, signal.partition, signal.offset)
        self.notes.answer(key, signal.kind, outcome, before, context(), int(time.time() * 1000))
        return recorded

    def checkpointing(self, context: SnapshotContext, delivered: int) -> None:
        """Before a checkpoint: what the notifications topic has (out of the outbox), and the progress
        of the snapshots signals started (into it)."""
        if delivered >= NO_TOPIC:
            self.notes.clear()
            return
        self.notes.delivered(delivered)
        self.notes.progressed(context, int(time.time() * 1000), time.monotonic())

    def copy(self) -> SignalLedger:
        return SignalLedger(dict(self.offsets), list(self.ids), list(self.history), self.notes.copy())

    def to_json(self) -> dict[str, Any]:
        data = {
            "offsets": {str(p): o for p, o in sorted(self.offsets.items())},
            "ids": list(self.ids),
            "history": [h.to_json() for h in self.history],
        }
        if self.notes.next_number > 1:  # a checkpoint without notifications reads as it did before them
            data["notifications"] = self.notes.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any) -> SignalLedger:
        """The ledger of a checkpoint; ValueError names what is not as written."""
        if not isinstance(data, dict):
            raise ValueError(f"signals is {type(data).__name__}, not an object")
        offsets, ids, history = data.get("offsets", {}), data.get("ids", []), data.get("history", [])
        if not isinstance(offsets, dict) or not all(
            isinstance(o, int) and not isinstance(o, bool) and str(p).isdigit() for p, o in offsets.items()
        ):
            raise ValueError("signals.offsets is not an object of partition: offset")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise ValueError("signals.ids is not a list of strings")
        if not isinstance(history, list):
            raise ValueError("signals.history is not a list")
        try:
            outcomes = [
                SignalOutcome(
                    h.get("id"), str(h["type"]), int(h["partition"]), int(h["offset"]), str(h["outcome"])
                )
                for h in history
            ]
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"signals.history holds an entry that is not an outcome ({exc})") from None
        notes = NotificationLog.from_json(data.get("notifications", {}))  # absent before notifications
        return cls({int(p): o for p, o in offsets.items()}, list(ids), outcomes, notes)
