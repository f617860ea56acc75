"""The column plan of a write: which data columns, in which order, with which Delta types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import types as T

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.delta import types as delta_types
from gtidsnap.sinks.delta.widening import evolve_type


@dataclass(frozen=True)
class PlannedColumn:
    """A data column of one write: its Delta type and the source column its values come from."""

    name: str
    data_type: T.DataType
    source: Column | None  # None: the source no longer has it (dropped), values are NULL


@dataclass(frozen=True)
class ColumnPlan:
    columns: tuple[PlannedColumn, ...]
    widen: Mapping[str, T.DataType]  # existing Delta columns whose type must be widened first


def plan_columns(
    table: TableId,
    where: str,
    existing: T.StructType | None,
    schema: TableSchema,
    seen: Mapping[str, Column],
) -> ColumnPlan:
    """The data columns of a write to the Delta table at ``where``: what it has, in its order, then the
    source's new columns; types per ``widening.evolve_type``. ``seen`` is every source column
    described during the batch (a column added and dropped between two commits is kept too)."""
    current = {c.name.casefold(): c for c in schema.columns}
    described = {**{n.casefold(): c for n, c in seen.items()}, **current}
    reserved = [c.name for c in described.values() if c.name in delta_types.RESERVED]
    if reserved:
        raise SinkError(
            f"{table} has column(s) {', '.join(reserved)}, whose names gtidsnap uses for its own columns "
            f"in {where}; rename them at the source or leave the table out of the capture"
        )
    invalid = delta_types.invalid_column_names(c.name for c in described.values())
    if invalid:
        raise SinkError(
            f"{table} has column name(s) {', '.join(map(repr, invalid))} that Delta refuses in {where} "
            "(spaces, commas, braces, parentheses, '=' need column mapping, which gtidsnap does not set)"
        )
    planned: list[PlannedColumn] = []
    widen: dict[str, T.DataType] = {}
    known: set[str] = set()
    for f in existing.fields if existing is not None else ():
        if f.name in delta_types.RESERVED:
            continue
        known.add(f.name.casefold())
        source = described.get(f.name.casefold())
        data_type = f.dataType
        if source is not None and f.name.casefold() in current:
            wanted = delta_types.spark_type(source)
            evolved = evolve_type(f.dataType, wanted)
            if evolved is None:
                raise SinkError(
                    f"column {source.name} of {table} changed to {source.column_type} "
                    f"({wanted.simpleString()}), which the Delta column of type {f.dataType.simpleString()} "
                    f"in {where} cannot hold and Delta cannot widen to; move the Delta tables of {table} "
                    "away and snapshot the table again"
                )
            if evolved != f.dataType:
                widen[f.name] = evolved
            data_type = evolved
        planned.append(PlannedColumn(f.name, data_type, source))
    ordered = [*schema.columns, *(c for n, c in seen.items() if n.casefold() not in current)]
    for column in ordered:
        if column.name.casefold() not in known:
            known.add(column.name.casefold())
            planned.append(PlannedColumn(column.name, delta_types.spark_type(column), column))
    missing = [k for k in schema.key if k.casefold() not in known]
    if missing:
        raise SinkError(f"key column(s) {', '.join(missing)} of {table} are not among its columns")
    return ColumnPlan(tuple(planned), widen)
