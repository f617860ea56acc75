"""Type changes at the source as Delta column types: keep, widen, or refuse.

A Delta column keeps its type while that type still holds every value of the new source type (a
narrowing such as BIGINT -> INT); it is widened with Delta's type widening when Delta supports the
change (INT -> BIGINT, FLOAT -> DOUBLE, DECIMAL(10,2) -> DECIMAL(12,4), DATE -> DATETIME, ...); any
other change (INT -> VARCHAR, DATETIME -> TIMESTAMP, ...) is refused by the sink, naming the table and
column. :func:`evolve_type` decides; which Spark type a source type has is
:mod:`gtidsnap.sinks.delta.types`'s.

Pure: no SparkSession, no JVM.
"""

from __future__ import annotations

from pyspark.sql import types as T

from gtidsnap.sinks.arrow_columns import MAX_PRECISION
from gtidsnap.sinks.delta.types import INTEGRAL

# The decimal digits each integral type needs (what a DECIMAL must have left of the point).
_DIGITS: dict[type[T.DataType], int] = {T.ByteType: 3, T.ShortType: 5, T.IntegerType: 10, T.LongType: 19}
# Delta's own minimum for widening an integral column to DECIMAL: decimal(10,0), or (20,0) for BIGINT.
_DELTA_DECIMAL_DIGITS: dict[type[T.DataType], int] = {
    T.ByteType: 10,
    T.ShortType: 10,
    T.IntegerType: 10,
    T.LongType: 20,
}


def _integral_rank(data_type: T.DataType) -> int | None:
    for rank, kind in enumerate(INTEGRAL):
        if isinstance(data_type, kind):
            return rank
    return None


def holds(existing: T.DataType, new: T.DataType) -> bool:
    """Can a column of type ``existing`` store every value of type ``new`` exactly?"""
    if existing == new:
        return True
    old_rank, new_rank = _integral_rank(existing), _integral_rank(new)
    if old_rank is not None and new_rank is not None:
        return new_rank <= old_rank
    if isinstance(existing, T.DecimalType):
        if new_rank is not None:
            return existing.precision - existing.scale >= _DIGITS[type(new)]
        if isinstance(new, T.DecimalType):
            integral_digits = existing.precision - existing.scale
            return existing.scale >= new.scale and integral_digits >= new.precision - new.scale
        return False
    if old_rank is not None and isinstance(new, T.DecimalType):
        return new.scale == 0 and new.precision < _DIGITS[type(existing)]
    if isinstance(existing, T.DoubleType):
        return isinstance(new, T.FloatType) or (new_rank is not None and new_rank <= 2)
    if isinstance(existing, T.FloatType):
        return new_rank is not None and new_rank <= 1  # float32 is exact up to 2**24
    if isinstance(existing, T.TimestampNTZType):
        return isinstance(new, T.DateType)
    return False


def can_widen(existing: T.DataType, new: T.DataType) -> bool:
    """Does Delta's type widening (Delta 4) support changing a column from ``existing`` to ``new``?"""
    if existing == new:
        return True
    old_rank, new_rank = _integral_rank(existing), _integral_rank(new)
    if old_rank is not None:
        if new_rank is not None:
            return new_rank > old_rank
        if isinstance(new, T.DoubleType):
            return old_rank <= 2
        if isinstance(new, T.DecimalType):
            return new.precision - new.scale >= _DELTA_DECIMAL_DIGITS[type(existing)]
        return False
    if isinstance(existing, T.FloatType):
        return isinstance(new, T.DoubleType)
    if isinstance(existing, T.DecimalType) and isinstance(new, T.DecimalType):
        grow_precision, grow_scale = new.precision - existing.precision, new.scale - existing.scale
        return grow_precision >= grow_scale >= 0
    if isinstance(existing, T.DateType):
        return isinstance(new, T.TimestampNTZType)
    return False


def _candidates(existing: T.DataType, new: T.DataType) -> list[T.DataType]:
    """Common supertypes worth trying when neither type holds the other (INT and DECIMAL(8,2), ...)."""
    numeric: tuple[type[T.DataType], ...] = (T.DecimalType, *INTEGRAL)
    if not (isinstance(existing, numeric) and isinstance(new, (*numeric, T.FloatType))):
        return []
    if isinstance(new, T.FloatType):
        return [T.DoubleType()]

    def digits_and_scale(t: T.DataType) -> tuple[int, int]:
        if isinstance(t, T.DecimalType):
            return t.precision - t.scale, t.scale
        return _DELTA_DECIMAL_DIGITS[type(t)], 0

    (d1, s1), (d2, s2) = digits_and_scale(existing), digits_and_scale(new)
    digits, scale = max(d1, d2), max(s1, s2)
    return [T.DecimalType(digits + scale, scale)] if digits + scale <= MAX_PRECISION else []


def evolve_type(existing: T.DataType, new: T.DataType) -> T.DataType | None:
    """The type a Delta column of type ``existing`` must have to also take values of type ``new``:
    ``existing`` when it already holds them, a wider type Delta can widen to, or None (impossible)."""
    if holds(existing, new):
        return existing
    if can_widen(existing, new):
        return new
    for candidate in _candidates(existing, new):
        if holds(candidate, new) and can_widen(existing, candidate):
            return candidate
    return None
