"""A mirror's MERGE of its waiting changes done in this process, as Delta's MERGE does it, without
a Spark job: the data files that hold a changed key are read by pyarrow, written again with the
changes applied (newest ``_seq`` wins, as in :func:`gtidsnap.sinks.delta.tables.merge_newest`), and
swapped in one commit through Delta's transaction API (the old files removed, the new ones added,
the Change Data Feed rows in a ``_change_data`` file), with the batch's ``txn`` and user metadata.

Why: Spark's MERGE of 10,000 changes into a 10,000-row mirror costs 2.4-3.2 s warm and ~10 s of a
core the first time in a JVM (planning and compiling its jobs), taken from the stream's decoding on a
two-core machine; this costs a read and a write of the touched files (~0.1 s for that mirror) and a
commit. It is used where it is exact and small: the mirror's columns are the changes' (no schema
evolution), no deletion vectors, no partitions, no column mapping, and the files holding the changed
keys (found by the key's file statistics) are at most :data:`REWRITE_BYTES`. Elsewhere Spark MERGEs.
A crash before the commit leaves files the log never names, as any failed Delta write does.
"""

from __future__ import annotations

import bisect
import json
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gtidsnap.sinks.delta.change_rows import SEQ, conformed, plan_schema
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.file_commits import delta_actions, write_data_file, write_operation
from gtidsnap.sinks.delta.staging import output_filesystem
from gtidsnap.sinks.delta.writes import retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REWRITE_BYTES = 64 * 1024 * 1024  # the touched files' size at most (their rows are read into memory)
REWRITE_FILES = 64  # and their number
CHANGE_TYPE = "_change_type"
_T, _S = "_gtidsnap_t", "_gtidsnap_s"


@dataclass(frozen=True)
class Merged:
    """What a MERGE makes of the touched files' rows: the rows of the files it replaces (with the
    inserted rows), the Change Data Feed rows, and which files are replaced."""

    rows: pa.Table
    changes: pa.Table
    rewritten: frozenset[int]
    updated: int
    deleted: int
    inserted: int


def merged(target: pa.Table, file_of: pa.Array, source: pa.Table, key: Sequence[str]) -> Merged:
    """The MERGE of ``source`` (one row a key, with ``_op`` and ``_seq``) into ``target`` (the rows
    of the touched files, ``file_of`` each row's file): a key's change applies over an older ``_seq``
    only, a delete removes the row, a change of a key not in ``target`` inserts it (a delete: nothing).
    Only files with a row updated or deleted are rewritten."""
    key = list(key)
    t = target.select([*key, SEQ]).append_column(_T, pa.array(range(target.num_rows), pa.int64()))
    s = pa.table(
        {
            **{k: source.column(k) for k in key},
            "_s_seq": source.column(SEQ),
            "_s_op": source.column("_op"),
            _S: pa.array(range(source.num_rows), pa.int64()),
        }
    )
    pairs = t.join(s, keys=key, join_type="inner")
    applied = pairs.filter(pc.greater(pairs.column("_s_seq"), pairs.column(SEQ)))
    is_delete = pc.equal(applied.column("_s_op"), "d")
    deletes = applied.filter(is_delete)
    updates = applied.filter(pc.invert(is_delete))
    unmatched = pc.invert(pc.is_in(s.column(_S), value_set=pairs.column(_S)))
    inserts = s.filter(pc.and_(unmatched, pc.not_equal(s.column("_s_op"), "d"))).column(_S)
    replaced = applied.column(_T)
    rewritten = frozenset(pc.unique(pc.take(file_of, replaced)).to_pylist())
    in_rewritten = pc.is_in(file_of, value_set=pa.array(sorted(rewritten), file_of.type))
    keep = pc.and_(in_rewritten, pc.invert(pc.is_in(t.column(_T), value_set=replaced.combine_chunks())))
    post = source.take(updates.column(_S))
    rows = pa.concat_tables([target.filter(keep), post, source.take(inserts)])
    changes = pa.concat_tables(
        [
            _typed(target.take(updates.column(_T)), "update_preimage"),
            _typed(post, "update_postimage"),
            _typed(target.take(deletes.column(_T)), "delete"),
            _typed(source.take(inserts), "insert"),
        ]
    )
    return Merged(rows, changes, rewritten, updates.num_rows, deletes.num_rows, len(inserts))


def _typed(rows: pa.Table, change: str) -> pa.Table:
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


