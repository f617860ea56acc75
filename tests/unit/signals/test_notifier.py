"""The notifier without a broker (signals/notifier): a run is never held up by Kafka being away."""

from __future__ import annotations

import time

from gtidsnap.config.settings import SignalSettings
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.notifications import NotificationLog
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.signal_ledger import SignalLedger
from gtidsnap.signals.notifier import Notifier, final
from tests.fakes import gtids


def test_no_broker_neither_holds_up_the_run_nor_counts_anything_delivered() -> None:
    settings = SignalSettings(bootstrap="127.0.0.1:1", notifications_topic="notes", connector="c")
    started = time.monotonic()
    notifier = Notifier(settings).start()
    assert time.monotonic() - started < 1.0, "start() returns at once; the topic is made on its thread"
    ledger = SignalLedger()
    ledger.notes = NotificationLog()
    ledger.notes.answer("s1", "pause-snapshot", "done", SnapshotContext(), SnapshotContext(), 1)
    notifier.saved(Checkpoint("mysql", gtids(3), 1, None, SnapshotContext(), ledger))
    time.sleep(1.5)
    assert notifier.delivered == 0, "nothing is taken for delivered: the outbox stays in the checkpoint"
    stopping = time.monotonic()
    notifier.stop()
    assert time.monotonic() - stopping < 35.0


def test_the_last_notification_a_signal_gets() -> None:
    assert final("execute-snapshot", {"type": "COMPLETED"})
    assert not final("execute-snapshot", {"type": "STARTED"})
    assert not final("execute-snapshot", {"type": "TABLE_SCAN_COMPLETED"})
    assert final("pause-snapshot", {"type": "PAUSED"}) and final("stop-snapshot", {"type": "ABORTED"})
    assert final("execute-snapshot", {"type": "REFUSED"}) and final("resume-snapshot", {"type": "IGNORED"})
