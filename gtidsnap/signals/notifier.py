"""The notifications topic: each saved checkpoint's outbox (:mod:`gtidsnap.core.notifications`) produced
to it, in order, keyed by the connector name; and, for ``gtidsnap snapshot ... --wait``, read back.

Exactly once per notification: one is produced only after the checkpoint holding it is saved (so it
never tells of something a crash undoes), leaves the outbox with a later checkpoint once delivered,
and before the first is produced the topic's tail is read for the highest number of this output
already there (ids are ``<connector>-<lineage>-<number>``, the lineage kept in the checkpoint), so what
a kill -9 between the delivery and that checkpoint left in the outbox is not produced again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from gtidsnap.config.loading import SignalSettings
from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.notifications import COMPLETED, IGNORED, REFUSED, STARTED, Notification
from gtidsnap.core.ports import CheckpointPort
from gtidsnap.signals.kafka import client_settings, ensure_topic

log = logging.getLogger("gtidsnap.signals.notifier")
NOTIFICATION_HEADER = "gtidsnap-notification"
"""A header every notification carries: a consumer of a topic they reach (a misconfigured signal topic)
tells them from signals by it, and never acts on one (:mod:`gtidsnap.signals.consumer`)."""
TAIL_READ = 1_000  # messages at the end of each partition read at start for the highest number sent
FLUSH_S = 10.0
WARN_EVERY_S = 60.0


def topic_settings(settings: SignalSettings) -> SignalSettings:
    """The signal settings aimed at the notifications topic (for :func:`ensure_topic` and clients)."""
    return settings.model_copy(update={"topic": settings.notifications_topic})


class Notifier:
    """Produces outboxes handed by :meth:`saved` on a thread of its own; :attr:`delivered` is the highest
    number known to be on the topic (the engine drops those from its outbox). Kafka away never holds up
    the run: the topic is made, read back and written on this thread, which retries."""

    def __init__(self, settings: SignalSettings) -> None:
        self.settings = topic_settings(settings)
        self.connector = settings.connector
        self.delivered = 0
        self._outbox: list[Notification] = []
        self._lineage: str | None = None  # the outbox's numbering (NotificationLog.lineage)
        self._synced: str | None = None  # the lineage whose highest number on the topic is known
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gtidsnap-notifier", daemon=True)
        self._producer: Any = None
        self._warned_at = -WARN_EVERY_S
        self._handed = 0  # the highest number handed to the producer (on its way)
        self._acked: set[int] = set()  # numbers the broker acknowledged above ``delivered``
        self._broken = False  # a delivery failed for good: read the topic back before going on

    def start(self) -> Notifier:
        self._thread.start()
        return self

    def saved(self, checkpoint: Checkpoint) -> None:
        """A checkpoint was saved: its outbox may go out (called on the committing thread)."""
        notes = checkpoint.signals.notes
        self._outbox, self._lineage = list(notes.outbox), notes.lineage
        self._wake.set()

    def stop(self) -> None:
        """Send what the last checkpoint holds (for at most ``FLUSH_S``), then stop."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=3 * FLUSH_S)

    def _run(self) -> None:
        while True:
            self._wake.wait(1.0)
            self._wake.clear()
            try:
                self._send()
            except Exception as exc:  # Kafka away, a fatal producer error: said, then tried again
                self._broken = True
                self._warn(f"the notifications topic {self.settings.topic} is not reachable ({exc})")
            if self._stop.is_set():
                return

    def _send(self) -> None:
        """Produce what is not on its way yet; ``delivered`` moves over what the broker acknowledged, in
        order. The producer retries a delivery for as long as it takes (``message.timeout.ms = 0``), so
        within a process nothing is produced twice; after a failure for good the topic is read again."""
        lineage = self._lineage
        if lineage is None:
            return
        if self._synced != lineage or self._broken:
            self._resync(lineage)
        todo = [n for n in self._outbox if n.number > max(self.delivered, self._handed)]
        for note in todo:
            message = json.dumps(note.message(self.connector, lineage)).encode("utf-8")
            self._producer.produce(
                self.settings.topic,
                key=self.connector.encode("utf-8"),
                value=message,
                headers=[(NOTIFICATION_HEADER, b"1")],
                on_delivery=self._acknowledged(note.number),
            )
            self._handed = note.number
        left = self._producer.flush(FLUSH_S)
        for note in self._outbox:
            if note.number <= self.delivered:
                continue
            if note.number not in self._acked:
                break
            self.delivered = note.number
        self._acked = {n for n in self._acked if n > self.delivered}
        if not left and todo:
            crash_point("notifications-delivered")  # on the topic, still in the checkpoint's outbox
        if left:
            self._warn(f"{left} notification(s) not yet delivered to {self.settings.topic}; they wait")

    def _resync(self, lineage: str) -> None:
        """A new producer, and ``delivered`` from the topic: the highest number of this output there."""
        from confluent_kafka import Producer

        if self._producer is not None:
            self._producer.flush(FLUSH_S)
        ensure_topic(self.settings, stop=self._stop)
        highest = self._highest_sent(lineage)
        self._producer = Producer(
            {
                **client_settings(self.settings),
                "acks": "all",
                "enable.idempotence": True,
                "message.timeout.ms": 0,
            }
        )
        self.delivered = max(self.delivered, highest) if self._synced == lineage else highest
        self._handed, self._acked = self.delivered, set()
        self._synced, self._broken = lineage, False

    def _acknowledged(self, number: int) -> Callable[[Any, Any], None]:
        def done(error: Any, _message: Any) -> None:
            if error is None:
                self._acked.add(number)
            else:
                self._broken = True
                self._warn(f"a notification was not delivered to {self.settings.topic}: {error}")

        return done

    def _warn(self, text: str) -> None:
        if time.monotonic() - self._warned_at >= WARN_EVERY_S:
            self._warned_at = time.monotonic()
            log.warning("%s", text)

    def _highest_sent(self, lineage: str) -> int:
        """The highest number of this output's notifications among the topic's last messages."""
        prefix, highest = f"{self.connector}-{lineage}-", 0
        for note in tail(self.settings, TAIL_READ):
            number = str(note.get("id", "")).removeprefix(prefix)
            if str(note.get("id", "")).startswith(prefix) and number.isdigit():
                highest = max(highest, int(number))
        return highest


