"""The rows of a source table against its mirror's, key by key: what ``gtidsnap verify`` reports.

Plain data in, differences out: both sides come as rows in the mirror's own types (the source's rows
rendered by the code that renders a snapshot's chunks), so a value compares as itself. A FLOAT column
compares at single precision (a FLOAT held in a DOUBLE column is the float's value, read either way).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Key = tuple[Any, ...]
Row = Mapping[str, Any]
Kind = Literal["missing", "extra", "different"]


@dataclass(frozen=True)
class Difference:
    """A key whose row is not the same on both sides: ``missing`` from the mirror, ``extra`` in the
    mirror (gone from the source), or ``different`` in ``columns``."""

    key: Key
    kind: Kind
    columns: tuple[str, ...] = ()
    source: Row | None = None
    mirror: Row | None = None

    def describe(self, key_names: Sequence[str]) -> str:
        key = ", ".join(f"{n}={v!r}" for n, v in zip(key_names, self.key, strict=True))
        if self.kind == "missing":
            return f"({key}) is missing from the mirror"
        if self.kind == "extra":
            return f"({key}) is in the mirror but not in the source"
        assert self.source is not None and self.mirror is not None
        shown = "; ".join(f"{c}: source {self.source[c]!r}, mirror {self.mirror[c]!r}" for c in self.columns)
        return f"({key}) differs: {shown}"


def _single(value: float) -> float:
    """``value`` at single precision (beyond its range: as is)."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return value


def same_value(a: Any, b: Any, single_precision: bool = False) -> bool:
    """Equal as the mirror holds them (NaN equals NaN; ``single_precision``: a FLOAT column)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return _single(a) == _single(b) if single_precision else a == b
    return bool(a == b)


def diff_rows(
    source: Mapping[Key, Row],
    mirror: Mapping[Key, Row],
    columns: Sequence[str],
    single_precision: Iterable[str] = (),
    skipped: Iterable[Key] = (),
) -> list[Difference]:
    """The keys of ``source`` whose row the mirror lacks or holds otherwise (in ``columns``), and the
    keys only the mirror has, in key order of ``source`` then of ``mirror``; ``skipped`` keys (changed
    after the source's rows were read) are left out."""
    skip, single = set(skipped), set(single_precision)
    found: list[Difference] = []
    for key, row in source.items():
        if key in skip:
            continue
        held = mirror.get(key)
        if held is None:
            found.append(Difference(key, "missing", source=row))
            continue
        differ = tuple(c for c in columns if not same_value(row.get(c), held.get(c), c in single))
        if differ:
            found.append(Difference(key, "different", differ, row, held))
    found.extend(
        Difference(key, "extra", mirror=row)
        for key, row in mirror.items()
        if key not in source and key not in skip
    )
    return found
