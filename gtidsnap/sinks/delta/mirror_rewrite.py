"""A mirror's MERGE of its waiting changes done in this process, as Delta's MERGE does it, without
a Spark job: the data files that hold a changed key are read by pyarrow, written again with the
changes applied (newest ``_seq`` wins, as in :func:`gtidsnap.sinks.delta.tables.merge_newest`), and
swapped in one commit through Delta's transaction API (the old files removed, the new ones added,
the Change Data Feed rows in a ``_change_data`` file), with the batch's ``txn`` and user metadata.

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
import time
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
from gtidsnap.sinks.delta.file_commits import delta_actions, holds_plan, write_data_file
from gtidsnap.sinks.delta.file_merge import CHANGE_TYPE, inserted, meeting, merged_file, touched, typed
from gtidsnap.sinks.delta.mirror_files import PIECE_ROWS
from gtidsnap.sinks.delta.staged_frames import spark_schema
from gtidsnap.sinks.delta.staging import output_filesystem
from gtidsnap.sinks.delta.util import USER_METADATA
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
MERGE_METRICS = (  # reported 0 unless counted
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetRowsCopied",
    "numTargetRowsNotMatchedBySourceUpdated",
    "numTargetRowsNotMatchedBySourceDeleted",
    "numTargetDeletionVectorsAdded",
    "numTargetDeletionVectorsRemoved",
    "numTargetDeletionVectorsUpdated",
    "scanTimeMs",
    "materializeSourceTimeMs",
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
    jvm: Any = spark._jvm
    app_id, version, meta = commit
    result: list[Rewrite | None] = [None]

    def attempt() -> None:
        started = _now_ms()
        txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path).startTransaction()
        if not _plain(txn, plan):
            return
        actions: list[dict[str, Any]] = []
        if version is not None:
            if txn.txnVersion(app_id) >= version:
                result[0] = Rewrite(0, 0, 0, 0)
                return
            actions.append({"txn": {"appId": app_id, "version": version, "lastUpdated": _now_ms()}})
        txn.readWholeTable()  # any commit in between (OPTIMIZE, say) conflicts: this one is done again
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
        m: Counter[str] = Counter()  # what Delta's MERGE reports of itself (its operationMetrics)
        now = _now_ms()
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
            actions.append(_remove(old, now))
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
                actions.append(
                    {"cdc": {"path": cdc.name, "partitionValues": {}, "size": cdc.size, "dataChange": False}}
                )
                m["numTargetChangeFilesAdded"] += 1
        m["numSourceRows"] = m["operationNumSourceRows"] = source.num_rows
        m["numTargetRowsMatchedUpdated"] = m["numTargetRowsUpdated"]
        m["numTargetRowsMatchedDeleted"] = m["numTargetRowsDeleted"]
        m["executionTimeMs"] = m["rewriteTimeMs"] = _now_ms() - started
        _register_metrics(spark, txn, m)
        crash_point("delta-mirror-rewritten")  # files written, never committed: no reader sees them
        _commit_as_merge(spark, txn, actions, meta)
        rewritten_files = m["numTargetFilesRemoved"]
        result[0] = Rewrite(
            rewritten_files, m["numTargetRowsUpdated"], m["numTargetRowsDeleted"], inserts.num_rows
        )

    retry_conflicts(attempt, path)
    return result[0]


def _files(path: str, txn: Any) -> list[dict[str, Any]] | None:
    """The table's files as of the transaction's snapshot (``add`` actions), None past
    :data:`TABLE_FILES`: from the version's checksum file where Delta wrote them in it (its optional
    ``allFiles``, kept for small tables), else by the snapshot's Spark job."""
    snapshot = txn.snapshot()
    filesystem, base = output_filesystem(path)
    try:
        name = f"{base.rstrip('/')}/_delta_log/{int(snapshot.version()):020d}.crc"
        with filesystem.open_input_stream(name) as stream:
            checksum = json.loads(stream.read())
        if isinstance(checksum.get("allFiles"), list) and checksum.get("numFiles") == len(
            checksum["allFiles"]
        ):
            return list(checksum["allFiles"])
    except (OSError, ValueError):
        pass  # no checksum file (not written, or cleaned up): the snapshot lists them
    if snapshot.numOfFiles() > TABLE_FILES:
        return None
    return [json.loads(j) for j in snapshot.allFiles().toJSON().collectAsList()]


