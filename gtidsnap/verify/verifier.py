"""``gtidsnap verify``: a source table on the replica compared with its Delta mirror, key range by key
range, while writers and gtidsnap may both be running.

How a range is compared at one consistent point: the replica's executed GTID set ``lw`` is read, then
the range's rows (a keyset SELECT, as a snapshot chunk is read). The output is then awaited until its
checkpoint has processed ``lw`` (and the changelog holds that checkpoint's batch), so the mirror
overlaid with the changelog's newer records (:func:`current_state`) holds every change up to ``lw``.
The keys of the range that changed after ``lw`` are those with a changelog record numbered at or above
the checkpoint's ``next_seq`` when verify began whose GTID is not in ``lw``: they are left out of the
comparison, as a snapshot window leaves out the keys that changed under it. Everything else must be
equal. Both sides are compared in the mirror's own types: the source's rows are rendered by the code
that renders a snapshot's chunks (:class:`gtidsnap.sinks.arrow_columns.ArrowRenderer`), so a value is
compared with itself for every type; the rule is :mod:`gtidsnap.verify.row_diff`.

Where the table allows it (:func:`gtidsnap.core.row_hash.hashable`) a range is first compared by its row
count and hash, computed by the server and by Spark over the mirror alike; only a range whose hashes
differ is read row by row. Ranges go 16 at a time: their hashes read, the output awaited once, the
mirror's hashes computed in one Spark job, the ranges that differ read row by row (up to 100,000 rows
at one point).

Keys that differ, that only the mirror has, or that changed during their range's read are read again
by key (a second consistent point) and compared again: a writer's change caught between two reads is
not reported, a real difference is. A key that changed both times is counted as not compared.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.errors import SinkError
from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.core.ports import CheckpointPort
from gtidsnap.core.row_hash import hashable
from gtidsnap.core.schema import TableSchema
from gtidsnap.sinks.arrow_columns import ArrowRenderer
from gtidsnap.sinks.delta.catch_up import current_state, mirror_staged_watermark, mirror_watermark, overlaid
from gtidsnap.sinks.delta.changelog_appends import holds_batch
from gtidsnap.sinks.delta.layout import changelog_path, mirror_path, recorded_key
from gtidsnap.sinks.delta.position import parse_position
from gtidsnap.verify.mirror_hashes import in_range, range_hashes
from gtidsnap.verify.row_diff import Difference, Key, diff_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from gtidsnap.source.replica import Replica
    from gtidsnap.source.result_rows import ChunkResult

log = logging.getLogger("gtidsnap.verify")

RANGE_ROWS = 50_000  # rows of a key range, read and compared at one point
RECHECK_AT_MOST = 10_000  # keys read again by key at most (the first ones found)
RECHECK_BATCH = 500  # keys a SELECT reads again
HASHED_AT_ONCE = 16  # ranges hashed before one wait for the output and one Spark job
ROWS_AT_ONCE = 100_000  # rows of the ranges whose hashes differ read and compared at one point, at most


@dataclass
class VerifyReport:
    """What verifying one table found."""

    table: TableId
    key: tuple[str, ...]
    source_rows: int = 0
    ranges: int = 0
    differences: list[Difference] = field(default_factory=list)
    changing: int = 0  # keys that changed while read, both times: not compared
    rechecked: int = 0
    by_hash: bool = False  # compared by range hashes (else row by row)
    read_ranges: int = 0  # ranges whose hashes differed: read row by row

    @property
    def same(self) -> bool:
        return not self.differences


class MirrorVerifier:
    """Compares source tables with their mirrors under the output at ``root`` (see the module
    docstring); ``store`` is the output's checkpoint, read to know how far the output has come."""

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        replica: Replica,
        store: CheckpointPort,
        range_rows: int = RANGE_ROWS,
        wait_s: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
        hashes: bool = True,
    ) -> None:
        self.spark, self.root, self.replica, self.store = spark, root, replica, store
        self.range_rows, self.wait_s, self.sleep = range_rows, wait_s, sleep
        self.hashes = hashes  # ranges compared by hash where the table allows it
        # read once per table: the mirror's key and a lower bound of its watermark (catch_up.overlaid) once
        # its changelog exists; the changelog batches seen committed (a commit is never taken back)
        self._overlay: dict[TableId, tuple[list[str] | None, int | None]] = {}
        self._held: set[tuple[TableId, int]] = set()
        self._staged: dict[TableId, int] = {}  # each mirror's staged watermark, as last read (it only grows)

    # ------------------------------------------------------------------ the whole table
    def verify(self, table: TableId) -> VerifyReport:
        schema = self.replica.schema(table)
        since = self._usable(table).next_seq  # a record at or above it came after verify began
        report = VerifyReport(table, tuple(schema.key))
        upto = self.replica.max_key(schema)
        if self.hashes and hashable(schema):
            report.by_hash = True
            recheck = self._by_hashes(table, schema, upto, since, report)
        else:
            recheck = self._by_rows(table, schema, upto, since, report)
        if recheck:
            self._recheck(table, schema, list(recheck)[:RECHECK_AT_MOST], since, report)
        return report

    def _by_rows(
        self,
        table: TableId,
        schema: TableSchema,
        upto: Sequence[Any] | None,
        since: int,
        report: VerifyReport,
    ) -> dict[Key, None]:
        """Every range's rows read and compared: the keys to read again."""
        key = list(schema.key)
        recheck: dict[Key, None] = {}
        read_keys: list[pa.Table] = []
        after: Sequence[Any] | None = None
        lw = self.replica.executed()
        while upto is not None:
            lw = self.replica.executed()
            chunk = self.replica.select_chunk(schema, after, upto, self.range_rows)
            if not chunk.count:
                break
            rows = _rendered(chunk, schema)
            report.source_rows += rows.num_rows
            report.ranges += 1
            read_keys.append(rows.select(key))
            found, changed = self._compare(table, schema, rows, lw, since)
            recheck.update(dict.fromkeys([*(d.key for d in found), *changed]))
            if chunk.count < self.range_rows:
                break
            after = chunk.last_raw_key
        self._wait_passed(table, lw)
        recheck.update(dict.fromkeys(self._mirror_only(table, key, read_keys)))
        return recheck

    def _by_hashes(
        self,
        table: TableId,
        schema: TableSchema,
        upto: Sequence[Any] | None,
        since: int,
        report: VerifyReport,
    ) -> dict[Key, None]:
        """Each range compared by its hash on both sides, read row by row only where they differ: the
        keys to read again."""
        from pyspark.sql import functions as F

        recheck: dict[Key, None] = {}
        after: Sequence[Any] | None = None
        lw = self.replica.executed()
        while upto is not None:
            ends = self.replica.chunk_ends(schema, after, upto, self.range_rows, HASHED_AT_ONCE)
            bounds = [tuple(e) for e in ends]
            if len(ends) < HASHED_AT_ONCE and (not bounds or bounds[-1] != tuple(upto)):
                bounds.append(tuple(upto))  # the last range, shorter
            starts: list[Sequence[Any] | None] = [after, *bounds[:-1]]
            ranges = list(zip(starts, bounds, strict=True))
            after = bounds[-1]
            source = [self.replica.range_hash(schema, start, stop) for start, stop in ranges]
            lw = self.replica.executed()  # after the reads: holds every change they saw
            self._wait_passed(table, lw)
            held = range_hashes(self._state(table), schema, ranges)
            report.ranges += len(ranges)
            report.source_rows += sum(count for count, _ in source)
            differ = [r for r, mine, theirs in zip(ranges, source, held, strict=True) if mine != theirs]
            step = max(1, ROWS_AT_ONCE // self.range_rows)  # the rows held in memory at once stay bounded
            for first in range(0, len(differ), step):  # a writer's change since makes them differ too
                recheck.update(self._range_rows(table, schema, differ[first : first + step], since, report))
            if len(ends) < HASHED_AT_ONCE:
                break
        self._wait_passed(table, lw)
        key = list(schema.key)
        state = self._state(table).select(*[F.col(quote_ident(k)) for k in key])
        beyond = state if upto is None else state.where(~in_range(key, None, upto))
        recheck.update(dict.fromkeys(_keys(beyond.limit(RECHECK_AT_MOST).toArrow(), key)))
        return recheck

    def _range_rows(
        self,
        table: TableId,
        schema: TableSchema,
        ranges: Sequence[tuple[Sequence[Any] | None, Sequence[Any]]],
        since: int,
        report: VerifyReport,
    ) -> dict[Key, None]:
        """Ranges whose hashes differ, compared row by row at one point: the keys that differ, that only
        the mirror has, or that changed after ``lw`` (read again later)."""
        from pyspark.sql import functions as F

        report.read_ranges += len(ranges)
        lw = self.replica.executed()
        read = [_rendered(self.replica.select_chunk(schema, a, e, None), schema) for a, e in ranges]
        rows = pa.concat_tables(read, promote_options="permissive")
        self._wait_passed(table, lw)
        inside = in_range(schema.key, *ranges[0])
        for bounds in ranges[1:]:
            inside = inside | in_range(schema.key, *bounds)
        columns = [F.col(quote_ident(c.name)) for c in schema.columns]
        state = self._state(table).where(inside).select(*columns)
        found, changed = self._compare(
            table, schema, rows, lw, since, held=_as_types(state.toArrow(), rows.schema)
        )
        return dict.fromkeys([*(d.key for d in found), *changed])  # "extra": the keys only the mirror has

    # ------------------------------------------------------------------ one consistent point
    def _compare(
        self,
        table: TableId,
        schema: TableSchema,
        rows: pa.Table,
        lw: GtidSet,
        since: int,
        keys: pa.Table | None = None,
        held: pa.Table | None = None,
    ) -> tuple[list[Difference], set[Key]]:
        """``rows`` (read after ``lw``) against the mirror's rows of ``keys`` (default: the rows' own), or
        ``held`` (the mirror's rows of the range read, read after the output passed ``lw``) once the output
        has passed ``lw``: the differences, and the keys that changed after ``lw`` (left out)."""
        self._wait_passed(table, lw)
        key, columns = list(schema.key), [c.name for c in schema.columns]
        keys = rows.select(key) if keys is None else keys
        if held is None:
            held = self._mirror_rows(table, keys, columns, rows.schema)
        else:  # the mirror's keys the source lacks may have come after lw too
            keys = (
                pa.concat_tables([keys, held.select(key)], promote_options="permissive")
                .group_by(key)
                .aggregate([])
            )
        changed = self._changed_after(table, keys, since, lw)
        single = [c.name for c in schema.columns if c.data_type == "float"]
        return diff_rows(_by_key(rows, key), _by_key(held, key), columns, single, changed), changed

    def _recheck(
        self, table: TableId, schema: TableSchema, keys: list[Key], since: int, report: VerifyReport
    ) -> None:
        """The keys found different, mirror-only or changing, read again by key and compared again."""
        report.rechecked = len(keys)
        key = list(schema.key)
        for start in range(0, len(keys), RECHECK_BATCH):
            part = keys[start : start + RECHECK_BATCH]
            lw = self.replica.executed()
            rows = _rendered(self.replica.select_keys(schema, part), schema)
            key_schema = pa.schema([rows.schema.field(k) for k in key])
            asked = pa.Table.from_pylist([dict(zip(key, k, strict=True)) for k in part], schema=key_schema)
            found, changed = self._compare(table, schema, rows, lw, since, asked)
            report.differences += found
            report.changing += len(changed)

    # ------------------------------------------------------------------ the output
    def _usable(self, table: TableId) -> Checkpoint:
        """The checkpoint, once the output can be compared for ``table`` (a clear error otherwise)."""
        from delta.tables import DeltaTable

        checkpoint = self.store.load()
        if checkpoint is None:
            raise SinkError("there is no checkpoint: nothing was written to the output to verify yet")
        if not DeltaTable.isDeltaTable(self.spark, mirror_path(self.root, table)):
            raise SinkError(f"{table} has no mirror at {mirror_path(self.root, table)}: snapshot it first")
        pending = [t for t in checkpoint.context.pending() if t.table == table]
        if pending:
            raise SinkError(f"the snapshot of {table} is under way: verify it once the snapshot is done")
        return checkpoint

    def _wait_passed(self, table: TableId, lw: GtidSet) -> None:
        """Until the output's checkpoint has processed ``lw`` and the output holds what it stands for
        (:meth:`_settled`)."""
        deadline = time.monotonic() + self.wait_s
        while True:
            checkpoint = self.store.load()
            if checkpoint is not None and checkpoint.processed >= lw and self._settled(table, checkpoint):
                return
            if time.monotonic() >= deadline:
                reached = checkpoint.processed if checkpoint is not None else "nothing"
                raise SinkError(
                    f"the output has not reached the replica's position {lw} within {self.wait_s:.0f} s "
                    f"(its checkpoint is at {reached}): verify compares a table once gtidsnap has "
                    "streamed past what it read, so gtidsnap must be running (or the source quiet)"
                )
            self.sleep(0.2)

    def _settled(self, table: TableId, checkpoint: Checkpoint) -> bool:
        """Does the output hold what ``checkpoint`` stands for, by its own watermarks: the mirror has
        taken the staged snapshot rows the checkpoint names (it may have taken them after the checkpoint
        was saved, which then still names them), and the changelog holds the batches it names."""
        position = parse_position(checkpoint.sink_position)
        staged = max((f.last_seq for f in position.staged if f.table == table), default=-1)
        if staged > self._staged.get(table, -1):
            self._staged[table] = mirror_staged_watermark(self.spark, mirror_path(self.root, table))
            if staged > self._staged[table]:
                return False  # snapshot rows on their way to the mirror
        path = changelog_path(self.root, table)
        for append in position.appends:
            if append.table == table and (table, append.batch) not in self._held:
                if not holds_batch(self.spark, path, append.batch):
                    return False
                self._held.add((table, append.batch))
        return True

    def _state(self, table: TableId) -> DataFrame:
        if not self._logged(table):
            return current_state(self.spark, self.root, table)
        key, held = self._overlay[table]
        rows = self.spark.read.format("delta").load(mirror_path(self.root, table))
        return overlaid(self.spark, rows, changelog_path(self.root, table), key, held)

    def _logged(self, table: TableId) -> bool:
        """Has ``table`` a changelog (its mirror's key and watermark then read, once)?"""
        from delta.tables import DeltaTable

        if table not in self._overlay:
            if not DeltaTable.isDeltaTable(self.spark, changelog_path(self.root, table)):
                return False  # no change of the table streamed yet
            mirror = mirror_path(self.root, table)
            self._overlay[table] = (recorded_key(self.spark, mirror), mirror_watermark(self.spark, mirror))
        return True

    def _mirror_rows(
        self, table: TableId, keys: pa.Table, columns: Sequence[str], like: pa.Schema
    ) -> pa.Table:
        """The mirror's current rows of ``keys`` (overlaid with the changelog), as ``like``'s types."""
        from pyspark.sql import functions as F

        if not keys.num_rows:
            return like.empty_table()
        asked = self.spark.createDataFrame(keys)
        frame = self._state(table).join(F.broadcast(asked), on=list(keys.column_names), how="left_semi")
        held = frame.select(*[F.col(quote_ident(c)) for c in columns]).toArrow()
        return _as_types(held, like)

    def _changed_after(self, table: TableId, keys: pa.Table, since: int, lw: GtidSet) -> set[Key]:
        """Keys with a changelog record from ``since`` on whose transaction is not in ``lw``."""
        from pyspark.sql import functions as F

        if not keys.num_rows or not self._logged(table):
            return set()  # no change of the table was ever streamed
        names = list(keys.column_names)
        asked = self.spark.createDataFrame(keys)
        frame = (
            self.spark.read.format("delta")
            .load(changelog_path(self.root, table))
            .where(F.col("_seq") >= F.lit(since))
            .join(F.broadcast(asked), on=names, how="left_semi")
            .select(*[F.col(quote_ident(n)) for n in names], "_gtid")
        )
        changed: set[Key] = set()
        flavor = self.replica.flavor
        for row in _as_types(frame.toArrow(), keys.schema.append(pa.field("_gtid", pa.string()))).to_pylist():
            gtid = row["_gtid"]
            if gtid is None or not parse_gtid_set(str(flavor), gtid) <= lw:
                changed.add(tuple(row[n] for n in names))
        return changed

    def _mirror_only(self, table: TableId, key: list[str], read: list[pa.Table]) -> list[Key]:
        """Keys the mirror holds that the source's ranges did not have (the first ones)."""
        from pyspark.sql import functions as F

        frame = self._state(table).select(*[F.col(quote_ident(k)) for k in key])
        if read:
            known = pa.concat_tables(read)
            frame = frame.join(self.spark.createDataFrame(known), on=key, how="left_anti")
            like = known.schema
        else:
            like = None
        rows = frame.limit(RECHECK_AT_MOST).toArrow()
        if like is not None:
            rows = _as_types(rows, like)
        return [tuple(r[k] for k in key) for r in rows.to_pylist()]


def _rendered(chunk: ChunkResult, schema: TableSchema) -> pa.Table:
    """The chunk's rows in the mirror's types, by the code that renders a snapshot's chunks."""
    _, rows = ArrowRenderer()(chunk.rows, schema)
    return pa.Table.from_batches([rows.batch])


def _as_types(rows: pa.Table, like: pa.Schema) -> pa.Table:
    """``rows`` with the types of ``like``'s columns of the same name (a mirror's widened column, a
    timestamp read back by Spark): a column that cannot be cast stays as read."""
    columns = []
    for name in rows.column_names:
        column = rows.column(name)
        index = like.get_field_index(name)
        if index >= 0 and column.type != like.field(index).type:
            with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError):
                column = column.cast(like.field(index).type)
        columns.append(column)
    return pa.table(columns, names=rows.column_names)


def _keys(rows: pa.Table, key: Sequence[str]) -> list[Key]:
    return [tuple(r[k] for k in key) for r in rows.to_pylist()]


def _by_key(rows: pa.Table, key: Sequence[str]) -> dict[Key, dict[str, Any]]:
    return {tuple(r[k] for k in key): r for r in rows.to_pylist()}
