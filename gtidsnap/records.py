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

from gtidsnap.model import Row, RowChange, TableId

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


def snapshot_records(
    table: TableId, rows: Iterable[Row], key_columns: Sequence[str], first_seq: int, fresh: bool, now: int
) -> list[Record]:
    """The records of the rows a snapshot chunk put out, numbered from ``first_seq``, stamped ``now``."""
    return [
        Record("r", table, tuple(row.get(c) for c in key_columns), None, row, None, seq, True, now, fresh)
        for seq, row in enumerate(rows, first_seq)
    ]