def _remove(add: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """The ``remove`` action of a file the commit replaces."""
    return {
        "remove": {
            "path": add["path"],
            "deletionTimestamp": now_ms,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": {},
            "size": add["size"],
            **{k: add[k] for k in ("stats", "tags") if add.get(k) is not None},
        }
    }


def _commit_as_merge(
    spark: SparkSession, txn: Any, actions: list[dict[str, Any]], meta: dict[str, Any]
) -> None:
    """Commit ``actions`` as a MERGE tagged with ``meta``. A MERGE's user metadata can only come from
    the settings of the JVM thread's active session (the operation has no field for it): ``spark``
    (a background thread's own session) is made active for the commit, and both are restored after."""
    jvm: Any = spark._jvm
    sessions = jvm.org.apache.spark.sql.SparkSession
    before = sessions.getActiveSession()
    conf = spark.conf
    held = conf.get(USER_METADATA, None)
    sessions.setActiveSession(spark._jsparkSession)
    conf.set(USER_METADATA, json.dumps(meta))
    try:
        txn.commit(delta_actions(spark, actions), _merge_operation(spark))
    finally:
        if held is None:
            conf.unset(USER_METADATA)
        else:
            conf.set(USER_METADATA, held)
        if before.isDefined():
            sessions.setActiveSession(before.get())
        else:
            sessions.clearActiveSession()


def _register_metrics(spark: SparkSession, txn: Any, values: Counter[str]) -> None:
    """The rewrite's figures as the SQL metrics a MERGE commit reports in the table's history (Delta
    requires some of them for a MERGE; the others are read as 0)."""
    jvm: Any = spark._jvm
    create = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric
    metrics = {}
    for name in (*MERGE_METRICS, *values):
        metric = create(spark.sparkContext._jsc.sc(), name)
        metric.set(int(values.get(name, 0)))
        metrics[name] = metric
    txn.registerSQLMetrics(
        spark._jsparkSession, jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(metrics)
    )


def _merge_operation(spark: SparkSession) -> Any:
    """A ``MERGE`` in the table's history, as the Spark MERGE it replaces (its predicates unnamed)."""
    jvm: Any = spark._jvm
    none = jvm.scala.Option.empty()
    empty = jvm.scala.jdk.javaapi.CollectionConverters.asScala(jvm.java.util.ArrayList()).toList()
    return jvm.org.apache.spark.sql.delta.DeltaOperations.Merge(none, none, none, none, empty, empty, empty)


def _plain(txn: Any, plan: ColumnPlan) -> bool:
    """Whether the mirror's files can be rewritten as plain Parquet of ``plan``'s columns: its schema
    (as of the transaction, not as cached) is the plan's, no partitions, no constraints, Change Data
    Feed on, and no table feature this module does not keep (deletion vectors, column mapping, row
    tracking: what the sink creates has none)."""
    from pyspark.sql import types as T

    metadata = txn.metadata()
    schema = T.StructType.fromJson(json.loads(metadata.schemaString()))
    if not holds_plan(schema, spark_schema(plan)) or not metadata.partitionColumns().isEmpty():
        return False
    conf = {str(k): str(v) for k, v in json.loads(metadata.json())["metaData"]["configuration"].items()}
    if conf.get("delta.enableChangeDataFeed", "").lower() != "true" or conf.get("delta.appendOnly") == "true":
        return False
    if any(k.startswith("delta.constraints.") for k in conf):
        return False
    protocol = json.loads(txn.protocol().json())["protocol"]
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


def _now_ms() -> int:
    return int(time.time() * 1000)
