"""What gtidsnap emits: one record per row change or snapshot read, in one strictly increasing order.

Every sink receives the same records; ``seq`` is the order of emission, so "newest wins" is a
comparison of ``seq`` (a snapshot row takes the sequence of the point where the window put it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, Literal

import orjson

from gtidsnap.core.model import ChunkRow, ColumnarRows, Key, ReadRows, Row, RowChange, RowChanges, TableId

RecordOp = Literal["c", "u", "d", "r"]


@dataclass(slots=True)
class Record:
    """One emitted change: ``op`` c/u/d from the binlog, r for a snapshot read. Never changed once
    made; not frozen, as :class:`gtidsnap.core.model.RowChange` is not (one is made per change)."""

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
        key=tuple(map(row.get, change.key_columns)),
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


_LINE_HEAD = b'{"op":"r","table":'
_LINE_SEQ = b',"gtid":null,"seq":'


@dataclass(frozen=True, slots=True)
class SnapshotLines:
    """Consecutive snapshot rows of one chunk whose JSON a chunk reader wrote
    (:func:`snapshot_line_body`), numbered from ``first_seq``: the JSON-lines sink's records of them,
    the same bytes :meth:`Record.to_line` gives each row's record. One object a chunk, not one a row:
    the engine's thread, the snapshot's limit with readers, does no work per row."""

    table_json: bytes  # the table's name as a JSON string
    bodies: tuple[bytes, ...]
    first_seq: int
    source_ts: int

    def __len__(self) -> int:
        return len(self.bodies)

    def to_lines(self) -> bytes:
        """Every row's line; built by C-level iterators (no Python bytecode a row)."""
        head = _LINE_HEAD + self.table_json + b","
        tail = b',"snapshot":true,"source_ts":%d}\n' % self.source_ts
        return numbered_lines(head, self.bodies, _LINE_SEQ, self.first_seq, tail)


def numbered_lines(
    head: bytes, bodies: Sequence[bytes], before_seq: bytes, first_seq: int, tail: bytes
) -> bytes:
    """``head + body + before_seq + seq + tail`` for each body, ``seq`` counting from ``first_seq``;
    built by C-level iterators (no Python bytecode a line)."""
    seqs = map(b"%d".__mod__, range(first_seq, first_seq + len(bodies)))
    return b"".join(chain.from_iterable(zip(repeat(head), bodies, repeat(before_seq), seqs, repeat(tail))))


_CHANGE_GTID = b',"gtid":'
_CHANGE_SEQ = b',"seq":'


@dataclass(frozen=True, slots=True)
class ChangeLines:
    """The records of one rows event whose JSON a decoder process wrote (:class:`RowChanges`' bodies),
    numbered from ``first_seq``: the same bytes :meth:`Record.to_line` gives each change's record, one
    object an event."""

    head: bytes  # '{"op":...,"table":...,' : the same for every row of the event
    gtid_json: bytes  # the transaction's GTID as a JSON string
    bodies: tuple[bytes, ...]
    first_seq: int
    source_ts: int

    def __len__(self) -> int:
        return len(self.bodies)

    def to_lines(self) -> bytes:
        """Every row's line; built by C-level iterators (no Python bytecode a row)."""
        gtid = _CHANGE_GTID + self.gtid_json + _CHANGE_SEQ
        tail = b',"snapshot":false,"source_ts":%d}\n' % self.source_ts
        return numbered_lines(self.head, self.bodies, gtid, self.first_seq, tail)


def change_lines(changes: RowChanges, first_seq: int) -> ChangeLines:
    """The records of ``changes``, numbered from ``first_seq``."""
    head = b'{"op":"%b","table":%b,' % (changes.op.encode(), orjson.dumps(str(changes.table)))
    gtid = orjson.dumps(str(changes.gtid))
    return ChangeLines(head, gtid, changes.bodies, first_seq, changes.source_ts)


@dataclass(frozen=True, slots=True)
class SnapshotColumns:
    """Consecutive snapshot rows of one chunk in an output's columnar form (:class:`ColumnarRows`, made
    by its reader), numbered from ``first_seq``: one object a chunk, never a Python object a row."""

    table: TableId
    rows: ColumnarRows
    first_seq: int
    source_ts: int
    fresh: bool  # the table's first snapshot into this output (see Record.fresh)

    def __len__(self) -> int:
        return len(self.rows)


Emitted = Record | SnapshotLines | ChangeLines | SnapshotColumns  # what the engine hands its sink


