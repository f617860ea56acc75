"""Table selectors: ``db.table`` names or regular expressions that name tables of the replica's catalog.

Selectors come from whoever may write to the signal topic, so a pattern is matched with RE2, whose
matching time is linear in the text: ``(a+)+b`` cannot hang the engine's thread the way Python's
backtracking ``re`` can. RE2 has no back-references or look-around; a pattern using them is refused
with RE2's reason. A selector is matched in full against ``db.table``, as Debezium's
``data-collections`` are.

A selector that names one table literally (``shop.orders``, or Debezium's escaped ``shop\\.orders``)
is read as that name; a table in a system schema (``mysql``, ``sys``, ``performance_schema``,
``information_schema``) is refused by name. Pure: the catalog is passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import re2

from gtidsnap.core.model import SYSTEM_SCHEMAS, TableId

MAX_SELECTOR_CHARS = 512
"""Longest selector accepted: a table name or a pattern, not a program."""
_REGEX_CHARS = frozenset("^$*+?{}[]|()")
_MAX_MEM = 8 << 20  # bytes RE2 may use for one compiled pattern


class SelectorError(ValueError):
    """A selector that is not a usable table name or pattern; the message names it and says why."""


def _refused(selector: str, reason: str) -> SelectorError:
    shown = repr(selector) if len(selector) <= 80 else repr(selector[:77]) + "..."
    return SelectorError(f"{shown} {reason}")


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print each refused pattern to stderr
    options.max_mem = _MAX_MEM
    return options


def literal_table(selector: str) -> TableId | None:
    """The one table a selector names (``db.t`` or ``db\\.t``), None for a real pattern.

    An unescaped ``.`` is read as a dot, as users mean it; any other regular-expression operator
    makes it a pattern."""
    chars: list[str] = []
    i = 0
    while i < len(selector):
        ch = selector[i]
        if ch == "\\":
            if i + 1 < len(selector) and not selector[i + 1].isalnum():
                chars.append(selector[i + 1])
                i += 2
                continue
            return None
        if ch in _REGEX_CHARS:
            return None
        chars.append(ch)
        i += 1
    schema, dot, name = "".join(chars).partition(".")
    return TableId(schema, name) if dot and schema and name else None


def check_selector(selector: str) -> None:
    """Raise :class:`SelectorError` for a selector that cannot select anything capturable."""
    if len(selector) > MAX_SELECTOR_CHARS:
        raise _refused(selector, f"has {len(selector)} characters; at most {MAX_SELECTOR_CHARS} are taken")
    table = literal_table(selector)
    if table is not None and table.schema.lower() in SYSTEM_SCHEMAS:
        raise _refused(selector, f"is in the system schema {table.schema}, which gtidsnap does not capture")
    if table is None:
        compile_pattern(selector)


def compile_pattern(selector: str) -> Any:
    """The selector as a compiled RE2 pattern; :class:`SelectorError` with RE2's reason when it is not one."""
    try:
        return re2.compile(selector, _options())
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        raise _refused(
            selector,
            f"is not a valid regular expression for RE2 ({reason}); RE2 has no back-references or "
            "look-around; escape special characters of a table name with a backslash",
        ) from None


def selects(selector: str, table: TableId) -> bool:
    """Does ``selector`` name ``table`` (literally, or as a pattern matched in full)?"""
    literal = literal_table(selector)
    if literal is not None:
        return literal == table
    return compile_pattern(selector).fullmatch(str(table)) is not None


def resolve(selectors: Sequence[str], catalog: Iterable[TableId]) -> list[TableId]:
    """The tables ``selectors`` name, in order without repeats: names as they are (whether or not in the
    catalog), patterns against ``catalog`` (sorted matches). :class:`SelectorError` names a pattern that
    matches nothing."""
    names = {str(t): t for t in catalog}
    found: list[TableId] = []
    for selector in selectors:
        check_selector(selector)
        literal = literal_table(selector)
        if literal is not None:  # named: the caller says why it cannot be had (missing, a view, ...)
            found.append(names.get(str(literal), literal))
            continue
        pattern = compile_pattern(selector)
        matched = sorted(t for n, t in names.items() if pattern.fullmatch(n))
        if not matched:
            raise _refused(selector, "matches no table on the replica")
        found.extend(matched)
    return list(dict.fromkeys(found))
