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

import base64
import datetime as dt
import json
import re
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from gtidsnap.core.column_values import SPATIAL_TYPES
from gtidsnap.core.schema import Column

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
_BINARY = (
    frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "vector"}) | SPATIAL_TYPES
)
_UTC = dt.UTC

#: Integral types by width, narrowest first (:mod:`gtidsnap.sinks.delta.widening` ranks them so).
INTEGRAL: tuple[type[T.DataType], ...] = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
#: The most digits a Spark DECIMAL has.
MAX_PRECISION = 38


# ----------------------------------------------------------------------------- types


def _args(column_type: str) -> list[int]:
    """The numbers of ``decimal(12,2)`` / ``bit(10)`` / ``int(11)``; empty when there are none."""
    found = re.search(r"\(([\d\s,]+)\)", column_type)
    return [int(a) for a in found.group(1).split(",")] if found else []


def spark_type(column: Column) -> T.DataType:
    """The Spark type of a source column: the table in the module docstring."""
    t = column.data_type.lower()
    unsigned = column.unsigned
    if t == "tinyint":
        return T.ShortType() if unsigned else T.ByteType()
    if t == "smallint":
        return T.IntegerType() if unsigned else T.ShortType()
    if t == "mediumint":
        return T.IntegerType()
    if t in ("int", "integer"):
        return T.LongType() if unsigned else T.IntegerType()
    if t == "bigint":
        return T.DecimalType(20, 0) if unsigned else T.LongType()
    if t in ("decimal", "numeric"):
        args = _args(column.column_type)
        precision = args[0] if args else 10
        scale = args[1] if len(args) > 1 else 0
        return T.DecimalType(precision, scale) if precision <= MAX_PRECISION else T.StringType()
    if t == "float":
        return T.FloatType()
    if t in ("double", "real", "double precision"):
        return T.DoubleType()
    if t == "bit":
        args = _args(column.column_type)
        return T.LongType() if (args[0] if args else 1) <= 63 else T.DecimalType(20, 0)
    if t == "year":
        return T.ShortType()
    if t == "date":
        return T.DateType()
    if t == "datetime":
        return T.TimestampNTZType()
    if t == "timestamp":
        return T.TimestampType()
    if t == "set":
        return T.ArrayType(T.StringType(), True)
    if t in _BINARY:
        return T.BinaryType()
    return T.StringType()  # text types, TIME, JSON, ENUM, UUID/INET4/INET6 (MariaDB) and anything unknown


def arrow_type(data_type: T.DataType) -> pa.DataType:
    """The Arrow type Spark reads as ``data_type`` (timestamps in microseconds, TIMESTAMP in UTC)."""
    simple: dict[type[T.DataType], pa.DataType] = {
        T.BooleanType: pa.bool_(),
        T.ByteType: pa.int8(),
        T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(),
        T.LongType: pa.int64(),
        T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(),
        T.StringType: pa.string(),
        T.BinaryType: pa.binary(),
        T.DateType: pa.date32(),
        T.TimestampNTZType: pa.timestamp("us"),
        T.TimestampType: pa.timestamp("us", tz="UTC"),
    }
    if isinstance(data_type, T.DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, T.ArrayType):
        return pa.list_(arrow_type(data_type.elementType))
    try:
        return simple[type(data_type)]
    except KeyError:
        raise ValueError(f"no Arrow type for Spark type {data_type.simpleString()}") from None


def invalid_column_names(names: Iterable[str]) -> list[str]:
    """Names Delta refuses (spaces, commas, braces, ... need column mapping, which gtidsnap does not set)."""
    return [n for n in names if _INVALID_NAME.search(n)]


# ----------------------------------------------------------------------------- values


def _to_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _to_json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    text = str(value)
    if text.startswith("base64:"):
        return base64.b64decode(text[len("base64:") :])
    return text.encode("utf-8", errors="surrogateescape")


_INVALID_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?: \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)?")


