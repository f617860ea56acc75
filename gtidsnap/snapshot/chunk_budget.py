"""How many rows a chunk may hold: ``snapshot.chunk_size``, capped by the size of the table's rows.

A chunk is read whole and handed on whole: its reader holds its rows as values, then in the output's
form (JSON bodies, Arrow columns) and pickled for the engine, which keeps it until its window goes out
(two chunks a reader in flight). ``chunk_size`` counts rows only, so a large one (Spark's readers want
100,000 and more) on wide rows would take gigabytes in one reader. So a table's chunks are also kept to
about ``CHUNK_BYTES_BUDGET`` of rows by the server's estimate of a row's size
(``information_schema.TABLES.AVG_ROW_LENGTH``, read when the table's snapshot starts): the pure rule is
:func:`budgeted_chunk_size`, the engine's per-table memory of it :class:`ChunkSizes`.
"""

from __future__ import annotations

import logging

from gtidsnap.core.errors import PrerequisiteError, QueryError
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import TableProgress
from gtidsnap.core.ports import ReplicaPort

log = logging.getLogger(__name__)

# Row data a chunk may hold by the server's estimate. Measured on MariaDB 10.11, one reader rendering
# JSON lines, a chunk of 32 MiB by the estimate: at its peak the reader grew by 74 MB for 3 KB text rows
# (estimate 4.1 KB) and by 165 MB for narrow ones (a 200-byte text and two integers, estimate 257 B:
# Python's objects cost more than the row's bytes), pickled for the engine 24 and 35 MB; at 64 MiB the
# same rows took 149 and 327 MB. So a reader (45-80 MB idle) stays under ~250 MB with such rows,
# and the engine ~35 MB a chunk in flight. Larger chunks read no faster
# (16, 32, 64 MiB: 363k, 384k, 390k narrow rows/s), and a chunk's own round trips (~1 ms) are lost
# in its ~0.3 s read. The default 1,024 rows meets the budget only with rows above 32 KB.
CHUNK_BYTES_BUDGET = 32 * 2**20
# The fewest rows the budget leaves a chunk. An estimate far too high comes from a table mostly
# deleted (InnoDB keeps its pages): few rows, so small chunks cost little. Rows larger than
# CHUNK_BYTES_BUDGET / MIN_BUDGETED_ROWS (335 KB) are read this many at a time, above the budget.
MIN_BUDGETED_ROWS = 100


def budgeted_chunk_size(chunk_size: int, avg_row_length: int | None) -> int:
    """``chunk_size``, or fewer rows when that many rows of ``avg_row_length`` bytes would pass
    ``CHUNK_BYTES_BUDGET``, never fewer than ``MIN_BUDGETED_ROWS`` (nor more than ``chunk_size``).
    Without an estimate (None, 0: an empty or new table) ``chunk_size`` as it is."""
    if avg_row_length is None or avg_row_length <= 0:
        return chunk_size
    return min(chunk_size, max(MIN_BUDGETED_ROWS, CHUNK_BYTES_BUDGET // avg_row_length))


class ChunkSizes:
    """Each table's chunk size for the engine's planning: the table's estimate is read once per
    snapshot of it (when it starts, or when this run first plans a snapshot it resumed), and a cap is
    told once (again if ``snapshot.chunk_size`` changes)."""

    def __init__(self, replica: ReplicaPort) -> None:
        """``replica``: where :meth:`of` reads an estimate not learned (:meth:`learn`) before."""
        self._replica = replica
        self._estimates: dict[TableId, int | None] = {}
        self._told: dict[TableId, tuple[int, int]] = {}

    def of(self, progress: TableProgress, chunk_size: int) -> int:
        """The rows of the next chunks of ``progress``'s table, ``chunk_size`` the configured ones."""
        table = progress.table
        if not progress.started or table not in self._estimates:
            self._estimates[table] = self._estimate(table)
            self._told.pop(table, None)
        estimate = self._estimates[table]
        size = budgeted_chunk_size(chunk_size, estimate)
        if size < chunk_size and self._told.get(table) != (chunk_size, size):
            self._told[table] = (chunk_size, size)
            log.info(
                "%s: chunks of %s rows, not snapshot.chunk_size = %s: its rows are ~%s bytes each by the "
                "server's estimate (AVG_ROW_LENGTH), and a reader holds a chunk whole, so chunks are kept "
                "to ~%d MiB of rows (at least %d rows)",
                table,
                f"{size:,}",
                f"{chunk_size:,}",
                f"{estimate:,}",
                CHUNK_BYTES_BUDGET // 2**20,
                MIN_BUDGETED_ROWS,
            )
        return size

    def known(self, table: TableId) -> bool:
        return table in self._estimates

    def learn(self, table: TableId, estimate: int | None) -> None:
        """``table``'s estimate, read elsewhere (the planning thread, as its snapshot starts)."""
        self._estimates[table] = estimate
        self._told.pop(table, None)

    def _estimate(self, table: TableId) -> int | None:
        return row_length_estimate(self._replica, table)


def row_length_estimate(replica: ReplicaPort, table: TableId) -> int | None:
    """The server's estimate, or None when it refuses to give one (the chunks then stay as
    configured: the snapshot itself may well work)."""
    try:
        return replica.avg_row_length(table)
    except (QueryError, PrerequisiteError) as exc:
        log.warning(
            "cannot read the average row length of %s, so its chunks are not kept to ~%d MiB: %s",
            table,
            CHUNK_BYTES_BUDGET // 2**20,
            exc,
        )
        return None
