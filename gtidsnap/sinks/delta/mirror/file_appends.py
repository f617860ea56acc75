"""A fresh mirror's APPEND of staged snapshot rows as its own data files: each batch's staged file read
back by pyarrow, the keys with a newer change left out (that change goes in instead, a delete nowhere:
a fresh mirror does not hold the key), written under the mirror's folder and committed in one Delta
transaction (:mod:`gtidsnap.sinks.delta.file_commits`). The rows never pass through the JVM (a Spark
append of the same rows cost ~15 CPU-s a million here). Splits staged by remote readers are made the
mirror's files by Spark tasks running the same code (a split a task): their rows never come into the
driver's Python, which commits what the tasks report."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.sinks.arrow_columns import POSITION, UTC_TS, kept_numbers
from gtidsnap.sinks.delta.change_rows import SEQ, conformed, matching, plan_schema
from gtidsnap.sinks.delta.columns import ColumnPlan
from gtidsnap.sinks.delta.file_commits import DataFile, commit_files, write_data_file
from gtidsnap.sinks.delta.staging import StagedFile

PIECE_ROWS = 32_768  # rows of a staged file in memory at once (read on the calling thread: Arrow's reading
# threads and pieces of a whole row group cost ~100 MB of RSS more per file being rewritten)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def staged_mirror_rows(staged: StagedFile, plan: ColumnPlan, changelog: bool = False) -> Iterator[pa.Table]:
    """A staged file's rows as the mirror's (``changelog``: the changelog's, a snapshot row each) rows
    in ``plan``, a piece at a time: a batch's file has its meta columns; a split's ``_seq`` is its
    ``first_seq`` + the row's position (a split staged before 2026-11-27: its kept rows numbered in
    order), its time its stamp, its dropped positions and those past ``positions`` left out (what
    :func:`~gtidsnap.sinks.delta.staged_frames.staged_frame` makes of it in Spark)."""
    dropped = pa.array(staged.dropped, pa.int64())
    for batch in pq.ParquetFile(staged.path).iter_batches(batch_size=PIECE_ROWS, use_threads=False):
        rows = pa.Table.from_batches([batch])
        if staged.split:
            position = rows.column(POSITION)
            keep = pc.and_(pc.less(position, staged.positions), pc.invert(pc.is_in(position, dropped)))
            rows = rows.filter(keep)
            position = rows.column(POSITION)
            if staged.by_position:
                seqs = pc.add(position, pa.scalar(staged.first_seq, pa.int64()))
            else:
                seqs = kept_numbers(position, staged.dropped, staged.first_seq)
            n = rows.num_rows
            stamp = pa.array([staged.source_ts * 1_000_000] * n, pa.int64()).cast(UTC_TS)
            rows = (
                rows.drop_columns([POSITION])
                .append_column(SEQ, seqs)
                .append_column("_op", pa.array(["r"] * n, pa.string()))
                .append_column("_gtid", pa.nulls(n, pa.string()))
                .append_column("_source_ts", stamp)
            )
        if changelog and "_snapshot" not in rows.column_names:
            rows = rows.append_column("_snapshot", pa.array([True] * rows.num_rows, pa.bool_()))
        yield conformed(rows, plan, changelog=changelog)


def mirror_file(
    path: str,
    staged: StagedFile,
    plan: ColumnPlan,
    changed: pa.Table | None,
    key: Sequence[str],
    stats_columns: Sequence[str],
) -> DataFile | None:
    """One staged file written as a data file of the mirror at ``path``, the rows of ``changed`` keys
    left out (a deleted key's staged row too); run by the sink, or by a Spark task for a split."""
    rows = staged_mirror_rows(staged, plan)
    parts = rows if changed is None else (_among(p, changed, key, keep=False) for p in rows)
    return write_data_file(path, parts, plan_schema(plan, changelog=False), stats_columns)


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
    jobs = [(path, one, plan, changed, list(key), list(stats_columns)) for one in staged if one.split]
    files = _on_executors(spark, jobs) if jobs else []
    local = [one for one in staged if not one.split]
    # one at a time: two at once (Arrow frees the GIL) ended a 1M-row snapshot ~0.3 s sooner, with the
    # engine's peak ~50 MB higher
    files += [mirror_file(path, one, plan, changed, key, stats_columns) for one in local]
    if changes is not None:
        rows = conformed(changes.filter(pc.not_equal(changes.column("_op"), "d")), plan, changelog=False)
        files.append(write_data_file(path, [rows], plan_schema(plan, changelog=False), stats_columns))
    written = [f for f in files if f is not None]
    crash_point("delta-mirror-files-written" if staged else "delta-new-keys-written")
    app_id, version, meta = commit
    commit_files(spark, path, written, app_id, version, meta)
    return sum(f.rows for f in written)


def _among(rows: pa.Table, keys: pa.Table, key: Sequence[str], keep: bool) -> pa.Table:
    """The rows of ``rows`` whose key is among ``keys`` (``keep``), or is not: a set lookup for a
    one-column key (a join and a sort cost ~3x more), :func:`change_rows.matching` otherwise."""
    if len(key) != 1:
        return matching(rows, keys, key, keep=keep)
    found = pc.is_in(rows.column(key[0]), value_set=keys.column(key[0]).combine_chunks())
    return rows.filter(found if keep else pc.invert(found))


def staged_meeting(
    staged: Sequence[StagedFile], key: Sequence[str], asked: pa.Table | None, held: pa.Table | None
) -> tuple[pa.Table | None, bool]:
    """What an update needs of the staged rows' keys, read a file at a time (a snapshot's keys are
    never all in memory at once): the keys and ``_seq`` of the rows whose key is among ``asked`` (the
    waiting changes'; None: none asked), and whether any of their keys is in ``held``."""
    met: list[pa.Table] = []
    held_met = False
    for one in staged:
        rows = staged_keys_of(one, key)
        if asked is not None and asked.num_rows:
            met.append(_among(rows, asked, key, keep=True))
        if held is not None and held.num_rows and not held_met:
            held_met = _among(rows.select(list(key)), held, key, keep=True).num_rows > 0
    if asked is None:
        return None, held_met
    return (pa.concat_tables(met) if met else None), held_met


def _on_executors(spark: SparkSession, jobs: list[tuple[Any, ...]]) -> list[DataFile | None]:
    """Splits made data files by Spark tasks, a split a task: their rows never come into the driver,
    which gets each file's name, size and statistics back."""
    return spark.sparkContext.parallelize(jobs, len(jobs)).map(_mirror_file_job).collect()


def _mirror_file_job(job: tuple[Any, ...]) -> DataFile | None:
    return mirror_file(*job)


def staged_keys_of(staged: StagedFile, key: Sequence[str]) -> pa.Table:
    """The key columns and ``_seq`` of a staged file's rows (of a split: the positions its windows
    kept, numbered from its ``first_seq`` by position)."""
    if not staged.split:
        return pq.read_table(staged.path, columns=[*key, SEQ])
    rows = pq.read_table(staged.path, columns=[*key, POSITION])
    position = rows.column(POSITION)
    if staged.dropped or staged.positions < rows.num_rows:
        dropped = pc.is_in(position, pa.array(staged.dropped, pa.int64()))
        rows = rows.filter(pc.and_(pc.less(position, staged.positions), pc.invert(dropped)))
    position = rows.column(POSITION)
    if staged.by_position:
        seqs = pc.add(position, pa.scalar(staged.first_seq, pa.int64()))
    else:
        seqs = kept_numbers(position, staged.dropped, staged.first_seq)
    return rows.select(list(key)).append_column(SEQ, seqs)
