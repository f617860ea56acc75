"""Rows as Arrow columns in the Delta column types, built without Spark: what a chunk reader makes of
its chunk for a Delta output (:class:`ArrowRenderer`, in the reader's own process), and what the Delta
sink makes of streamed records. Pure: pyarrow only, no JVM, no pyspark (a reader imports this).

The types are those of :mod:`gtidsnap.sinks.delta.types` (its ``spark_type`` read as Arrow; a test
holds the two equal for every column type). Values are gtidsnap's canonical ones
(:mod:`gtidsnap.core.column_values`): a column whose values all have the Python type Arrow takes
as is goes to Arrow in one call; DECIMAL, DATE, DATETIME and TIMESTAMP text is cast by Arrow's own
parsers in one call per column; anything those refuse (a zero date, say), and every other type, is
converted value by value, which also names a value that does not fit. The one-call paths give
exactly what the value by value path gives (property-tested).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gtidsnap.core.column_values import SPATIAL_TYPES
from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import Key, Row
from gtidsnap.core.schema import Column, TableSchema

MAX_PRECISION = 38  # the most digits a Spark DECIMAL has
_BINARY = (
    frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "vector"}) | SPATIAL_TYPES
)
_UTC = dt.UTC
NAIVE_TS = pa.timestamp("us")
UTC_TS = pa.timestamp("us", tz="UTC")


# ----------------------------------------------------------------------------- types


def _args(column_type: str) -> list[int]:
    """The numbers of ``decimal(12,2)`` / ``bit(10)`` / ``int(11)``; empty when there are none."""
    found = re.search(r"\(([\d\s,]+)\)", column_type)
    return [int(a) for a in found.group(1).split(",")] if found else []


def arrow_type_of(column: Column) -> pa.DataType:
    """The Arrow type of a source column's Delta column (the table in :mod:`gtidsnap.sinks.delta.types`)."""
    t = column.data_type.lower()
    unsigned = column.unsigned
    if t == "tinyint":
        return pa.int16() if unsigned else pa.int8()
    if t == "smallint":
        return pa.int32() if unsigned else pa.int16()
    if t == "mediumint":
        return pa.int32()
    if t in ("int", "integer"):
        return pa.int64() if unsigned else pa.int32()
    if t == "bigint":
        return pa.decimal128(20, 0) if unsigned else pa.int64()
    if t in ("decimal", "numeric"):
        args = _args(column.column_type)
        precision = args[0] if args else 10
        scale = args[1] if len(args) > 1 else 0
        return pa.decimal128(precision, scale) if precision <= MAX_PRECISION else pa.string()
    if t == "float":
        return pa.float32()
    if t in ("double", "real", "double precision"):
        return pa.float64()
    if t == "bit":
        args = _args(column.column_type)
        return pa.int64() if (args[0] if args else 1) <= 63 else pa.decimal128(20, 0)
    if t == "year":
        return pa.int16()
    if t == "date":
        return pa.date32()
    if t == "datetime":
        return NAIVE_TS
    if t == "timestamp":
        return UTC_TS
    if t == "set":
        return pa.list_(pa.string())
    if t in _BINARY:
        return pa.binary()
    return pa.string()  # text types, TIME, JSON, ENUM, UUID/INET4/INET6 (MariaDB) and anything unknown


# ----------------------------------------------------------------------------- values one by one


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


def converter(column: Column | None, arrow_type: pa.DataType) -> Callable[[Any], Any]:
    """Canonical value of ``column`` -> the Python value Arrow builds ``arrow_type`` from (None stays
    None). ``column`` is the source column the values come from (None: unknown, e.g. a dropped column);
    it only matters for JSON, whose canonical value is the parsed document, written as JSON text."""
    fn: Callable[[Any], Any]
    if pa.types.is_string(arrow_type):
        fn = _to_json_text if column is not None and column.data_type.lower() == "json" else _to_text
    elif pa.types.is_integer(arrow_type):
        fn = _to_int
    elif pa.types.is_decimal(arrow_type):
        fn = _to_decimal
    elif pa.types.is_floating(arrow_type):
        fn = float
    elif pa.types.is_binary(arrow_type):
        fn = _to_bytes
    elif pa.types.is_date32(arrow_type):
        fn = _to_date
    elif pa.types.is_timestamp(arrow_type):
        fn = _to_naive if arrow_type.tz is None else _to_utc
    elif pa.types.is_list(arrow_type):
        fn = _to_list
    elif pa.types.is_boolean(arrow_type):
        fn = bool
    else:
        raise ValueError(f"no conversion to Arrow type {arrow_type}")

    def convert(value: Any) -> Any:
        return None if value is None else fn(value)

    return convert


