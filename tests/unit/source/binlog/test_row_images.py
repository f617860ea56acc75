"""The row-image readers against python-mysql-replication's own decode (with gtidsnap's fixes), on
the same bytes: random column shapes, random values (NULLs, empty sets, negative decimals, invalid
dates), several rows per event. Equal rows, or the same exception from both."""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import pymysql.protocol
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysqlreplication.column import Column
from pymysqlreplication.constants import BINLOG, FIELD_TYPE
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import RowsEvent, UpdateRowsEvent, WriteRowsEvent

from gtidsnap.core.column_values import plain_value, value_converter
from gtidsnap.core.schema import Column as SchemaColumn
from gtidsnap.source.binlog import row_images
from gtidsnap.source.binlog.values import row_values

Value = st.SearchStrategy[bytes]


def _column(kind: int, **facts: Any) -> Column:
    base = {"type": kind, "name": None, "unsigned": False, "character_set_name": None}
    base |= {"enum_values": None, "set_values": None}
    return Column(**{**base, **facts})


@st.composite
def _decimal_bytes(draw: st.DrawFn, precision: int, decimals: int) -> bytes:
    """A valid DECIMAL(precision, decimals) image: digit groups within range, sign in the top bit,
    every byte inverted for a negative value."""
    sizes = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
    full_int, part_int = divmod(precision - decimals, 9)
    full_frac, part_frac = divmod(decimals, 9)
    groups = [(sizes[part_int], 10**part_int)] if part_int else []
    groups += [(4, 10**9)] * (full_int + full_frac)
    groups += [(sizes[part_frac], 10**part_frac)] if part_frac else []
    raw = bytearray()
    for size, limit in groups:
        raw += draw(st.integers(0, limit - 1)).to_bytes(size, "big")
    raw[0] |= 0x80
    if draw(st.booleans()):
        raw = bytearray(b ^ 0xFF for b in raw)
    return bytes(raw)


def _length_coded(size: int, body: bytes) -> bytes:
    return len(body).to_bytes(size, "little") + body


# single-byte charsets (decoded through their table), multi-byte and non-ASCII-compatible ones
_CHARSETS = st.sampled_from(
    [None, "utf8mb4", "latin1", "binary", "latin2", "cp1250", "koi8r", "sjis", "utf16"]
)
_TEXT = st.text(max_size=20).map(lambda s: s.encode("utf-8"))
_ANY_BYTES = st.binary(max_size=20)


_KINDS = [
    *(FIELD_TYPE.TINY, FIELD_TYPE.SHORT, FIELD_TYPE.INT24, FIELD_TYPE.LONG, FIELD_TYPE.LONGLONG),
    *(FIELD_TYPE.FLOAT, FIELD_TYPE.DOUBLE, FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING, FIELD_TYPE.BLOB),
    *(FIELD_TYPE.NEWDECIMAL, FIELD_TYPE.DATE, FIELD_TYPE.DATETIME, FIELD_TYPE.TIME, FIELD_TYPE.DATETIME2),
    *(FIELD_TYPE.TIME2, FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2, FIELD_TYPE.YEAR, FIELD_TYPE.ENUM),
    *(FIELD_TYPE.SET, FIELD_TYPE.BIT, FIELD_TYPE.GEOMETRY, FIELD_TYPE.JSON),
]


