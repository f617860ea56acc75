"""Row images decoded by a reader built once per table shape, instead of python-mysql-replication's
per-value dispatch (an ``if``/``elif`` over the column type and a packet method call for every value
of every row: about three quarters of the stream's CPU time in a profile).

The library stays the protocol layer: it reads the event header, the table map and the column
metadata; only the row bytes are decoded here, with the same results as the library plus gtidsnap's
fixes in :mod:`gtidsnap.source.binlog.values` (the same pure decoders). What is not plain (a partial JSON
update, a MINIMAL row image, a column without a name, a type not listed) goes to the library as before
(:meth:`gtidsnap.source.binlog.translator.EventTranslator` reads ``event.rows`` then). Each value goes
straight through its column's converter, so the library's rows are never built; a DATETIME or DECIMAL
is read as its normal text at once (:mod:`gtidsnap.source.binlog.normal_readers`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import UpdateRowsEvent

from gtidsnap.source.binlog.normal_readers import normal_reader
from gtidsnap.source.binlog.value_readers import ValueReader, set_or_empty, value_reader

# One row image normalised: (row bytes, offset) -> (values, offset after it).
NormalImageReader = Callable[[bytes, int], tuple[dict[str, Any], int]]
Converter = Callable[[Any], Any]

_CACHE_LIMIT = 512  # table shapes kept; a new shape beyond it clears the cache


def normal_image_reader(
    columns: Sequence[Any], errors: str, converters: Mapping[str, Converter], other: Converter
) -> NormalImageReader | None:
    """The reader of one FULL row image whose every value goes through its column's converter at
    once (``other`` for a name without one): what :meth:`TableSchema.normalize_row` makes of
    :func:`gtidsnap.source.binlog.values.row_values` of the library's row, without building that row first.
    None if any column is left to the library."""
    # (index, name, reader, converter, whether the reader gives the converted value itself)
    readers: list[tuple[int, str, ValueReader, Converter, bool]] = []
    for i, column in enumerate(columns):
        if not column.name:
            return None
        convert = converters.get(column.name, other)
        normal = normal_reader(column, errors, convert)
        if normal is not None:
            readers.append((i, column.name, normal, convert, True))
            continue
        if column.type == FIELD_TYPE.SET:
            reader: ValueReader | None = set_or_empty(column.size, column.set_values or ())
        else:
            reader = value_reader(column, errors)
        if reader is None:
            return None
        readers.append((i, column.name, reader, convert, False))
    null_bytes = (len(columns) + 7) // 8

    def read_with_nulls(data: bytes, pos: int, nulls: int) -> tuple[dict[str, Any], int]:
        values: dict[str, Any] = {}
        for i, name, reader, convert, converted in readers:
            if nulls >> i & 1:
                values[name] = convert(None)
                continue
            value, pos = reader(data, pos)
            values[name] = value if converted else convert(value)
        return values, pos

    # An image without NULLs, the common case, is read by a function written out for this shape
    # (the bits of the NULL bitmap past the last column are not NULLs: servers set them):
    # one call per value and one dict display, no loop (a third of this reader's time). Its text holds
    # only generated variable names; column names, readers and converters are bound as values.
    namespace: dict[str, Any] = {"from_bytes": int.from_bytes, "with_nulls": read_with_nulls}
    for k, (_, name, reader, convert, _converted) in enumerate(readers):
        namespace |= {f"r{k}": reader, f"c{k}": convert, f"n{k}": name}
    count = len(readers)
    reads = "".join(f"    v{k}, pos = r{k}(data, pos)\n" for k in range(count))
    display = ", ".join(
        f"n{k}: v{k}" if converted else f"n{k}: c{k}(v{k})" for k, (*_, converted) in enumerate(readers)
    )
    source = (
        "def read(data, pos):\n"
        f"    nulls = from_bytes(data[pos : pos + {null_bytes}], 'little') & {(1 << count) - 1}\n"
        f"    if nulls:\n        return with_nulls(data, pos + {null_bytes}, nulls)\n"
        f"    pos += {null_bytes}\n{reads}    return {{{display}}}, pos\n"
    )
    exec(compile(source, f"<row image reader of {count} columns>", "exec"), namespace)
    read: NormalImageReader = namespace["read"]
    return read


def _shape(columns: Sequence[Any]) -> tuple[Any, ...]:
    """What a reader is built from: equal shapes share one reader across table map events."""
    return tuple(
        (
            c.type,
            c.name,
            c.unsigned,
            c.character_set_name,
            getattr(c, "max_length", None),
            getattr(c, "size", None),
            getattr(c, "fsp", None),
            getattr(c, "length_size", None),
            getattr(c, "precision", None),
            getattr(c, "decimals", None),
            getattr(c, "bits", None),
            tuple(c.enum_values or ()),
            tuple(c.set_values or ()),
        )
        for c in columns
    )


_decoded_here = 0  # rows events read by this module
_left_to_library = 0  # rows events this module declined


def decoded_here() -> int:
    """How many rows events this module has read in this process (tests, benchmarks)."""
    return _decoded_here


def left_to_library() -> int:
    """How many rows events this module left to the library in this process."""
    return _left_to_library


def _all_present(bitmap: bytes, columns: int) -> bool:
    every = (1 << columns) - 1
    return int.from_bytes(bitmap, "little") & every == every


_normal_readers: dict[
    tuple[Any, ...], tuple[Mapping[str, Converter], Converter, NormalImageReader | None]
] = {}


# The last reader found, by the identity of its columns list: a table map parsed once per table version
# (:mod:`gtidsnap.source.binlog.table_maps`) hands every rows event of that version the same list, so
# a run of events of one table finds its reader without computing the shape (once per event otherwise:
# a per-transaction cost of small transactions). The entry holds the list, so its id is not reused.
_last: tuple[Sequence[Any], str, Mapping[str, Converter], Converter, NormalImageReader | None] | None = None


def _normal_reader_of(
    columns: Sequence[Any], errors: str, converters: Mapping[str, Converter], other: Converter
) -> NormalImageReader | None:
    global _last
    last = _last
    if (
        last is not None
        and last[0] is columns
        and last[1] == errors
        and last[2] is converters
        and last[3] is other
    ):
        return last[4]
    # Keyed by the converters' identity; the entry holds them, so the id is not reused meanwhile.
    key = (errors, id(converters), id(other), _shape(columns))
    try:
        reader = _normal_readers[key][2]
    except KeyError:
        if len(_normal_readers) >= _CACHE_LIMIT:
            _normal_readers.clear()
        reader = normal_image_reader(columns, errors, converters, other)
        _normal_readers[key] = (converters, other, reader)
    _last = (columns, errors, converters, other, reader)
    return reader


def _readable(event: Any) -> bool:
    """Whether this module reads the event's rows: whole images of a plain rows event."""
    if event.event_type == BINLOG.PARTIAL_UPDATE_ROWS_EVENT:
        return False
    count = len(event.columns)
    if not _all_present(event.columns_present_bitmap, count):
        return False  # a MINIMAL or NOBLOB image
    return not isinstance(event, UpdateRowsEvent) or _all_present(event.columns_present_bitmap2, count)


