"""A chunk's rows read straight from the result set's packets: one reader per result shape.

PyMySQL reads each field of a text-protocol row with a few method calls (the length, then the bytes),
turns it into a Python object (``datetime``, ``Decimal``, ``int``), and gtidsnap's converters then turn
most of those objects back into the text the server sent, its canonical form
(:mod:`gtidsnap.core.column_values`). Measured on the benchmark's table (1M rows, six columns, one core):
PyMySQL's fetch costs 6.4 µs of CPU a row and normalising 2.8 µs more; reading the packets without
parsing any field, 1.3 µs. A chunk is most of a snapshot's CPU, so that is where the time is.

For each result shape (the column names, PyMySQL's ``(encoding, converter)`` per field as it chose
them from the field descriptions, the table's converters) a function is written out with one block
per field: the length byte, the bytes, the value. Every value is what PyMySQL's row put through
:meth:`TableSchema.normalize_values` would hold: by default the field goes through PyMySQL's own
decode and converter and then gtidsnap's, as before; a shortcut is taken only where it gives the same
value for whatever the server can send (the unit tests compare both on random values):

* integers: ``int`` of the ASCII digits (PyMySQL decodes them first);
* text (CHAR, VARCHAR, TEXT, ENUM): decoded with the connection's encoding, as PyMySQL does;
* DECIMAL: the server's fixed-point text is the canonical form already (PyMySQL makes a ``Decimal`` of
  it, gtidsnap prints that back);
* DATE, and DATETIME/TIMESTAMP without a fraction: the server's text, when it has the length of that
  text (``YYYY-MM-DD``, ``YYYY-MM-DD HH:MM:SS``), is the canonical form, valid, zero or invalid; the
  one exception is a TIMESTAMP of 1970-01-01 00:00:00, which the canonical form writes as the zero
  TIMESTAMP.

A field whose length takes more than one byte (251 bytes or longer) is read by the same length rules
PyMySQL follows (a 2, 3 or 8 byte length after 0xFC, 0xFD, 0xFE).

The row packets themselves are read here too (:func:`read_result_rows`): PyMySQL runs the query and
reads the field descriptions, then the rows are cut out of the socket's bytes in blocks, one packet
after the other, instead of PyMySQL's per-row ``_read_packet`` (two buffered reads, a packet object
and its checks; a chunk read of the benchmark's table went from 34,300 to 26,300 instructions a row,
counted by callgrind). Everything PyMySQL checks is checked the
same way, with the same outcome: each packet's sequence number, a packet split at 16 MiB, an error
packet in the middle of the rows (raised as PyMySQL raises it), the connection lost (closed, then
``OperationalError`` 2013), and the EOF packet that ends the rows (its warning count and "more
results" flag kept on the result). The last row's payload comes back too, so the chunk's raw last key
(the next chunk's lower bound, as the server sent it) is read by PyMySQL as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import cached_property
from typing import Any

from pymysql import converters as pymysql_converters
from pymysql.protocol import EOFPacketWrapper, MysqlPacket

from gtidsnap.core.column_values import INTEGER_TYPES, TEXT_TYPES, plain_value
from gtidsnap.core.model import Key
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.socket_packets import MAX_PACKET, long_payload, read_block, wrong_sequence

Convert = Callable[[Any], Any]
FieldConverter = tuple[str | None, Convert | None]  # PyMySQL's (encoding, converter) of one field
ParseRow = Callable[[bytes, int], tuple[Key, dict[str, Any]]]

_TEMPORAL_LENGTH = {"date": 10, "datetime": 19, "timestamp": 19}
_EPOCH_TEXT = b"1970-01-01 00:00:00"


def general_reader(
    encoding: str | None, converter: Callable[[Any], Any] | None, normalize: Callable[[Any], Any]
) -> Callable[[bytes], Any]:
    """A field's bytes as PyMySQL returns them (decode, then its converter), then normalised."""
    if encoding is not None and converter is not None:
        return lambda v: normalize(converter(v.decode(encoding)))
    if encoding is not None:
        return lambda v: normalize(v.decode(encoding))
    if converter is not None:
        return lambda v: normalize(converter(v))
    return normalize


