"""Readers that give a column's normalised value straight from the row bytes, for the types whose
normal form is text: DATETIME(fsp) and DECIMAL.

Why: the plain path builds a Python object per value (a ``datetime``, a ``Decimal``, from text) only for
the column's converter to turn it into text at once (``isoformat``, ``decimal_text``). Reading the
fields and writing the text directly skips both objects: about a third of those columns' decode time.

Exactly the same values: a fused reader is used only where the column's converter is the standard one
of its type (:func:`gtidsnap.core.column_values.value_converter` tags it), and any value off the
common path (a zero or invalid date: a day past the month's length, leap years included) goes the
plain way, reader then converter. The unit tests compare both paths over every byte pattern class."""

from __future__ import annotations

from calendar import monthrange
from collections.abc import Callable
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from gtidsnap.core.column_values import converter_kind
from gtidsnap.source.binlog.value_readers import ValueReader, decimal_parts, value_reader
from gtidsnap.source.binlog.values import DATETIME_INT_OFFSET, FRACTION_SCALE, fraction_bytes

SECONDS_KEPT = 4096  # distinct seconds a DATETIME column's reader remembers the text of


def valid_day(year: int, month: int, day: int) -> bool:
    """Whether ``year-month-day`` is a date ``datetime`` accepts (year 1-9999); the month's length is
    looked up only past the 28th."""
    if not (1 <= year <= 9999 and 1 <= month <= 12 and day >= 1):
        return False
    return day <= 28 or day <= monthrange(year, month)[1]


def normal_reader(column: Any, errors: str, convert: Callable[[Any], Any]) -> ValueReader | None:
    """The reader of ``column``'s values already through ``convert``; None where there is none (read
    with :func:`gtidsnap.source.binlog.value_readers.value_reader`, then ``convert``)."""
    kind = converter_kind(convert)
    if column.type == FIELD_TYPE.DATETIME2 and kind == "datetime":
        plain = value_reader(column, errors)
        return _datetime2_text(column.fsp, plain, convert) if plain is not None else None
    if column.type == FIELD_TYPE.NEWDECIMAL and kind == "decimal":
        return _decimal_text(column.precision, column.decimals)
    return None


def _datetime2_text(fsp: int, plain: ValueReader, convert: Callable[[Any], Any]) -> ValueReader:
    width = fraction_bytes(fsp)
    size, scale = 5 + width, FRACTION_SCALE[width]
    # The seconds read and their text: a transaction's rows mostly share their timestamps (``NOW()`` is
    # the statement's), an update's before images those of an earlier write, so a handful of seconds
    # alternate (a last-second-only memo missed half of a stream's updates). Shared by the stream pump's
    # thread and the loop's: a dict's get, set and clear are each atomic, and an entry is never changed.
    seconds: dict[bytes, str] = {}

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        head = data[pos : pos + 5]
        text = seconds.get(head)
        if text is None:
            packed = int.from_bytes(head, "big") - DATETIME_INT_OFFSET
            year, month = divmod((packed >> 22) & 0x1FFFF, 13)
            day, hms = (packed >> 17) & 0x1F, packed & 0x1FFFF
            hour, minute, second = hms >> 12, (hms >> 6) & 0x3F, hms & 0x3F
            if not (hour < 24 and minute < 60 and second < 60 and valid_day(year, month, day)):
                value, end = plain(data, pos)
                return convert(value), end
            text = f"{year:04d}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}"
            if len(seconds) >= SECONDS_KEPT:  # a table of scattered timestamps: start again, never grow
                seconds.clear()
            seconds[head] = text
        micros = int.from_bytes(data[pos + 5 : pos + size], "big") * scale if width else 0
        return (f"{text}.{micros:06d}" if micros else text), pos + size

    return read


def _decimal_text(precision: int, decimals: int) -> ValueReader:
    """A DECIMAL (:func:`gtidsnap.source.binlog.value_readers.decimal_parts`) as the text
    ``decimal_text`` gives its ``Decimal``: fixed point, ``decimals`` places, a negative zero signed."""
    parts = decimal_parts(precision, decimals)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        negative, unscaled, end = parts(data, pos)
        digits = str(unscaled)
        if decimals:
            digits = digits.rjust(decimals + 1, "0")
            digits = f"{digits[:-decimals]}.{digits[-decimals:]}"
        return (f"-{digits}" if negative else digits), end

    return read
