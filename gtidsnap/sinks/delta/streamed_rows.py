"""A table's streamed changes of the batch being filled, turned into Arrow as they arrive.

Held as :class:`~gtidsnap.core.records.Record` objects until the batch commits, a second's changes
(~30,000) kept every row image, key and value alive for the whole batch: the engine's thread then
allocated each change in cold memory and the collector walked them again and again, which made the
same decoding ~25% slower than into JSON lines (measured: 31.8 against 25 CPU-s of the engine's
thread for 1M changes). Here every :data:`GROUP` records of a table become Arrow columns at once (their
Python objects die young, as into JSON lines), typed as the source describes them; the commit casts
them to the Delta table's plan (:func:`gtidsnap.sinks.delta.change_rows.conformed`: only the widenings
Delta allows, which lose nothing).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from gtidsnap.core.records import Record
from gtidsnap.core.schema import TableSchema
from gtidsnap.sinks.delta.change_rows import conformed, record_rows
from gtidsnap.sinks.delta.columns import ColumnPlan, PlannedColumn, plan_columns

#: Records of one table turned into Arrow at once: large enough that Arrow's per-call cost vanishes,
#: small enough that they are still in the cache (measured the same from 500 to 2,000).
GROUP = 1024


def source_plan(schema: TableSchema) -> ColumnPlan:
    """The columns of ``schema`` as a new Delta table would have them, FLOAT as DOUBLE: a FLOAT's
    value is the server's printed text, which a cast from float32 would not give back in a DOUBLE
    column (a cast from DOUBLE to FLOAT rounds as Arrow's conversion from Python does)."""
    plan = plan_columns(schema.table, f"the changes of {schema.table}", None, schema, {})
    columns = tuple(
        PlannedColumn(c.name, T.DoubleType(), c.source) if isinstance(c.data_type, T.FloatType) else c
        for c in plan.columns
    )
    return ColumnPlan(columns, plan.widen)


class StreamedRows:
    """One table's streamed records (c/u/d) of a batch, as changelog rows (see the module docstring)."""

    def __init__(self) -> None:
        self.count = 0  # records (a key update is one record and two rows)
        self._tables: list[pa.Table] = []
        self._group: list[Record] = []
        self._schema: TableSchema | None = None
        self._plan: ColumnPlan | None = None

    def __len__(self) -> int:
        return self.count

    def add(self, records: list[Record], schema: TableSchema) -> None:
        """``records``, decoded with ``schema`` (the table's shape when they were written)."""
        if schema is not self._schema:
            self._flush()
            self._schema, self._plan = schema, source_plan(schema)
        self._group.extend(records)
        self.count += len(records)
        if len(self._group) >= GROUP:
            self._flush()

    def rows(self, plan: ColumnPlan) -> pa.Table | None:
        """Every record's changelog rows as columns of ``plan``, in ``_seq`` order (None: no record)."""
        self._flush()
        if not self._tables:
            return None
        parts = [conformed(t, plan, changelog=True) for t in self._tables]
        return pa.concat_tables(parts) if len(parts) > 1 else parts[0]

    def _flush(self) -> None:
        if self._group:
            assert self._schema is not None and self._plan is not None
            self._tables.append(
                record_rows(self._schema.table, self._schema, self._plan, self._group, changelog=True)
            )
            self._group = []
