"""The packet row reader gives what PyMySQL's row, normalised, gives: random shapes, values and lengths."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pymysql
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysql import converters
from pymysql.connections import TEXT_TYPES, MySQLResult
from pymysql.constants import FIELD_TYPE
from pymysql.protocol import MysqlPacket

from gtidsnap.core.model import TableId
from gtidsnap.core.schema import Column, TableSchema
from gtidsnap.source.result_rows import MAX_PACKET, build_row_parser, read_result_rows, shortcut

ENCODING = "utf8"  # what PyMySQL's connection encoding is for charset utf8mb4


def pymysql_field(field_type: int, binary: bool) -> tuple[str | None, Any]:
    """The ``(encoding, converter)`` PyMySQL's ``_get_descriptions`` picks for a field (use_unicode)."""
    if field_type == FIELD_TYPE.JSON:
        encoding: str | None = ENCODING
    elif field_type in TEXT_TYPES:
        encoding = None if binary else ENCODING
    else:
        encoding = "ascii"
    converter = converters.decoders.get(field_type)
    return encoding, None if converter is converters.through else converter


def _digits(n: int) -> st.SearchStrategy[str]:
    return st.text("0123456789", min_size=n, max_size=n)


def _decimal(precision: int, scale: int) -> st.SearchStrategy[str]:
    """A DECIMAL(precision, scale) as the server prints it (negative zero too)."""
    whole = st.integers(0, 10 ** (precision - scale) - 1).map(str)
    frac = _digits(scale).map(lambda d: f".{d}" if d else "")
    return st.tuples(st.sampled_from(["", "-"]), whole, frac).map("".join)


def _datetime(fraction: bool) -> st.SearchStrategy[str]:
    """Every field's digits at random (valid, zero and invalid dates), as the server prints them."""
    base = st.tuples(_digits(4), _digits(2), _digits(2), _digits(2), _digits(2), _digits(2)).map(
        lambda p: f"{p[0]}-{p[1]}-{p[2]} {p[3]}:{p[4]}:{p[5]}"
    )
    valid = st.datetimes().map(lambda d: d.replace(microsecond=0).isoformat(sep=" "))
    texts = st.one_of(base, valid, st.just("0000-00-00 00:00:00"), st.just("1970-01-01 00:00:00"))
    if not fraction:
        return texts
    digits = st.integers(1, 6).flatmap(_digits) | st.sampled_from(["0", "000", "000000"])  # zero: no fraction
    return st.tuples(texts, digits).map(lambda t: f"{t[0]}.{t[1]}")


def _date() -> st.SearchStrategy[str]:
    base = st.tuples(_digits(4), _digits(2), _digits(2)).map(lambda p: f"{p[0]}-{p[1]}-{p[2]}")
    return st.one_of(base, st.dates().map(lambda d: d.isoformat()), st.just("0000-00-00"))


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=300)

