"""A chunk's rows read straight from the result set's packets: one reader per result shape.

PyMySQL reads each field of a text-protocol row with a few method calls (the length, then the bytes),
turns it into a Python object (``datetime``, ``Decimal``, ``int``), and gtidsnap's converters then turn
most of those objects back into the text the server sent, its canonical form
(:mod:`gtidsnap.column_values`). Measured on the benchmark's table (1M rows, six columns, one core):
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

A field whose length takes more than one byte (251 bytes or longer) is read by PyMySQL's own method.
The reader keeps the last row's packet so the chunk's raw last key (the next chunk's lower bound, as
the server sent it) is read by PyMySQL as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from pymysql import converters as pymysql_converters

from gtidsnap.column_values import INTEGER_TYPES, TEXT_TYPES, plain_value
from gtidsnap.model import Key, Row
from gtidsnap.schema import TableSchema

Convert = Callable[[Any], Any]
FieldConverter = tuple[str | None, Convert | None]  # PyMySQL's (encoding, converter) of one field
ReadRow = Callable[[Any], tuple[Key, Row]]

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


def build_row_reader(
    names: Sequence[str], fields: Sequence[FieldConverter], schema: TableSchema, last: list[Any]
) -> ReadRow:
    """The reader of one result shape: a row packet in, ``(key, normalised row)`` out. It puts each
    packet into ``last[0]`` (the caller reads the chunk's raw last key from it)."""
    columns = {c.name: c for c in schema.columns}
    converters = schema.converters
    env: dict[str, Any] = {"key_of": schema.key_of, "last": last}
    lines = ["def read_row(packet):", "    d = packet._data", "    p = packet._position"]
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
            "        packet._position = p",
            f"        v{i} = packet.read_length_coded_string()",
            "        p = packet._position",
            f"    if v{i} is not None:",
            f"        v{i} = {value}",
        ]
    pairs = ", ".join(f"{name!r}: v{i}" for i, name in enumerate(names))
    lines += ["    last[0] = packet", f"    row = {{{pairs}}}", "    return key_of(row), row"]
    exec(compile("\n".join(lines), f"<row reader of {schema.table}>", "exec"), env)
    reader: ReadRow = env["read_row"]
    return reader
