"""Taking one chunk between two watermarks, and what became of the attempt.

Steps 1-3 of the watermark algorithm: the low watermark (the replica's executed set, once what the
stream processed is visible: :mod:`gtidsnap.low_watermark`), the keyset
SELECT of the next chunk, the high watermark (the executed set now, minus the low one). The stream
is not read meanwhile: that is the "pause". What the attempt came to is returned as plain data
(:data:`TakeOutcome`) for the engine to apply to its snapshot context; the only state kept here is
how many times in a row a changed table shape made the attempt start over.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from gtidsnap.errors import FilterError, GtidsnapError, QueryError, SchemaError
from gtidsnap.gtid import GtidSet
from gtidsnap.low_watermark import LowWatermark
from gtidsnap.model import TableId
from gtidsnap.plan import TableProgress
from gtidsnap.ports import ChunkRows, ReplicaPort
from gtidsnap.schema_cache import SchemaCache

log = logging.getLogger(__name__)

SCHEMA_RETRIES = 3  # a chunk that fails on a changed schema is tried again with the shape read anew


@dataclass(frozen=True)
class ChunkTaken:
    """A chunk with rows, read between ``lw`` and ``lw + hw``: its window opens."""

    progress: TableProgress
    chunk: ChunkRows
    lw: GtidSet
    hw: GtidSet


@dataclass(frozen=True)
class SnapshotDone:
    """Nothing left to read: no row matched at the start (``selected`` False, no SELECT was sent) or
    the SELECT returned nothing."""

    progress: TableProgress
    selected: bool


@dataclass(frozen=True)
class ShapeChanged:
    """The replica applied a DDL the stream has not reached: try again with the shape read anew."""

    progress: TableProgress


@dataclass(frozen=True)
class SnapshotFailed:
    """The server refused the statement, stopped it at the time limit, the filter no longer passes
    its check, or the shape kept changing: this table's snapshot ends with the reason."""

    progress: TableProgress
    error: GtidsnapError


TakeOutcome = ChunkTaken | SnapshotDone | ShapeChanged | SnapshotFailed


class ChunkTaker:
    """Reads chunks of the replica's tables under watermarks (see the module docstring)."""

    def __init__(self, replica: ReplicaPort, schemas: SchemaCache, pauses_s: list[float]) -> None:
        self.replica = replica
        self.low_watermark = LowWatermark(replica)
        self.schemas = schemas
        self.pauses_s = pauses_s  # how long each chunk kept the stream paused (RunStats.chunk_pause_s)
        self._schema_retries = 0

    def take(
        self, progress: TableProgress, first_snapshot: bool, chunk_size: int, processed: GtidSet
    ) -> TakeOutcome:
        """The next chunk of ``progress``'s table; ``first_snapshot``: no earlier snapshot of this
        table went to the output (a fresh one may be appended rather than merged); ``processed``:
        what the stream has processed (the SELECT must see all of it)."""
        try:
            schema = self.schemas.get(progress.table)
            condition = progress.condition  # checked by the chunk SQL: FilterError fails the snapshot
            paused_at = time.monotonic()
            lw = self.low_watermark.read(processed)  # first: the greatest key must see what was streamed
            if not progress.started:
                progress = progress.begun(self.replica.max_key(schema, condition), first_snapshot)
                if progress.done:
                    log.info("%s is empty: snapshot done", progress.table)
                    return SnapshotDone(progress, selected=False)
            assert progress.max_key is not None
            try:
                chunk = self.replica.select_chunk(
                    schema, progress.last_key, progress.max_key, chunk_size, condition
                )
            finally:
                self.pauses_s.append(time.monotonic() - paused_at)
            hw = self.replica.executed() - lw
        except SchemaError as exc:
            self.schemas.forget(progress.table)
            if self._schema_retries < SCHEMA_RETRIES and self._table_exists(progress.table):
                self._schema_retries += 1
                log.info(
                    "schema of %s changed under the snapshot (%s); reading it again", progress.table, exc
                )
                return ShapeChanged(progress)
            return self._failed(progress, exc)
        except (QueryError, FilterError) as exc:
            return self._failed(progress, exc)
        self._schema_retries = 0
        if chunk.count == 0:
            return SnapshotDone(progress, selected=True)
        return ChunkTaken(progress, chunk, lw, hw)

    def _failed(self, progress: TableProgress, exc: GtidsnapError) -> SnapshotFailed:
        log.error("snapshot of %s stopped: %s", progress.table, exc)
        self._schema_retries = 0
        return SnapshotFailed(progress, exc)

    def _table_exists(self, table: TableId) -> bool:
        try:
            self.schemas.get(table)
        except SchemaError:
            return False
        return True