def emitted_rows(records: Iterable[Emitted]) -> int:
    """How many records ``records`` hold (snapshot lines and columns hold one a row)."""
    return sum(1 if isinstance(r, Record) else len(r) for r in records)


def encoded_line(record: Record | SnapshotLines | ChangeLines) -> bytes:
    """The JSON line(s) of ``record``."""
    return record.to_line() if isinstance(record, Record) else record.to_lines()


def split_chunk_rows(rows: Iterable[tuple[Key, Row]]) -> tuple[tuple[Key, ...], tuple[ChunkRow, ...]]:
    """A chunk's ``(key, row)`` pairs as its keys and its rows, in order: what a reader sends (two
    tuples pickle faster than a tuple of pairs)."""
    pairs = tuple(rows)
    return tuple(k for k, _ in pairs), tuple(r for _, r in pairs)


def encoded_chunk_rows(
    rows: Iterable[tuple[Key, Row]], key_columns: Sequence[str]
) -> tuple[tuple[Key, ...], tuple[ChunkRow, ...]]:
    """A chunk's keys and its rows with each row's JSON written in place of its values (a row orjson
    cannot write keeps its values): what a reader sends an engine writing JSON lines."""
    encode = _body_encoder(tuple(key_columns))
    keys: list[Key] = []
    out: list[ChunkRow] = []
    for key, row in rows:
        try:
            body: ChunkRow = encode(row)
        except (orjson.JSONEncodeError, KeyError):
            body = snapshot_line_body([row.get(c) for c in key_columns], row) or row
        keys.append(key)
        out.append(body)
    return tuple(keys), tuple(out)


class LineBodies:
    """The chunk renderer of a JSON-lines output (:func:`encoded_chunk_rows`). Picklable."""

    def __call__(
        self, rows: Sequence[tuple[Key, Row]], schema: Any
    ) -> tuple[tuple[Key, ...], tuple[ChunkRow, ...]]:
        return encoded_chunk_rows(rows, schema.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LineBodies)

    def __hash__(self) -> int:
        return hash(LineBodies)


def _body_encoder(key_columns: tuple[str, ...]) -> Callable[[Row], bytes]:
    """:func:`snapshot_line_body` for rows holding every key column, with the key read by one
    ``itemgetter`` and no dict built around the row (0.33 instead of 0.56 us a row, measured): the same
    bytes, since orjson writes a tuple as an array; raises what orjson or the getter raise."""
    dumps = orjson.dumps
    if len(key_columns) == 1:
        one = itemgetter(key_columns[0])
        return lambda row: b'"key":[%b],"before":null,"after":%b' % (dumps(one(row)), dumps(row))
    many = itemgetter(*key_columns)
    return lambda row: b'"key":%b,"before":null,"after":%b' % (dumps(many(row)), dumps(row))


def seq_span(rows: ReadRows) -> int:
    """How many ``_seq`` numbers a chunk's rows take (:meth:`ColumnarRows.seq_span`)."""
    return len(rows) if isinstance(rows, tuple) else rows.seq_span()


def snapshot_output(
    table: TableId,
    rows: ReadRows,
    key_columns: Sequence[str],
    first_seq: int,
    fresh: bool,
    stamp: int,
) -> list[Emitted]:
    """The records of the rows a snapshot chunk put out, numbered from ``first_seq``, stamped ``stamp``
    (their ``source_ts``): one for each row, but rows its reader encoded (bytes) go out together as
    :class:`SnapshotLines`, a run of consecutive ones in each, the same lines their records would make,
    and columns as one :class:`SnapshotColumns`."""
    if isinstance(rows, ColumnarRows):
        return [SnapshotColumns(table, rows, first_seq, stamp, fresh)] if len(rows) else []
    table_json = orjson.dumps(str(table))
    if rows and all(map(isinstance, rows, repeat(bytes))):  # the usual case: one object, no loop
        return [SnapshotLines(table_json, tuple(rows), first_seq, stamp)]  # type: ignore[arg-type]
    out: list[Emitted] = []
    seq, end = first_seq, 0
    while end < len(rows):
        start = end
        while end < len(rows) and isinstance(rows[end], bytes):
            end += 1
        if end > start:
            bodies = rows[start:end]
            out.append(SnapshotLines(table_json, tuple(bodies), seq, stamp))  # type: ignore[arg-type]
            seq += end - start
            continue
        row = rows[end]
        assert not isinstance(row, bytes)
        key = tuple(row.get(c) for c in key_columns)
        out.append(Record("r", table, key, None, row, None, seq, True, stamp, fresh))
        seq, end = seq + 1, end + 1
    return out
