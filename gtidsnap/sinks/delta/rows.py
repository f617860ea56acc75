"""The rows of a batch: records as row changes, the last change per key, the changes as Arrow."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import Row, TableId
from gtidsnap.core.records import Record
from gtidsnap.core.schema import TableSchema
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.columns import ColumnPlan


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


@dataclass(frozen=True)
class Change:
    """One row to write: the record's metadata with one row image (a key change is two of these), and
    the image's key (hashable), which routes it (:mod:`gtidsnap.sinks.delta.mirror_route`)."""

    op: str
    row: Row
    record: Record
    route_key: tuple[Any, ...]

    @property
    def fresh(self) -> bool:
        return self.record.fresh

    @property
    def seq(self) -> int:
        return self.record.seq


def _key(schema: TableSchema, row: Row) -> tuple[Any, ...]:
    try:
        return tuple(_hashable(row[k]) for k in schema.key)
    except KeyError as exc:
        raise SinkError(f"a row of {schema.table} lacks key column {exc.args[0]}: {dict(row)}") from None


def changes_of(schema: TableSchema, records: Sequence[Record]) -> list[Change]:
    """Every record as row changes: updates of the primary key split into the delete and the insert."""
    out: list[Change] = []
    for r in records:
        if r.op == "d":
            assert r.before is not None
            out.append(Change("d", r.before, r, _key(schema, r.before)))
        elif r.op == "u" and r.before is not None and r.after is not None:
            old, new = _key(schema, r.before), _key(schema, r.after)
            if old != new:
                out.extend((Change("d", r.before, r, old), Change("c", r.after, r, new)))
            else:
                out.append(Change("u", r.after, r, new))
        else:
            assert r.after is not None
            out.append(Change(r.op, r.after, r, _key(schema, r.after)))
    return out


def last_per_key(changes: Sequence[Change]) -> list[Change]:
    """The last change of each key (by ``seq``): what a MERGE needs (one source row per target row)."""
    last: dict[tuple[Any, ...], Change] = {}
    for change in changes:
        held = last.get(change.route_key)
        if held is None or change.record.seq >= held.record.seq:
            last[change.route_key] = change
    return sorted(last.values(), key=lambda c: c.record.seq)


def arrow_rows(
    table: TableId, plan: ColumnPlan, changes: Sequence[Change], meta: Sequence[T.StructField]
) -> tuple[pa.Table, T.StructType]:
    """The changes as one Arrow table (data columns, then ``meta``) and the matching Spark schema."""
    arrays: dict[str, pa.Array] = {}
    for col in plan.columns:
        values = [c.row.get(col.name) for c in changes]
        try:
            arrays[col.name] = delta_types.arrow_array(col.source, col.data_type, values)
        except ValueError as exc:
            raise SinkError(f"column {col.name} of {table}: {exc}") from exc
    meta_values: dict[str, list[Any]] = {
        "_op": [c.op for c in changes],
        "_seq": [c.record.seq for c in changes],
        "_gtid": [c.record.gtid for c in changes],
        "_source_ts": [dt.datetime.fromtimestamp(c.record.source_ts, dt.UTC) for c in changes],
        "_snapshot": [c.record.snapshot for c in changes],
    }
    for f in meta:
        arrays[f.name] = pa.array(meta_values[f.name], type=delta_types.arrow_type(f.dataType))
    fields = [T.StructField(c.name, c.data_type, True) for c in plan.columns] + list(meta)
    return pa.table(arrays), T.StructType(fields)
