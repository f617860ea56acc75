"""Row images decoded by a reader built once per table shape, instead of python-mysql-replication's
per-value dispatch (an ``if``/``elif`` over the column type and a packet method call for every value
of every row: about three quarters of the stream's CPU time in a profile).

The library stays the protocol layer: it reads the event header, the table map and the column
metadata; only the row bytes are decoded here, with the same results as the library plus gtidsnap's
fixes in :mod:`gtidsnap.binlog_values` (the same pure decoders). What is not plain (a partial JSON
update, a MINIMAL row image, a column without a name, a type not listed) goes to the library as before
(:meth:`gtidsnap.binlog_translator.EventTranslator` reads ``event.rows`` then). Each value goes
straight through its column's converter, so the library's rows are never built.
"""

from __future__ import annotations

import codecs
import datetime as dt
import struct
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from pymysqlreplication import json_binary
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent

from gtidsnap.binlog_values import (
    decode_date,
    decode_datetime,
    decode_datetime2,
    decode_time,
    decode_time2,
    fraction_bytes,
)

# A value reader: (row bytes, offset) -> (value, offset after it).
ValueReader = Callable[[bytes, int], tuple[Any, int]]
# One row image normalised: (row bytes, offset) -> (values, offset after it).
NormalImageReader = Callable[[bytes, int], tuple[dict[str, Any], int]]
Converter = Callable[[Any], Any]

_EPOCH = dt.datetime(1970, 1, 1)
_DECIMAL_DIGITS = 9  # digits per full 4-byte word of a DECIMAL
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a partial word by its digits
_CACHE_LIMIT = 512  # table shapes kept; a new shape beyond it clears the cache


def _fixed(fmt: str) -> ValueReader:
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return unpack(data, pos)[0], pos + size

    return read


def _int24(signed: bool) -> ValueReader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return int.from_bytes(data[pos : pos + 3], "little", signed=signed), pos + 3

    return read


def _length_coded(size: int) -> Callable[[bytes, int], tuple[bytes, int]]:
    """Bytes after a little-endian length of ``size`` bytes (a VARCHAR, BLOB, GEOMETRY, JSON)."""
    if size == 1:

        def read1(data: bytes, pos: int) -> tuple[bytes, int]:
            end = pos + 1 + data[pos]
            return data[pos + 1 : end], end

        return read1

    def read(data: bytes, pos: int) -> tuple[bytes, int]:
        start = pos + size
        end = start + int.from_bytes(data[pos:start], "little")
        return data[start:end], end

    return read


def _text(size: int, charset: str | None, errors: str) -> ValueReader:
    """As the library's ``__read_string``: the column's charset's codec, the raw bytes if Python has
    no such codec (an empty value then is ``""``, as there), UTF-8 when the table map named none."""
    raw = _length_coded(size)
    encoding = "utf-8" if charset is None else RowsEvent.charset_to_encoding(charset)
    try:
        codecs.lookup(encoding)
    except LookupError:  # e.g. "binary": bytes, but an empty value decodes (no codec is looked up)

        def read_raw(data: bytes, pos: int) -> tuple[Any, int]:
            value, end = raw(data, pos)
            return (value if value else ""), end

        return read_raw

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value, end = raw(data, pos)
        return value.decode(encoding, errors), end

    return read


def _decimal(precision: int, decimals: int) -> ValueReader:
    """As the library's ``__read_new_decimal`` for every value a server writes: groups of up to nine
    decimal digits in big-endian integers, the sign in the top bit, every bit but it inverted for a
    negative value; the ``Decimal`` has exactly ``decimals`` places (``-0.00`` stays negative)."""
    full_int, part_int = divmod(precision - decimals, _DECIMAL_DIGITS)
    full_frac, part_frac = divmod(decimals, _DECIMAL_DIGITS)
    groups = [(_DECIMAL_BYTES[part_int], part_int)] if part_int else []
    groups += [(4, _DECIMAL_DIGITS)] * (full_int + full_frac)
    groups += [(_DECIMAL_BYTES[part_frac], part_frac)] if part_frac else []
    size = sum(nbytes for nbytes, _ in groups)
    sign_bit = 1 << (8 * size - 1)
    negative_mask = ((1 << (8 * size)) - 1) ^ sign_bit
    # From the last group back: (bits to shift off, bit mask, its weight in the unscaled integer).
    steps: list[tuple[int, int, int]] = []
    weight = 1
    for nbytes, digits in reversed(groups):
        steps.append((8 * nbytes, (1 << (8 * nbytes)) - 1, weight))
        weight *= 10**digits
    exponent = f"E-{decimals}"

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        n = int.from_bytes(data[pos : pos + size], "big")
        negative = not n & sign_bit
        n ^= negative_mask if negative else sign_bit
        unscaled = 0
        for bits, mask, weight in steps:
            unscaled += (n & mask) * weight
            n >>= bits
        return Decimal(f"-{unscaled}{exponent}" if negative else f"{unscaled}{exponent}"), pos + size

    return read


