"""Each signal's answer and its snapshot's progress on the notifications outbox (core/notifications)."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.core.commands import (
    PauseSnapshots,
    ResumeSnapshots,
    SignalReceived,
    StartSnapshot,
    StopSnapshot,
)
from gtidsnap.core.errors import SignalError
from gtidsnap.core.model import TableId
from gtidsnap.core.notifications import (
    NO_TOPIC,
    OUTBOX_KEPT,
    PROGRESS_EVERY_S,
    Notification,
    NotificationLog,
)
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.signal_ledger import SignalLedger

A, B = TableId("shop", "a"), TableId("shop", "b")


def types(log: NotificationLog, signal: str | None = None) -> list[str]:
    return [n.type for n in log.outbox if signal is None or n.signal_id == signal]


def test_a_snapshot_signal_is_answered_then_reports_each_table_and_completes() -> None:
    log = NotificationLog()
    before = SnapshotContext()
    after = before.enqueue([A, B])
    log.answer("s1", "execute-snapshot", "done", before, after, 1)
    assert types(log) == ["STARTED"] and log.outbox[0].data == {"data_collections": "shop.a,shop.b"}
    reading = after.update(after.tables[0].begun((10,), True).chunk_read((5,), 5))
    log.progressed(reading, 2, now_s=100.0)
    log.progressed(reading, 3, now_s=100.0 + PROGRESS_EVERY_S)  # rows did not move: nothing new
    more = reading.update(reading.tables[0].chunk_read((7,), 2))
    log.progressed(more, 4, now_s=100.0 + PROGRESS_EVERY_S / 2)  # too soon after the last report
    log.progressed(more, 5, now_s=100.0 + PROGRESS_EVERY_S)
    assert types(log) == ["STARTED", "IN_PROGRESS", "IN_PROGRESS"]
    assert log.outbox[-1].data == {"data_collection": "shop.a", "rows_scanned": "7", "chunks": "2"}
    a_done = more.update(more.tables[0].finished())
    b_failed = a_done.update(a_done.tables[1].failed("no such table").finished())
    log.progressed(b_failed, 6, now_s=200.0)
    ends = [n for n in log.outbox if n.type == "TABLE_SCAN_COMPLETED"]
    assert [(n.data["data_collection"], n.data["status"]) for n in ends] == [
        ("shop.a", "SUCCEEDED"),
        ("shop.b", "FAILED"),
    ]
    assert ends[0].data["total_rows_scanned"] == "7" and ends[1].data["reason"] == "no such table"
    assert types(log)[-1] == "COMPLETED" and not log.scanning
    log.progressed(b_failed, 7, now_s=300.0)
    assert types(log).count("COMPLETED") == 1, "an ended snapshot reports nothing more"
    numbers = [n.number for n in log.outbox]
    assert numbers == list(range(1, len(numbers) + 1)) and log.next_number == len(numbers) + 1


def test_stop_pause_resume_refused_and_repeated_signals_get_their_answers() -> None:
    log = NotificationLog()
    queued = SnapshotContext().enqueue([A, B])
    log.answer("s1", "execute-snapshot", "done", SnapshotContext(), queued, 1)
    log.answer("s2", "pause-snapshot", "done", queued, replace(queued, paused=True), 2)
    log.answer("s3", "resume-snapshot", "done", queued, queued, 3)
    log.answer("s4", "stop-snapshot", "done", queued, queued.stop([B]), 4)
    log.answer("s5", "execute-snapshot", "refused: no table matches shop.zz", queued, queued, 5)
    log.answer("s1", "execute-snapshot", "ignored: duplicate id", queued, queued, 6)
    assert types(log, "s2") == ["PAUSED"] and types(log, "s3") == ["RESUMED"]
    assert types(log, "s4") == ["ABORTED"] and log.outbox[3].data == {"data_collections": "shop.b"}
    assert types(log, "s5") == ["REFUSED"] and log.outbox[-2].data["reason"] == "no table matches shop.zz"
    stopped = [n for n in log.outbox if n.signal_id == "s1" and n.type == "TABLE_SCAN_COMPLETED"]
    assert [n.data["status"] for n in stopped] == ["STOPPED"], "the stop reaches the signal that started B"
    assert log.scanning == {"s1": ["shop.a"]}
    assert types(log, "s1")[-1] == "IGNORED"


def test_a_request_for_tables_already_being_read_completes_at_once() -> None:
    log = NotificationLog()
    queued = SnapshotContext().enqueue([A])
    log.answer("s1", "execute-snapshot", "done", queued, queued, 1)
    assert types(log) == ["STARTED", "COMPLETED"] and not log.scanning


def test_delivered_leaves_the_outbox_and_the_json_round_trips() -> None:
    log = NotificationLog()
    queued = SnapshotContext().enqueue([A])
    log.answer("s1", "execute-snapshot", "done", SnapshotContext(), queued, 1)
    log.answer("s2", "pause-snapshot", "done", queued, queued, 2)
    log.delivered(1)
    assert [n.number for n in log.outbox] == [2]
    back = NotificationLog.from_json(json.loads(json.dumps(log.to_json())))
    assert back.to_json() == log.to_json() and back.scanning == {"s1": ["shop.a"]}
    assert back.lineage == log.lineage and len(log.lineage) == 12
    message = back.outbox[0].message("inst", back.lineage)
    assert message["id"] == f"inst-{log.lineage}-2" and message["type"] == "PAUSED"
    assert message["aggregateType"] == "Incremental Snapshot"
    assert message["additionalData"] == {"connector_name": "inst", "signal_id": "s2"}


def test_a_broker_down_for_long_loses_progress_reports_first() -> None:
    log = NotificationLog()
    log.answer("s0", "pause-snapshot", "done", SnapshotContext(), SnapshotContext(), 0)
    for i in range(OUTBOX_KEPT + 5):
        log._add("s1", "IN_PROGRESS", {}, i)
    assert len(log.outbox) == OUTBOX_KEPT and log.outbox[0].type == "PAUSED"


class Queue:
    """The engine's part in a signal, on a snapshot context: start queues, stop drops (or refuses)."""

    def __init__(self, refuse_stop: bool = False) -> None:
        self.context, self.refuse_stop = SnapshotContext(), refuse_stop

    def act(self, command: object) -> None:
        if isinstance(command, StartSnapshot):
            self.context = self.context.enqueue(command.tables)
        elif isinstance(command, StopSnapshot) and self.refuse_stop:
            raise SignalError("stop what?")
        elif isinstance(command, StopSnapshot):
            self.context = self.context.stop(command.tables)

    def now(self) -> SnapshotContext:
        return self.context


