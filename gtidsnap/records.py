"""What gtidsnap emits: one record per row change or snapshot read, in one strictly increasing order.

Every sink receives the same records; ``seq`` is the order of emission, so "newest wins" is a
comparison of ``seq`` (a snapshot row takes the sequence of the point where the window put it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from gtidsnap.model import ChunkRow, Key, Row, RowChange, TableId

RecordOp = Literal["c", "u", "d", "r"]


@dataclass(frozen=True)
class Record:
    """One emitted change: ``op`` c/u/d from the binlog, r for a snapshot read."""

    op: RecordOp
    table: TableId
    key: tuple[Any, ...]
    before: Row | None
    after: Row | None
    gtid: str | None
    seq: int
    snapshot: bool
    source_ts: int
    # A row of a table's first snapshot into this output (TableProgress.fresh): a Delta mirror may
    # append it instead of merging it. Not part of the JSON-lines record.
    fresh: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "table": str(self.table),
            "key": list(self.key),
            "before": dict(self.before) if self.before is not None else None,
            "after": dict(self.after) if self.after is not None else None,
            "gtid": self.gtid,
            "seq": self.seq,
            "snapshot": self.snapshot,
            "source_ts": self.source_ts,
        }

    def to_line(self) -> bytes:
        """One JSON line, UTF-8. Text that is not valid Unicode (a lone surrogate left by decoding
        bytes that were not UTF-8) is written with ``\\u`` escapes instead of failing the batch."""
        try:
            return orjson.dumps(self.to_json(), option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:
            return (json.dumps(self.to_json(), separators=(",", ":")) + "\n").encode("ascii")


def change_record(change: RowChange, seq: int) -> Record:
    """The record of one binlog row change, its key shown as the row's key column values (of the
    shape the change was decoded with)."""
    row = change.after if change.after is not None else change.before
    assert row is not None
    return Record(
        op=change.op,
        table=change.table,
        key=tuple(row.get(c) for c in change.key_columns),
        before=change.before,
        after=change.after,
        gtid=str(change.gtid),
        seq=seq,
        snapshot=False,
        source_ts=change.source_ts,
    )


def snapshot_line_body(key: Sequence[Any], row: Row) -> bytes | None:
    """The part of a snapshot row's JSON line that does not depend on where it goes out (its "key",
    "before" and "after", as :meth:`Record.to_line` writes them), encoded where the row was read (a
    chunk reader); None when orjson cannot write it (the row then travels as values)."""
    try:
        return orjson.dumps({"key": list(key), "before": None, "after": row})[1:-1]
    except orjson.JSONEncodeError:
        return None


@dataclass(frozen=True, slots=True)
class SnapshotLine:
    """A snapshot row whose JSON a chunk reader wrote (:func:`snapshot_line_body`): the JSON-lines
    sink's record of it, the same bytes :meth:`Record.to_line` gives the row's record."""

    table_json: bytes  # the table's name as a JSON string
    body: bytes
    seq: int
    source_ts: int

    def to_line(self) -> bytes:
        return b'{"op":"r","table":%b,%b,"gtid":null,"seq":%d,"snapshot":true,"source_ts":%d}\n' % (
            self.table_json,
            self.body,
            self.seq,
            self.source_ts,
        )


Emitted = Record | SnapshotLine  # what the engine hands its sink


def encoded_chunk_rows(
    rows: Iterable[tuple[Key, Row]], key_columns: Sequence[str]
) -> tuple[tuple[Key, ChunkRow], ...]:
    """A chunk's rows with each row's JSON written in place of its values (a row orjson cannot write
    keeps its values): what a reader sends an engine writing JSON lines."""
    out = []
    for key, row in rows:
        body = snapshot_line_body([row.get(c) for c in key_columns], row)
        out.append((key, body if body is not None else row))
    return tuple(out)


def snapshot_output(
    table: TableId,
    rows: Iterable[ChunkRow],
    key_columns: Sequence[str],
    first_seq: int,
    fresh: bool,
    now: int,
) -> list[Emitted]:
    """The records of the rows a snapshot chunk put out, numbered from ``first_seq``, stamped ``now``;
    rows its reader encoded (bytes) go out as :class:`SnapshotLine`, the same line their record would
    make."""
    table_json = orjson.dumps(str(table))
    out: list[Emitted] = []
    for seq, row in enumerate(rows, first_seq):
        if isinstance(row, bytes):
            out.append(SnapshotLine(table_json, row, seq, now))
        else:
            key = tuple(row.get(c) for c in key_columns)
            out.append(Record("r", table, key, None, row, None, seq, True, now, fresh))
    return out
