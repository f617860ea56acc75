"""The captured tables' shapes, in one cache for the engine, the binlog adapter and the Delta sink.

A shape is read from the replica when first needed and read again after the engine forgets it (a DDL
of the table, a chunk that failed on a changed schema). The last shape ever read stays known: records
of a table dropped since still carry values of that shape, and the sink writes them with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gtidsnap.core.errors import SchemaError
from gtidsnap.core.model import TableId
from gtidsnap.core.schema import TableSchema


class SchemaCache:
    """``read`` gives a table's current shape (the replica's, with its surrogate key); the engine's
    thread reads and forgets, the Delta sink's committer thread only reads (hence the lock)."""

    def __init__(self, read: Callable[[TableId], TableSchema]) -> None:
        self._read = read
        self._current: dict[TableId, TableSchema] = {}
        self._last: dict[TableId, TableSchema] = {}
        self._lock = threading.Lock()

    def get(self, table: TableId) -> TableSchema:
        """The current shape (read from the replica if not known); SchemaError if it cannot be read."""
        with self._lock:
            known = self._current.get(table)
        if known is not None:
            return known
        shape = self._read(table)
        with self._lock:
            self._current[table] = self._last[table] = shape
        return shape

    def forget(self, table: TableId) -> None:
        """Read the shape again when next needed (the table changed)."""
        with self._lock:
            self._current.pop(table, None)

    def current_or_last(self, table: TableId) -> TableSchema:
        """The current shape; for a table dropped or renamed since, the last one read."""
        try:
            return self.get(table)
        except SchemaError:
            with self._lock:
                last = self._last.get(table)
            if last is None:
                raise
            return last
