"""Which tables ``gtidsnap verify`` can compare by one hash per key range, computed on the replica and
over the mirror alike, and how each column is written into the hashed text.

A row's text is its columns joined by ``SEPARATOR``, NULL written ``NULL_TEXT``; the range's hash is the
XOR of each row's CRC32 (order-free) with the row count. Each kind below is written the same way by the
server's SQL and by Spark over the mirror: integers and DECIMAL as their plain text, text types as UTF-8
text, binary types as upper-case hex, DATE as ``YYYY-MM-DD``, DATETIME and TIMESTAMP (UTC) with six
fractional digits, SET as its members joined by commas. Other types (FLOAT, DOUBLE, JSON, TIME, BIT,
spatial, MariaDB's UUID and INET) have no such text on both sides: a table with one is compared row by
row. The keys must be integers, so that a key range holds the same rows in both (a text key's order
follows its collation on the server, its bytes in Spark).
"""

from __future__ import annotations

from typing import Literal

from gtidsnap.core.schema import Column, TableSchema

Kind = Literal["number", "text", "bytes", "date", "moment", "set"]

SEPARATOR = "\x1f"
NULL_TEXT = "\\N"
INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})
_KINDS: dict[str, Kind] = {
    **dict.fromkeys(INTEGER_TYPES, "number"),
    "decimal": "number",
    "numeric": "number",
    **dict.fromkeys(["char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"], "text"),
    **dict.fromkeys(["binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"], "bytes"),
    "date": "date",
    "datetime": "moment",
    "timestamp": "moment",
    "set": "set",
}


def kind_of(column: Column) -> Kind | None:
    """How ``column`` is written into the hashed text (None: it cannot be, alike on both sides)."""
    if "json" in column.column_type.lower():  # MariaDB's JSON is LONGTEXT with a check
        return None
    return _KINDS.get(column.data_type.lower())


def hashable(schema: TableSchema) -> bool:
    """Can ``schema``'s table be compared by range hashes (else: row by row)?"""
    keys = all(c.data_type.lower() in INTEGER_TYPES for c in schema.key_columns)
    return keys and all(kind_of(c) is not None for c in schema.columns)
