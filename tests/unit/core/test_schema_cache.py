"""The one cache of table shapes shared by the engine and the sink (schema_cache)."""

from __future__ import annotations

import pytest

from gtidsnap.core.errors import SchemaError
from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.core.schema_cache import SchemaCache

T = TableId("shop", "orders")
ID = Column("id", "int", "int(11)")


def test_read_once_again_after_forget_and_the_last_shape_outlives_a_drop() -> None:
    shapes = {T: TableSchema(T, (ID,), ("id",))}
    reads: list[TableId] = []

    def read(table: TableId) -> TableSchema:
        reads.append(table)
        if table not in shapes:
            raise SchemaError(f"table {table} does not exist")
        return shapes[table]

    cache = SchemaCache(read)
    first = cache.get(T)
    assert cache.get(T) is first and reads == [T], "read once"
    wider = TableSchema(T, (ID, Column("name", "varchar", "varchar(9)")), ("id",))
    shapes[T] = wider
    assert cache.get(T) is first, "not read again before the engine forgets it"
    cache.forget(T)
    assert cache.get(T) is wider and reads == [T, T]
    del shapes[T]
    cache.forget(T)
    with pytest.raises(SchemaError):
        cache.get(T)
    assert cache.current_or_last(T) is wider, "a dropped table's records keep its last shape"
    with pytest.raises(SchemaError):
        cache.current_or_last(TableId("shop", "never"))
