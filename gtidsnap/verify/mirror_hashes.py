"""The mirror's side of ``gtidsnap verify``'s range hash: the rows of a key range written as
:mod:`gtidsnap.core.row_hash` says, in Spark, so a range whose rows are the same on the replica and in
the mirror has the same count and hash (the replica's side:
:func:`gtidsnap.source.chunk_sql.range_hash_query`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gtidsnap.core.model import quote_ident
from gtidsnap.core.row_hash import NULL_TEXT, SEPARATOR, kind_of
from gtidsnap.core.schema import TableSchema

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame


def _text(kind: str, column: SparkColumn) -> SparkColumn:
    from pyspark.sql import functions as F

    if kind == "number" or kind == "text":
        return column.cast("string")
    if kind == "bytes":
        return F.hex(column)
    if kind == "date":
        return F.date_format(column, "yyyy-MM-dd")
    if kind == "moment":
        return F.date_format(column, "yyyy-MM-dd HH:mm:ss.SSSSSS")
    return F.array_join(column, ",")  # set


def in_range(key: Sequence[str], after: Sequence[Any] | None, upto: Sequence[Any]) -> SparkColumn:
    """``after < key <= upto`` over integer key columns, compared as tuples."""
    from pyspark.sql import functions as F

    columns = [F.col(quote_ident(k)) for k in key]

    def beyond(values: Sequence[Any]) -> SparkColumn:
        """key > values, lexicographically."""
        terms = []
        for i, (column, value) in enumerate(zip(columns, values, strict=True)):
            step = column > F.lit(value)
            for before, bound in zip(columns[:i], values[:i], strict=True):
                step = step & (before == F.lit(bound))
            terms.append(step)
        result = terms[0]
        for term in terms[1:]:
            result = result | term
        return result

    upper = ~beyond(upto)
    return upper if after is None else beyond(after) & upper


def range_hashes(
    frame: DataFrame, schema: TableSchema, ranges: Sequence[tuple[Sequence[Any] | None, Sequence[Any]]]
) -> list[tuple[int, int]]:
    """The row count and hash of the rows of ``frame`` (the mirror's state) in each ``after < key <= upto``
    of ``ranges`` (in key order, each starting where the one before ends), in one Spark job."""
    from pyspark.sql import functions as F

    parts = []
    for column in schema.columns:
        kind = kind_of(column)
        if kind is None:
            raise ValueError(f"column {column.name} ({column.column_type}) has no hashed text")
        parts.append(F.coalesce(_text(kind, F.col(quote_ident(column.name))), F.lit(NULL_TEXT)))
    row = F.crc32(F.concat_ws(SEPARATOR, *parts).cast("binary"))
    if not ranges:
        return []
    which = F.when(in_range(schema.key, *ranges[0]), F.lit(0))
    for index, bounds in enumerate(ranges[1:], start=1):
        which = which.when(in_range(schema.key, *bounds), F.lit(index))
    got = (
        frame.select(which.alias("_gtidsnap_range"), row.alias("_gtidsnap_hash"))
        .where(F.col("_gtidsnap_range").isNotNull())
        .groupBy("_gtidsnap_range")
        .agg(F.count(F.lit(1)), F.bit_xor("_gtidsnap_hash"))
        .collect()
    )
    found = {int(r[0]): (int(r[1]), int(r[2] or 0)) for r in got}
    return [found.get(index, (0, 0)) for index in range(len(ranges))]