def shortcut(
    data_type: str | None, encoding: str | None, converter: Callable[[Any], Any] | None
) -> str | None:
    """The expression (a template of the field's bytes ``{v}``, not NULL) that gives the general
    reader's (``{g}``) value for a column of ``data_type`` read with PyMySQL's ``encoding`` and
    ``converter``; None: no shortcut, the general reader is called. The module doc says why each is
    exact."""
    if data_type in INTEGER_TYPES and encoding == "ascii" and converter is int:
        return "int({v})"
    if data_type in TEXT_TYPES and encoding is not None and converter is None:
        return f"{{v}}.decode({encoding!r})"
    if data_type in ("decimal", "numeric") and encoding == "ascii" and converter is Decimal:
        return "{v}.decode('ascii')"
    length = _TEMPORAL_LENGTH.get(data_type or "")
    expected = pymysql_converters.convert_date if data_type == "date" else pymysql_converters.convert_datetime
    if length is not None and encoding == "ascii" and converter is expected:
        epoch = f" and {{v}} != {_EPOCH_TEXT!r}" if data_type == "timestamp" else ""
        return f"({{v}}.decode('ascii') if len({{v}}) == {length}{epoch} else {{g}}({{v}}))"
    return None


def build_row_parser(names: Sequence[str], fields: Sequence[FieldConverter], schema: TableSchema) -> ParseRow:
    """The reader of one result shape: a row's payload (in ``d``, from offset ``p``) in, ``(key,
    normalised row)`` out."""
    columns = {c.name: c for c in schema.columns}
    converters = schema.converters
    env: dict[str, Any] = {"key_of": schema.key_of, "long_field": long_field}
    lines = ["def parse_row(d, p):"]
    for i, (name, (encoding, converter)) in enumerate(zip(names, fields, strict=True)):
        column = columns.get(name)
        general = general_reader(encoding, converter, converters.get(name, plain_value))
        expression = shortcut(column.data_type if column else None, encoding, converter)
        env[f"g{i}"] = general
        value = (expression or "{g}({v})").format(v=f"v{i}", g=f"g{i}")
        lines += [
            "    n = d[p]",
            "    if n < 251:",
            f"        v{i} = d[p + 1 : p + 1 + n]",
            "        p += 1 + n",
            "    elif n == 251:",
            f"        v{i} = None",
            "        p += 1",
            "    else:",
            f"        v{i}, p = long_field(d, p)",
            f"    if v{i} is not None:",
            f"        v{i} = {value}",
        ]
    pairs = ", ".join(f"{name!r}: v{i}" for i, name in enumerate(names))
    lines += [f"    row = {{{pairs}}}", "    return key_of(row), row"]
    exec(compile("\n".join(lines), f"<row reader of {schema.table}>", "exec"), env)
    parse: ParseRow = env["parse_row"]
    return parse


def long_field(d: bytes, p: int) -> tuple[bytes, int]:
    """A field of 251 bytes or more at ``p`` (its first byte 0xFC, 0xFD or 0xFE: a 2, 3 or 8 byte
    length follows), and where the next field starts."""
    size = {0xFC: 2, 0xFD: 3, 0xFE: 8}[d[p]]
    n = int.from_bytes(d[p + 1 : p + 1 + size], "little")
    start = p + 1 + size
    return d[start : start + n], start + n