def _rest_of(event: Any) -> bytes:
    global _decoded_here
    _decoded_here += 1
    data: bytes = event.packet.read(event.event_size - event.packet.read_bytes)
    return data


def normalized_images(
    event: Any, converters: Mapping[str, Converter], other: Converter
) -> list[dict[str, Any]] | None:
    """Every row image of a WRITE/UPDATE/DELETE rows event in order (an update's before, then its
    after), each value through ``converters`` as :func:`normal_image_reader` says, reading the rest
    of the event; None (nothing read) if the event is left to the library or its rows were read
    already (``event.rows`` has them)."""
    if getattr(event, "_RowsEvent__rows", None) is not None:
        return None
    if not event.complete:
        return []
    errors = "ignore" if event._ignore_decode_errors else "strict"
    read = _normal_reader_of(event.columns, errors, converters, other) if _readable(event) else None
    if read is None:
        global _left_to_library
        _left_to_library += 1
        return None
    return read_images(read, _rest_of(event))


def rows_bytes(event: Any, converters: Mapping[str, Converter], other: Converter) -> tuple[str, bytes] | None:
    """The decode-errors mode and the row bytes of a rows event this module reads (the rest of the
    event, consumed), for a reader made elsewhere (:mod:`gtidsnap.source.binlog.row_decoders`); None
    (nothing read) where :func:`normalized_images` would not read the rows, or would find none."""
    if getattr(event, "_RowsEvent__rows", None) is not None or not event.complete or not _readable(event):
        return None
    errors = "ignore" if event._ignore_decode_errors else "strict"
    if _normal_reader_of(event.columns, errors, converters, other) is None:
        return None
    return errors, _rest_of(event)


def read_images(read: NormalImageReader, data: bytes) -> list[dict[str, Any]]:
    """Every row image in ``data`` (a rows event's row bytes), in order."""
    images: list[dict[str, Any]] = []
    pos, end = 0, len(data)
    while pos < end:
        values, pos = read(data, pos)
        images.append(values)
    return images
