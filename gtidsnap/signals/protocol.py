"""The signal messages (pure): the ones Debezium users already write, keyed by the connector name (one
topic can serve many instances; a message whose key is not this instance's ``signals.connector`` is
skipped)::

    key:   gtidsnap
    value: {"id": "b0c1", "type": "execute-snapshot",
            "data": {"data-collections": ["shop.orders", "shop\\\\.audit_.*"], "type": "INCREMENTAL",
                     "additional-conditions": [{"data-collection": "shop.orders",
                                                "filter": "region = 'EU'"}]}}
    value: {"id": "b0c2", "type": "stop-snapshot", "data": {"data-collections": ["shop.orders"]}}
    value: {"id": "b0c3", "type": "pause-snapshot"}
    value: {"id": "b0c4", "type": "resume-snapshot"}

:func:`parse_signal`: one Kafka message in, a :class:`~gtidsnap.core.commands.SignalReceived` out, carrying
either the engine command or the reason the message is refused; it never raises on bad input, so the
engine records every message's offset, and what became of it, exactly once. Resolving names and
regular expressions against the replica's catalog, and refusing a filter on a table outside the
request, need the replica: the engine does that when it applies the command. :func:`build_message`
writes a message the way ``gtidsnap snapshot ...`` sends it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gtidsnap.core.commands import (
    Command,
    PauseSnapshots,
    ResumeSnapshots,
    SignalReceived,
    StartSnapshot,
    StopSnapshot,
)
from gtidsnap.core.errors import FilterError, SignalError
from gtidsnap.core.model import TableId
from gtidsnap.core.selectors import SelectorError, check_selector, literal_table, selects
from gtidsnap.filters.check import check_filter

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


def parse_signal(
    key: bytes | None, value: bytes | None, partition: int, offset: int, connector: str
) -> SignalReceived | None:
    """The message at ``partition``/``offset`` as the engine's input; None when it is for another
    instance (its key is not ``connector``) or is a notification (Debezium's shape, ``aggregateType``
    and ``additionalData``: an answer, never a signal). Bad input gives a result with ``error`` set,
    never an exception: the engine must record the offset of a refused message as well."""
    if key is None or key != connector.encode("utf-8"):
        return None
    signal_id: str | None = None
    kind = UNKNOWN_KIND
    try:
        message = _json_object(value)
        if "aggregateType" in message and "additionalData" in message:
            return None
        raw_id = message.get("id")
        if raw_id is not None and (not isinstance(raw_id, str) or not raw_id.strip()):
            raise SignalError(f'"id" must be a non-empty string, got {_show(raw_id)}')
        if raw_id is not None and len(raw_id) > MAX_ID_CHARS:
            raise SignalError(f'"id" has {len(raw_id)} characters; at most {MAX_ID_CHARS} are taken')
        if raw_id is not None and not raw_id.isprintable():  # shown in logs, `status`, terminals
            raise SignalError(f'"id" {_show(raw_id)} holds control characters: write it without them')
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
    """The filter as the user wrote it, once it passes :func:`gtidsnap.filters.check.check_filter`'s rules
    that
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
