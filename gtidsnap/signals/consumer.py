"""Signals: snapshots steered through a Kafka topic, because users of a read-only replica cannot write a
signal table. The messages are read by :mod:`gtidsnap.signals.protocol` (pure); the topic and the
producer side are :mod:`gtidsnap.signals.kafka`.

:class:`SignalConsumer` is the shell: a thread that reads the topic and puts each parse result on the
engine's command queue. It never acts on a signal itself and never commits offsets to Kafka: the
offsets live in the engine's checkpoint next to the snapshot state they produced, so a signal acted on
is never acted on again after a crash, and a signal sent while gtidsnap was stopped is acted on when it
starts.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from gtidsnap.config.loading import SignalSettings
from gtidsnap.core.commands import (
    Command,
)
from gtidsnap.signals.kafka import ERROR_REPEAT_S, client_settings, ensure_topic
from gtidsnap.signals.notifier import NOTIFICATION_HEADER
from gtidsnap.signals.protocol import parse_signal

log = logging.getLogger("gtidsnap.signals.consumer")

RETRY_MIN_S, RETRY_MAX_S = 0.5, 5.0
POLL_S = 0.5  # how long one poll may block: bounds how long stop() waits


class LagWatch:
    """Notices a partition that is no longer read although messages wait on the broker.

    librdkafka reconnects by itself after a broker restart, but an explicitly assigned partition can,
    rarely, stay stuck afterwards (librdkafka issues 4492 and 5153; one test run here saw a signal
    not arrive within 60 s of a restart, in about twenty restarts). The consumer compares its position
    with the broker's high watermark every WATCH_S and rebuilds itself when a partition has been
    behind for ``stall_s`` without a single message read."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self.behind_since: dict[int, float] = {}

    def read(self, partition: int) -> None:
        self.behind_since.pop(partition, None)

    def stalled(self, partition: int, next_offset: int | None, low: int, high: int, now: float) -> bool:
        start = low if next_offset is None else max(next_offset, low)
        if high <= start:
            self.behind_since.pop(partition, None)
            return False
        since = self.behind_since.setdefault(partition, now)
        return now - since >= self.stall_s


WATCH_S = 5.0
STALL_S = 10.0


