"""Smoke test of the real Kafka broker: keyed JSON round trip and committed consumer-group offsets."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from tests.integration.fixtures.kafka_server import KafkaBroker

pytestmark = pytest.mark.integration

POLL_BUDGET_S = 30.0
QUIET_WINDOW_S = 2.0


def _produce(bootstrap: str, topic: str, key: bytes, value: bytes) -> None:
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
    remaining = producer.flush(timeout=POLL_BUDGET_S)
    assert remaining == 0, f"{remaining} message(s) not delivered within {POLL_BUDGET_S}s"
    assert not errors, f"delivery failed: {errors}"


def _consumer(bootstrap: str, group_id: str) -> Consumer:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
    }
    return Consumer(conf)


def _poll_one(consumer: Consumer, budget_s: float) -> Message | None:
    """The first real message within ``budget_s`` (partition EOF events are skipped), else None."""
    deadline = time.monotonic() + budget_s
    while (left := deadline - time.monotonic()) > 0:
        msg = consumer.poll(timeout=min(0.5, left))
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            pytest.fail(f"consumer error: {err}")
        return msg
    return None


def _assert_nothing_polled(consumer: Consumer, budget_s: float) -> None:
    msg = _poll_one(consumer, budget_s)
    assert msg is None, f"second consumer got an already committed message at offset {msg.offset()}"


def test_keyed_json_round_trip_and_group_offset(kafka_broker: KafkaBroker, kafka_topic: str) -> None:
    bootstrap = kafka_broker.bootstrap
    assert bootstrap.startswith("127.0.0.1:")
    group_id = f"gtidsnap-smoke-{uuid.uuid4().hex[:12]}"
    key = b"orders:42"
    payload = {"gtid": "0-1-42", "op": "snapshot-signal", "tables": ["shop.orders"]}
    _produce(bootstrap, kafka_topic, key, json.dumps(payload).encode())

    # First group member: receives the message, commits the offset after it, leaves the group.
    first = _consumer(bootstrap, group_id)
    try:
        first.subscribe([kafka_topic])
        msg = _poll_one(first, POLL_BUDGET_S)
        assert msg is not None, f"no message on {kafka_topic} within {POLL_BUDGET_S}s"
        assert msg.topic() == kafka_topic
        assert msg.key() == key
        raw = msg.value()
        assert raw is not None
        assert json.loads(raw) == payload
        first.commit(message=msg, asynchronous=False)
        offset = msg.offset()
        assert offset is not None
        partition = msg.partition()
        assert partition is not None
        committed = first.committed([TopicPartition(kafka_topic, partition)], timeout=10)
        assert committed[0].offset == offset + 1
    finally:
        first.close()

    # Second member of the same group, started afterwards: resumes after the committed offset.
    assigned_at: list[float] = []

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assigned_at.append(time.monotonic())

    second = _consumer(bootstrap, group_id)
    try:
        second.subscribe([kafka_topic], on_assign=on_assign)
        deadline = time.monotonic() + POLL_BUDGET_S
        while not assigned_at and time.monotonic() < deadline:
            _assert_nothing_polled(second, 0.5)
        assert assigned_at, f"second consumer got no partition within {POLL_BUDGET_S}s"
        _assert_nothing_polled(second, QUIET_WINDOW_S)

        # It is really consuming: a new message arrives, and only that one.
        _produce(bootstrap, kafka_topic, b"orders:43", json.dumps({"gtid": "0-1-43"}).encode())
        fresh = _poll_one(second, POLL_BUDGET_S)
        assert fresh is not None, f"second consumer got no new message within {POLL_BUDGET_S}s"
        assert fresh.key() == b"orders:43"
        assert fresh.offset() == offset + 1
    finally:
        second.close()
