"""A snapshot request checked whole before any of its tables is queued.

A request (from the CLI or a signal) names tables and RE2 patterns, and may carry filters. It is taken
whole or refused whole, naming why: a pattern that matches nothing, a table that cannot be snapshotted
(missing, a view, no key), a filter for a table not in the request, a filter that fails its check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gtidsnap.core.commands import StartSnapshot
from gtidsnap.core.errors import SchemaError
from gtidsnap.core.model import TableId
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.core.selectors import SelectorError, resolve
from gtidsnap.filters.check import check_filter


def checked_request(
    command: StartSnapshot, catalog: Callable[[], list[TableId]], schemas: SchemaCache
) -> dict[TableId, str | None]:
    """Each requested table, in order without repeats, with its filter as it will run (None: none).
    ``catalog`` lists the replica's tables; it is asked only when the request has patterns."""
    tables = list(dict.fromkeys([*command.tables, *_resolve(command.selectors, catalog)]))
    for table in tables:
        schemas.get(table)  # fail early, naming the table, if it cannot be snapshotted
    unknown = set(command.conditions) - {str(t) for t in tables}
    if unknown:
        raise SchemaError(f"a filter names {', '.join(sorted(unknown))}, which is not in the request")
    return {t: _filter(t, command.conditions.get(str(t), command.condition), schemas) for t in tables}


def _resolve(selectors: Sequence[str], catalog: Callable[[], list[TableId]]) -> list[TableId]:
    """Names as they are, regular expressions (RE2) against the replica's catalog (full match)."""
    if not selectors:
        return []
    try:
        return resolve(selectors, catalog())
    except SelectorError as exc:
        raise SchemaError(str(exc)) from None


def _filter(table: TableId, condition: str | None, schemas: SchemaCache) -> str | None:
    """The filter as it will run, so a request is refused when it arrives (FilterError names why);
    the chunk SQL checks it again (a checkpoint may hold one from elsewhere)."""
    if condition is None:
        return None
    return check_filter(condition, table, [c.name for c in schemas.get(table).columns])
