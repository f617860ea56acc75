"""What the compiled chunk read serves (types, keys, connections), its address, and its columns rendered
as the Python path renders the same values."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from urllib.parse import unquote, urlsplit

import pyarrow as pa
import pytest

from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.sinks.arrow_columns import ArrowRenderer
from gtidsnap.source import arrow_chunks
from gtidsnap.source.arrow_chunks import column_refusal, connection_refusal, connection_uri, table_refusal
from gtidsnap.source.connection import ConnectionSettings, Secret, TlsMode

T = TableId("shop", "orders")


def settings(**changes: object) -> ConnectionSettings:
    return ConnectionSettings("127.0.0.1", 33062, "gtidsnap", Secret("p@ss:w/rd%"), **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data_type", "column_type", "served"),
    [
        ("bigint", "bigint(20) unsigned", True),
        ("decimal", "decimal(12,2)", True),
        ("decimal", "decimal(28,10)", True),
        ("decimal", "decimal(29,2)", False),
        ("decimal", "decimal(30,20)", False),
        ("datetime", "datetime(6)", True),
        ("varchar", "varchar(10)", True),
        ("longblob", "longblob", True),
        ("float", "float", False),
        ("timestamp", "timestamp", False),
        ("time", "time(2)", False),
        ("json", "json", False),
        ("bit", "bit(3)", False),
        ("set", "set('a','b')", False),
        ("uuid", "uuid", False),
        ("point", "point", False),
    ],
)
def test_only_types_read_exactly_are_served(data_type: str, column_type: str, served: bool) -> None:
    refusal = column_refusal(Column("c", data_type, column_type))
    assert (refusal is None) is served
    if not served:
        assert "column c is" in str(refusal)


def test_only_integer_keys_are_served() -> None:
    columns = (Column("id", "int", "int"), Column("name", "varchar", "varchar(9)"))
    assert table_refusal(TableSchema(T, columns, ("id",))) is None
    refusal = table_refusal(TableSchema(T, columns, ("name",)))
    assert refusal is not None and "key column name" in refusal


def test_tls_or_another_version_keeps_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    assert connection_refusal(settings()) is None
    assert "TLS is preferred" in str(connection_refusal(settings(tls=TlsMode.PREFERRED)))
    monkeypatch.setattr(arrow_chunks, "installed_version", lambda: "0.4.7")
    assert connection_refusal(settings()) == "connectorx 0.4.7 is installed, 0.4.6 is the version tested"
    monkeypatch.setattr(arrow_chunks, "installed_version", lambda: None)
    assert connection_refusal(settings()) == "connectorx is not installed"


def test_the_address_quotes_every_part() -> None:
    uri = urlsplit(connection_uri(settings(), "odd db/x"))
    assert (uri.scheme, uri.hostname, uri.port) == ("mysql", "127.0.0.1", 33062)
    assert unquote(uri.username or "") == "gtidsnap" and unquote(uri.password or "") == "p@ss:w/rd%"
    assert unquote(uri.path) == "/odd db/x"
    ipv6 = ConnectionSettings("::1", 3306, "u", Secret("p"))
    assert urlsplit(connection_uri(ipv6, "d")).hostname == "::1"


def test_columns_render_as_the_values_do() -> None:
    """A chunk as connectorx hands it over (its own Arrow types) gives the keys and Delta columns the
    Python path gives for the same rows."""
    schema = TableSchema(
        T,
        (
            Column("id", "bigint", "bigint(20) unsigned"),
            Column("amount", "decimal", "decimal(12,2)"),
            Column("at", "datetime", "datetime(6)"),
            Column("small", "tinyint", "tinyint(3) unsigned"),
            Column("blob", "blob", "blob"),
        ),
        ("id",),
    )
    ids = [1, 2**64 - 1]
    table = pa.table(
        {
            "id": pa.array(ids, pa.uint64()),
            "amount": pa.array([Decimal("-1.50"), None], pa.decimal128(38, 10)),
            "at": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5, 6), None], pa.timestamp("us")),
            "small": pa.array([255, 0], pa.uint8()),
            "blob": pa.array([b"\x00\xff", b""], pa.large_binary()),
        }
    )
    values = [
        (
            (1,),
            {
                "id": 1,
                "amount": "-1.50",
                "at": "2026-01-02 03:04:05.000006",
                "small": 255,
                "blob": "base64:AP8=",
            },
        ),
        ((2**64 - 1,), {"id": 2**64 - 1, "amount": None, "at": None, "small": 0, "blob": "base64:"}),
    ]
    keys, rows = ArrowRenderer().from_columns(table, schema)
    python_keys, python_rows = ArrowRenderer()(values, schema)
    assert keys == python_keys == ((1,), (2**64 - 1,))
    assert rows.batch.equals(python_rows.batch)