def read_result_rows(
    conn: Any, result: Any, parse: ParseRow
) -> tuple[list[tuple[Key, dict[str, Any]]], bytes | None]:
    """Every row of the unbuffered result ``result`` (PyMySQL has read its field descriptions), read off
    ``conn``'s socket up to the EOF packet, and the last row's payload (None: no rows). Leaves the
    connection and the result as PyMySQL's own reading would (see the module docstring)."""
    rfile, seq = conn._rfile, conn._next_seq_id
    buf, p = b"", 0
    rows: list[tuple[Key, dict[str, Any]]] = []
    append = rows.append
    last: tuple[bytes, int, int] | None = None  # the buffer holding the last row's payload, and where
    while True:
        block = read_block(conn, rfile)
        buf = buf[p:] + block if p < len(buf) else block
        p, end = 0, len(buf)
        while p + 4 <= end:
            n = buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16
            q = p + 4 + n
            if q > end:
                break  # the packet's rest is in the next block
            if buf[p + 3] != seq:
                wrong_sequence(conn, buf[p + 3], seq)
            seq = (seq + 1) & 0xFF
            start = p + 4
            if n == MAX_PACKET:  # a payload of 16 MiB or more: gather it, then go on after it
                payload, p, seq, buf = long_payload(conn, rfile, buf, p, seq)
                append(parse(payload, 0))
                last, end = (payload, 0, len(payload)), len(buf)
                continue
            first = buf[start]
            if first == 0xFE and n < 9:  # EOF: the rows end
                conn._next_seq_id = seq
                _finish(result, MysqlPacket(buf[start:q], conn.encoding))
                return rows, None if last is None else last[0][last[1] : last[2]]
            if first == 0xFF:  # an error in the middle of the rows (a statement timeout, say)
                conn._next_seq_id = seq
                result.unbuffered_active = False
                MysqlPacket(buf[start:q], conn.encoding).raise_for_error()
            append(parse(buf, start))
            last = (buf, start, q)
            p = q


def _finish(result: Any, eof: MysqlPacket) -> None:
    """The result after its EOF packet, as PyMySQL's unbuffered reading leaves it."""
    wrapper = EOFPacketWrapper(eof)
    result.warning_count = wrapper.warning_count
    result.has_next = wrapper.has_next
    result.unbuffered_active = False
    result.connection = None
    result.rows = None


class ChunkResult:
    """One chunk as selected, in key order.

    ``rows`` pairs each normalised row with its (collation-folded) key; ``last_raw_key`` is the last
    row's key exactly as the server returned it, the next chunk's lower bound (folded keys must not be
    sent back: ``'abc'`` is not ``'ABC'`` under a binary collation of another key column).

    Rows come normalised already when read from the result's packets (:mod:`gtidsnap.source.result_rows`,
    ``read_from_packets``); rows PyMySQL parsed are normalised on first use of ``rows``.
    """

    def __init__(self, schema: TableSchema, names: Sequence[str], raw_rows: Sequence[Sequence[Any]]) -> None:
        self.schema = schema
        self.names = tuple(names)
        self.raw_rows = raw_rows
        self.count = len(raw_rows)
        self.read_from_packets = False
        key_at = [self.names.index(k) for k in schema.key]
        self.last_raw_key: tuple[Any, ...] | None = (
            tuple(raw_rows[-1][i] for i in key_at) if raw_rows else None
        )

    @classmethod
    def normalised(
        cls,
        schema: TableSchema,
        names: Sequence[str],
        rows: Sequence[tuple[Key, dict[str, Any]]],
        last_raw_row: Sequence[Any] | None,
    ) -> ChunkResult:
        """A chunk whose rows were normalised as they were read; ``last_raw_row``: the last row as
        PyMySQL reads it (None when there are no rows)."""
        chunk = cls(schema, names, [last_raw_row] if last_raw_row is not None else [])
        chunk.raw_rows, chunk.count, chunk.read_from_packets = (), len(rows), True
        chunk.__dict__["rows"] = tuple(rows)
        return chunk

    @cached_property
    def rows(self) -> tuple[tuple[Key, dict[str, Any]], ...]:
        normalize, key_of, names = self.schema.normalize_values, self.schema.key_of, self.names
        out = []
        for raw in self.raw_rows:
            row = normalize(names, raw)
            out.append((key_of(row), row))
        return tuple(out)