def _as_is(column: Column | None, arrow_type: pa.DataType) -> type | None:
    """The Python type whose values Arrow takes for ``arrow_type`` exactly as they are (their
    converter returns them unchanged), or None."""
    if pa.types.is_string(arrow_type):
        return None if column is not None and column.data_type.lower() == "json" else str
    if pa.types.is_integer(arrow_type):
        return int
    if pa.types.is_decimal(arrow_type):
        return Decimal
    if pa.types.is_float64(arrow_type):
        return float
    return None


def _parsed_by_arrow(arrow_type: pa.DataType) -> bool:
    """Types whose canonical text Arrow's own cast parses to what the value by value path gives."""
    return bool(
        pa.types.is_decimal(arrow_type) or pa.types.is_date32(arrow_type) or pa.types.is_timestamp(arrow_type)
    )


def _one_call(column: Column | None, arrow_type: pa.DataType, values: Sequence[Any]) -> pa.Array | None:
    """``values`` as Arrow in one call when they allow it (None: they do not)."""
    kind = _as_is(column, arrow_type)
    try:
        if kind is not None and all(v is None or type(v) is kind for v in values):
            return pa.array(values, type=arrow_type)
        if _parsed_by_arrow(arrow_type) and all(v is None or type(v) is str for v in values):
            text = pa.array(values, type=pa.string())
            if pa.types.is_timestamp(arrow_type):  # UTC text: parsed as wall time, then read as UTC
                return text.cast(NAIVE_TS).cast(arrow_type)
            if pa.types.is_decimal(arrow_type) and _digits(text) > arrow_type.precision:
                return None  # Arrow's cast wraps a 39-digit text around decimal128(38, s) silently
            return text.cast(arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        pass  # the value by value path names the bad value, or makes None of a zero date
    return None


def _digits(text: pa.Array) -> int:
    """The most digits of a decimal text among ``text`` (its sign and point left out)."""
    marks = pc.add(pc.count_substring(text, "-"), pc.count_substring(text, "."))
    most = pc.max(pc.subtract(pc.utf8_length(text), marks)).as_py()
    return int(most or 0)


def arrow_array(column: Column | None, arrow_type: pa.DataType, values: Sequence[Any]) -> pa.Array:
    """One Arrow column of ``arrow_type`` from canonical values; raises ValueError naming the bad value."""
    whole = _one_call(column, arrow_type, values)
    if whole is not None:
        return whole
    return values_one_by_one(column, arrow_type, values)


def values_one_by_one(column: Column | None, arrow_type: pa.DataType, values: Sequence[Any]) -> pa.Array:
    """:func:`arrow_array` without its one-call paths: every value through its converter."""
    convert = converter(column, arrow_type)
    converted = []
    for value in values:
        try:
            converted.append(convert(value))
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ValueError(f"{value!r} is not a {arrow_type} value: {exc}") from exc
    try:
        return pa.array(converted, type=arrow_type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise ValueError(f"values do not fit {arrow_type}: {exc}") from exc


def column_arrays(
    schema: TableSchema, rows: Sequence[Row], columns: Iterable[Column] | None = None
) -> tuple[list[str], list[pa.Array]]:
    """The data columns of ``rows`` (canonical values; ``columns`` default: the schema's), named and
    typed as their Delta columns; a value that does not fit is a SinkError naming table and column."""
    names: list[str] = []
    arrays: list[pa.Array] = []
    for column in columns if columns is not None else schema.columns:
        values = [row.get(column.name) for row in rows]
        try:
            arrays.append(arrow_array(column, arrow_type_of(column), values))
        except ValueError as exc:
            raise SinkError(f"column {column.name} of {schema.table}: {exc}") from exc
        names.append(column.name)
    return names, arrays


# ----------------------------------------------------------------------------- a chunk as columns


@dataclass(frozen=True)
class ArrowRows:
    """A chunk's rows as one Arrow record batch: the engine moves it whole (it pickles as Arrow's own
    buffers, not a Python object a row), and a window takes the rows it keeps by position."""

    batch: pa.RecordBatch

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    def taken(self, positions: Sequence[int]) -> ArrowRows:
        return ArrowRows(self.batch.take(pa.array(positions, type=pa.int32())))

    def seq_span(self) -> int:
        return len(self)


class ArrowRenderer:
    """What a chunk reader makes of its chunk for a Delta output: the keys (for the window) and the
    rows as :class:`ArrowRows` in the Delta column types. Picklable: it travels with each job."""

    def __call__(
        self, rows: Sequence[tuple[Key, Row]], schema: TableSchema
    ) -> tuple[tuple[Key, ...], ArrowRows]:
        keys = tuple(k for k, _ in rows)
        values = [r for _, r in rows]
        names, arrays = column_arrays(schema, values)
        return keys, ArrowRows(pa.RecordBatch.from_arrays(arrays, names=names))

    def from_columns(self, table: pa.Table, schema: TableSchema) -> tuple[tuple[Key, ...], ArrowRows]:
        """A chunk read as Arrow by the compiled client (:mod:`gtidsnap.source.arrow_chunks`, which reads
        only types it reads exactly, and integer keys): each column cast to its Delta type in one call
        (a cast that would lose a digit raises), the keys from the key columns, as from the values."""
        names = [c.name for c in schema.columns]
        try:
            arrays = [
                table.column(i).cast(arrow_type_of(c)).combine_chunks() for i, c in enumerate(schema.columns)
            ]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SinkError(f"a chunk of {schema.table} does not fit its Delta columns: {exc}") from exc
        at = [names.index(k) for k in schema.key]
        # integers as read (an unsigned BIGINT's Delta column is a DECIMAL; its key is the int)
        keys = tuple(zip(*(table.column(i).to_pylist() for i in at), strict=True))
        if not keys and table.num_rows:  # a key of no columns cannot be: never a silent empty chunk
            raise SinkError(f"a chunk of {schema.table} has rows and no key")
        return keys, ArrowRows(pa.RecordBatch.from_arrays(arrays, names=names))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrowRenderer)

    def __hash__(self) -> int:
        return hash(ArrowRenderer)


# ----------------------------------------------------------------------------- a chunk staged where read

POSITION = "_gtidsnap_pos"  # a staged split's row positions, so a window's kept rows are named by them


@dataclass(frozen=True)
class StagedRows:
    """A chunk's rows in a Parquet file its reader wrote (a Spark executor, say), not in this process:
    what crosses is the file's path, its row count and, once a window dropped some, the positions it
    dropped (ascending; a few where a window's keys changed). The rows are numbered by position: the
    chunk takes as many ``_seq`` numbers as the file has rows, a dropped row's number unused, so the
    Delta sink appends the file by Spark with the dropped positions filtered out and nothing else."""

    path: str
    rows: int
    dropped: tuple[int, ...] = ()

    def __len__(self) -> int:
        return self.rows - len(self.dropped)

    def taken(self, positions: Sequence[int]) -> StagedRows:
        """The rows at ``positions`` (ascending indexes among the rows kept so far), the rest dropped."""
        gone = set(self.dropped)
        kept = [p for p in range(self.rows) if p not in gone]
        now = {kept[i] for i in positions}
        return StagedRows(self.path, self.rows, tuple(p for p in range(self.rows) if p not in now))

    def seq_span(self) -> int:
        return self.rows


def kept_numbers(positions: pa.Array | pa.ChunkedArray, dropped: Sequence[int], first: int) -> pa.Array:
    """The numbers of the kept rows at ``positions`` (none of them dropped), counted in position order
    from ``first``: the position less the dropped positions below it (how splits staged before
    2026-11-27 were numbered, with no number left unused)."""
    import numpy as np

    at = np.asarray(positions, dtype=np.int64)
    below = np.searchsorted(np.asarray(dropped, dtype=np.int64), at, side="left")
    return pa.array(at - below + first, pa.int64())


@dataclass(frozen=True)
class StagedRenderer:
    """What a reader on another machine makes of its chunk for a Delta output: the keys (for the
    window), and the rows as Arrow columns in the Delta types written as one Parquet file under
    ``folder`` (the output's staging folder, which the reader's machine reaches), with each row's
    position. No row travels back: only :class:`StagedRows`."""

    folder: str

    def __call__(
        self, rows: Sequence[tuple[Key, Row]], schema: TableSchema
    ) -> tuple[tuple[Key, ...], StagedRows]:
        keys, rendered = ArrowRenderer()(rows, schema)
        return keys, self._staged(rendered.batch)

    def from_columns(self, table: pa.Table, schema: TableSchema) -> tuple[tuple[Key, ...], StagedRows]:
        """A chunk read as Arrow by the compiled client (:meth:`ArrowRenderer.from_columns`), staged."""
        keys, rendered = ArrowRenderer().from_columns(table, schema)
        return keys, self._staged(rendered.batch)

    def _staged(self, batch: pa.RecordBatch) -> StagedRows:
        import uuid

        import pyarrow.fs as pafs
        import pyarrow.parquet as pq

        table = pa.Table.from_batches([batch]).append_column(
            POSITION, pa.array(range(batch.num_rows), pa.int64())
        )
        uri = f"{self.folder.rstrip('/')}/{uuid.uuid4().hex}.parquet"
        filesystem, path = (
            (pafs.LocalFileSystem(), uri)
            if "://" not in uri and not uri.startswith("file:")
            else pafs.FileSystem.from_uri(uri.replace("s3a://", "s3://", 1))
        )
        filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with filesystem.open_output_stream(path) as stream:
            # read back once: no dictionaries or statistics (a third of pyarrow's writing time)
            pq.write_table(table, stream, compression="snappy", use_dictionary=False, write_statistics=False)
        return StagedRows(uri, batch.num_rows)