def _sized(reader: Callable[[bytes], Any], size: int) -> ValueReader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return reader(data[pos : pos + size]), pos + size

    return read


def _fsp_reader(decode: Callable[[bytes, int], Any], base: int, fsp: int) -> ValueReader:
    size = base + fraction_bytes(fsp)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return decode(data[pos : pos + size], fsp), pos + size

    return read


def _timestamp2(fsp: int) -> ValueReader:
    """As the library: seconds (big-endian), then the fraction scaled to microseconds; naive UTC."""
    frac = (fsp + 1) // 2
    scale = 10 ** (6 - fsp)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        seconds = int.from_bytes(data[pos : pos + 4], "big", signed=True)
        value = _EPOCH + dt.timedelta(seconds=seconds)
        if frac:
            micro = int.from_bytes(data[pos + 4 : pos + 4 + frac], "big", signed=True)
            if fsp % 2:
                micro = int(micro / 10)
            micro *= scale
            if micro > 0:
                value = value.replace(microsecond=micro)
        return value, pos + 4 + frac

    return read


def _timestamp(data: bytes, pos: int) -> tuple[Any, int]:
    return _EPOCH + dt.timedelta(seconds=int.from_bytes(data[pos : pos + 4], "little")), pos + 4


def _year(data: bytes, pos: int) -> tuple[Any, int]:
    return data[pos] + 1900, pos + 1


def _uint(size: int) -> ValueReader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return int.from_bytes(data[pos : pos + size], "little"), pos + size

    return read


def _enum(size: int, values: Sequence[str] | None) -> ValueReader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        index = int.from_bytes(data[pos : pos + size], "little")
        return (values[index] if values else None), pos + size

    return read


def _bits(bits: int, size: int) -> ValueReader:
    """As the library's ``__read_bit``: the value's ``bits`` lowest bits as a text of 0s and 1s."""
    mask = (1 << bits) - 1

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return format(int.from_bytes(data[pos : pos + size], "big") & mask, f"0{bits}b"), pos + size

    return read


def _json(size: int) -> ValueReader:
    raw = _length_coded(size)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value, end = raw(data, pos)
        return (json_binary.parse_json(value[0], value[1:]) if value else None), end

    return read


def value_reader(column: Any, errors: str = "strict") -> ValueReader | None:
    """The reader of one column's values, from the library's column metadata; None for a type this
    module leaves to the library (ENUM and SET come here only through :func:`image_reader`)."""
    kind, unsigned = column.type, column.unsigned
    if kind == FIELD_TYPE.TINY:
        return _fixed("<B" if unsigned else "<b")
    if kind == FIELD_TYPE.SHORT:
        return _fixed("<H" if unsigned else "<h")
    if kind == FIELD_TYPE.INT24:
        return _int24(not unsigned)
    if kind == FIELD_TYPE.LONG:
        return _fixed("<I" if unsigned else "<i")
    if kind == FIELD_TYPE.LONGLONG:
        return _fixed("<Q" if unsigned else "<q")
    if kind == FIELD_TYPE.FLOAT:
        return _fixed("<f")
    if kind == FIELD_TYPE.DOUBLE:
        return _fixed("<d")
    if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _text(2 if column.max_length > 255 else 1, column.character_set_name, errors)
    if kind == FIELD_TYPE.BLOB:
        return _text(column.length_size, column.character_set_name, errors)
    if kind == FIELD_TYPE.NEWDECIMAL:
        return _decimal(column.precision, column.decimals)
    if kind == FIELD_TYPE.DATE:
        return _sized(decode_date, 3)
    if kind == FIELD_TYPE.DATETIME:
        return _sized(decode_datetime, 8)
    if kind == FIELD_TYPE.TIME:
        return _sized(decode_time, 3)
    if kind == FIELD_TYPE.DATETIME2:
        return _fsp_reader(decode_datetime2, 5, column.fsp)
    if kind == FIELD_TYPE.TIME2:
        return _fsp_reader(decode_time2, 3, column.fsp)
    if kind == FIELD_TYPE.TIMESTAMP:
        return _timestamp
    if kind == FIELD_TYPE.TIMESTAMP2:
        return _timestamp2(column.fsp)
    if kind == FIELD_TYPE.YEAR:
        return _year
    if kind == FIELD_TYPE.ENUM:
        return _enum(column.size, column.enum_values)
    if kind == FIELD_TYPE.BIT:
        return _bits(column.bits, column.bytes)
    if kind == FIELD_TYPE.GEOMETRY:
        return _length_coded(column.length_size)
    if kind == FIELD_TYPE.JSON:
        return _json(column.length_size)
    return None


