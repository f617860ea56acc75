"""Signals: snapshots steered through a Kafka topic, because users of a read-only replica cannot write a
signal table.

Messages are the ones Debezium users already write, keyed by the connector name (one topic can serve
many instances; a message whose key is not this instance's ``signals.connector`` is skipped)::

    key:   gtidsnap
    value: {"id": "b0c1", "type": "execute-snapshot",
            "data": {"data-collections": ["shop.orders", "shop\\\\.audit_.*"], "type": "INCREMENTAL",
                     "additional-conditions": [{"data-collection": "shop.orders",
                                                "filter": "region = 'EU'"}]}}
    value: {"id": "b0c2", "type": "stop-snapshot", "data": {"data-collections": ["shop.orders"]}}
    value: {"id": "b0c3", "type": "pause-snapshot"}
    value: {"id": "b0c4", "type": "resume-snapshot"}

Two parts. :func:`parse_signal` is pure: one Kafka message in, a
:class:`~gtidsnap.commands.SignalReceived` out, carrying either the engine command or the reason the
message is refused; it never raises on bad input, so the engine records every message's offset, and
what became of it, exactly once. Resolving names and regular expressions against the replica's catalog,
and refusing a filter on a table outside the request, need the replica: the engine does that when it
applies the command.

:class:`SignalConsumer` is the shell: a thread that reads the topic and puts each parse result on the
engine's command queue. It never acts on a signal itself and never commits offsets to Kafka: the
offsets live in the engine's checkpoint next to the snapshot state they produced, so a signal acted on
is never acted on again after a crash, and a signal sent while gtidsnap was stopped is acted on when it
starts. :func:`send_signal` and :func:`build_message` are what ``gtidsnap snapshot ...`` uses.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gtidsnap.commands import (
    Command,
    PauseSnapshots,
    ResumeSnapshots,
    SignalReceived,
    StartSnapshot,
    StopSnapshot,
)
from gtidsnap.config import SignalSettings
from gtidsnap.errors import ConfigError, FilterError, SignalError
from gtidsnap.filters import check_filter
from gtidsnap.model import TableId
from gtidsnap.selectors import SelectorError, check_selector, literal_table, selects

log = logging.getLogger("gtidsnap.signals")

EXECUTE, STOP, PAUSE, RESUME = "execute-snapshot", "stop-snapshot", "pause-snapshot", "resume-snapshot"
KINDS = (EXECUTE, STOP, PAUSE, RESUME)
VERBS = {"start": EXECUTE, "stop": STOP, "pause": PAUSE, "resume": RESUME}
EXECUTE_FIELDS = (
    "data-collections",
    "type",
    "additional-conditions",
    "additional-condition",
    "surrogate-key",
)
STOP_FIELDS = ("data-collections", "type")
UNKNOWN_KIND = "?"  # the type shown in the history when the message has none we can read
MAX_MESSAGE_BYTES = 64 * 1024  # a signal is a request, not a payload: bigger ones are refused unread
MAX_ID_CHARS = 128  # ids are kept in the checkpoint (to ignore repeats): they must stay small
ANY_TABLE = TableId("each", "table")  # what a filter for every table of the request is checked against


# ----------------------------------------------------------------------------- the pure part


def parse_signal(
    key: bytes | None, value: bytes | None, partition: int, offset: int, connector: str
) -> SignalReceived | None:
    """The message at ``partition``/``offset`` as the engine's input; None when it is for another
    instance (its key is not ``connector``). Bad input gives a result with ``error`` set, never an
    exception: the engine must record the offset of a refused message as well."""
    if key is None or key != connector.encode("utf-8"):
        return None
    signal_id: str | None = None
    kind = UNKNOWN_KIND
    try:
        message = _json_object(value)
        raw_id = message.get("id")
        if raw_id is not None and (not isinstance(raw_id, str) or not raw_id.strip()):
            raise SignalError(f'"id" must be a non-empty string, got {_show(raw_id)}')
        if raw_id is not None and len(raw_id) > MAX_ID_CHARS:
            raise SignalError(f'"id" has {len(raw_id)} characters; at most {MAX_ID_CHARS} are taken')
        signal_id = raw_id
        raw_kind = message.get("type")
        if isinstance(raw_kind, str):
            kind = raw_kind[:64]
        command = _command(raw_kind, message.get("data"))
    except SignalError as exc:
        return SignalReceived(partition, offset, signal_id, kind, None, str(exc))
    return SignalReceived(partition, offset, signal_id, kind, command)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _show(value: Any) -> str:
    """A value quoted for an error message, cut short: messages are logged, and may be huge."""
    text = json.dumps(value) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _json_object(value: bytes | None) -> dict[str, Any]:
    if not value:
        raise SignalError("the message is empty; expected a JSON object")
    if len(value) > MAX_MESSAGE_BYTES:
        raise SignalError(f"the message has {len(value):,} bytes; signals are at most {MAX_MESSAGE_BYTES:,}")
    try:
        message = json.loads(value.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SignalError(f"the message is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    except json.JSONDecodeError as exc:
        raise SignalError(
            f"the message is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from exc
    if not isinstance(message, dict):
        raise SignalError(f"the message is {_json_type(message)}, not a JSON object")
    return message


def _command(kind: Any, data: Any) -> Command:
    if kind is None:
        raise SignalError(f'the message has no "type"; expected one of {", ".join(KINDS)}')
    if kind not in KINDS:
        raise SignalError(f'unknown "type" {_show(kind)}; expected one of {", ".join(KINDS)}')
    if kind in (PAUSE, RESUME):
        return PauseSnapshots() if kind == PAUSE else ResumeSnapshots()  # any "data" is irrelevant
    if data is None and kind == STOP:
        return StopSnapshot(None)
    if not isinstance(data, dict):
        what = "no" if data is None else f"{_json_type(data)} as"
        raise SignalError(f'{kind} has {what} "data"; expected an object with "data-collections"')
    known = EXECUTE_FIELDS if kind == EXECUTE else STOP_FIELDS
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise SignalError(
            f"{kind}: unknown field(s) in data: {', '.join(unknown)}; known: {', '.join(known)}"
        )
    _snapshot_type(data.get("type"))
    if kind == STOP:
        return _stop(data.get("data-collections"))
    return _execute(data)


def _snapshot_type(value: Any) -> None:
    if value is None or (isinstance(value, str) and value.upper() == "INCREMENTAL"):
        return
    raise SignalError(
        f"data.type {_show(value)} is not supported: gtidsnap only takes INCREMENTAL snapshots "
        "(read-only and lock-free, interleaved with the stream)"
    )


def _collections(value: Any, required: bool) -> list[str]:
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise SignalError(
            f"data.data-collections must be a non-empty list of table names or regular expressions, "
            f"got {_show(value)}"
        )
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise SignalError(f"data.data-collections[{i}] must be a non-empty string, got {_show(item)}")
    return list(dict.fromkeys(value))


def _execute(data: Mapping[str, Any]) -> StartSnapshot:
    selectors = _collections(data.get("data-collections"), required=True)
    for selector in selectors:
        try:
            check_selector(selector)
        except SelectorError as exc:
            raise SignalError(f"data.data-collections entry {exc}") from None
    surrogate = data.get("surrogate-key")
    if surrogate not in (None, ""):
        # The engine chunks by the primary key or the configured surrogate key; a key that changes per
        # request would also have to change how the binlog's rows are keyed, so it is not taken here.
        raise SignalError(
            "data.surrogate-key is not supported in signals: configure capture.surrogate_keys for the "
            "table instead"
        )
    condition = None
    if data.get("additional-condition") not in (None, ""):  # Debezium's older form: one filter for all
        condition = _filter(data["additional-condition"], ANY_TABLE, "data.additional-condition")
    conditions = _conditions(data.get("additional-conditions"))
    for name in conditions:
        table = TableId.parse(name)
        if not any(selects(s, table) for s in selectors):
            raise SignalError(
                f"data.additional-conditions has a filter for {name}, which is not in the request (no "
                "entry of data.data-collections names or matches it); add the table or drop its filter"
            )
    return StartSnapshot(selectors=tuple(selectors), condition=condition, conditions=conditions)


def _conditions(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    shape = '{"data-collection": "db.table", "filter": "..."}'
    if not isinstance(value, list):
        raise SignalError(f"data.additional-conditions must be a list of {shape} objects, got {_show(value)}")
    conditions: dict[str, str] = {}
    for i, entry in enumerate(value):
        where = f"data.additional-conditions[{i}]"
        if not isinstance(entry, dict):
            raise SignalError(f"{where} must be an object {shape}, got {_show(entry)}")
        table, text = entry.get("data-collection"), entry.get("filter")
        if not isinstance(table, str) or not isinstance(text, str):
            raise SignalError(f'{where} needs "data-collection" and "filter", both strings: {shape}')
        unknown = sorted(set(entry) - {"data-collection", "filter"})
        if unknown:
            raise SignalError(f"{where} has unknown field(s) {', '.join(unknown)}: {shape}")
        try:
            name = str(TableId.parse(table))
        except ValueError as exc:
            raise SignalError(f"{where}: {exc}") from exc
        if name in conditions:
            raise SignalError(f"{where}: a second filter for {name}; combine them with AND")
        conditions[name] = _filter(text, TableId.parse(name), f"{where} (filter for {name})")
    return conditions


def _filter(text: Any, table: TableId, where: str) -> str:
    """The filter as the user wrote it, once it passes :func:`gtidsnap.filters.check_filter`'s rules that
    need no catalog (the engine checks it again against the table's columns before any SELECT)."""
    if not isinstance(text, str):
        raise SignalError(f"{where} must be a string, got {_show(text)}")
    try:
        check_filter(text, table)
    except FilterError as exc:
        raise SignalError(f"{where}: {exc}") from None
    return text.strip()


def _stop(value: Any) -> StopSnapshot:
    selectors = _collections(value, required=False)
    if not selectors:
        return StopSnapshot(None)  # none named: stop every snapshot
    tables: list[TableId] = []
    for selector in selectors:
        table = literal_table(selector)
        if table is None:
            raise SignalError(
                f"stop-snapshot takes table names (db.table), not patterns: {_show(selector)}; "
                "name each table to stop, or name none to stop every snapshot"
            )
        tables.append(table)
    return StopSnapshot(tuple(tables))


def build_message(
    kind: str,
    tables: Sequence[str] = (),
    filters: Mapping[str, str] | None = None,
    signal_id: str | None = None,
) -> dict[str, Any]:
    """The message for ``kind`` (a Debezium type, or start/stop/pause/resume), checked by the same
    parser the consumer uses: the CLI never sends what the tool would refuse to read."""
    kind = VERBS.get(kind, kind)
    if kind not in KINDS:
        raise SignalError(f"unknown signal {kind!r}; expected one of {', '.join(VERBS)}")
    filters = dict(filters or {})
    if filters and kind != EXECUTE:
        raise SignalError(f"filters only go with execute-snapshot (start), not {kind}")
    if tables and kind in (PAUSE, RESUME):
        raise SignalError(f"{kind} applies to every snapshot; it takes no table names")
    if kind == EXECUTE and not tables:
        raise SignalError("execute-snapshot needs at least one table name or regular expression")
    message: dict[str, Any] = {"id": signal_id or str(uuid.uuid4()), "type": kind}
    if kind == EXECUTE:
        data: dict[str, Any] = {"data-collections": list(tables), "type": "INCREMENTAL"}
        if filters:
            data["additional-conditions"] = [{"data-collection": t, "filter": f} for t, f in filters.items()]
        message["data"] = data
    elif kind == STOP:
        message["data"] = {"data-collections": list(tables), "type": "INCREMENTAL"} if tables else {}
    else:
        message["data"] = {}
    checked = parse_signal(b"-", json.dumps(message).encode(), 0, 0, "-")
    assert checked is not None
    if checked.error is not None:
        raise SignalError(checked.error)
    return message


# ----------------------------------------------------------------------------- the shell

TOPIC_TIMEOUT_S = 10.0
RETRY_MIN_S, RETRY_MAX_S = 0.5, 5.0
POLL_S = 0.5  # how long one poll may block: bounds how long stop() waits
ERROR_REPEAT_S = 30.0  # the same Kafka error is logged again at most this often


def _common(settings: SignalSettings) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.bootstrap,
        "client.id": f"gtidsnap-{settings.connector}",
        # Reconnect fast after a broker restart (the signal topic is tiny, retrying costs nothing).
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 2000,
        "logger": _KafkaLog(),
    }


class _KafkaLog:
    """librdkafka's own log lines, into ``gtidsnap.signals.kafka``; while a broker is down it logs a
    failed connect every few milliseconds, so each kind of line is let through once per ERROR_REPEAT_S."""

    def __init__(self) -> None:
        self.logger = logging.getLogger("gtidsnap.signals.kafka")
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
    admin = AdminClient(_common(settings))
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

    producer = Producer({**_common(settings), "acks": "all", "enable.idempotence": True})
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
        offsets: Mapping[str, int],
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
            **_common(self.settings),
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
