"""Plain, frozen data that flows between gtidsnap's pieces: tables, keys, binlog events, chunks.

Adapters turn server bytes into these; the pure core (windows, plan) reads and returns only these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from gtidsnap.core.gtid import Gtid

Key = tuple[Any, ...]
"""Primary-key values in key-column order, normalised by the engine so equal keys compare equal
(for example case-folded for a case-insensitive collation)."""

Row = Mapping[str, Any]
# A chunk row as the window keeps it: its values, or the JSON its reader wrote of it
# (:func:`gtidsnap.core.records.snapshot_line_body`, for a JSON-lines output).
ChunkRow = Row | bytes


@runtime_checkable
class ColumnarRows(Protocol):
    """A chunk's rows in an output's columnar form (Arrow, say), kept whole: the engine makes no Python
    object of any row of them, and a window takes the rows it keeps by position."""

    def __len__(self) -> int: ...
    def taken(self, positions: Sequence[int]) -> ColumnarRows: ...
    def seq_span(self) -> int:
        """How many ``_seq`` numbers the rows take: one a row, unless rows a window dropped keep
        theirs (a staged split, numbered by position)."""
        ...


ReadRows = tuple[ChunkRow, ...] | ColumnarRows
"""A chunk's rows as its reader sent them: values, JSON line bodies, or columns."""
Op = Literal["c", "u", "d"]

Flavor = Literal["mysql", "mariadb"]
"""Which server speaks: MySQL GTID sets or MariaDB GTID positions."""

SYSTEM_SCHEMAS: frozenset[str] = frozenset({"mysql", "sys", "performance_schema", "information_schema"})
"""Schemas gtidsnap never captures (their tables are the server's own), compared lower-cased."""


def quote_ident(name: str) -> str:
    """``name`` as a backtick-quoted identifier, for the server's SQL and Spark's alike: a backtick
    inside is doubled, as both expect."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True, order=True)
class TableId:
    """A source table; ``str()`` is ``schema.name`` as users write it."""

    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"

    @classmethod
    def parse(cls, text: str) -> TableId:
        schema, dot, name = text.partition(".")
        if not dot or not schema or not name:
            raise ValueError(f"table {text!r} must be written schema.table")
        return cls(schema, name)


# --------------------------------------------------------------------------- binlog events


@dataclass(frozen=True)
class TxBegin:
    """A transaction starts; every event up to its commit shares ``gtid``."""

    gtid: Gtid


@dataclass(slots=True)
class RowChange:
    """One row inserted, updated or deleted.

    ``key`` is the row's key after the change (before it, for a delete); ``old_key`` is set when an
    update changed the primary key itself, so both keys count as touched. ``key_columns`` names the
    key of the shape the row was decoded with: the consumer may meet it after the shape cache moved
    on (a DDL read ahead by the stream's pump; a renamed table has no shape to read any more).

    Not frozen, never changed once made: one is made per row change, and a frozen dataclass's
    ``__init__`` (an ``object.__setattr__`` a field) cost ~0.7 us more, ~5% of a streamed change's CPU.
    """

    gtid: Gtid
    table: TableId
    op: Op
    key: Key
    before: Row | None
    after: Row | None
    old_key: Key | None = None
    source_ts: int = 0
    key_columns: tuple[str, ...] = ()

    def touched_keys(self) -> tuple[Key, ...]:
        return (self.key,) if self.old_key is None or self.old_key == self.key else (self.key, self.old_key)


@dataclass(slots=True)
class RowChanges:
    """The row changes of one rows event, decoded by a decoder process
    (:mod:`gtidsnap.source.binlog.row_decoders`), which also wrote each one's JSON: the engine's thread
    gets keys and bytes, one object an event instead of a ``RowChange`` a row.

    ``keys[i]`` is row ``i``'s key after the change (before it, for a delete), folded as
    :meth:`TableSchema.key_of` folds; ``old_keys[i]`` the key before an update that changed it (None
    otherwise; ``old_keys`` None when no row's key changed). ``bodies[i]`` is the part of row ``i``'s
    JSON line from its ``"key"`` to its ``"after"`` (:class:`gtidsnap.core.records.ChangeLines`)."""

    gtid: Gtid
    table: TableId
    op: Op
    keys: tuple[Key, ...]
    old_keys: tuple[Key | None, ...] | None
    bodies: tuple[bytes, ...]
    source_ts: int = 0

    def __len__(self) -> int:
        return len(self.bodies)

    def touched_keys(self) -> tuple[Key, ...]:
        """Every key the event's rows had before or after their change."""
        if self.old_keys is None:
            return self.keys
        return self.keys + tuple(k for k in self.old_keys if k is not None)


@dataclass(frozen=True)
class TxCommit:
    """The transaction ``gtid`` is complete; the stream's processed set now includes it. ``server_id``
    and ``timestamp``: its GTID event's header, the primary's (0: not known), which tell its transaction
    from another primary's of the same GTID (:mod:`gtidsnap.core.source_identity`)."""

    gtid: Gtid
    server_id: int = field(default=0, compare=False)  # two commits are equal by their GTID
    timestamp: int = field(default=0, compare=False)


@dataclass(frozen=True)
class SchemaChange:
    """A DDL statement (its own transaction) that touches ``tables``."""

    gtid: Gtid
    tables: frozenset[TableId]
    statement: str


@dataclass(frozen=True)
class Heartbeat:
    """The server had nothing more to send; ``last_gtid`` is the last transaction the stream saw."""

    last_gtid: Gtid | None = None


BinlogEvent = TxBegin | RowChange | RowChanges | TxCommit | SchemaChange | Heartbeat
