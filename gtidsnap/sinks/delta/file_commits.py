"""Rows written as a Delta table's own data files by pyarrow, then committed to the table's log as they
are, through Delta's own transaction API (``DeltaLog.startTransaction().commit``, reached over Py4J by
:mod:`.jvm_delta`; taken only on the Delta version gtidsnap was tested with: see
:class:`.tables.DeltaTables`'s ``by_files``).

Why: a Spark append of rows that are already columns in this process (staged snapshot rows, read back
from Parquet) costs the JVM a job that turns every row into Spark's row format and encodes it again
(~15 CPU-s a million rows here), while pyarrow writes the same Parquet in ~0.6 s of one thread. A
table's log only needs the files' names, sizes and statistics: the commit is Delta's, with its
conflict checks, its ``txn`` action (idempotent per app id and version, as Spark's ``txnAppId``) and
its ``commitInfo`` (a ``WRITE`` with the batch's user metadata, read by recovery like any other).

A file is written under the table's folder before its commit; a crash in between leaves a file the
log never names, which no reader sees and ``VACUUM`` removes.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gtidsnap.sinks.delta.jvm_delta import AddAction, DeltaTransaction, Transaction
from gtidsnap.sinks.delta.staging import output_filesystem
from gtidsnap.sinks.delta.writes import retry_conflicts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T

ROW_GROUP_ROWS = 32_768  # rows of a data file's row group at least (written from smaller parts; 131,072
# held a snapshot's end ~15 MB larger)
STRING_STATS_CHARS = 32  # Delta's own prefix length of a string's statistics; longer ones are left out


@dataclass(frozen=True)
class DataFile:
    """A Parquet file written under a table's folder, not yet in its log: its name relative to the
    table, its size and time, and its statistics (Delta's ``stats`` JSON)."""

    name: str
    size: int
    modified_ms: int
    stats: str
    rows: int

    def add_action(self) -> AddAction:
        return AddAction(self.name, self.size, self.modified_ms, self.stats)


def holds_plan(table: T.StructType | None, mirror: T.StructType) -> bool:
    """Whether a mirror whose schema is ``table`` takes files of ``mirror``'s columns as they are (the
    same names and types: no column to add or widen, which only a Spark write evolves)."""
    if table is None:
        return False
    have = {f.name.casefold(): f.dataType for f in table.fields}
    want = {f.name.casefold(): f.dataType for f in mirror.fields}
    return have == want


def write_data_file(
    table_path: str,
    parts: Iterable[pa.Table],
    schema: pa.Schema,
    stats_columns: Sequence[str],
    kind: str = "part",
) -> DataFile | None:
    """``parts`` (in the table's physical ``schema``) as one new data file of the table at
    ``table_path``, written part by part (a file's rows are never all in memory); None: no row.
    ``kind`` ``cdc``: a Change Data Feed file, under the table's ``_change_data`` folder."""
    filesystem, base = output_filesystem(table_path)
    name = f"{'_change_data/' if kind == 'cdc' else ''}{kind}-00000-{uuid.uuid4()}-c000.snappy.parquet"
    if kind == "cdc":
        filesystem.create_dir(f"{base.rstrip('/')}/_change_data", recursive=True)
    path = f"{base.rstrip('/')}/{name}"
    stats = FileStats(stats_columns)
    with (
        filesystem.open_output_stream(path) as stream,
        pq.ParquetWriter(stream, schema, compression="snappy", **_encoding(schema, stats_columns)) as writer,
    ):
        held: list[pa.Table] = []  # parts gathered into a row group of ROW_GROUP_ROWS
        for part in itertools.chain(parts, [None]):
            if part is not None and part.num_rows:
                held.append(part)
                stats.add(part)
            if held and (part is None or sum(t.num_rows for t in held) >= ROW_GROUP_ROWS):
                writer.write_table(pa.concat_tables(held) if len(held) > 1 else held[0])
                held = []
    if not stats.rows:
        filesystem.delete_file(path)
        return None
    info = filesystem.get_file_info(path)
    modified = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else int(time.time() * 1000)
    return DataFile(name, int(info.size or 0), modified, json.dumps(stats.as_delta()), stats.rows)


def _encoding(schema: pa.Schema, stats_columns: Sequence[str]) -> dict[str, Any]:
    """Parquet's dictionaries only where a column has a few values (``_op``), its statistics only on
    the columns readers filter by: pyarrow then writes 2-3x faster, the file ~25% larger."""
    names = set(schema.names)
    return {
        "use_dictionary": [c for c in ("_op",) if c in names],
        "write_statistics": [c for c in stats_columns if c in names],
    }


def file_stats(rows: pa.Table, columns: Sequence[str]) -> dict[str, Any]:
    """Delta's statistics of a file of ``rows`` (see :class:`FileStats`)."""
    stats = FileStats(columns)
    stats.add(rows)
    return stats.as_delta()


class FileStats:
    """Delta's statistics of a file written part by part: its row count, and the bounds and NULL count
    of ``columns`` where they are integers or short strings (a column without bounds lets no reader
    skip the file by it; a string longer than Delta's own prefix would need its truncation rules)."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self.rows = 0
        self.low: dict[str, Any] = {}
        self.high: dict[str, Any] = {}
        self.nulls: dict[str, int] = {}
        self.unbounded: set[str] = set()

    def add(self, part: pa.Table) -> None:
        self.rows += part.num_rows
        for name in self.columns:
            if name not in part.column_names:
                continue
            column = part.column(name)
            if not (pa.types.is_integer(column.type) or pa.types.is_string(column.type)):
                continue
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            if column.null_count == len(column):
                continue
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if isinstance(low, str) and max(len(low), len(high)) > STRING_STATS_CHARS:
                self.unbounded.add(name)
            self.low[name] = low if name not in self.low else min(self.low[name], low)
            self.high[name] = high if name not in self.high else max(self.high[name], high)

    def as_delta(self) -> dict[str, Any]:
        bounded = [name for name in self.low if name not in self.unbounded]
        return {
            "numRecords": self.rows,
            "minValues": {name: self.low[name] for name in bounded},
            "maxValues": {name: self.high[name] for name in bounded},
            "nullCount": dict(self.nulls),
        }


def commit_files(
    spark: SparkSession,
    table_path: str,
    files: Sequence[DataFile],
    app_id: str,
    version: int | None,
    meta: dict[str, Any],
) -> bool:
    """APPEND ``files`` to the table in one commit tagged with ``meta``; with a ``version``, idempotent
    for ``app_id`` (False: a commit of that version or a later one is already in the log)."""
    done = False

    def commit() -> None:
        nonlocal done
        txn = DeltaTransaction(spark, table_path)
        app = None
        if version is not None:
            if txn.transaction_version(app_id) >= version:
                return
            app = Transaction(app_id, version)
        txn.commit([f.add_action() for f in files], "WRITE", meta, app)
        done = True

    retry_conflicts(commit, table_path)
    return done
