"""The snapshot context: which tables, how far each got, what to resume from. Plain JSON, never pickled.

Keys are stored as *raw* server values (what the next keyset SELECT binds as its lower bound), and
JSON has no type for most of them, so each value is written with its type: ``{"int": 5}``,
``{"str": "a"}``, ``{"decimal": "1.20"}``, ``{"datetime": "2024-01-02T03:04:05.000006"}``,
``{"date": ...}``, ``{"time": seconds}``, ``{"bytes": base64}``, ``{"float": ...}``, ``{"null": null}``.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from gtidsnap.core.json_fields import count_field, typed_field
from gtidsnap.core.model import TableId

RawKey = tuple[Any, ...]


def encode_value(value: Any) -> dict[str, Any]:
    """One raw key value as typed JSON."""
    if value is None:
        return {"null": None}
    if isinstance(value, bool):
        return {"int": int(value)}
    if isinstance(value, int):
        return {"int": value}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, float):
        return {"float": repr(value)}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"time": str(value.total_seconds())}
    if isinstance(value, bytes | bytearray):
        return {"bytes": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"cannot store a key value of type {type(value).__name__}: {value!r}")


def decode_value(data: dict[str, Any]) -> Any:
    """The inverse of :func:`encode_value`."""
    if len(data) != 1:
        raise ValueError(f"a typed key value has exactly one type tag, got {data!r}")
    ((tag, v),) = data.items()
    decoders: dict[str, Any] = {
        "null": lambda _: None,
        "int": int,
        "str": str,
        "decimal": Decimal,
        "float": float,
        "datetime": dt.datetime.fromisoformat,
        "date": dt.date.fromisoformat,
        "time": lambda s: dt.timedelta(seconds=float(s)),
        "bytes": base64.b64decode,
    }
    if tag not in decoders:
        raise ValueError(f"unknown key value type {tag!r}")
    return decoders[tag](v)


def encode_key(key: RawKey | None) -> list[dict[str, Any]] | None:
    return None if key is None else [encode_value(v) for v in key]


def decode_key(data: list[dict[str, Any]] | None) -> RawKey | None:
    return None if data is None else tuple(decode_value(v) for v in data)


@dataclass(frozen=True)
class TableProgress:
    """One table's snapshot: bounds, progress, and an optional filter condition."""

    table: TableId
    max_key: RawKey | None = None  # captured when the table's snapshot starts; None = not started
    last_key: RawKey | None = None  # the last key of the last emitted chunk: the next lower bound
    started: bool = False
    done: bool = False
    chunks: int = 0
    rows: int = 0
    condition: str | None = None
    error: str | None = None
    # Its rows may reach a Delta mirror as plain appends: when it started, no snapshot of the table had
    # emitted rows into this output, and no DDL of the table has been seen since (see
    # sinks.delta.mirror.rule).
    fresh: bool = False

    # How a snapshot's progress changes, each step a new value (the engine only calls these):
    def begun(self, max_key: RawKey | None, fresh: bool) -> TableProgress:
        """It starts: it reads up to ``max_key``, the largest key now (None: empty, nothing to read)."""
        return replace(self, started=True, max_key=max_key, done=max_key is None, fresh=fresh)

    def chunk_read(self, last_key: RawKey | None, rows: int) -> TableProgress:
        """A chunk of ``rows`` rows went out; the next one starts after ``last_key``."""
        return replace(self, last_key=last_key, chunks=self.chunks + 1, rows=self.rows + rows)

    def finished(self) -> TableProgress:
        return replace(self, started=True, done=True)

    def failed(self, reason: str) -> TableProgress:
        """It ends with ``reason`` (``gtidsnap status`` shows it); the other tables go on."""
        return replace(self, started=True, done=True, error=reason)

    @property
    def state(self) -> str:
        """``error``, ``done``, ``reading`` or ``queued``: what ``status``, the progress bars and
        /metrics show."""
        return "error" if self.error else "done" if self.done else "reading" if self.started else "queued"

    def not_fresh(self) -> TableProgress:
        """A DDL of the table: the rest of its rows reach a Delta mirror by MERGE, never by APPEND."""
        return replace(self, fresh=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": str(self.table),
            "max_key": encode_key(self.max_key),
            "last_key": encode_key(self.last_key),
            "started": self.started,
            "done": self.done,
            "chunks": self.chunks,
            "rows": self.rows,
            "condition": self.condition,
            "error": self.error,
            "fresh": self.fresh,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TableProgress:
        """As :meth:`to_json` wrote it; ValueError names the first field that is not."""
        optional = (str, type(None))
        return cls(
            table=TableId.parse(typed_field(data, "table", str)),
            max_key=decode_key(typed_field(data, "max_key", (list, type(None)))),
            last_key=decode_key(typed_field(data, "last_key", (list, type(None)))),
            started=typed_field(data, "started", bool),
            done=typed_field(data, "done", bool),
            chunks=count_field(data, "chunks"),
            rows=count_field(data, "rows"),
            condition=typed_field(data, "condition", optional, None),
            error=typed_field(data, "error", optional, None),
            fresh=typed_field(data, "fresh", bool, False),
        )


@dataclass(frozen=True)
class SnapshotContext:
    """Every table asked for, in queue order; the first one not done is the one being read."""

    tables: tuple[TableProgress, ...] = field(default=())
    paused: bool = False
    # Tables any snapshot emitted rows for, in this output (stopped snapshots included). None: a
    # checkpoint written before this was kept, so every table counts as snapshotted.
    snapshotted: frozenset[TableId] | None = frozenset()

    def first_snapshot(self, table: TableId) -> bool:
        """Has no snapshot emitted rows of ``table`` into this output yet (as far as is known)?"""
        return self.snapshotted is not None and table not in self.snapshotted

    def emitted(self, table: TableId) -> SnapshotContext:
        """Note that a snapshot emitted rows of ``table``."""
        if self.snapshotted is None or table in self.snapshotted:
            return self
        return replace(self, snapshotted=self.snapshotted | {table})

    def current(self) -> TableProgress | None:
        return next((t for t in self.tables if not t.done), None)

    def pending(self) -> tuple[TableProgress, ...]:
        return tuple(t for t in self.tables if not t.done)

    def enqueue(self, tables: Iterable[TableId], condition: str | None = None) -> SnapshotContext:
        """Add tables to the queue; a table already waiting or running is not queued twice."""
        waiting = {t.table for t in self.tables if not t.done}
        added = tuple(TableProgress(t, condition=condition) for t in tables if t not in waiting)
        return replace(self, tables=self.tables + added)

    def update(self, progress: TableProgress) -> SnapshotContext:
        """Replace the entry of the table being read (the first not done for that table)."""
        for i, t in enumerate(self.tables):
            if t.table == progress.table and not t.done:
                return replace(self, tables=(*self.tables[:i], progress, *self.tables[i + 1 :]))
        raise KeyError(f"{progress.table} is not being snapshotted")

    def stop(self, tables: Iterable[TableId] | None = None) -> SnapshotContext:
        """Drop waiting or running snapshots (all when ``tables`` is None); finished ones stay listed."""
        names = None if tables is None else set(tables)
        kept = tuple(t for t in self.tables if t.done or (names is not None and t.table not in names))
        return replace(self, tables=kept)

    def to_json(self) -> dict[str, Any]:
        snapshotted = None if self.snapshotted is None else sorted(str(t) for t in self.snapshotted)
        return {
            "tables": [t.to_json() for t in self.tables],
            "paused": self.paused,
            "snapshotted": snapshotted,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotContext:
        """As :meth:`to_json` wrote it; ValueError names the first field that is not."""
        names = typed_field(data, "snapshotted", (list, type(None)), None)
        tables = typed_field(data, "tables", list, [])
        for i, t in enumerate(tables):
            if not isinstance(t, dict):
                raise ValueError(f"field 'tables[{i}]' is {type(t).__name__}, not dict")
        return cls(
            tables=tuple(TableProgress.from_json(t) for t in tables),
            paused=typed_field(data, "paused", bool, False),
            snapshotted=None if names is None else frozenset(TableId.parse(n) for n in names),
        )
