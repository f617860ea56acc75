"""A batch's rows as Arrow tables in a Delta table's column plan: streamed records (a key update as a
delete and an insert), snapshot chunks (Arrow already, from their readers), the newest row of each key,
and a table's key columns. Column by column, never a Python object a value once the values are read
out of the records (:mod:`gtidsnap.sinks.arrow_columns` converts them)."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import Row, TableId
from gtidsnap.core.records import Record, SnapshotColumns
from gtidsnap.core.schema import TableSchema
from gtidsnap.sinks import arrow_columns
from gtidsnap.sinks.arrow_columns import ArrowRows
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.columns import ColumnPlan

SEQ = "_seq"
_AT = "_gtidsnap_at"


def plan_schema(plan: ColumnPlan, changelog: bool) -> pa.Schema:
    """The Arrow schema of a write in ``plan``: its data columns, then the meta columns."""
    meta = delta_types.CHANGELOG_META if changelog else delta_types.MIRROR_META
    fields = [pa.field(c.name, delta_types.arrow_type(c.data_type)) for c in plan.columns]
    fields += [pa.field(f.name, delta_types.arrow_type(f.dataType)) for f in meta]
    return pa.schema(fields)


def record_rows(
    table: TableId, schema: TableSchema, plan: ColumnPlan, records: Sequence[Record], changelog: bool
) -> pa.Table:
    """``records`` of one table as rows of ``plan`` (a key update: a ``d`` of the old key and a ``c`` of
    the new one, the same ``_seq``), with the meta columns of a changelog or a mirror."""
    ops: list[str] = []
    images: list[Row] = []
    at: list[int] = []  # the record of each row
    key = itemgetter(*schema.key)
    for i, r in enumerate(records):
        if r.op == "d":
            if r.before is None:
                raise SinkError(f"a delete of {table} has no row image")
            ops.append("d")
            images.append(r.before)
            at.append(i)
        elif r.op == "u" and r.before is not None and r.after is not None and _moved(key, r.before, r.after):
            ops.extend(("d", "c"))
            images.extend((r.before, r.after))
            at.extend((i, i))
        else:
            if r.after is None:
                raise SinkError(f"a change of {table} has no row image")
            ops.append(r.op)
            images.append(r.after)
            at.append(i)
    arrays = []
    for column in plan.columns:
        values = [image.get(column.name) for image in images]
        try:
            arrays.append(delta_types.arrow_array(column.source, column.data_type, values))
        except ValueError as exc:
            raise SinkError(f"column {column.name} of {table}: {exc}") from exc
    of = [records[i] for i in at]
    arrays += [
        pa.array(ops, pa.string()),
        pa.array([r.seq for r in of], pa.int64()),
        pa.array([r.gtid for r in of], pa.string()),
        _timestamps([r.source_ts for r in of]),
    ]
    if changelog:
        arrays.append(pa.array([r.snapshot for r in of], pa.bool_()))
    return pa.Table.from_arrays(arrays, schema=plan_schema(plan, changelog))


def _moved(key: Any, before: Row, after: Row) -> bool:
    try:
        return bool(key(before) != key(after))
    except KeyError as exc:
        raise SinkError(f"a row lacks key column {exc.args[0]}: {dict(after)}") from None


def _timestamps(seconds: Sequence[int]) -> pa.Array:
    micros = pc.multiply(pa.array(seconds, pa.int64()), 1_000_000)
    return micros.cast(arrow_columns.UTC_TS)


def snapshot_rows(plan: ColumnPlan, chunks: Sequence[SnapshotColumns], changelog: bool) -> pa.Table:
    """Snapshot chunks (their readers' Arrow columns) as rows of ``plan``: each column cast to the
    plan's type (a widened column) or NULL (a column the rows were read without), ``_op`` ``r``,
    ``_seq`` numbered from each chunk's first, no GTID."""
    target = plan_schema(plan, changelog)
    parts = []
    for chunk in chunks:
        if not isinstance(chunk.rows, ArrowRows):
            raise SinkError(
                f"snapshot rows of {chunk.table} are not Arrow columns: {type(chunk.rows).__name__}"
            )
        batch, n = chunk.rows.batch, len(chunk.rows)
        arrays = _columns_as(batch, list(target)[: len(plan.columns)], f" of {chunk.table}")
        arrays += [
            pa.array(["r"] * n, pa.string()),
            pa.array(range(chunk.first_seq, chunk.first_seq + n), pa.int64()),
            pa.nulls(n, pa.string()),
            _timestamps([chunk.source_ts]).take(pa.array([0] * n, pa.int32()))
            if n
            else pa.array([], arrow_columns.UTC_TS),
        ]
        if changelog:
            arrays.append(pa.array([True] * n, pa.bool_()))
        parts.append(pa.Table.from_arrays(arrays, schema=target))
    return pa.concat_tables(parts) if parts else target.empty_table()


def conformed(rows: pa.Table, plan: ColumnPlan, changelog: bool) -> pa.Table:
    """``rows`` built with an earlier plan of their table as rows of ``plan``: its columns in its order,
    a column they lack NULL, a widened one cast (changes wait for a mirror across batches, and a
    column can be added or widened in between)."""
    target = plan_schema(plan, changelog)
    if rows.schema.equals(target):
        return rows
    return pa.Table.from_arrays(_columns_as(rows, list(target), ""), schema=target)


def _columns_as(rows: pa.Table | pa.RecordBatch, fields: Sequence[pa.Field], where: str) -> list[Any]:
    """The columns of ``rows`` named by ``fields``, each cast to its field's type (a widened column) or
    NULL (a column the rows lack)."""
    arrays: list[Any] = []
    for field in fields:
        index = rows.schema.get_field_index(field.name)
        if index < 0:
            arrays.append(pa.nulls(rows.num_rows, field.type))
            continue
        column = rows.column(index)
        try:
            arrays.append(column if column.type == field.type else column.cast(field.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SinkError(f"column {field.name}{where}: {exc}") from exc
    return arrays


def _positions(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """The key columns and ``_seq`` of ``rows`` with each row's position: what joins work on (Arrow's
    joins take no list column, and need not carry the rows)."""
    narrow = rows.select([*key, SEQ]) if SEQ in rows.column_names else rows.select(list(key))
    return narrow.append_column(_AT, pa.array(range(rows.num_rows), pa.int64()))


def newest_per_key(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """The row of each key with the highest ``_seq`` (what a MERGE needs: one source row a key), in
    ``_seq`` order."""
    if rows.num_rows == 0:
        return rows
    at = _positions(rows, key)
    grouped = at.group_by(list(key)).aggregate([(SEQ, "max")])
    newest = pa.table({**{k: grouped.column(k) for k in key}, SEQ: grouped.column(f"{SEQ}_max")})
    picked = at.join(newest, keys=[*key, SEQ], join_type="inner")
    picked = picked.group_by([*key, SEQ]).aggregate([(_AT, "max")])  # one a key, were a _seq repeated
    chosen = picked.column(f"{_AT}_max")
    return rows.take(pc.take(chosen, pc.sort_indices(chosen)))


def matching(rows: pa.Table, keys: pa.Table, key: Sequence[str], keep: bool) -> pa.Table:
    """The rows of ``rows`` whose key is among ``keys`` (``keep``), or is not, in their order."""
    if rows.num_rows == 0 or keys.num_rows == 0:
        return rows if not keep or rows.num_rows == 0 else rows.slice(0, 0)
    at = _positions(rows, key).select([*key, _AT])
    kind = "left semi" if keep else "left anti"
    chosen = at.join(keys.select(list(key)), keys=list(key), join_type=kind).column(_AT)
    return rows.take(pc.take(chosen, pc.sort_indices(chosen)))


def top_seqs(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """Each key of ``rows`` (keys and ``_seq``) once, with its highest ``_seq`` (as ``_seq_max``)."""
    return rows.group_by(list(key)).aggregate([(SEQ, "max")])


def newer_than(changes: pa.Table, tops: pa.Table, key: Sequence[str]) -> pa.Table:
    """The rows of ``changes`` (one a key) with a higher ``_seq`` than their key's in ``tops``
    (:func:`top_seqs`), in their order; a key ``tops`` lacks is not kept."""
    if changes.num_rows == 0 or tops.num_rows == 0:
        return changes.slice(0, 0)
    at = _positions(changes, key).join(tops, keys=list(key), join_type="inner")
    at = at.filter(pc.greater(at.column(SEQ), at.column(f"{SEQ}_max")))
    chosen = at.column(_AT)
    return changes.take(pc.take(chosen, pc.sort_indices(chosen)))


def key_rows(rows: pa.Table, key: Sequence[str]) -> pa.Table:
    """The distinct keys of ``rows``."""
    return rows.select(list(key)).group_by(list(key)).aggregate([])
