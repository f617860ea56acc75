"""A mirror's MERGE of its waiting changes done in this process, as Delta's MERGE does it, without
a Spark job: the data files that hold a changed key are read by pyarrow, written again with the
changes applied (newest ``_seq`` wins, as in :func:`gtidsnap.sinks.delta.tables.merge_newest`), and
swapped in one commit through Delta's transaction API (:mod:`.jvm_delta`: the old files removed, the
new ones added, the Change Data Feed rows in a ``_change_data`` file), with the batch's ``txn`` and user
metadata. Taken only on the Delta version gtidsnap was tested with (the caller's choice, by
:meth:`.tables.DeltaTables.takes_files`).

Why: Spark's MERGE of 10,000 changes into a 10,000-row mirror costs 2.4-3.2 s warm and ~10 s of a
core the first time in a JVM (planning and compiling its jobs), taken from the stream's decoding on a
two-core machine; this costs a read and a write of the touched files (~0.1 s for that mirror) and a
small Spark job listing the table's files. It is used where it is exact and small: the mirror's
columns are the changes' (no schema evolution), no deletion vectors, no partitions, no column
mapping, and the files that may hold a changed key (by the key's file statistics) are at most
:data:`REWRITE_FILES` and :data:`REWRITE_BYTES` (read and written a piece at a time: a file's rows
are never all in memory). Elsewhere Spark MERGEs. A crash before the commit
leaves files the log never names, as any failed Delta write does.
"""

from __future__ import annotations

import json
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.sinks.delta.change_rows import SEQ, conformed, plan_schema
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.file_commits import holds_plan, write_data_file
from gtidsnap.sinks.delta.jvm_delta import (
    Action,
    CdcAction,
    DeltaTransaction,
    RemoveAction,
    Transaction,
    now_ms,
)
from gtidsnap.sinks.delta.mirror.file_appends import PIECE_ROWS
from gtidsnap.sinks.delta.mirror.file_merge import CHANGE_TYPE, inserted, meeting, merged_file, touched, typed
from gtidsnap.sinks.delta.staged_frames import spark_schema
from gtidsnap.sinks.delta.staging import output_filesystem
from gtidsnap.sinks.delta.writes import retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REWRITE_BYTES = 256 * 1024 * 1024  # the touched files' size at most (Spark MERGEs larger ones in parallel)
REWRITE_FILES = 64  # and their number
TABLE_FILES = 10_000  # the table's files at most
PLAIN_FEATURES = frozenset(  # writer features a rewrite keeps (any other: Spark MERGEs)
    {
        "appendOnly",  # the feature, not the property (checked apart)
        "changeDataFeed",
        "invariants",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "domainMetadata",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "checkpointProtection",
        "inCommitTimestamp",
    }
)


@dataclass(frozen=True)
class Rewrite:
    """What a rewrite did: the files it replaced and the rows it updated, deleted and inserted."""

    rewritten: int
    updated: int
    deleted: int
    inserted: int


def rewrite_merge(
    spark: SparkSession,
    path: str,
    source: pa.Table,
    key: Sequence[str],
    plan: ColumnPlan,
    stats_columns: Sequence[str],
    commit: tuple[str, int | None, dict[str, Any]],
) -> Rewrite | None:
    """MERGE ``source`` (the mirror's columns of ``plan``, one row a key) into the mirror at ``path``
    by rewriting the files it touches, one at a time, in one commit (``commit``: app id, txn version
    or None, user metadata). None: not for this mirror (see the module docstring); the caller MERGEs
    in Spark."""
    app_id, version, meta = commit
    result: list[Rewrite | None] = [None]

    def attempt() -> None:
        started = now_ms()
        txn = DeltaTransaction(spark, path)
        if not _plain(txn, plan):
            return
        app = None
        if version is not None:
            if txn.transaction_version(app_id) >= version:
                result[0] = Rewrite(0, 0, 0, 0)
                return
            app = Transaction(app_id, version)
        txn.read_whole_table()  # any commit in between (OPTIMIZE, say) conflicts: this one is done again
        files = _files(path, txn)
        if files is None:
            return  # too many to bring into Python
        if any(f.get("deletionVector") or ":" in f["path"] or f["path"].startswith("/") for f in files):
            return  # a file with deleted rows marked, or outside the table's folder (a clone's)
        found = touched(files, key[0], source.column(key[0]).combine_chunks()) if len(key) == 1 else files
        sizes = [int(f["size"]) for f in found]
        if len(found) > REWRITE_FILES or sum(sizes) > REWRITE_BYTES:
            return
        physical = plan_schema(plan, changelog=False)
        feed: list[pa.Table] = []
        matched: list[pa.Array] = []
        actions: list[Action] = []
        m: Counter[str] = Counter()  # what Delta's MERGE reports of itself (its operationMetrics)
        now = now_ms()
        for old in found:
            met, applies = meeting(_read_keys(path, old, physical, key), source, key)
            matched.append(met)
            if not applies:
                continue

            def rewritten(old: dict[str, Any] = old) -> Iterator[pa.Table]:
                for piece in _pieces(path, old, plan):
                    done = merged_file(piece, source, key)
                    if done.rows is None:
                        m["numTargetRowsCopied"] += piece.num_rows
                        yield piece
                        continue
                    m["numTargetRowsCopied"] += done.rows.num_rows - done.updated
                    m["numTargetRowsUpdated"] += done.updated
                    m["numTargetRowsDeleted"] += done.deleted
                    feed.append(done.changes)
                    yield done.rows

            new = write_data_file(path, rewritten(), physical, stats_columns)
            actions.append(RemoveAction.of(old, now))
            m["numTargetFilesRemoved"] += 1
            m["numTargetBytesRemoved"] += int(old["size"])
            if new is not None:
                actions.append(new.add_action())
                m["numTargetFilesAdded"] += 1
                m["numTargetBytesAdded"] += new.size
        inserts = inserted(source, matched)
        if inserts.num_rows:
            new = write_data_file(path, [inserts], physical, stats_columns)
            assert new is not None
            actions.append(new.add_action())
            feed.append(typed(inserts, "insert"))
            m["numTargetRowsInserted"] += inserts.num_rows
            m["numTargetFilesAdded"] += 1
            m["numTargetBytesAdded"] += new.size
        if feed:
            cdc_schema = physical.append(pa.field(CHANGE_TYPE, pa.string()))
            cdc = write_data_file(path, feed, cdc_schema, [], kind="cdc")
            if cdc is not None:
                actions.append(CdcAction(cdc.name, cdc.size))
                m["numTargetChangeFilesAdded"] += 1
        m["numSourceRows"] = m["operationNumSourceRows"] = source.num_rows
        m["numTargetRowsMatchedUpdated"] = m["numTargetRowsUpdated"]
        m["numTargetRowsMatchedDeleted"] = m["numTargetRowsDeleted"]
        m["executionTimeMs"] = m["rewriteTimeMs"] = now_ms() - started
        crash_point("delta-mirror-rewritten")  # files written, never committed: no reader sees them
        txn.commit(actions, "MERGE", meta, app, metrics=m)
        rewritten_files = m["numTargetFilesRemoved"]
        result[0] = Rewrite(
            rewritten_files, m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], inserts.num_rows
        )

    retry_conflicts(attempt, path)
    return result[0]


