"""The MERGE rule of the sink's mirrors (a change applies over an older ``_seq`` only, a delete removes
the row, a change of a key no file holds inserts it, a delete of one is nothing) on one data file's
rows as Arrow: plain data in, rows and Change Data Feed rows out, property-tested against a
row-by-row MERGE (tests/unit/sinks/delta/mirror/test_file_merge.py). :mod:`.file_rewrite` runs it on the
files a change set touches, a piece at a time."""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gtidsnap.sinks.delta.change_rows import SEQ

CHANGE_TYPE = "_change_type"
_T, _S = "_gtidsnap_t", "_gtidsnap_s"


@dataclass(frozen=True)
class FileMerge:
    """What a MERGE makes of one data file: its rows after it (None: none changed, the file stays),
    the Change Data Feed rows of its changed rows, and the source rows whose key it holds."""

    rows: pa.Table | None
    changes: pa.Table
    matched: pa.Array
    updated: int
    deleted: int


def merged_file(target: pa.Table, source: pa.Table, key: Sequence[str]) -> FileMerge:
    """The MERGE of ``source`` (one row a key, with ``_op`` and ``_seq``) into one file's rows
    ``target``: a key's change applies over an older ``_seq`` only, a delete removes the row."""
    key = list(key)
    t = target.select([*key, SEQ]).append_column(_T, pa.array(range(target.num_rows), pa.int64()))
    pairs = t.join(_source_keys(source, key), keys=key, join_type="inner")
    applied = pairs.filter(pc.greater(pairs.column("_s_seq"), pairs.column(SEQ)))
    is_delete = pc.equal(applied.column("_s_op"), "d")
    deletes = applied.filter(is_delete)
    updates = applied.filter(pc.invert(is_delete))
    matched = pairs.column(_S).combine_chunks()
    if not applied.num_rows:
        return FileMerge(None, typed(source.slice(0, 0), "insert"), matched, 0, 0)
    keep = pc.invert(pc.is_in(t.column(_T), value_set=applied.column(_T).combine_chunks()))
    post = source.take(updates.column(_S))
    changes = pa.concat_tables(
        [
            typed(target.take(updates.column(_T)), "update_preimage"),
            typed(post, "update_postimage"),
            typed(target.take(deletes.column(_T)), "delete"),
        ]
    )
    rows = pa.concat_tables([target.filter(keep), post])
    return FileMerge(rows, changes, matched, updates.num_rows, deletes.num_rows)


def inserted(source: pa.Table, matched: Sequence[pa.Array]) -> pa.Table:
    """The source rows whose key no file holds (``matched``: those some file holds), deletes left
    out: what the MERGE inserts."""
    at = pa.array(range(source.num_rows), pa.int64())
    held = pa.concat_arrays(list(matched)) if matched else pa.array([], pa.int64())
    new = pc.and_(pc.invert(pc.is_in(at, value_set=held)), pc.not_equal(source.column("_op"), "d"))
    return source.filter(new)


def _source_keys(source: pa.Table, key: list[str]) -> pa.Table:
    return pa.table(
        {
            **{k: source.column(k) for k in key},
            "_s_seq": source.column(SEQ),
            "_s_op": source.column("_op"),
            _S: pa.array(range(source.num_rows), pa.int64()),
        }
    )


def typed(rows: pa.Table, change: str) -> pa.Table:
    return rows.append_column(CHANGE_TYPE, pa.array([change] * rows.num_rows, pa.string()))


def touched(files: Sequence[dict[str, Any]], column: str, keys: pa.Array) -> list[dict[str, Any]]:
    """The files (``add`` actions) that may hold one of ``keys`` (integers, of the key's one
    ``column``) by their statistics; a file without bounds may hold any, and every file may hold a
    key of another type (a string's bounds are prefixes)."""
    if not pa.types.is_integer(keys.type):
        return list(files)
    ordered = sorted(k for k in keys.to_pylist() if k is not None)
    out = []
    for f in files:
        stats = json.loads(f.get("stats") or "{}")
        low = stats.get("minValues", {}).get(column)
        high = stats.get("maxValues", {}).get(column)
        if not isinstance(low, int) or not isinstance(high, int):
            out.append(f)
            continue
        at = bisect.bisect_left(ordered, low)
        if at < len(ordered) and ordered[at] <= high:
            out.append(f)
    return out


def meeting(keys: pa.Table, source: pa.Table, key: Sequence[str]) -> tuple[pa.Array, bool]:
    """Of a file's keys and ``_seq``: the source rows whose key it holds, and whether one of them
    applies (over an older ``_seq``), so that the file is rewritten."""
    pairs = keys.join(_source_keys(source, list(key)), keys=list(key), join_type="inner")
    applies = pc.any(pc.greater(pairs.column("_s_seq"), pairs.column(SEQ))).as_py()
    return pairs.column(_S).combine_chunks(), bool(applies)