class SignalConsumer:
    """Reads the signal topic on its own thread and hands each message for this instance to the engine.

    Partitions are assigned explicitly, at the next offsets recorded in the engine's checkpoint; a
    partition with no recorded offset (the first start) is read from its beginning, so a signal sent
    before gtidsnap ever ran is not lost. No consumer-group membership and no offset commits: the
    checkpoint is the only record of what was consumed, which makes acting on a signal exactly once.

    Nothing escapes the thread: Kafka errors are logged and retried (librdkafka reconnects by itself
    when the broker comes back; :class:`LagWatch` covers the rare case where it does not), and
    streaming is never held up by the topic being unreachable.
    """

    def __init__(
        self,
        settings: SignalSettings,
        commands: queue.Queue[Command],
        offsets: Mapping[int, int],
        poll_s: float = POLL_S,
        stall_s: float | None = None,  # default STALL_S
    ) -> None:
        self.settings = settings
        self.commands = commands
        self.offsets = {int(p): int(o) for p, o in offsets.items()}  # next offset to read, per partition
        self.poll_s = poll_s
        self.assigned = threading.Event()  # set once the partitions are assigned (tests and diagnostics)
        self.received = 0  # messages handed to the engine
        self.rebuilds = 0  # times a stuck Kafka consumer was replaced
        self.polled_at = 0.0  # time.monotonic() of the last poll: a stuck thread shows here
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gtidsnap-signals", daemon=True)
        self._errors: dict[str, float] = {}
        self._watch = LagWatch(STALL_S if stall_s is None else stall_s)
        self._watch_at = 0.0
        self._partitions: list[int] | None = None
        self._consumer: Any = None  # the confluent_kafka.Consumer; used by this thread only

    def start(self) -> SignalConsumer:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """Ask the thread to finish and wait for it (at most one poll, then the consumer's close)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("the signal consumer did not stop within %.0fs", timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        from confluent_kafka import Consumer

        delay = RETRY_MIN_S
        try:
            while not self._stop.is_set():
                try:
                    if self._consumer is None:
                        self._consumer = Consumer(self._config())
                    if self._partitions is None:
                        self._assign()
                    self._poll()
                    if time.monotonic() >= self._watch_at:
                        self._check_lag()
                    delay = RETRY_MIN_S
                except Exception as exc:  # never out of the thread: log, wait, retry
                    self._warn(f"{type(exc).__name__}: {exc}", f"signal consumer: {exc}; retrying")
                    self._stop.wait(delay)
                    delay = min(RETRY_MAX_S, delay * 2)
        finally:
            self._close()
            log.info("signal consumer stopped")

    def _close(self) -> None:
        consumer, self._consumer, self._partitions = self._consumer, None, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception as exc:
                log.warning("closing the signal consumer: %s", exc)

    def _config(self) -> dict[str, Any]:
        return {
            **client_settings(self.settings),
            "group.id": self.settings.group or f"gtidsnap-{self.settings.connector}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # A recorded offset no longer on the broker (retention) restarts at the oldest message kept.
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "error_cb": self._on_error,
        }

    def _assign(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        partitions = ensure_topic(self.settings, stop=self._stop)
        self._consumer.assign(
            [
                TopicPartition(self.settings.topic, p, self.offsets.get(p, OFFSET_BEGINNING))
                for p in partitions
            ]
        )
        log.info(
            "reading signals for %r from %s on %s at %s",
            self.settings.connector,
            self.settings.topic,
            self.settings.bootstrap,
            ", ".join(
                f"partition {p} offset {self.offsets[p]}" if p in self.offsets else f"partition {p} start"
                for p in partitions
            ),
        )
        self._partitions = partitions
        self._watch = LagWatch(self._watch.stall_s)
        self._watch_at = time.monotonic() + WATCH_S
        self.assigned.set()

    def _poll(self) -> None:
        message = self._consumer.poll(self.poll_s)
        self.polled_at = time.monotonic()
        if message is None:
            return
        error = message.error()
        if error is not None:
            self._warn(str(error.code()), f"signal topic {self.settings.topic}: {error}")
            return
        self._errors.clear()
        partition, offset = message.partition(), message.offset()
        self.offsets[partition] = offset + 1
        self._watch.read(partition)
        if any(name == NOTIFICATION_HEADER for name, _ in message.headers() or ()):
            log.debug("signal topic offset %d: a notification, not a signal; skipped", offset)
            return
        signal = parse_signal(message.key(), message.value(), partition, offset, self.settings.connector)
        if signal is None:
            log.debug(
                "signal topic offset %d: key %r is for another instance; skipped", offset, message.key()
            )
            return
        self.commands.put(signal)  # the engine acts on it, logs it and records the offset
        self.received += 1

    def _check_lag(self) -> None:
        """Rebuild the consumer if a partition is stuck (see :class:`LagWatch`)."""
        from confluent_kafka import KafkaException, TopicPartition

        self._watch_at = time.monotonic() + WATCH_S
        for p in self._partitions or ():
            partition = TopicPartition(self.settings.topic, p)
            try:
                low, high = self._consumer.get_watermark_offsets(partition, timeout=2.0, cached=False)
            except KafkaException:
                return  # the broker is unreachable: librdkafka is reconnecting, nothing to judge yet
            # The fetch position, past control records too (a transactional producer's commit markers
            # are offsets that are never delivered as messages); our own count before the first fetch.
            position = self._consumer.position([partition])[0].offset
            next_offset = position if position >= 0 else self.offsets.get(p)
            if self._watch.stalled(p, next_offset, low, high, time.monotonic()):
                log.warning(
                    "signal topic %s partition %d: messages up to offset %d wait but none was read for "
                    "%.0fs; reconnecting the consumer at offset %s",
                    self.settings.topic,
                    p,
                    high - 1,
                    self._watch.stall_s,
                    self.offsets.get(p, "start"),
                )
                self.rebuilds += 1
                self._close()
                return

    def _on_error(self, error: Any) -> None:
        self._warn(
            str(error.code()), f"signal topic {self.settings.topic} on {self.settings.bootstrap}: {error}"
        )

    def _warn(self, key: str, text: str) -> None:
        """Log an error once, then again only every ERROR_REPEAT_S while it lasts (outages repeat)."""
        now = time.monotonic()
        if now - self._errors.get(key, -ERROR_REPEAT_S) >= ERROR_REPEAT_S:
            self._errors[key] = now
            log.warning("%s", text)
