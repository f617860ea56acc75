"""The Kafka side of signals that is not the consumer: client settings, librdkafka's log, the signal
topic created when missing, and a message sent (``gtidsnap snapshot ...``)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from gtidsnap.config.loading import SignalSettings
from gtidsnap.core.errors import ConfigError, SignalError

log = logging.getLogger("gtidsnap.signals.consumer")

TOPIC_TIMEOUT_S = 10.0
ERROR_REPEAT_S = 30.0  # the same Kafka error is logged again at most this often


def client_settings(settings: SignalSettings) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.bootstrap,
        "client.id": f"gtidsnap-{settings.connector}",
        # Reconnect fast after a broker restart (the signal topic is tiny, retrying costs nothing).
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 2000,
        "logger": _KafkaLog(),
    }


class _KafkaLog:
    """librdkafka's own log lines, into ``gtidsnap.signals.consumer.kafka``; while a broker is down it logs a
    failed connect every few milliseconds, so each kind of line is let through once per ERROR_REPEAT_S."""

    def __init__(self) -> None:
        self.logger = logging.getLogger("gtidsnap.signals.consumer.kafka")
        self._last: dict[tuple[int, str], float] = {}

    def log(self, level: int, fmt: str, *args: Any) -> None:
        kind = (level, str(args[0]) if args else fmt)  # librdkafka's facility, e.g. FAIL, GETPID
        now = time.monotonic()
        if now - self._last.get(kind, -ERROR_REPEAT_S) >= ERROR_REPEAT_S:
            self._last[kind] = now
            self.logger.log(min(level, logging.WARNING), fmt, *args)


def ensure_topic(
    settings: SignalSettings, timeout_s: float = TOPIC_TIMEOUT_S, stop: threading.Event | None = None
) -> list[int]:
    """The topic's partitions; the topic is created (1 partition, the broker's replication factor) if
    it does not exist, since brokers usually refuse to create topics on first use. Tries for at most
    ``timeout_s`` (less if ``stop`` is set) before raising :class:`SignalError`."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    where = f"signal topic {settings.topic} on {settings.bootstrap}"
    admin = AdminClient(client_settings(settings))
    deadline = time.monotonic() + timeout_s
    created = False
    last = "no answer"
    while True:
        try:  # short attempts, so that stop() is not held up by an unreachable broker
            meta = admin.list_topics(
                topic=settings.topic, timeout=min(1.0, max(0.1, deadline - time.monotonic()))
            )
            topic = meta.topics.get(settings.topic)
        except KafkaException as exc:
            topic, last = None, str(exc.args[0])
        code = topic.error.code() if topic is not None and topic.error is not None else None
        if topic is not None and code is None and topic.partitions:
            if all(p.leader >= 0 for p in topic.partitions.values()):
                return sorted(topic.partitions)
            last = "partitions without a leader"
        elif code == KafkaError.UNKNOWN_TOPIC_OR_PART and not created:
            future = admin.create_topics(
                [NewTopic(settings.topic, num_partitions=1)], request_timeout=timeout_s
            )
            try:
                future[settings.topic].result(timeout=timeout_s)
                log.info("created the %s", where)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise SignalError(
                        f"{where} does not exist and could not be created: {exc.args[0]}"
                    ) from exc
            except TimeoutError as exc:
                raise SignalError(
                    f"{where} does not exist; creating it timed out after {timeout_s:.0f}s"
                ) from exc
            created = True
        elif topic is not None and topic.error is not None:
            last = str(topic.error)
        if time.monotonic() >= deadline or (stop is not None and stop.is_set()):
            raise SignalError(f"{where} is not reachable or not ready: {last}")
        time.sleep(0.1)


def send_signal(settings: SignalSettings, message: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    """Produce ``message`` keyed by the connector name; returns once the broker has it (acks=all)."""
    from confluent_kafka import KafkaError, Message, Producer

    if not settings.bootstrap:
        raise ConfigError(
            "no signal topic configured: set [signals] bootstrap, GTIDSNAP_SIGNALS_BOOTSTRAP or --bootstrap"
        )
    ensure_topic(settings)
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer({**client_settings(settings), "acks": "all", "enable.idempotence": True})
    producer.produce(
        settings.topic,
        key=settings.connector.encode("utf-8"),
        value=json.dumps(message).encode("utf-8"),
        on_delivery=delivered,
    )
    if producer.flush(timeout=timeout_s) > 0:
        raise SignalError(f"the signal was not delivered to {settings.bootstrap} within {timeout_s:.0f}s")
    if failures:
        raise SignalError(f"the signal was refused by {settings.bootstrap}: {failures[0]}")