# data_type, column_type, PyMySQL field type, binary charset, the server's text of a value
TYPES: list[tuple[str, str, int, bool, st.SearchStrategy[Any]]] = [
    ("tinyint", "tinyint(4)", FIELD_TYPE.TINY, False, st.integers(-128, 255).map(str)),
    ("int", "int(11)", FIELD_TYPE.LONG, False, st.integers(-(2**31), 2**32 - 1).map(str)),
    ("bigint", "bigint(20) unsigned", FIELD_TYPE.LONGLONG, False, st.integers(-(2**63), 2**64 - 1).map(str)),
    ("varchar", "varchar(300)", FIELD_TYPE.VAR_STRING, False, _TEXT),
    ("char", "char(10)", FIELD_TYPE.STRING, False, _TEXT),
    ("text", "text", FIELD_TYPE.BLOB, False, _TEXT),
    ("enum", "enum('a','b')", FIELD_TYPE.STRING, False, st.sampled_from(["a", "b", ""])),
    ("set", "set('a','b')", FIELD_TYPE.STRING, False, st.sampled_from(["a", "a,b", ""])),
    ("decimal", "decimal(12,2)", FIELD_TYPE.NEWDECIMAL, False, _decimal(12, 2)),
    ("decimal", "decimal(65,30)", FIELD_TYPE.NEWDECIMAL, False, _decimal(65, 30)),
    ("decimal", "decimal(10,0)", FIELD_TYPE.NEWDECIMAL, False, _decimal(10, 0)),
    ("datetime", "datetime", FIELD_TYPE.DATETIME, False, _datetime(False)),
    ("datetime", "datetime(6)", FIELD_TYPE.DATETIME, False, _datetime(True)),
    ("timestamp", "timestamp", FIELD_TYPE.TIMESTAMP, False, _datetime(False)),
    ("timestamp", "timestamp(3)", FIELD_TYPE.TIMESTAMP, False, _datetime(True)),
    ("date", "date", FIELD_TYPE.DATE, False, _date()),
    ("time", "time", FIELD_TYPE.TIME, False, st.sampled_from(["00:00:00", "-838:59:59", "12:30:00.5"])),
    ("float", "float", FIELD_TYPE.FLOAT, False, st.floats(-1e9, 1e9, width=32).map(lambda f: f"{f:g}")),
    (
        "double",
        "double",
        FIELD_TYPE.DOUBLE,
        False,
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
    ),
    ("year", "year(4)", FIELD_TYPE.YEAR, False, st.integers(1901, 2155).map(str) | st.just("0000")),
    ("varbinary", "varbinary(300)", FIELD_TYPE.VAR_STRING, True, st.binary(max_size=300)),
    ("blob", "blob", FIELD_TYPE.BLOB, True, st.binary(max_size=70_000)),
    ("bit", "bit(10)", FIELD_TYPE.BIT, True, st.binary(min_size=2, max_size=2)),
    ("json", "json", FIELD_TYPE.JSON, False, st.sampled_from(['{"a": [1, 2.5, "x"]}', "null", "3"])),
]


def length_coded(value: bytes | None) -> bytes:
    """One field of a text-protocol row: NULL, or its length (1, 3, 4 or 9 bytes) and its bytes."""
    if value is None:
        return b"\xfb"
    n = len(value)
    if n < 251:
        head = bytes([n])
    elif n < 2**16:
        head = b"\xfc" + struct.pack("<H", n)
    elif n < 2**24:
        head = b"\xfd" + struct.pack("<I", n)[:3]
    else:
        head = b"\xfe" + struct.pack("<Q", n)
    return head + value


@st.composite
def shapes_and_rows(draw: st.DrawFn) -> tuple[TableSchema, list[tuple[str | None, Any]], list[list[Any]]]:
    picks = draw(st.lists(st.sampled_from(range(len(TYPES))), min_size=1, max_size=8))
    columns = [Column("id", "bigint", "bigint(20)", nullable=False)]
    fields = [pymysql_field(FIELD_TYPE.LONGLONG, False)]
    makers: list[st.SearchStrategy[Any]] = [st.integers(-(2**63), 2**63 - 1).map(str)]
    for i, pick in enumerate(picks):
        data_type, column_type, field_type, binary, values = TYPES[pick]
        columns.append(Column(f"c{i}", data_type, column_type))
        fields.append(pymysql_field(field_type, binary))
        makers.append(st.none() | values)
    schema = TableSchema(TableId("db", "t"), tuple(columns), ("id",))
    rows = draw(st.lists(st.tuples(*makers).map(list), min_size=1, max_size=4))
    return schema, fields, rows