def _set(size: int, members: Sequence[str]) -> ValueReader:
    """A SET's members; None for an empty one (told apart from NULL in none_sources, as there)."""
    members = tuple(members)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        mask = int.from_bytes(data[pos : pos + size], "little")
        return ({m for bit, m in enumerate(members) if mask >> bit & 1} or None), pos + size

    return read


def _set_or_empty(size: int, members: Sequence[str]) -> ValueReader:
    """A SET's members, an empty set for none (what gtidsnap makes of the library's None and its
    EMPTY_SET source)."""
    read_set = _set(size, members)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value, end = read_set(data, pos)
        return (set() if value is None else value), end

    return read


def normal_image_reader(
    columns: Sequence[Any], errors: str, converters: Mapping[str, Converter], other: Converter
) -> NormalImageReader | None:
    """The reader of one FULL row image whose every value goes through its column's converter at
    once (``other`` for a name without one): what :meth:`TableSchema.normalize_row` makes of
    :func:`gtidsnap.binlog_values.row_values` of the library's row, without building that row first.
    None if any column is left to the library."""
    readers: list[tuple[int, str, ValueReader, Converter]] = []
    for i, column in enumerate(columns):
        if not column.name:
            return None
        if column.type == FIELD_TYPE.SET:
            reader: ValueReader | None = _set_or_empty(column.size, column.set_values or ())
        else:
            reader = value_reader(column, errors)
        if reader is None:
            return None
        readers.append((i, column.name, reader, converters.get(column.name, other)))
    null_bytes = (len(columns) + 7) // 8

    def read_with_nulls(data: bytes, pos: int, nulls: int) -> tuple[dict[str, Any], int]:
        values: dict[str, Any] = {}
        for i, name, reader, convert in readers:
            if nulls >> i & 1:
                values[name] = convert(None)
                continue
            value, pos = reader(data, pos)
            values[name] = convert(value)
        return values, pos

    # An image without NULLs, the common case, is read by a function written out for this shape
    # (the bits of the NULL bitmap past the last column are not NULLs: servers set them):
    # one call per value and one dict display, no loop (a third of this reader's time). Its text holds
    # only generated variable names; column names, readers and converters are bound as values.
    namespace: dict[str, Any] = {"from_bytes": int.from_bytes, "with_nulls": read_with_nulls}
    for k, (_, name, reader, convert) in enumerate(readers):
        namespace |= {f"r{k}": reader, f"c{k}": convert, f"n{k}": name}
    count = len(readers)
    reads = "".join(f"    v{k}, pos = r{k}(data, pos)\n" for k in range(count))
    display = ", ".join(f"n{k}: c{k}(v{k})" for k in range(count))
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


def _normal_reader_of(
    columns: Sequence[Any], errors: str, converters: Mapping[str, Converter], other: Converter
) -> NormalImageReader | None:
    # Keyed by the converters' identity; the entry holds them, so the id is not reused meanwhile.
    key = (errors, id(converters), id(other), _shape(columns))
    try:
        return _normal_readers[key][2]
    except KeyError:
        if len(_normal_readers) >= _CACHE_LIMIT:
            _normal_readers.clear()
        reader = normal_image_reader(columns, errors, converters, other)
        _normal_readers[key] = (converters, other, reader)
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
    data = _rest_of(event)
    images: list[dict[str, Any]] = []
    pos, end = 0, len(data)
    while pos < end:
        values, pos = read(data, pos)
        images.append(values)
    return images
