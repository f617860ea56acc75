"""Helpers of the sink's Delta writes: the MERGE condition that lets Delta skip files, the table's
schema after a write with schema evolution, a write tried again after a conflicting commit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark.sql import types as T

from gtidsnap.sinks.delta.util import short_error

if TYPE_CHECKING:
    pass

log = logging.getLogger("gtidsnap.sinks.delta")

CONFLICT_RETRIES = 3


def evolved_schema(known: T.StructType | None, written: T.StructType) -> T.StructType:
    """The table's schema after a write with schema evolution: what it had, then the new columns."""
    if known is None:
        return written
    names = {f.name.casefold() for f in known.fields}
    by_name = {f.name.casefold(): f for f in written.fields}
    fields = [by_name.get(f.name.casefold(), f) for f in known.fields]
    return T.StructType(fields + [f for f in written.fields if f.name.casefold() not in names])


def retry_conflicts(action: Callable[[], object], path: str) -> None:
    """Run a Delta write; again when it lost a race with another writer (OPTIMIZE, say). Safe: the
    write is idempotent through its txn version."""
    for attempt in range(1, CONFLICT_RETRIES + 1):
        try:
            action()
            return
        except Exception as exc:
            if "Concurrent" not in type(exc).__name__ + str(exc)[:200] or attempt == CONFLICT_RETRIES:
                raise
            log.warning("%s: conflicting commit (%s), trying again", path, short_error(exc))
            time.sleep(0.2 * attempt)
