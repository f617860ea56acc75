"""Which tables verify compares by range hashes, and the server's side of the hash: every column
written into the text, NULL apart, the range bound like a chunk's."""

from __future__ import annotations

from gtidsnap.core.model import TableId
from gtidsnap.core.row_hash import NULL_TEXT, SEPARATOR, hashable, kind_of
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.source.chunk_sql import range_hash_query

T = TableId("shop", "orders")
ID = Column("id", "bigint", "bigint(20) unsigned")
NAME = Column("name", "varchar", "varchar(20)")
AT = Column("at", "datetime", "datetime(6)")


def test_integer_keys_and_hashable_columns_only() -> None:
    assert hashable(TableSchema(T, (ID, NAME, AT), ("id",)))
    assert not hashable(TableSchema(T, (ID, NAME), ("name",))), "a text key orders by its collation"
    assert not hashable(TableSchema(T, (ID, Column("f", "float", "float")), ("id",)))
    assert kind_of(Column("j", "longtext", "longtext /* json */")) is None, "MariaDB's JSON"
    assert kind_of(Column("b", "varbinary", "varbinary(4)")) == "bytes"


def test_the_servers_hash_query() -> None:
    sql, params = range_hash_query(TableSchema(T, (ID, NAME, AT), ("id",)), (10,), (20,))
    assert "COUNT(*), COALESCE(BIT_XOR(CRC32(CONCAT_WS(%s, COALESCE(CAST(`id` AS CHAR), %s)" in sql
    assert (
        "CONVERT(`name` USING utf8mb4)" in sql and "DATE_FORMAT(`at`, '%%Y-%%m-%%d %%H:%%i:%%s.%%f')" in sql
    )
    assert sql.endswith("WHERE `id` > %s AND `id` <= %s")
    assert params == [SEPARATOR, NULL_TEXT, NULL_TEXT, NULL_TEXT, 10, 20]