def rewrite_merge(
    spark: SparkSession,
    path: str,
    source: pa.Table,
    key: Sequence[str],
    plan: ColumnPlan,
    stats_columns: Sequence[str],
    commit: tuple[str, int | None, dict[str, Any]],
) -> Merged | None:
    """MERGE ``source`` (the mirror's columns of ``plan``, one row a key) into the mirror at ``path``
    by rewriting the files it touches, in one commit (``commit``: app id, txn version or None, user
    metadata). None: not for this mirror (see the module docstring); the caller MERGEs in Spark."""
    jvm: Any = spark._jvm
    app_id, version, meta = commit
    result: list[Merged | None] = [None]

    def attempt() -> None:
        txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
        if not _plain(txn):
            return
        actions: list[dict[str, Any]] = []
        if version is not None:
            if txn.txnVersion(app_id) >= version:
                result[0] = Merged(source.slice(0, 0), source.slice(0, 0), frozenset(), 0, 0, 0)
                return
            actions.append({"txn": {"appId": app_id, "version": version, "lastUpdated": _now_ms()}})
        txn.readWholeTable()  # any commit in between (OPTIMIZE, say) conflicts: this one is redone
        files = [json.loads(j) for j in txn.snapshot().allFiles().toJSON().collectAsList()]
        if any(f.get("deletionVector") or ":" in f["path"] or f["path"].startswith("/") for f in files):
            return  # a file with deleted rows marked, or outside the table's folder (a clone's)
        found = touched(files, key[0], source.column(key[0]).combine_chunks()) if len(key) == 1 else files
        if len(found) > REWRITE_FILES or sum(f["size"] for f in found) > REWRITE_BYTES:
            return
        target, file_of = _read(path, found, plan)
        done = merged(target, file_of, source, key)
        physical = plan_schema(plan, changelog=False)
        new = write_data_file(path, [done.rows], physical, stats_columns) if done.rows.num_rows else None
        cdc = (
            write_data_file(
                path, [done.changes], physical.append(pa.field(CHANGE_TYPE, pa.string())), [], "cdc"
            )
            if done.changes.num_rows
            else None
        )
        now = _now_ms()
        for i in sorted(done.rewritten):
            old = found[i]
            actions.append(
                {
                    "remove": {
                        "path": old["path"],
                        "deletionTimestamp": now,
                        "dataChange": True,
                        "extendedFileMetadata": True,
                        "partitionValues": {},
                        "size": old["size"],
                    }
                }
            )
        if new is not None:
            actions.append(new.add_action())
        if cdc is not None:
            actions.append(
                {"cdc": {"path": cdc.name, "partitionValues": {}, "size": cdc.size, "dataChange": False}}
            )
        txn.commit(delta_actions(spark, actions), write_operation(spark, meta))
        result[0] = done

    retry_conflicts(attempt, path)
    return result[0]


def _plain(txn: Any) -> bool:
    """Whether the mirror's files can be rewritten as plain Parquet of its columns: no partitions, no
    column mapping, no deletion vectors, and Change Data Feed on (what the sink creates)."""
    metadata = txn.metadata()
    conf = {
        k: metadata.configuration().get(k)
        for k in ("delta.enableDeletionVectors", "delta.columnMapping.mode", "delta.enableChangeDataFeed")
    }
    value = {k: (str(v.get()).lower() if v.isDefined() else "") for k, v in conf.items()}
    return (
        metadata.partitionColumns().isEmpty()
        and value["delta.enableDeletionVectors"] != "true"
        and value["delta.columnMapping.mode"] in ("", "none")
        and value["delta.enableChangeDataFeed"] == "true"
    )


def _read(path: str, files: Sequence[dict[str, Any]], plan: ColumnPlan) -> tuple[pa.Table, pa.Array]:
    """The rows of ``files`` in the mirror's columns (Spark's INT96 times, a column a file lacks
    NULL), and each row's file (its index in ``files``)."""
    filesystem, base = output_filesystem(path)
    parts = []
    for f in files:
        name = urllib.parse.unquote(f["path"])
        with filesystem.open_input_file(f"{base.rstrip('/')}/{name}") as stream:
            parts.append(conformed(pq.read_table(stream), plan, changelog=False))
    file_of = pa.array([i for i, p in enumerate(parts) for _ in range(p.num_rows)], pa.int32())
    rows = pa.concat_tables(parts) if parts else plan_schema(plan, changelog=False).empty_table()
    return rows, file_of


def _now_ms() -> int:
    return int(time.time() * 1000)