def _moment(value: Any) -> dt.datetime | None:
    """A DATETIME/TIMESTAMP value; None for a zero or invalid date (``0000-00-00 00:00:00``), which
    gtidsnap writes as the server's text and Delta has no value for."""
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day)
    text = str(value)
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        if _INVALID_DATE.fullmatch(text):
            return None
        raise


def _to_naive(value: Any) -> dt.datetime | None:
    moment = _moment(value)
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(_UTC).replace(tzinfo=None)


def _to_utc(value: Any) -> dt.datetime | None:
    """TIMESTAMP text is UTC (the snapshot session runs at +00:00, the binlog holds UTC instants)."""
    moment = _moment(value)
    if moment is None:
        return None
    return moment.replace(tzinfo=_UTC) if moment.tzinfo is None else moment.astimezone(_UTC)


def _to_date(value: Any) -> dt.date | None:
    moment = _moment(value)
    return None if moment is None else moment.date()


def _to_decimal(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(str(value))


def _to_int(value: Any) -> int:
    if isinstance(value, str | Decimal | float):
        number = Decimal(value) if not isinstance(value, Decimal) else value
        if number != number.to_integral_value():
            raise ValueError("not a whole number")
        return int(number)
    return int(value)


def _to_list(value: Any) -> list[str]:
    items = value if isinstance(value, list | tuple | set | frozenset) else str(value).split(",")
    return sorted(str(i) for i in items if str(i) != "")


def converter(column: Column | None, data_type: T.DataType) -> Callable[[Any], Any]:
    """Canonical value of ``column`` -> the Python value Arrow builds ``data_type`` from (None stays None).

    ``column`` is the source column the values come from (None: unknown, e.g. a dropped column); it
    only matters for JSON, whose canonical value is the parsed document and is written as JSON text.
    """
    if isinstance(data_type, T.StringType):
        fn: Callable[[Any], Any] = (
            _to_json_text if column is not None and column.data_type.lower() == "json" else _to_text
        )
    elif isinstance(data_type, INTEGRAL):
        fn = _to_int
    elif isinstance(data_type, T.DecimalType):
        fn = _to_decimal
    elif isinstance(data_type, T.FloatType | T.DoubleType):
        fn = float
    elif isinstance(data_type, T.BinaryType):
        fn = _to_bytes
    elif isinstance(data_type, T.DateType):
        fn = _to_date
    elif isinstance(data_type, T.TimestampNTZType):
        fn = _to_naive
    elif isinstance(data_type, T.TimestampType):
        fn = _to_utc
    elif isinstance(data_type, T.ArrayType):
        fn = _to_list
    elif isinstance(data_type, T.BooleanType):
        fn = bool
    else:
        raise ValueError(f"no conversion to Spark type {data_type.simpleString()}")

    def convert(value: Any) -> Any:
        return None if value is None else fn(value)

    return convert


def _as_is(column: Column | None, data_type: T.DataType) -> type | None:
    """The Python type whose values Arrow takes for ``data_type`` exactly as they are (their converter
    returns them unchanged), or None."""
    if isinstance(data_type, T.StringType):
        return None if column is not None and column.data_type.lower() == "json" else str
    if isinstance(data_type, INTEGRAL):
        return int
    if isinstance(data_type, T.DecimalType):
        return Decimal
    if isinstance(data_type, T.DoubleType):
        return float
    return None


def arrow_array(column: Column | None, data_type: T.DataType, values: Sequence[Any]) -> pa.Array:
    """One Arrow column of ``data_type`` from canonical values; raises ValueError naming the bad value.
    Values that need no conversion go to Arrow in one call instead of one by one."""
    kind = _as_is(column, data_type)
    if kind is not None and all(v is None or type(v) is kind for v in values):
        try:
            return pa.array(values, type=arrow_type(data_type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # the value by value path names the bad value
    convert = converter(column, data_type)
    converted = []
    for value in values:
        try:
            converted.append(convert(value))
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ValueError(f"{value!r} is not a {data_type.simpleString()} value: {exc}") from exc
    try:
        return pa.array(converted, type=arrow_type(data_type))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise ValueError(f"values do not fit {data_type.simpleString()}: {exc}") from exc