class NotifyingStore:
    """A checkpoint store that tells the :class:`Notifier` of each checkpoint it saved."""

    def __init__(self, store: CheckpointPort, notifier: Notifier) -> None:
        self.store, self.notifier = store, notifier
        self.path = store.path

    def load(self) -> Checkpoint | None:
        return self.store.load()

    def save(self, checkpoint: Checkpoint) -> None:
        self.store.save(checkpoint)
        self.notifier.saved(checkpoint)


def tail(settings: SignalSettings, most: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The last ``most`` messages of each partition of ``settings.topic``, as JSON objects."""
    from confluent_kafka import TopicPartition

    consumer = _reader(settings)
    found: list[dict[str, Any]] = []
    try:
        meta = consumer.list_topics(settings.topic, timeout=timeout_s).topics[settings.topic]
        ends: dict[int, int] = {}
        assigned = []
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(settings.topic, partition), timeout=timeout_s
            )
            if high > low:
                ends[partition] = high
                assigned.append(TopicPartition(settings.topic, partition, max(low, high - most)))
        if not assigned:
            return found
        consumer.assign(assigned)
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{settings.topic}: its last messages were not read within {timeout_s:.0f} s"
                )
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            partition, offset = message.partition() or 0, message.offset() or 0
            if offset >= ends.get(partition, 0) - 1:
                ends.pop(partition, None)
            value = _json_object(message.value())
            if value is not None:
                found.append(value)
    finally:
        consumer.close()
    return found


def end_offsets(settings: SignalSettings, timeout_s: float = 10.0) -> dict[int, int]:
    """Where each partition of the notifications topic ends now (read before a signal is sent)."""
    from confluent_kafka import TopicPartition

    notes = topic_settings(settings)
    ensure_topic(notes)
    consumer = _reader(notes)
    try:
        meta = consumer.list_topics(notes.topic, timeout=timeout_s).topics[notes.topic]
        return {
            p: consumer.get_watermark_offsets(TopicPartition(notes.topic, p), timeout=timeout_s)[1]
            for p in sorted(meta.partitions)
        }
    finally:
        consumer.close()


def final(kind: str, note: dict[str, Any]) -> bool:
    """Is ``note`` the last one its signal gets (``kind``: the signal's type)?"""
    answer = note.get("type")
    if answer in (REFUSED, IGNORED):
        return True
    return answer == COMPLETED if kind == "execute-snapshot" else answer != STARTED


def follow(
    settings: SignalSettings, signal_id: str, start: dict[int, int], kind: str, timeout_s: float
) -> Iterator[dict[str, Any]]:
    """The notifications answering ``signal_id``, from offsets ``start`` on, until its last one (see
    :func:`final`); raises TimeoutError after ``timeout_s``."""
    from confluent_kafka import TopicPartition

    notes = topic_settings(settings)
    consumer = _reader(notes)
    consumer.assign([TopicPartition(notes.topic, p, o) for p, o in start.items()])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            value = _json_object(message.value())
            data = value.get("additionalData", {}) if value is not None else {}
            if (
                value is not None
                and data.get("signal_id") == signal_id
                and data.get("connector_name") == settings.connector
            ):
                yield value
                if final(kind, value):
                    return
        raise TimeoutError(f"no final notification for signal {signal_id} within {timeout_s:.0f} s")
    finally:
        consumer.close()


def _reader(settings: SignalSettings) -> Any:
    """A consumer of ``settings.topic`` that is assigned its partitions and commits nothing (a group of
    its own: reading back never moves anyone's offsets)."""
    from confluent_kafka import Consumer

    group = f"gtidsnap-read-{time.time_ns()}"
    return Consumer({**client_settings(settings), "group.id": group, "enable.auto.commit": False})


def _json_object(raw: bytes | None) -> dict[str, Any] | None:
    """A message's value as a JSON object; None for anything else (another producer's message)."""
    try:
        value = json.loads(raw or b"")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