def _files(path: str, txn: DeltaTransaction) -> list[dict[str, Any]] | None:
    """The table's files as of the transaction's snapshot (``add`` actions), None past
    :data:`TABLE_FILES`: from the version's checksum file where Delta wrote them in it (its optional
    ``allFiles``, kept for small tables), else by the snapshot's Spark job."""
    filesystem, base = output_filesystem(path)
    try:
        name = f"{base.rstrip('/')}/_delta_log/{txn.version():020d}.crc"
        with filesystem.open_input_stream(name) as stream:
            checksum = json.loads(stream.read())
        if isinstance(checksum.get("allFiles"), list) and checksum.get("numFiles") == len(
            checksum["allFiles"]
        ):
            return list(checksum["allFiles"])
    except (OSError, ValueError):
        pass  # no checksum file (not written, or cleaned up): the snapshot lists them
    if txn.file_count() > TABLE_FILES:
        return None
    return txn.files()


def _plain(txn: DeltaTransaction, plan: ColumnPlan) -> bool:
    """Whether the mirror's files can be rewritten as plain Parquet of ``plan``'s columns: its schema
    (as of the transaction, not as cached) is the plan's, no partitions, no constraints, Change Data
    Feed on, and no table feature this module does not keep (deletion vectors, column mapping, row
    tracking: what the sink creates has none)."""
    from pyspark.sql import types as T

    metadata = txn.metadata()
    schema = T.StructType.fromJson(json.loads(metadata.schema_json))
    if not holds_plan(schema, spark_schema(plan)) or metadata.partition_columns:
        return False
    conf = metadata.configuration
    if conf.get("delta.enableChangeDataFeed", "").lower() != "true" or conf.get("delta.appendOnly") == "true":
        return False
    if any(k.startswith("delta.constraints.") for k in conf):
        return False
    protocol = txn.protocol()
    if protocol.get("minWriterVersion") != 7:
        return False  # a table of the sink's has its writer features listed
    return set(protocol.get("writerFeatures") or ()) <= PLAIN_FEATURES


def _read_keys(path: str, add: dict[str, Any], physical: pa.Schema, key: Sequence[str]) -> pa.Table:
    """A data file's key columns and ``_seq``, in the mirror's types."""
    names = [*key, SEQ]
    with _open(path, add) as stream:
        rows = pq.read_table(stream, columns=names, use_threads=False, coerce_int96_timestamp_unit="us")
    return rows.cast(pa.schema([physical.field(n) for n in names]))


def _pieces(path: str, add: dict[str, Any], plan: ColumnPlan) -> Iterator[pa.Table]:
    """A data file's rows in the mirror's columns (Spark's INT96 times cast, a column it lacks
    NULL), :data:`PIECE_ROWS` at a time: a file's rows are never all in memory."""
    with _open(path, add) as stream:
        data = pq.ParquetFile(stream, coerce_int96_timestamp_unit="us")
        for batch in data.iter_batches(batch_size=PIECE_ROWS, use_threads=False):
            yield conformed(pa.Table.from_batches([batch]), plan, changelog=False)


def _open(path: str, add: dict[str, Any]) -> Any:
    filesystem, base = output_filesystem(path)
    return filesystem.open_input_file(f"{base.rstrip('/')}/{urllib.parse.unquote(add['path'])}")
