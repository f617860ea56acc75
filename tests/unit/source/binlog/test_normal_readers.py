"""The readers that write a DATETIME's or a DECIMAL's normal text straight from the bytes give exactly
what the plain reader then the column's converter give: on valid images (every field in range, days
29-31 of any month, zero dates) and on arbitrary bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pymysqlreplication.column import Column as LibraryColumn
from pymysqlreplication.constants import FIELD_TYPE

from gtidsnap.core.column_values import converter_kind, plain_value, value_converter
from gtidsnap.core.schema import Column
from gtidsnap.source.binlog.normal_readers import SECONDS_KEPT, normal_reader, valid_day
from gtidsnap.source.binlog.value_readers import value_reader
from tests.unit.source.binlog.test_row_images import _decimal_bytes


def _library_column(kind: int, **facts: Any) -> LibraryColumn:
    base = {"type": kind, "name": "c", "unsigned": False, "character_set_name": None}
    return LibraryColumn(**{**base, "enum_values": None, "set_values": None, **facts})


def _both(column: LibraryColumn, convert: Any, data: bytes) -> tuple[Any, Any]:
    fused = normal_reader(column, "strict", convert)
    plain = value_reader(column, "strict")
    assert fused is not None and plain is not None
    value, end = plain(data, 0)
    return fused(data, 0), (convert(value), end)


@st.composite
def _datetime2(draw: st.DrawFn, fsp: int | None = None) -> tuple[int, bytes]:
    """DATETIME2(fsp) images (of any fsp unless given): fields in (and around) their ranges, or any bytes."""
    fsp = draw(st.integers(0, 6)) if fsp is None else fsp
    width = (fsp + 1) // 2
    if draw(st.booleans()):
        return fsp, draw(st.binary(min_size=5 + width, max_size=5 + width))
    year, month = draw(st.integers(0, 9999)), draw(st.integers(0, 13))
    day, hour = draw(st.integers(0, 31)), draw(st.integers(0, 24))
    minute, second = draw(st.integers(0, 60)), draw(st.integers(0, 60))
    packed = ((year * 13 + month) << 22 | day << 17 | hour << 12 | minute << 6 | second) + 0x8000000000
    fraction = draw(st.integers(0, 10 ** (2 * width) - 1)) if width else 0
    return fsp, packed.to_bytes(5, "big") + fraction.to_bytes(width, "big")


@settings(max_examples=1500, deadline=None)
@given(_datetime2())
def test_a_datetime_is_written_as_its_converter_writes_it(case: tuple[int, bytes]) -> None:
    fsp, data = case
    convert = value_converter(Column("c", "datetime", f"datetime({fsp})"))
    fused, plain = _both(_library_column(FIELD_TYPE.DATETIME2, fsp=fsp), convert, data)
    assert fused == plain


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 6), st.data())
def test_one_reader_gives_each_value_of_a_run_its_own_text(fsp: int, data: st.DataObject) -> None:
    """One reader reads many values (as it does a table's rows): the last second's text it remembers is
    never another value's, whether the seconds repeat with other fractions, alternate, or are invalid."""
    convert = value_converter(Column("c", "datetime", f"datetime({fsp})"))
    column = _library_column(FIELD_TYPE.DATETIME2, fsp=fsp)
    fused, plain = normal_reader(column, "strict", convert), value_reader(column, "strict")
    assert fused is not None and plain is not None
    images = data.draw(st.lists(_datetime2(fsp), min_size=1, max_size=6))
    width = (fsp + 1) // 2
    fractions = st.binary(min_size=width, max_size=width)
    run = [
        image[:5] + data.draw(fractions) for _, image in images for _ in range(data.draw(st.integers(1, 3)))
    ]
    # the same images with one byte of their second changed: each byte of it tells values apart
    run += [image[:at] + bytes([image[at] ^ 1]) + image[at + 1 :] for image in run for at in range(5)]
    run += data.draw(st.permutations(run))
    for image in run:
        value, end = plain(image, 0)
        assert fused(image, 0) == (convert(value), end), image


def test_a_reader_that_met_more_seconds_than_it_keeps_still_writes_each_its_own_text() -> None:
    """Past ``SECONDS_KEPT`` distinct seconds the reader forgets and starts again: the seconds read before
    and after that, in either order, still get their own text (a memo that kept a stale entry fails)."""
    convert = value_converter(Column("c", "datetime", "datetime(0)"))
    column = _library_column(FIELD_TYPE.DATETIME2, fsp=0)
    fused, plain = normal_reader(column, "strict", convert), value_reader(column, "strict")
    assert fused is not None and plain is not None
    base = ((2026 * 13 + 12) << 22 | 2 << 17) + 0x8000000000
    clock = [(s // 3600) << 12 | (s // 60 % 60) << 6 | s % 60 for s in range(0, 86_400, 3)]
    images = [(base | hms).to_bytes(5, "big") for hms in clock]
    run = images[: SECONDS_KEPT + 7] + images[:50] + images[-SECONDS_KEPT - 3 :] + images[3:9] * 2
    for image in run:
        value, end = plain(image, 0)
        assert fused(image, 0) == (convert(value), end), image


@st.composite
def _decimal(draw: st.DrawFn) -> tuple[int, int, bytes]:
    precision = draw(st.integers(1, 65))
    decimals = draw(st.integers(0, min(30, precision)))
    data = draw(_decimal_bytes(precision, decimals))
    if draw(st.booleans()):  # any bytes of that size: digit groups out of range too
        data = draw(st.binary(min_size=len(data), max_size=len(data)))
    return precision, decimals, data


@settings(max_examples=1500, deadline=None)
@given(_decimal())
def test_a_decimal_is_written_as_its_converter_writes_it(case: tuple[int, int, bytes]) -> None:
    precision, decimals, data = case
    convert = value_converter(Column("c", "decimal", f"decimal({precision},{decimals})"))
    column = _library_column(FIELD_TYPE.NEWDECIMAL, precision=precision, decimals=decimals)
    fused, plain = _both(column, convert, data)
    assert fused == plain


def test_only_the_standard_converters_of_those_types_are_fused() -> None:
    datetime = _library_column(FIELD_TYPE.DATETIME2, fsp=0)
    decimal = _library_column(FIELD_TYPE.NEWDECIMAL, precision=5, decimals=2)
    assert converter_kind(value_converter(Column("c", "datetime", "datetime"))) == "datetime"
    assert converter_kind(value_converter(Column("c", "int", "int"))) is None
    assert normal_reader(datetime, "strict", lambda v: v) is None  # a converter of its own: plain
    assert normal_reader(decimal, "strict", plain_value) is None
    # a TIMESTAMP column's converter is not a DATETIME's, whatever the binlog type says
    assert normal_reader(datetime, "strict", value_converter(Column("c", "timestamp", "timestamp"))) is None
    assert normal_reader(datetime, "strict", value_converter(Column("c", "datetime", "datetime"))) is not None


def test_every_valid_day_is_read_straight_from_the_bytes() -> None:
    """Days 29-31 are valid or not by the month (and February's 29th by the year); the fused reader
    writes the valid ones itself, as the converter would, and leaves the others to the plain path."""
    assert valid_day(2024, 2, 29) and not valid_day(2023, 2, 29) and not valid_day(1900, 2, 29)
    assert valid_day(2000, 2, 29) and valid_day(2026, 11, 30) and not valid_day(2026, 11, 31)
    assert valid_day(2026, 12, 31) and not valid_day(2026, 4, 31) and not valid_day(0, 1, 1)
    assert not valid_day(10000, 1, 1) and not valid_day(2026, 13, 1) and not valid_day(2026, 1, 0)
    convert = value_converter(Column("c", "datetime", "datetime(0)"))
    column = _library_column(FIELD_TYPE.DATETIME2, fsp=0)
    for (year, month, day), text in [
        ((2026, 11, 29), "2026-11-29 23:59:58"),
        ((2024, 2, 29), "2024-02-29 23:59:58"),
        ((2023, 2, 29), None),  # not a date: whatever the plain path makes of it
    ]:
        packed = ((year * 13 + month) << 22 | day << 17 | 23 << 12 | 59 << 6 | 58) + 0x8000000000
        fused, plain = _both(column, convert, packed.to_bytes(5, "big"))
        assert fused == plain
        if text is not None:
            assert fused == (text, 5)