@st.composite
def column_and_values(draw: st.DrawFn) -> tuple[Column, Value]:
    """A column definition as the library builds it from a table map, and its value images."""
    kind = draw(st.sampled_from(_KINDS))
    unsigned = draw(st.booleans())
    fixed = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4}
    fixed |= {FIELD_TYPE.LONGLONG: 8, FIELD_TYPE.FLOAT: 4, FIELD_TYPE.DOUBLE: 8, FIELD_TYPE.YEAR: 1}
    fixed |= {FIELD_TYPE.DATE: 3, FIELD_TYPE.DATETIME: 8, FIELD_TYPE.TIME: 3, FIELD_TYPE.TIMESTAMP: 4}
    if kind in fixed:
        n = fixed[kind]
        return _column(kind, unsigned=unsigned), st.binary(min_size=n, max_size=n)
    if kind in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        max_length = draw(st.sampled_from([10, 255, 256, 3000]))
        charset = draw(_CHARSETS)
        column = _column(kind, max_length=max_length, character_set_name=charset)
        size = 2 if max_length > 255 else 1
        return column, st.one_of(_TEXT, _ANY_BYTES).map(lambda b: _length_coded(size, b))
    if kind == FIELD_TYPE.BLOB:
        size = draw(st.integers(1, 4))
        column = _column(kind, length_size=size, character_set_name=draw(_CHARSETS))
        return column, st.one_of(_TEXT, _ANY_BYTES).map(lambda b: _length_coded(size, b))
    if kind == FIELD_TYPE.NEWDECIMAL:
        precision = draw(st.integers(1, 65))
        decimals = draw(st.integers(0, min(30, precision)))
        return _column(kind, precision=precision, decimals=decimals), _decimal_bytes(precision, decimals)
    if kind in (FIELD_TYPE.DATETIME2, FIELD_TYPE.TIME2, FIELD_TYPE.TIMESTAMP2):
        fsp = draw(st.integers(0, 6))
        n = {FIELD_TYPE.DATETIME2: 5, FIELD_TYPE.TIME2: 3, FIELD_TYPE.TIMESTAMP2: 4}[kind] + (fsp + 1) // 2
        return _column(kind, fsp=fsp), st.binary(min_size=n, max_size=n)
    if kind in (FIELD_TYPE.ENUM, FIELD_TYPE.SET):
        size = draw(st.sampled_from([1, 2] if kind == FIELD_TYPE.ENUM else [1, 2, 3, 4, 8]))
        members = draw(st.lists(st.text(min_size=1, max_size=5), unique=True, max_size=min(10, 8 * size)))
        facts = {"enum_values" if kind == FIELD_TYPE.ENUM else "set_values": members or None}
        if kind == FIELD_TYPE.ENUM:
            index = st.integers(0, max(len(members) - 1, 0))
        else:
            index = st.integers(0, (1 << len(members)) - 1)
        return _column(kind, size=size, **facts), index.map(lambda i: i.to_bytes(size, "little"))
    if kind == FIELD_TYPE.BIT:
        bits = draw(st.integers(1, 64))
        n = (bits + 7) // 8
        return _column(kind, bits=bits, bytes=n), st.binary(min_size=n, max_size=n)
    if kind == FIELD_TYPE.GEOMETRY:
        return _column(kind, length_size=4), _ANY_BYTES.map(lambda b: _length_coded(4, b))
    json_values = st.one_of(
        st.just(b""),
        st.sampled_from([b"\x04\x00", b"\x04\x01", b"\x04\x02"]),  # null, true, false
        st.integers(-(2**15), 2**15 - 1).map(lambda i: b"\x05" + struct.pack("<h", i)),
        st.text(max_size=30).map(lambda s: b"\x0c" + bytes([len(s.encode())]) + s.encode()),
    )
    return _column(FIELD_TYPE.JSON, length_size=4), json_values.map(lambda b: _length_coded(4, b))


@st.composite
def events(draw: st.DrawFn) -> tuple[bool, list[Column], bytes]:
    """(an update?, the columns, the row bytes of one to four rows of one or two images each)."""
    shapes = draw(st.lists(column_and_values(), min_size=1, max_size=12))
    columns = [c for c, _ in shapes]
    for i, column in enumerate(columns):
        column.name = f"c{i}"
    update = draw(st.booleans())
    data = bytearray()
    for _ in range(draw(st.integers(1, 4)) * (2 if update else 1)):
        nulls = [draw(st.booleans()) if draw(st.integers(0, 3)) == 0 else False for _ in columns]
        bitmap = sum(1 << i for i, null in enumerate(nulls) if null)
        size = (len(columns) + 7) // 8
        bitmap |= draw(st.integers(0, 2 ** (8 * size - len(columns)) - 1)) << len(columns)  # unused bits
        data += bitmap.to_bytes(size, "little")
        for null, (_, values) in zip(nulls, shapes, strict=True):
            if not null:
                data += draw(values)
    return update, columns, bytes(data)


KEEP = lambda v: v  # noqa: E731  (a converter that keeps the value)


