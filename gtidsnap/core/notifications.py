"""What the notifications topic is told about each signal (pure): its answer, then, for a snapshot, its
tables' progress and ends.

Every signal the engine records (:mod:`gtidsnap.core.signal_ledger`) gets exactly one *answer*:
``STARTED`` (execute-snapshot), ``ABORTED`` (stop-snapshot), ``PAUSED``, ``RESUMED``, or ``REFUSED`` /
``IGNORED`` (a bad message, a repeated id). A snapshot's tables then report ``IN_PROGRESS`` (at most
every ``PROGRESS_EVERY_S`` per table), ``TABLE_SCAN_COMPLETED`` with a status (``SUCCEEDED``, ``FAILED``,
``STOPPED``), and ``COMPLETED`` once the last of them ends. Each notification carries the id of its
signal and a number, consecutive per output: they wait in the checkpoint's outbox, are produced after
the checkpoint holding them is saved, and leave it once delivered, so a kill -9 neither loses one nor,
with the topic read back at start (:mod:`gtidsnap.signals.notifier`), sends one twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gtidsnap.core.plan import SnapshotContext, TableProgress

AGGREGATE = "Incremental Snapshot"  # Debezium's aggregateType for snapshot notifications
STARTED, ABORTED, PAUSED, RESUMED = "STARTED", "ABORTED", "PAUSED", "RESUMED"
REFUSED, IGNORED = "REFUSED", "IGNORED"
IN_PROGRESS, TABLE_SCAN_COMPLETED, COMPLETED = "IN_PROGRESS", "TABLE_SCAN_COMPLETED", "COMPLETED"
SUCCEEDED, FAILED, STOPPED = "SUCCEEDED", "FAILED", "STOPPED"
ANSWERS = {
    "execute-snapshot": STARTED,
    "stop-snapshot": ABORTED,
    "pause-snapshot": PAUSED,
    "resume-snapshot": RESUMED,
}
PROGRESS_EVERY_S = 5.0  # IN_PROGRESS of one table at most this often
NO_TOPIC = 2**62  # what the engine reports as delivered without a notifications topic: nothing is kept
OUTBOX_KEPT = 1_000  # undelivered ones kept in the checkpoint (a broker down for long): progress goes first


@dataclass(frozen=True)
class Notification:
    number: int  # consecutive per output: the dedup key (the message id is <connector>-<number>)
    signal_id: str
    type: str
    data: Mapping[str, str]
    timestamp_ms: int

    def message(self, connector: str, lineage: str) -> dict[str, Any]:
        """Debezium's notification shape, with the signal's id in ``additionalData.signal_id``."""
        return {
            "id": f"{connector}-{lineage}-{self.number}",
            "aggregateType": AGGREGATE,
            "type": self.type,
            "additionalData": {"connector_name": connector, "signal_id": self.signal_id, **self.data},
            "timestamp": self.timestamp_ms,
        }

    def to_json(self) -> dict[str, Any]:
        return {"n": self.number, "signal": self.signal_id, "type": self.type, "data": dict(self.data),
                "ts": self.timestamp_ms}  # fmt: skip

    @classmethod
    def from_json(cls, data: Any) -> Notification:
        if not isinstance(data, dict) or not isinstance(data.get("data", {}), dict):
            raise ValueError(f"a notification is not an object with data: {data!r:.100}")
        fields = {str(k): str(v) for k, v in data.get("data", {}).items()}
        return cls(int(data["n"]), str(data["signal"]), str(data["type"]), fields, int(data["ts"]))


def signal_key(signal_id: str | None, partition: int, offset: int) -> str:
    """The signal a notification answers: its id, or where it was read when it has none."""
    return signal_id if signal_id is not None else f"offset {partition}:{offset}"


@dataclass
class NotificationLog:
    """The outbox and the snapshots still reporting, kept in the checkpoint with the signal ledger."""

    next_number: int = 1
    # Which numbering: a checkpoint started over numbers from 1 again, under a lineage of its own.
    lineage: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    outbox: list[Notification] = field(default_factory=list)
    scanning: dict[str, list[str]] = field(default_factory=dict)  # signal -> tables its snapshot reads
    # Not kept: when each (signal, table) last reported progress, and its rows then.
    _reported: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict, repr=False)

    def answer(
        self, signal: str, kind: str, outcome: str, before: SnapshotContext, after: SnapshotContext, ms: int
    ) -> None:
        """The one answer to a signal just recorded with ``outcome``; ``before``/``after``: the snapshot
        context around it (which tables it queued or stopped)."""
        if outcome.startswith("refused"):
            self._add(signal, REFUSED, {"reason": outcome.removeprefix("refused: "), "signal_type": kind}, ms)
            return
        if outcome.startswith("ignored"):
            self._add(signal, IGNORED, {"reason": outcome.removeprefix("ignored: "), "signal_type": kind}, ms)
            return
        was, now = _pending(before), _pending(after)
        if kind == "execute-snapshot":
            queued = [t for t in now if t not in was]
            self._add(signal, STARTED, {"data_collections": ",".join(queued)}, ms)
            if queued:
                self.scanning[signal] = queued
            else:  # every table asked for is being read already (for another signal)
                self._add(signal, COMPLETED, {"data_collections": ""}, ms)
            return
        stopped = [t for t in was if t not in now]
        data = {"data_collections": ",".join(stopped)} if kind == "stop-snapshot" else {}
        self._add(signal, ANSWERS.get(kind, kind.upper()), data, ms)
        for table in stopped:
            for owner in [s for s, tables in self.scanning.items() if table in tables]:
                self._ended(owner, table, STOPPED, {}, ms)

    def progressed(self, context: SnapshotContext, ms: int, now_s: float) -> None:
        """Progress and ends of the snapshots signals started, as ``context`` shows them now."""
        pending = _pending(context)
        for signal, tables in list(self.scanning.items()):
            for table in list(tables):
                progress = pending.get(table)
                if progress is None:
                    ended = _last_done(context, table)
                    if ended is None:  # stopped some other way (`gtidsnap` restarted without it)
                        self._ended(signal, table, STOPPED, {}, ms)
                    else:
                        status = FAILED if ended.error else SUCCEEDED
                        data = {"total_rows_scanned": str(ended.rows)}
                        data.update({"reason": ended.error} if ended.error else {})
                        self._ended(signal, table, status, data, ms)
                elif progress.started:
                    last_s, last_rows = self._reported.get((signal, table), (float("-inf"), -1))
                    if progress.rows != last_rows and now_s - last_s >= PROGRESS_EVERY_S:
                        self._reported[(signal, table)] = (now_s, progress.rows)
                        data = {"data_collection": table, "rows_scanned": str(progress.rows),
                                "chunks": str(progress.chunks)}  # fmt: skip
                        self._add(signal, IN_PROGRESS, data, ms)

    def delivered(self, upto: int) -> None:
        """Notifications up to number ``upto`` reached the topic: out of the outbox."""
        self.outbox = [n for n in self.outbox if n.number > upto]

    def clear(self) -> None:
        """No notifications topic: nothing is kept (a checkpoint without one reads as before them)."""
        self.next_number, self.outbox, self.scanning = 1, [], {}
        self._reported.clear()

    def _ended(self, signal: str, table: str, status: str, data: dict[str, str], ms: int) -> None:
        self._add(signal, TABLE_SCAN_COMPLETED, {"data_collection": table, "status": status, **data}, ms)
        tables = self.scanning.get(signal, [])
        if table in tables:
            tables.remove(table)
        self._reported.pop((signal, table), None)
        if not tables and signal in self.scanning:
            del self.scanning[signal]
            self._add(signal, COMPLETED, {}, ms)

    def _add(self, signal: str, kind: str, data: dict[str, str], ms: int) -> None:
        self.outbox.append(Notification(self.next_number, signal, kind, data, ms))
        self.next_number += 1
        if len(self.outbox) > OUTBOX_KEPT:  # the oldest progress report goes first, then the oldest
            drop = next((n for n in self.outbox if n.type == IN_PROGRESS), self.outbox[0])
            self.outbox.remove(drop)

    def copy(self) -> NotificationLog:
        scanning = {s: list(t) for s, t in self.scanning.items()}
        return NotificationLog(self.next_number, self.lineage, list(self.outbox), scanning, self._reported)

    def to_json(self) -> dict[str, Any]:
        return {
            "next": self.next_number,
            "lineage": self.lineage,
            "outbox": [n.to_json() for n in self.outbox],
            "scanning": {s: list(t) for s, t in self.scanning.items()},
        }

    @classmethod
    def from_json(cls, data: Any) -> NotificationLog:
        """As :meth:`to_json` wrote it; ValueError names what is not."""
        if not isinstance(data, dict):
            raise ValueError(f"signals.notifications is {type(data).__name__}, not an object")
        scanning = data.get("scanning", {})
        if not isinstance(scanning, dict) or not all(isinstance(t, list) for t in scanning.values()):
            raise ValueError("signals.notifications.scanning is not an object of signal: tables")
        outbox = data.get("outbox", [])
        if not isinstance(outbox, list):
            raise ValueError("signals.notifications.outbox is not a list")
        try:
            notes = [Notification.from_json(n) for n in outbox]
            number = int(data.get("next", 1))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"signals.notifications holds an entry that is not one ({exc})") from None
        lineage = str(data.get("lineage") or uuid.uuid4().hex[:12])
        return cls(number, lineage, notes, {str(s): [str(t) for t in ts] for s, ts in scanning.items()})


def _pending(context: SnapshotContext) -> dict[str, TableProgress]:
    return {str(t.table): t for t in context.pending()}


def _last_done(context: SnapshotContext, table: str) -> TableProgress | None:
    return next((t for t in reversed(context.tables) if t.done and str(t.table) == table), None)
