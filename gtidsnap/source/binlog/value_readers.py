"""One column's value read straight from a row image's bytes: a reader per column type, built once
per table shape (:mod:`gtidsnap.source.binlog.row_images` puts them together per row image). Each
gives what python-mysql-replication's per-value dispatch gives, with gtidsnap's fixes from
:mod:`gtidsnap.source.binlog.values`; None for a column left to the library."""

from __future__ import annotations

import codecs
import datetime as dt
import struct
import sys
from codecs import charmap_decode
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from pymysqlreplication import json_binary
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import RowsEvent

from gtidsnap.source.binlog.values import (
    decode_date,
    decode_datetime,
    decode_datetime2,
    decode_time,
    decode_time2,
    fraction_bytes,
)

_ASCII = "".join(map(chr, range(128)))

# A value reader: (row bytes, offset) -> (value, offset after it).
ValueReader = Callable[[bytes, int], tuple[Any, int]]

_EPOCH = dt.datetime(1970, 1, 1)
_DECIMAL_DIGITS = 9  # digits per full 4-byte word of a DECIMAL
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes of a partial word by its digits


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

    table = _ascii_charmap(encoding)
    if table is not None:  # a single-byte charset (latin1, cp1250, ...): its ASCII text decoded as such

        def read_charmap(data: bytes, pos: int) -> tuple[Any, int]:
            value, end = raw(data, pos)
            if value.isascii():
                return value.decode("ascii"), end
            return charmap_decode(value, errors, table)[0], end

        return read_charmap

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value, end = raw(data, pos)
        return value.decode(encoding, errors), end

    return read


def _ascii_charmap(encoding: str) -> str | None:
    """The decoding table of a single-byte codec that maps ASCII to itself (what ``bytes.decode`` with
    it runs, through a Python frame per value: ~10x the C ASCII decode, which gives the same text for
    ASCII bytes); None for any other codec (UTF-8, multi-byte ones: decoded as they are)."""
    decode = codecs.lookup(encoding).decode
    module = sys.modules.get(getattr(decode, "__module__", "") or "")
    table = getattr(module, "decoding_table", None) if module is not None else None
    if not isinstance(table, str) or len(table) != 256 or table[:128] != _ASCII:
        return None
    return table


# A DECIMAL read as its parts: (row bytes, offset) -> (negative, unscaled integer, offset after it).
DecimalPartsReader = Callable[[bytes, int], tuple[bool, int, int]]


def decimal_parts(precision: int, decimals: int) -> DecimalPartsReader:
    """As the library's ``__read_new_decimal`` for every value a server writes: groups of up to nine
    decimal digits in big-endian integers, the sign in the top bit, every bit but it inverted for a
    negative value; read as the sign and the unscaled integer (the value is that over ``10**decimals``;
    a negative zero keeps its sign)."""
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

    def read(data: bytes, pos: int) -> tuple[bool, int, int]:
        n = int.from_bytes(data[pos : pos + size], "big")
        negative = not n & sign_bit
        n ^= negative_mask if negative else sign_bit
        unscaled = 0
        for bits, mask, weight in steps:
            unscaled += (n & mask) * weight
            n >>= bits
        return negative, unscaled, pos + size

    return read


def _decimal(precision: int, decimals: int) -> ValueReader:
    """A DECIMAL (:func:`decimal_parts`) as a ``Decimal`` of exactly ``decimals`` places (``-0.00``
    stays negative)."""
    parts = decimal_parts(precision, decimals)
    exponent = f"E-{decimals}"

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        negative, unscaled, end = parts(data, pos)
        return Decimal(f"-{unscaled}{exponent}" if negative else f"{unscaled}{exponent}"), end

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


def set_or_empty(size: int, members: Sequence[str]) -> ValueReader:
    """A SET's members, an empty set for none (what gtidsnap makes of the library's None and its
    EMPTY_SET source)."""
    read_set = _set(size, members)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        value, end = read_set(data, pos)
        return (set() if value is None else value), end

    return read