def test_the_ledger_answers_each_signal_it_records_and_keeps_the_outbox_in_its_json() -> None:
    ledger = SignalLedger()
    queue = Queue(refuse_stop=True)
    act, context = queue.act, queue.now

    ledger.act_once(SignalReceived(0, 0, "a", "execute-snapshot", StartSnapshot((A,))), act, context)
    ledger.act_once(SignalReceived(0, 1, None, "stop-snapshot", StopSnapshot()), act, context)
    ledger.act_once(SignalReceived(0, 1, "again", "pause-snapshot", PauseSnapshots()), act, context)
    assert [(n.signal_id, n.type) for n in ledger.notes.outbox] == [
        ("a", "STARTED"),
        ("offset 0:1", "REFUSED"),
    ]
    assert ledger.notes.outbox[1].data["reason"] == "stop what?"
    back = SignalLedger.from_json(json.loads(json.dumps(ledger.to_json())))
    assert back.notes.to_json() == ledger.notes.to_json()
    copy = ledger.copy()
    copy.notes.answer("b", "resume-snapshot", "done", context(), context(), 9)
    assert len(ledger.notes.outbox) == 2, "a checkpoint's copy is independent"


KINDS = {
    "execute-snapshot": lambda t: StartSnapshot((t,)),
    "stop-snapshot": lambda t: StopSnapshot((t,)),
    "pause-snapshot": lambda t: PauseSnapshots(),
    "resume-snapshot": lambda t: ResumeSnapshots(),
}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(KINDS)), st.sampled_from([A, B]), st.booleans(), st.booleans()),
        max_size=25,
    )
)
def test_every_signal_gets_exactly_one_answer_and_snapshots_end_once(
    signals: list[tuple[str, TableId, bool, bool]],
) -> None:
    """Any sequence of signals, tables finishing between them: one answer per signal id, one
    TABLE_SCAN_COMPLETED per table a signal queued, one COMPLETED per execute-snapshot answered STARTED."""
    ledger = SignalLedger()
    queue = Queue()
    for offset, (kind, table, finish, bad) in enumerate(signals):
        error = "bad message" if bad else None
        signal = SignalReceived(0, offset, f"id{offset}", kind, KINDS[kind](table), error)
        ledger.act_once(signal, queue.act, queue.now)
        current = queue.context.current()
        if finish and current is not None:
            queue.context = queue.context.update(current.begun((1,), True).finished())
        ledger.checkpointing(queue.context, 0)
    for _ in range(len(signals) + 1):  # the rest of the queue reads to its end
        current = queue.context.current()
        if current is not None:
            queue.context = queue.context.update(current.begun((1,), True).finished())
        ledger.checkpointing(queue.context, 0)
    answers = {"STARTED", "ABORTED", "PAUSED", "RESUMED", "REFUSED", "IGNORED"}
    outbox: list[Notification] = ledger.notes.outbox
    for offset in range(len(signals)):
        mine = [n for n in outbox if n.signal_id == f"id{offset}"]
        assert sum(n.type in answers for n in mine) == 1, mine
        assert mine[0].type in answers, "the answer comes first"
        if mine[0].type == "STARTED":
            queued = [t for t in mine[0].data["data_collections"].split(",") if t]
            ended = [n.data["data_collection"] for n in mine if n.type == "TABLE_SCAN_COMPLETED"]
            assert sorted(ended) == sorted(queued)
            assert [n.type for n in mine].count("COMPLETED") == 1 and mine[-1].type == "COMPLETED"
    assert not ledger.notes.scanning
    assert [n.number for n in outbox] == list(range(1, len(outbox) + 1))


def test_without_a_notifications_topic_nothing_is_kept() -> None:
    ledger = SignalLedger()
    queued = SnapshotContext().enqueue([A])
    ledger.notes.answer("s1", "execute-snapshot", "done", SnapshotContext(), queued, 1)
    ledger.checkpointing(queued, NO_TOPIC)
    assert ledger.notes.outbox == [] and not ledger.notes.scanning
    assert "notifications" not in ledger.to_json(), "the checkpoint reads as before notifications"