def _event(update: bool, columns: list[Column], data: bytes) -> RowsEvent:
    """A rows event as the library holds it once its header is read: only the rows left to read."""
    packet = object.__new__(BinLogPacketWrapper)
    packet._BinLogPacketWrapper__data_buffer = b""  # type: ignore[attr-defined]
    packet.read_bytes = 0
    packet.packet = pymysql.protocol.MysqlPacket(data, "utf8")
    event: Any = object.__new__(UpdateRowsEvent if update else WriteRowsEvent)
    full = b"\xff" * ((len(columns) + 7) // 8)
    event.__dict__.update(
        packet=packet,
        event_size=len(data),
        complete=True,
        event_type=BINLOG.UPDATE_ROWS_EVENT_V2 if update else BINLOG.WRITE_ROWS_EVENT_V2,
        table_id=1,
        table_map={1: type("Table", (), {"columns": columns})()},
        columns=columns,
        columns_present_bitmap=full,
        columns_present_bitmap2=full,
        _ignore_decode_errors=False,
        _ctl_connection=None,
        _RowsEvent__none_sources={},
        _RowsEvent__use_column_name_cache=False,
        _RowsEvent__enable_logging=False,
        _RowsEvent__rows=None,
    )
    return event


def _comparable(value: Any) -> Any:
    """NaN equal to NaN (a FLOAT's bytes may hold one), a Decimal equal only to one written the same
    (``0.00`` is not ``0``, nor ``-0.00`` ``0.00``), all else as it is."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, Decimal):
        return ("Decimal", str(value))
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    return value


def _outcome(decode: Any) -> tuple[str, Any]:
    try:
        return "rows", _comparable(decode())
    except Exception as exc:  # the same failure from both is agreement
        return "error", type(exc).__name__


def _library_rows(event: RowsEvent) -> list[dict[str, Any]]:
    rows = []
    while event.packet.read_bytes < event.event_size:
        rows.append(event._fetch_one_row())  # type: ignore[attr-defined]
    return rows


def _converted(rows: list[dict[str, Any]], converters: dict[str, Any], other: Any) -> list[dict[str, Any]]:
    """What the translator made of the library's rows before: row_values, then each converter."""
    prefixes = ("before_", "after_") if rows and "after_values" in rows[0] else ("",)
    images = [row_values(row, prefix) for row in rows for prefix in prefixes]
    return [{name: converters.get(name, other)(v) for name, v in image.items()} for image in images]


@settings(max_examples=600, deadline=None)
@given(events())
def test_normalized_images_convert_what_the_library_reads(case: tuple[bool, list[Column], bytes]) -> None:
    """Each value through its column's converter (the others through ``other``), an empty SET as
    ``set()``: what the translator made of the library's rows with row_values and normalize_row."""
    update, columns, data = case
    converters = {c.name: (lambda v, name=c.name: (name, v)) for c in columns[::2]}
    other = lambda v: ("other", v)  # noqa: E731
    expected = _outcome(lambda: _converted(_library_rows(_event(update, columns, data)), converters, other))
    ours = _outcome(lambda: row_images.normalized_images(_event(update, columns, data), converters, other))
    assert ours == expected


def test_rows_read_already_are_not_read_again() -> None:
    columns = [_column(FIELD_TYPE.LONG, name="id")]
    event: Any = _event(False, columns, b"\x00" + b"\x01\x00\x00\x00")
    event._RowsEvent__rows = [{"values": {"id": 1}, "none_sources": {}}]
    assert row_images.normalized_images(event, {}, lambda v: v) is None and event.packet.read_bytes == 0


def test_a_minimal_image_or_a_nameless_column_is_left_to_the_library() -> None:
    columns = [_column(FIELD_TYPE.LONG, name="id"), _column(FIELD_TYPE.LONG, name="v")]
    event: Any = _event(False, columns, b"\x00" + b"\x01\x00\x00\x00" * 2)
    event.columns_present_bitmap = b"\x01"  # v left out: MINIMAL
    declined = row_images.left_to_library()
    assert row_images.normalized_images(event, {}, KEEP) is None and event.packet.read_bytes == 0
    columns[1].name = None
    assert (
        row_images.normalized_images(_event(False, columns, b"\x00" + b"\x01\x00\x00\x00" * 2), {}, KEEP)
        is None
    )
    assert row_images.left_to_library() == declined + 2


def test_unused_bits_of_the_present_bitmap_do_not_matter() -> None:
    columns = [_column(FIELD_TYPE.TINY, name="a", unsigned=True), _column(FIELD_TYPE.TINY, name="b")]
    event: Any = _event(False, columns, b"\x02\x07")  # b is NULL
    event.columns_present_bitmap = b"\xff"
    decoded = row_images.decoded_here()
    assert row_images.normalized_images(event, {}, KEEP) == [{"a": 7, "b": None}]
    assert row_images.decoded_here() == decoded + 1


def _standard_converter(column: Column) -> Any:
    """The column's converter as a table's schema makes it, for the types read as their normal text."""
    if column.type == FIELD_TYPE.DATETIME2:
        return value_converter(SchemaColumn(column.name, "datetime", f"datetime({column.fsp})"))
    if column.type == FIELD_TYPE.NEWDECIMAL:
        return value_converter(
            SchemaColumn(column.name, "decimal", f"decimal({column.precision},{column.decimals})")
        )
    return lambda v: v


@settings(max_examples=400, deadline=None)
@given(events())
def test_datetimes_and_decimals_read_as_text_equal_the_converted_library_values(
    case: tuple[bool, list[Column], bytes],
) -> None:
    update, columns, data = case
    converters = {c.name: _standard_converter(c) for c in columns}
    expected = _outcome(
        lambda: _converted(_library_rows(_event(update, columns, data)), converters, plain_value)
    )
    ours = _outcome(
        lambda: row_images.normalized_images(_event(update, columns, data), converters, plain_value)
    )
    assert ours == expected
