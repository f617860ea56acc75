"""MySQL/MariaDB column types as Spark/Delta types that lose nothing, and gtidsnap's canonical values
(gtidsnap.core.column_values.normalize_value) as the Python values Arrow builds those columns from.

Pure: no SparkSession, no JVM; ``pyspark.sql.types`` and ``pyarrow`` are plain Python here.

=============================  ===========================  =============================================
MySQL / MariaDB                Spark / Delta                Value written
=============================  ===========================  =============================================
TINYINT / BOOL                 BYTE                         as is
TINYINT UNSIGNED               SHORT                        0..255
SMALLINT                       SHORT
SMALLINT UNSIGNED              INT
MEDIUMINT (UNSIGNED)           INT
INT                            INT
INT UNSIGNED                   BIGINT
BIGINT                         BIGINT
BIGINT UNSIGNED                DECIMAL(20,0)                up to 18446744073709551615
DECIMAL(p,s), p <= 38          DECIMAL(p,s)                 exact
DECIMAL(p,s), p > 38           STRING                       the canonical text ("1234.5600")
FLOAT                          FLOAT                        as the server prints it (6 digits), in float32
DOUBLE                         DOUBLE
BIT(n), n <= 63                BIGINT                       the bits as an unsigned number
BIT(64)                        DECIMAL(20,0)
YEAR                           SHORT                        0 for YEAR 0000
DATE                           DATE                         zero/invalid dates ("0000-00-00") are NULL
DATETIME                       TIMESTAMP_NTZ                wall-clock value, no zone; zero/invalid: NULL
TIMESTAMP                      TIMESTAMP                    the UTC instant; zero: NULL
TIME                           STRING                       "[-]HHH:MM:SS[.ffffff]" (may exceed 24 h)
JSON                           STRING                       compact JSON text of the value
ENUM                           STRING                       the member
SET                            ARRAY<STRING>                members, sorted
CHAR/VARCHAR/*TEXT             STRING
BINARY/VARBINARY/*BLOB         BINARY                       the bytes (BINARY(n) zero-padded to n)
VECTOR                         BINARY                       the stored float32s
GEOMETRY and spatial types     BINARY                       the server's internal form (SRID + WKB)
UUID/INET4/INET6 (MariaDB)     STRING                       the server's text ("::ffff:1.2.3.4")
anything else                  STRING                       text; other values as JSON text
=============================  ===========================  =============================================

MariaDB's JSON is LONGTEXT to information_schema, so it arrives and is stored as the server's text.
Type changes at the source (keep, widen or refuse a Delta column's type) are
:mod:`gtidsnap.sinks.delta.widening`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from gtidsnap.core.schema import Column
from gtidsnap.sinks import arrow_columns

#: Columns gtidsnap adds to every mirror row: the record that last wrote it.
MIRROR_META: tuple[T.StructField, ...] = (
    T.StructField("_op", T.StringType()),  # c, u or r (a deleted row is gone)
    T.StructField("_seq", T.LongType()),
    T.StructField("_gtid", T.StringType()),  # NULL for snapshot rows
    T.StructField("_source_ts", T.TimestampType()),
)
#: Columns gtidsnap adds to every changelog row.
CHANGELOG_META: tuple[T.StructField, ...] = (*MIRROR_META, T.StructField("_snapshot", T.BooleanType()))
RESERVED = frozenset(f.name for f in CHANGELOG_META)

# Characters Delta refuses in column names unless column mapping is on.
_INVALID_NAME = re.compile(r"[ ,;{}()\n\t=]")

#: Integral types by width, narrowest first (:mod:`gtidsnap.sinks.delta.widening` ranks them so).
INTEGRAL: tuple[type[T.DataType], ...] = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


# ----------------------------------------------------------------------------- types


def spark_type(column: Column) -> T.DataType:
    """The Spark type of a source column: the table in the module docstring (the Spark reading of
    :func:`gtidsnap.sinks.arrow_columns.arrow_type_of`, which chunk readers use without Spark)."""
    return spark_type_of_arrow(arrow_columns.arrow_type_of(column))


def spark_type_of_arrow(arrow: pa.DataType) -> T.DataType:
    """The Spark type Spark reads an Arrow column of type ``arrow`` as (the inverse of :func:`arrow_type`)."""
    if pa.types.is_decimal(arrow):
        return T.DecimalType(arrow.precision, arrow.scale)
    if pa.types.is_list(arrow):
        return T.ArrayType(spark_type_of_arrow(arrow.value_type), True)
    for spark, candidate in _SIMPLE:
        if arrow == candidate:
            return spark()
    raise ValueError(f"no Spark type for Arrow type {arrow}")


_SIMPLE: tuple[tuple[type[T.DataType], pa.DataType], ...] = (
    (T.BooleanType, pa.bool_()),
    (T.ByteType, pa.int8()),
    (T.ShortType, pa.int16()),
    (T.IntegerType, pa.int32()),
    (T.LongType, pa.int64()),
    (T.FloatType, pa.float32()),
    (T.DoubleType, pa.float64()),
    (T.StringType, pa.string()),
    (T.BinaryType, pa.binary()),
    (T.DateType, pa.date32()),
    (T.TimestampNTZType, arrow_columns.NAIVE_TS),
    (T.TimestampType, arrow_columns.UTC_TS),
)


def arrow_type(data_type: T.DataType) -> pa.DataType:
    """The Arrow type Spark reads as ``data_type`` (timestamps in microseconds, TIMESTAMP in UTC)."""
    if isinstance(data_type, T.DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, T.ArrayType):
        return pa.list_(arrow_type(data_type.elementType))
    for spark, arrow in _SIMPLE:
        if type(data_type) is spark:
            return arrow
    raise ValueError(f"no Arrow type for Spark type {data_type.simpleString()}")


def invalid_column_names(names: Iterable[str]) -> list[str]:
    """Names Delta refuses (spaces, commas, braces, ... need column mapping, which gtidsnap does not set)."""
    return [n for n in names if _INVALID_NAME.search(n)]


# ----------------------------------------------------------------------------- values


def converter(column: Column | None, data_type: T.DataType) -> Callable[[Any], Any]:
    """Canonical value of ``column`` -> the Python value Arrow builds ``data_type`` from (None stays
    None): :func:`gtidsnap.sinks.arrow_columns.converter` for the Spark type's Arrow type."""
    return arrow_columns.converter(column, arrow_type(data_type))


def arrow_array(column: Column | None, data_type: T.DataType, values: Sequence[Any]) -> pa.Array:
    """One Arrow column of the Spark type ``data_type`` from canonical values; raises ValueError naming
    the bad value (:func:`gtidsnap.sinks.arrow_columns.arrow_array`)."""
    return arrow_columns.arrow_array(column, arrow_type(data_type), values)
