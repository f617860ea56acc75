"""Typed fields of the JSON objects gtidsnap reads back (its checkpoint): each field is of the type
written or the read fails naming it. Read by truthiness, ``"done": "false"`` would mark a snapshot done
and ``"rows": "12"`` pass as a count, so a hand-edited or damaged checkpoint resumed at a wrong place."""

from __future__ import annotations

from typing import Any

MISSING: Any = ...


def typed_field(
    data: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = MISSING
) -> Any:
    """``data[name]``, which must be a ``kind`` (a bool is not an int here); ``default`` when it is
    missing (no default: ValueError naming it)."""
    if name not in data:
        if default is not MISSING:
            return default
        raise ValueError(f"field {name!r} is missing")
    value = data[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        got = "null" if value is None else type(value).__name__
        raise ValueError(f"field {name!r} is {got}, not {wanted}")
    return value


def count_field(data: dict[str, Any], name: str, default: Any = MISSING) -> int:
    """``data[name]`` as a count: an integer, 0 or more."""
    value: int = typed_field(data, name, int, default)
    if value < 0:
        raise ValueError(f"field {name!r} is {value}, not 0 or more")
    return value
