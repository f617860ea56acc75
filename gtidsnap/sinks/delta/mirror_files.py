"""A fresh mirror's APPEND of staged snapshot rows as its own data files: each batch's staged file read
back by pyarrow, the keys with a newer change left out (that change goes in instead, a delete nowhere:
a fresh mirror does not hold the key), written under the mirror's folder and committed in one Delta
transaction (:mod:`gtidsnap.sinks.delta.file_commits`). No Spark job: the rows never pass through the
JVM (a Spark append of the same rows cost ~15 CPU-s a million here). Splits staged by remote readers
stay Spark's (their rows never come into the driver's Python)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.sinks.delta.change_rows import conformed, matching, plan_schema
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.file_commits import commit_files, write_data_file
from gtidsnap.sinks.delta.staging import StagedFile

PIECE_ROWS = 131_072  # rows of a staged file in memory at once

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql import types as T


def holds_plan(table: T.StructType | None, mirror: T.StructType) -> bool:
    """Whether a mirror whose schema is ``table`` takes files of ``mirror``'s columns as they are (the
    same names and types: no column to add or widen, which only a Spark write evolves)."""
    if table is None:
        return False
    have = {f.name.casefold(): f.dataType for f in table.fields}
    want = {f.name.casefold(): f.dataType for f in mirror.fields}
    return have == want


def staged_mirror_rows(staged: StagedFile, plan: ColumnPlan) -> Iterator[pa.Table]:
    """A batch's staged file (its meta columns written with it) as the mirror's rows in ``plan``, a
    piece at a time."""
    for batch in pq.ParquetFile(staged.path).iter_batches(batch_size=PIECE_ROWS):
        yield conformed(pa.Table.from_batches([batch]), plan, changelog=False)


def append_staged_files(
    spark: SparkSession,
    path: str,
    staged: Sequence[StagedFile],
    changes: pa.Table | None,
    plan: ColumnPlan,
    key: Sequence[str],
    stats_columns: Sequence[str],
    commit: tuple[str, int | None, dict[str, Any]],
) -> int:
    """APPEND ``staged`` and the mirror rows of ``changes`` (newer than the staged rows of their keys,
    or of keys the mirror cannot hold; deletes left out) into the fresh mirror at ``path`` in one
    commit (``commit``: app id, txn version or None, user metadata); the rows appended."""
    changed = None if changes is None or not changes.num_rows else changes.select(list(key))
    schema = plan_schema(plan, changelog=False)
    parts: list[Iterable[pa.Table]] = []
    for one in staged:
        rows = staged_mirror_rows(one, plan)
        # a deleted key's staged row goes too
        parts.append(rows if changed is None else (matching(p, changed, key, keep=False) for p in rows))
    if changes is not None:
        parts.append([conformed(changes.filter(pc.not_equal(changes.column("_op"), "d")), plan, False)])
    files = [write_data_file(path, part, schema, stats_columns) for part in parts]
    written = [f for f in files if f is not None]
    crash_point("delta-mirror-files-written")
    app_id, version, meta = commit
    commit_files(spark, path, written, app_id, version, meta)
    return sum(f.rows for f in written)