def _encoded(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _outcome(read: Callable[[], Any]) -> Any:
    try:
        return ("value", read())
    except Exception as exc:  # both readers must fail the same way on what PyMySQL cannot convert
        return ("error", type(exc).__name__)


@settings(max_examples=400, deadline=None)
@given(shapes_and_rows(), st.binary(max_size=5))
def test_packet_reader_gives_pymysql_rows_normalised(case: Any, before: bytes) -> None:
    """Each row's payload read where it lies in a larger buffer (``before`` it: other bytes)."""
    schema, fields, rows = case
    names = [c.name for c in schema.columns]
    parse = build_row_parser(names, fields, schema)
    pymysql_result = SimpleNamespace(converters=fields)
    for values in rows:
        data = b"".join(length_coded(_encoded(v)) for v in values)

        def theirs(data: bytes = data) -> Any:
            raw = MySQLResult._read_row_from_packet(pymysql_result, MysqlPacket(data, ENCODING))
            row = schema.normalize_values(names, raw)
            return schema.key_of(row), row

        buffer = before + data + b"\xfb"
        assert _outcome(lambda buffer=buffer: parse(buffer, len(before))) == _outcome(theirs), values


def test_every_shortcut_is_covered_by_the_types_above() -> None:
    """Each column type the reader shortcuts is among the generated ones (with PyMySQL's own field)."""
    taken = {
        data_type
        for data_type, _, field_type, binary, _ in TYPES
        if shortcut(data_type, *pymysql_field(field_type, binary)) is not None
    }
    assert taken == {"tinyint", "int", "bigint", "varchar", "char", "text", "enum", "decimal"} | {
        "datetime",
        "timestamp",
        "date",
    }


def test_a_field_pymysql_converts_otherwise_takes_the_general_way() -> None:
    """A shortcut only for the encoding and converter it was proven with: a connection with other
    decoders (or a future PyMySQL) is read the general way."""
    assert shortcut("int", "ascii", float) is None
    assert shortcut("datetime", "ascii", None) is None
    assert shortcut("decimal", "ascii", float) is None
    assert shortcut("varchar", None, None) is None  # bytes: a binary charset


def id_and_blob() -> tuple[TableSchema, Any]:
    """A table of an INT key and a LONGBLOB, and its row parser."""
    schema = TableSchema(
        TableId("db", "t"),
        (Column("id", "int", "int(11)", nullable=False), Column("b", "longblob", "longblob")),
        ("id",),
    )
    fields = [pymysql_field(FIELD_TYPE.LONG, False), pymysql_field(FIELD_TYPE.LONG_BLOB, True)]
    return schema, build_row_parser(["id", "b"], fields, schema)


@pytest.mark.parametrize("length", [250, 251, 65_535, 65_536, 2**24])
def test_long_fields_are_read_by_length_prefix(length: int) -> None:
    schema, parse = id_and_blob()
    blob = bytes(range(256)) * (length // 256) + bytes(length % 256)
    key, row = parse(length_coded(b"7") + length_coded(blob), 0)
    assert key == (7,)
    assert row == schema.normalize_values(["id", "b"], [7, blob])


# ----------------------------------------------------------------------------- the packets


def packets(payloads: list[bytes], seq: int) -> tuple[bytes, int]:
    """The payloads as the server sends them (a 16 MiB payload split, the last part possibly empty),
    numbered from ``seq``; and the number after the last."""
    out = []
    for payload in payloads:
        while True:
            part, payload = payload[:MAX_PACKET], payload[MAX_PACKET:]
            out.append(len(part).to_bytes(3, "little") + bytes([seq]) + part)
            seq = (seq + 1) & 0xFF
            if len(part) < MAX_PACKET:
                break
    return b"".join(out), seq


EOF_PACKET = b"\xfe\x02\x00\x02\x00"  # 2 warnings; status: autocommit, no more results


class Trickle(io.RawIOBase):
    """A socket that hands out what it holds in pieces of the given sizes (then all the rest)."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes = data, list(sizes)

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.sizes.pop(0) if self.sizes else len(self.data), len(self.data))
        b[:n] = self.data[:n]
        self.data = self.data[n:]
        return n


class FakeConnection:
    encoding = ENCODING

    def __init__(self, data: bytes, sizes: list[int], seq: int) -> None:
        self._rfile = io.BufferedReader(Trickle(data, sizes), buffer_size=7)
        self._next_seq_id = seq
        self.closed = False

    def _force_close(self) -> None:
        self.closed = True


def result() -> SimpleNamespace:
    return SimpleNamespace(
        unbuffered_active=True, connection=object(), rows=(), warning_count=0, has_next=True
    )


@settings(max_examples=200, deadline=None)
@given(shapes_and_rows(), st.integers(0, 255), st.lists(st.integers(1, 40), max_size=30))
def test_rows_are_cut_out_of_the_socket_whatever_its_pieces(case: Any, seq: int, sizes: list[int]) -> None:
    """Packets arrive in pieces of any size; every row comes out as the parser reads its payload, the
    sequence numbers carry on after the EOF packet, the result is left finished, and the last row's
    payload comes back (PyMySQL reads the raw last key from it)."""
    schema, fields, rows = case
    names = [c.name for c in schema.columns]
    parse = build_row_parser(names, fields, schema)
    payloads = [b"".join(length_coded(_encoded(v)) for v in values) for values in rows]
    try:
        expected = [parse(p, 0) for p in payloads]
    except Exception:
        return  # a value PyMySQL cannot convert either: the parser's own test covers it
    data, after = packets([*payloads, EOF_PACKET], seq)
    conn, res = FakeConnection(data, sizes, seq), result()
    got, last = read_result_rows(conn, res, parse)
    assert got == expected
    assert last == payloads[-1]
    assert conn._next_seq_id == after and not conn.closed
    assert (res.unbuffered_active, res.connection, res.rows, res.warning_count) == (False, None, None, 2)
    assert not res.has_next


def test_no_rows_and_a_payload_of_16_mib_or_more() -> None:
    _, parse = id_and_blob()
    data, _ = packets([EOF_PACKET], 1)
    assert read_result_rows(FakeConnection(data, [], 1), result(), parse) == ([], None)
    for size in (MAX_PACKET - 9, MAX_PACKET - 8, MAX_PACKET * 2):  # the payload exactly 16 MiB - 1, or more
        blob = b"x" * size
        long_row = length_coded(b"7") + length_coded(blob)
        data, after = packets([long_row, length_coded(b"8") + b"\xfb", EOF_PACKET], 250)
        conn = FakeConnection(data, [70_000] * 3, 250)
        rows, last = read_result_rows(conn, result(), parse)
        assert rows == [parse(long_row, 0), ((8,), {"id": 8, "b": None})]
        assert conn._next_seq_id == after and last == length_coded(b"8") + b"\xfb"


def test_an_error_in_the_middle_of_the_rows_is_pymysqls_error() -> None:
    """A statement stopped by the server's time limit: the rows read so far are dropped, the error is
    the one PyMySQL raises, the result no longer unbuffered."""
    schema = TableSchema(TableId("db", "t"), (Column("id", "int", "int(11)", nullable=False),), ("id",))
    parse = build_row_parser(["id"], [pymysql_field(FIELD_TYPE.LONG, False)], schema)
    error = (
        b"\xff" + (1969).to_bytes(2, "little") + b"#70100Query execution was interrupted (max_statement_time)"
    )
    data, _ = packets([length_coded(b"1"), error], 1)
    res = result()
    with pytest.raises(pymysql.err.OperationalError) as raised:
        read_result_rows(FakeConnection(data, [3], 1), res, parse)
    assert raised.value.args[0] == 1969 and "max_statement_time" in raised.value.args[1]
    assert res.unbuffered_active is False


@pytest.mark.parametrize("cut", [2, 6, 9])
def test_a_connection_lost_in_the_middle_of_the_rows_is_closed_and_2013(cut: int) -> None:
    schema = TableSchema(TableId("db", "t"), (Column("id", "int", "int(11)", nullable=False),), ("id",))
    parse = build_row_parser(["id"], [pymysql_field(FIELD_TYPE.LONG, False)], schema)
    data, _ = packets([length_coded(b"1"), EOF_PACKET], 1)
    conn = FakeConnection(data[:cut], [], 1)
    with pytest.raises(pymysql.err.OperationalError) as raised:
        read_result_rows(conn, result(), parse)
    assert raised.value.args[0] == 2013 and conn.closed


@pytest.mark.parametrize(
    ("got", "error"), [(0, pymysql.err.OperationalError), (5, pymysql.err.InternalError)]
)
def test_a_packet_out_of_sequence_closes_the_connection(got: int, error: type[Exception]) -> None:
    schema = TableSchema(TableId("db", "t"), (Column("id", "int", "int(11)", nullable=False),), ("id",))
    parse = build_row_parser(["id"], [pymysql_field(FIELD_TYPE.LONG, False)], schema)
    data, _ = packets([length_coded(b"1")], got)
    conn = FakeConnection(data, [], 1)
    with pytest.raises(error):
        read_result_rows(conn, result(), parse)
    assert conn.closed
