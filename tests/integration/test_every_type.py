"""Every column type each server has, as a value and as a key, snapshot and stream: one canonical form.

The type list is the server's own, not ours: every word its catalogue knows (``information_schema.KEYWORDS``,
the help topics of the data-type and geographic categories, MariaDB's DATA TYPE plugins) is tried as a
column type in a ``CREATE TEMPORARY TABLE`` on the primary (temporary tables stay out of the ROW binlog),
as ``NAME``, ``NAME(10)`` and ``NAME('a','b')``. Each one that makes a column gives a DATA_TYPE, and
every DATA_TYPE found must be in :data:`MATRIX`: a new server version cannot slip a type past this test.

Per DATA_TYPE the matrix has column definitions (UNSIGNED, fractional seconds, collations, ...) with
sample literals and, where the type can be a key, distinct key literals. Then, on each flavour:

* values: one ``id, n, v`` table per definition; a snapshot, then ``UPDATE ... SET n = n + 1`` so the
  binlog carries full images of the same stored values. For every row the snapshot's ``v`` equals the
  update's before and after ``v``, and the documented canonical value where the sample says it;
* keys: one ``k PRIMARY KEY, id, n`` table per key-capable definition, and one keyed by ``(g, k)`` (so
  k is bounded inside row-value comparisons), walked with chunk size 1 and with chunk size 2: every row
  comes out exactly once (a wrong keyset bound skips or repeats rows), and each row's snapshot ``key``
  equals the ``key`` of its later update (the form the window compares);
* a type gtidsnap refuses as a key makes ``Replica.schema`` raise a SchemaError naming the type, and a
  type listed without keys is one the server itself cannot index as a primary key.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Context, Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from gtidsnap.core.commands import Shutdown
from gtidsnap.core.errors import SchemaError
from gtidsnap.core.model import TableId
from gtidsnap.run import build_engine
from gtidsnap.source.binlog import row_images
from gtidsnap.source.chunk_sql import chunk_query
from gtidsnap.source.replica import Replica
from gtidsnap.source.result_rows import ChunkResult
from tests.integration.cdc import make_config, read_records, reader_settings
from tests.integration.fixtures.db_servers import ReplicaPair

pytestmark = pytest.mark.integration

BOTH = ("mariadb", "mysql")
MARIADB = ("mariadb",)
MYSQL = ("mysql",)


class _Any:
    """An expected value not spelled out: only snapshot == stream is checked for it."""

    def __repr__(self) -> str:
        return "ANY"


ANY: Any = _Any()


@dataclass(frozen=True)
class Sample:
    """A SQL literal (or expression) and the canonical value gtidsnap must give it."""

    sql: str
    expect: Any = ANY


@dataclass(frozen=True)
class Variant:
    """One column definition of a DATA_TYPE, its value samples and (if it can be a key) key samples."""

    ddl: str
    values: tuple[Sample, ...]
    keys: tuple[Sample, ...] = ()
    prefix: int | None = None  # BLOB/TEXT/spatial keys need PRIMARY KEY (k(prefix))
    flavors: tuple[str, ...] = BOTH


@dataclass(frozen=True)
class TypeCase:
    variants: tuple[Variant, ...]
    refused_key: bool = False  # gtidsnap refuses it as a key (chunking.UNSUPPORTED_KEY_TYPES)


def s(value: Any, expect: Any = ANY) -> Sample:
    """A sample from a Python value: text is quoted, numbers are written as they are; ``expect``
    defaults to the value itself (NULL to None)."""
    if value is None:
        return Sample("NULL", None)
    sql = "'" + value.replace("\\", "\\\\").replace("'", "''") + "'" if isinstance(value, str) else str(value)
    return Sample(sql, value if expect is ANY else expect)


def b64(data: bytes) -> str:
    return "base64:" + base64.b64encode(data).decode()


def hexs(data: bytes, expect: Any = ANY) -> Sample:
    """A binary literal ``x'..'``; expected as base64 of ``expect`` (default: the bytes)."""
    return Sample(f"x'{data.hex()}'", b64(data if expect is ANY else expect))


def bits(text: str) -> Sample:
    return Sample(f"b'{text}'", int(text, 2))


def dec(text: str, scale: int) -> Sample:
    """A DECIMAL literal, expected as the fixed-point text with the column's scale."""
    number = Decimal(text).quantize(Decimal(1).scaleb(-scale), context=Context(prec=100))
    return Sample(text, format(number.copy_abs() if number == 0 else number, "f"))  # no -0.00


def geo(wkt: str, srid: int | None = None) -> Sample:
    args = f"'{wkt}'" + (f", {srid}" if srid is not None else "")
    return Sample(f"ST_GeomFromText({args})")


NULL = s(None)
INTS = {  # DATA_TYPE: width in bits
    "tinyint": 8,
    "smallint": 16,
    "mediumint": 24,
    "int": 32,
    "bigint": 64,
}


def int_case(data_type: str) -> TypeCase:
    width = INTS[data_type]
    lo, hi, top = -(2 ** (width - 1)), 2 ** (width - 1) - 1, 2**width - 1
    name = data_type.upper()
    variants = [
        Variant(name, (s(lo), s(hi), s(0), s(-1), NULL), keys=(s(lo), s(-1), s(0), s(1), s(hi))),
        Variant(
            f"{name} UNSIGNED",
            (s(0), s(top), s(hi + 1), NULL),
            keys=(s(0), s(1), s(hi), s(hi + 1), s(top)),
        ),
    ]
    if data_type == "tinyint":
        variants.append(Variant("BOOL", (Sample("TRUE", 1), Sample("FALSE", 0), NULL)))
    if data_type == "int":
        variants.append(Variant("INT(5) UNSIGNED ZEROFILL", (s(42), s(123456), NULL)))
    return TypeCase(tuple(variants))


TEXTS = ("", "abc", "Grüße 😀 ✓", " lead", "tab\there", "quote ' and \\ backslash")


def text_case(name: str, prefix: int | None) -> TypeCase:
    """CHAR/VARCHAR/*TEXT: trailing spaces kept (CHAR strips them when it stores)."""
    strips = name.startswith("CHAR")
    values = (*(s(t) for t in TEXTS), s("trail  ", "trail" if strips else "trail  "), NULL)
    keys = (s(""), s("a"), s("B"), s("c d"), s("ü"), s("😀"), s("zz"))
    return TypeCase((Variant(name, values, keys=keys, prefix=prefix),))


def blob_case(name: str, prefix: int | None) -> TypeCase:
    values = (hexs(b""), hexs(b"\x00\xff"), hexs(b"abc"), hexs(b"\x00" * 3), NULL)
    keys = (hexs(b""), hexs(b"\x00"), hexs(b"\x00\x00"), hexs(b"\x01"), hexs(b"\xff"), hexs(b"abc"))
    return TypeCase((Variant(name, values, keys=keys, prefix=prefix),))


def spatial_case(name: str, wkts: Sequence[str], empty: str | None) -> TypeCase:
    """Spatial values (the server's SRID + WKB); keys only on MariaDB (MySQL: spatial indexes only)."""
    values = (
        *(geo(w) for w in wkts),
        geo(wkts[0], 4326),
        *([geo(empty)] if empty else []),
        NULL,
    )
    keys = (*(geo(w) for w in wkts), geo(wkts[0], 4326))
    prefix = None if name == "POINT" else 64
    return TypeCase(
        (
            Variant(name, values, keys=keys, prefix=prefix, flavors=MARIADB),
            Variant(name, values, flavors=MYSQL),
        )
    )


DEC65_MAX = "9" * 35 + "." + "9" * 30
UUIDS = (
    "123e4567-e89b-12d3-a456-426655440000",  # v1, trailing zero bytes (the binlog drops them)
    "f81d4fae-7dec-11d0-a765-00a0c91e6bf6",  # v1
    "550e8400-e29b-41d4-a716-446655440000",  # v4
    "1ec9414c-232a-6b00-b3c8-9f6bdeced846",  # v6
    "01890a5d-ac96-774b-bcce-b302099a8057",  # v7
    "01234567-89ab-1def-0123-456789abcdef",  # v1, variant 0
    "01234567-89ab-5def-e123-456789abcdef",  # v5, variant 3 (reserved)
    "01234567-89ab-0def-c123-456789abcdef",  # v0, variant 2 (Microsoft)
    "00000000-0000-0000-0000-000000000000",  # nil: the binlog has ''
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
)
INET6 = (
    "::",
    "::1",
    "::100",
    "::0.1.0.0",  # IPv4-compatible
    "::1.2.3.4",
    "::ffff:1.2.3.4",  # IPv4-mapped
    "::ffff:0.0.0.0",
    "::1:0:0",
    "2001:db8::",  # trailing zero bytes
    "2001:0:1::1:0:1",
    "ffff::1:1:0:1:1:ffff",  # a single zero group is compressed too
    "fe80::1:2",
    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
)
INET6_WRITTEN = (("2001:db8:0:0:1::1", "2001:db8::1:0:0:1"), ("::FFFF:1.2.3.4", "::ffff:1.2.3.4"))
INET4 = ("0.0.0.0", "0.0.0.1", "1.2.3.0", "10.0.0.1", "127.0.0.1", "255.255.255.255")
JSON_TEMPORAL = (
    "JSON_OBJECT('d', CAST('2024-01-02' AS DATE), 't', CAST('12:34:56.5' AS TIME(6)),"
    " 'neg', CAST('-00:00:01.25' AS TIME(2)), 'long', CAST('-838:59:59' AS TIME),"
    " 'dt', CAST('2024-01-02 03:04:05.000001' AS DATETIME(6)), 'ts', TIMESTAMP'2024-01-02 03:04:05.5',"
    " 'dec0', CAST(0 AS DECIMAL(65,30)), 'dec', CAST('-1.50' AS DECIMAL(10,2)),"
    " 'bin', CAST(x'00ff' AS BINARY),"
    " 'bit', b'101', 'big', 18446744073709551615, 'neg0', -0.0e0, 'dbl', 0.1e0 + 0.2e0,"
    " 'y', CAST(2024 AS YEAR), 'g', ST_GeomFromText('POINT(1 2)'))"
)

MATRIX: dict[str, TypeCase] = {
    **{t: int_case(t) for t in INTS},
    "decimal": TypeCase(
        (
            Variant(
                "DECIMAL(12,2)",
                (dec("-1234567890.12", 2), dec("0.05", 2), dec("0", 2), dec("-0", 2), NULL),
                keys=(dec("-1", 2), dec("-0.01", 2), dec("0", 2), dec("0.01", 2), dec("9999999999.99", 2)),
            ),
            Variant(
                "DECIMAL(65,30)",
                (
                    dec("0", 30),
                    dec(DEC65_MAX, 30),
                    dec("-" + DEC65_MAX, 30),
                    dec("0.000000000000000000000000000001", 30),
                    dec("-1.5", 30),
                    NULL,
                ),
                keys=(
                    dec("-" + DEC65_MAX, 30),
                    dec("-1", 30),
                    dec("-0.000000000000000000000000000001", 30),
                    dec("0", 30),
                    dec("0.000000000000000000000000000001", 30),
                    dec("0.000000000000000000000000000002", 30),
                    dec("0.5", 30),
                    dec(DEC65_MAX, 30),
                ),
            ),
            Variant("DECIMAL(65,0)", (dec("9" * 65, 0), dec("-" + "9" * 65, 0), NULL)),
            Variant("DECIMAL(5,5)", (dec("0.00001", 5), dec("-0.99999", 5), NULL)),
            Variant("DECIMAL(10,2) UNSIGNED", (dec("99999999.99", 2), dec("0", 2), NULL)),
        )
    ),
    "float": TypeCase(
        (
            Variant(
                "FLOAT",
                (
                    Sample("1.1", 1.1),
                    Sample("-0.0e0", 0.0),
                    Sample("123456789", 123457000.0),
                    Sample("3.40282e38", 3.40282e38),
                    Sample("1.17549e-38", 1.17549e-38),
                    Sample("-1.5", -1.5),
                    NULL,
                ),
                keys=(Sample("1.5"),),
            ),
            Variant("FLOAT(7,3)", (Sample("1234.567", 1234.567), Sample("-0.001", -0.001), NULL)),
        ),
        refused_key=True,
    ),
    "double": TypeCase(
        (
            Variant(
                "DOUBLE",
                (
                    Sample("3.141592653589793e0", 3.141592653589793),
                    Sample("0.1e0 + 0.2e0", 0.30000000000000004),
                    Sample("1.7976931348623157e308", 1.7976931348623157e308),
                    Sample("2.2250738585072014e-308", 2.2250738585072014e-308),
                    Sample("5e-324"),
                    Sample("-0.0e0"),
                    Sample("1e300", 1e300),
                    NULL,
                ),
                keys=(
                    Sample("-1e300", -1e300),
                    Sample("-0.5e0", -0.5),
                    Sample("0e0", 0.0),
                    Sample("2.2250738585072014e-308", 2.2250738585072014e-308),
                    Sample("0.1e0", 0.1),
                    Sample("0.1e0 + 0.2e0", 0.30000000000000004),
                    Sample("1e0 / 3e0", 1 / 3),
                    Sample("1.7976931348623157e308", 1.7976931348623157e308),
                ),
            ),
            Variant("DOUBLE(10,2)", (Sample("1.5", 1.5), Sample("-12345678.91", -12345678.91), NULL)),
        )
    ),
    "bit": TypeCase(
        (
            Variant("BIT(1)", (bits("0"), bits("1"), NULL), keys=(bits("0"), bits("1"))),
            Variant(
                "BIT(8)",
                (bits("10100101"), bits("0"), bits("11111111"), NULL),
                keys=tuple(bits(b) for b in ("0", "1", "10", "101", "1111111", "10000000", "11111111")),
            ),
            Variant("BIT(20)", (bits("11110000111100001111"), bits("1"), NULL)),
            Variant(
                "BIT(64)",
                (bits("1" * 64), bits("0"), bits("1" + "0" * 63), NULL),
                keys=(bits("0"), bits("1"), bits("1" + "0" * 63), bits("1" * 64)),
            ),
        )
    ),
    "year": TypeCase(
        (
            Variant(
                "YEAR",
                (s(1901), s(2155), s(0), Sample("'00'", 2000), NULL),
                keys=(s(0), s(1901), s(1999), s(2000), s(2155)),
            ),
        )
    ),
    "date": TypeCase(
        (
            Variant(
                "DATE",
                (
                    s("1000-01-01"),
                    s("9999-12-31"),
                    s("2024-02-29"),
                    s("0000-00-00"),
                    s("2024-00-10"),
                    s("2024-01-00"),
                    s("2024-02-30"),
                    NULL,
                ),
                keys=tuple(
                    s(d)
                    for d in (
                        "0000-00-00",
                        "0000-01-01",
                        "1000-01-01",
                        "2024-00-00",
                        "2024-01-00",
                        "2024-02-29",
                        "2024-02-30",
                        "9999-12-31",
                    )
                ),
            ),
        )
    ),
    "datetime": TypeCase(
        (
            Variant(
                "DATETIME",
                (
                    s("1000-01-01 00:00:00"),
                    s("9999-12-31 23:59:59"),
                    s("0000-00-00 00:00:00"),
                    s("2024-00-10 00:00:00"),
                    s("2024-02-30 12:00:00"),
                    NULL,
                ),
            ),
            Variant(
                "DATETIME(6)",
                (
                    s("2024-02-29 23:59:59.999999"),
                    s("2024-01-01 00:00:00.000001"),
                    s("0000-00-00 00:00:00.000000", "0000-00-00 00:00:00"),
                    s("2024-00-10 12:00:00.5", "2024-00-10 12:00:00.500000"),
                    NULL,
                ),
                keys=(
                    s("0000-00-00 00:00:00.000000", "0000-00-00 00:00:00"),
                    s("0000-00-00 00:00:00.000001", "0000-00-00 00:00:00.000001"),
                    s("1000-01-01 00:00:00"),
                    s("2024-00-10 12:00:00.5", "2024-00-10 12:00:00.500000"),
                    s("2024-01-01 00:00:00.000001"),
                    s("2024-02-29 23:59:59.999999"),
                    s("9999-12-31 23:59:59.999999"),
                ),
            ),
            Variant("DATETIME(3)", (s("2024-01-02 03:04:05.123", "2024-01-02 03:04:05.123000"), NULL)),
        )
    ),
    "timestamp": TypeCase(
        (
            Variant(
                "TIMESTAMP",
                (s("1970-01-01 00:00:01"), s("2038-01-19 03:14:07"), s("0000-00-00 00:00:00"), NULL),
            ),
            Variant(
                "TIMESTAMP(6)",
                (
                    s("2038-01-19 03:14:07.999999"),
                    s("1970-01-01 00:00:01.000001"),
                    s("0000-00-00 00:00:00.000000", "0000-00-00 00:00:00"),
                    NULL,
                ),
                keys=(
                    s("0000-00-00 00:00:00.000000", "0000-00-00 00:00:00"),
                    s("1970-01-01 00:00:01"),
                    s("1970-01-01 00:00:01.000001"),
                    s("2000-01-01 00:00:00.5", "2000-01-01 00:00:00.500000"),
                    s("2038-01-19 03:14:07.999999"),
                ),
            ),
        )
    ),
    "time": TypeCase(
        (
            Variant(
                "TIME",
                (s("-838:59:59"), s("838:59:59"), s("00:00:00"), s("-00:00:01"), s("24:00:00"), NULL),
                keys=(s("-838:59:59"), s("-24:00:00"), s("-00:00:01"), s("00:00:00"), s("838:59:59")),
            ),
            Variant(
                "TIME(6)",
                (
                    s("-00:59:59.999500"),
                    s("-838:59:58.000001"),
                    s("-00:00:00.000001"),
                    s("12:34:56.5", "12:34:56.500000"),
                    NULL,
                ),
                keys=(
                    s("-838:59:59"),
                    s("-00:00:01"),
                    s("-00:00:00.5", "-00:00:00.500000"),
                    s("-00:00:00.000001"),
                    s("00:00:00"),
                    s("00:00:00.000001"),
                    s("24:00:00"),
                    s("838:59:59"),
                ),
            ),
            Variant(
                "TIME(3)",
                (
                    s("-00:00:01.001", "-00:00:01.001000"),
                    s("-838:59:58.999", "-838:59:58.999000"),
                    s("00:00:00.5", "00:00:00.500000"),
                    NULL,
                ),
                keys=(
                    s("-00:00:01.001", "-00:00:01.001000"),
                    s("-00:00:01", "-00:00:01"),
                    s("-00:00:00.999", "-00:00:00.999000"),
                    s("00:00:00.001", "00:00:00.001000"),
                ),
            ),
            Variant(
                "TIME(1)", (s("-00:00:00.1", "-00:00:00.100000"), s("-12:00:00.9", "-12:00:00.900000"), NULL)
            ),
            Variant(
                "TIME(2)",
                (
                    s("-00:00:01.25", "-00:00:01.250000"),
                    s("-12:00:00.01", "-12:00:00.010000"),
                    s("00:00:00.99", "00:00:00.990000"),
                    NULL,
                ),
            ),
        )
    ),
    "char": TypeCase(
        (
            *text_case("CHAR(30)", None).variants,
            Variant(
                "CHAR(4) COLLATE utf8mb4_bin",
                (s("a"), s("A"), NULL),
                keys=(s("A"), s("a"), s("b"), s("B"), s("")),
            ),
        )
    ),
    "varchar": TypeCase(
        (
            *text_case("VARCHAR(24)", None).variants,
            Variant(
                "VARCHAR(8) COLLATE utf8mb4_bin",
                (s("a  "), NULL),
                keys=(s("A"), s("a"), s("b"), s("B"), s("😀"), s("😁")),
            ),
            # NO PAD collations: 'a' and 'a ' are two keys
            Variant(
                "VARCHAR(8) COLLATE utf8mb4_0900_ai_ci",
                (s("a "),),
                keys=(s("a"), s("a "), s("a  "), s("B"), s("b ")),
                flavors=MYSQL,
            ),
            Variant(
                "VARCHAR(8) COLLATE utf8mb4_general_nopad_ci",
                (s("a "),),
                keys=(s("a"), s("a "), s("a  "), s("B"), s("b ")),
                flavors=MARIADB,
            ),
            Variant(
                "VARCHAR(8) CHARACTER SET latin1", (s("Grüße"), s("€‰"), s(""), NULL), keys=(s("ä"), s("€"))
            ),
        )
    ),
    "tinytext": text_case("TINYTEXT", 8),
    "text": text_case("TEXT", 8),
    "mediumtext": text_case("MEDIUMTEXT", 8),
    "longtext": TypeCase(
        (
            *text_case("LONGTEXT", 8).variants,
            # MariaDB's JSON is LONGTEXT with a check: its text, as written
            Variant(
                "JSON",
                (s('{"a": 1, "b": [1, 2.50, "é"]}'), s('"x"'), s("null"), NULL),
                flavors=MARIADB,
            ),
        )
    ),
    "binary": TypeCase(
        (
            Variant(
                "BINARY(4)",
                (
                    hexs(b"", b"\x00" * 4),
                    hexs(b"\x00", b"\x00" * 4),
                    hexs(b"ab", b"ab\x00\x00"),
                    hexs(b"\xff" * 4),
                    hexs(b"\x00\x00\x00\x01"),
                    NULL,
                ),
                keys=(
                    hexs(b"\x00" * 4),
                    hexs(b"\x00\x00\x00\x01"),
                    hexs(b"\x01", b"\x01\x00\x00\x00"),
                    hexs(b"\x7f", b"\x7f\x00\x00\x00"),
                    hexs(b"\xff", b"\xff\x00\x00\x00"),
                    hexs(b"\xff" * 4),
                    hexs(b"ab", b"ab\x00\x00"),
                ),
            ),
        )
    ),
    "varbinary": TypeCase(
        (
            Variant(
                "VARBINARY(8)",
                (hexs(b""), hexs(b"\x00"), hexs(b"\x00\x00"), hexs(b"abc"), hexs(b"\xff\x00"), NULL),
                keys=(
                    hexs(b""),
                    hexs(b"\x00"),
                    hexs(b"\x00\x00"),
                    hexs(b"\x01"),
                    hexs(b"\xff"),
                    hexs(b"\xff\x00"),
                    hexs(b"abc"),
                ),
            ),
        )
    ),
    "tinyblob": blob_case("TINYBLOB", 8),
    "blob": blob_case("BLOB", 8),
    "mediumblob": blob_case("MEDIUMBLOB", 8),
    "longblob": blob_case("LONGBLOB", 8),
    "enum": TypeCase(
        (
            Variant(
                "ENUM('a','b','c d')",
                (s("a"), s("c d"), Sample("'not a member'", ""), NULL),
                keys=(s("a"), s("b")),
            ),
        ),
        refused_key=True,
    ),
    "set": TypeCase(
        (
            Variant(
                "SET('a','b','c')",
                (
                    Sample("''", []),
                    Sample("'a'", ["a"]),
                    Sample("'c,a'", ["a", "c"]),
                    Sample("'a,b,c'", ["a", "b", "c"]),
                    NULL,
                ),
                keys=(s("a"), s("b")),
            ),
        ),
        refused_key=True,
    ),
    "json": TypeCase(
        (
            Variant(
                "JSON",
                (
                    Sample(
                        """'{"k": [1, 2.5, "é😀", null, true, {"n": 12345678901234567890}], "empty": {}}'""",
                        {"k": [1, 2.5, "é😀", None, True, {"n": 12345678901234567890}], "empty": {}},
                    ),
                    Sample("""'"just a string"'""", "just a string"),
                    Sample("'null'", None),
                    Sample("'[]'", []),
                    Sample("'1e300'", 1e300),
                    Sample("'0.30000000000000004'", 0.30000000000000004),
                    Sample(
                        """'{"a": {"b": {"c": [1, [2, [3, {}]]]}}}'""", {"a": {"b": {"c": [1, [2, [3, {}]]]}}}
                    ),
                    Sample(
                        JSON_TEMPORAL,
                        {
                            "d": "2024-01-02",
                            "t": "12:34:56.500000",
                            "neg": "-00:00:01.250000",
                            "long": ANY,  # MySQL packs a TIME over 31 h into JSON oddly; the text shows it
                            "dt": "2024-01-02 03:04:05.000001",
                            "ts": "2024-01-02 03:04:05.500000",
                            "dec0": 0.0,
                            "dec": -1.5,
                            "bin": "base64:type15:AP8=",
                            "bit": "base64:type15:BQ==",
                            "big": 18446744073709551615,
                            "neg0": -0.0,
                            "dbl": 0.30000000000000004,
                            "y": 2024,
                            "g": {"type": "Point", "coordinates": [1.0, 2.0]},
                        },
                    ),
                    Sample(
                        "JSON_ARRAY(CAST('00:00:00' AS TIME), CAST('-838:59:59.000001' AS TIME(6)),"
                        " CAST('2024-02-29' AS DATE), CAST(0.000001 AS DECIMAL(65,30)), CAST(x'' AS BINARY),"
                        " CAST('2024-02-29 23:59:59' AS DATETIME))",
                        [
                            "00:00:00.000000",
                            ANY,
                            "2024-02-29",
                            1e-06,
                            "base64:type15:",
                            "2024-02-29 23:59:59.000000",
                        ],
                    ),
                    NULL,
                ),
            ),
        )
    ),
    "geometry": spatial_case(
        "GEOMETRY",
        ("POINT(1 2)", "LINESTRING(0 0,1 1)", "POLYGON((0 0,1 0,1 1,0 0))"),
        "GEOMETRYCOLLECTION EMPTY",
    ),
    "point": spatial_case("POINT", ("POINT(1 2)", "POINT(0 5)", "POINT(-1 0)", "POINT(3 1)"), None),
    "linestring": spatial_case("LINESTRING", ("LINESTRING(0 0,1 1)", "LINESTRING(1 1,2 2,3 3)"), None),
    "polygon": spatial_case("POLYGON", ("POLYGON((0 0,1 0,1 1,0 0))", "POLYGON((1 1,2 1,2 2,1 1))"), None),
    "multipoint": spatial_case("MULTIPOINT", ("MULTIPOINT(0 0,1 1)", "MULTIPOINT(1 1)"), None),
    "multilinestring": spatial_case(
        "MULTILINESTRING", ("MULTILINESTRING((0 0,1 1))", "MULTILINESTRING((1 1,2 2),(3 3,4 4))"), None
    ),
    "multipolygon": spatial_case(
        "MULTIPOLYGON", ("MULTIPOLYGON(((0 0,1 0,1 1,0 0)))", "MULTIPOLYGON(((1 1,2 1,2 2,1 1)))"), None
    ),
    "geometrycollection": spatial_case(
        "GEOMETRYCOLLECTION",
        ("GEOMETRYCOLLECTION(POINT(1 2))", "GEOMETRYCOLLECTION(POINT(3 4),LINESTRING(0 0,1 1))"),
        "GEOMETRYCOLLECTION EMPTY",
    ),
    "geomcollection": spatial_case(
        "GEOMCOLLECTION",
        ("GEOMETRYCOLLECTION(POINT(1 2))", "GEOMETRYCOLLECTION(POINT(3 4),LINESTRING(0 0,1 1))"),
        "GEOMETRYCOLLECTION EMPTY",
    ),
    "uuid": TypeCase((Variant("UUID", (*(s(u) for u in UUIDS), NULL), keys=tuple(s(u) for u in UUIDS)),)),
    "inet6": TypeCase(
        (
            Variant(
                "INET6",
                (*(s(a) for a in INET6), *(s(a, b) for a, b in INET6_WRITTEN), NULL),
                keys=(*(s(a) for a in INET6), s(*INET6_WRITTEN[0])),
            ),
        )
    ),
    "inet4": TypeCase((Variant("INET4", (*(s(a) for a in INET4), NULL), keys=tuple(s(a) for a in INET4)),)),
    # Newer servers (MariaDB 11.7, MySQL 9.0); the probe shows whether this one has it.
    "vector": TypeCase(
        (
            Variant(
                "VECTOR(2)",
                (Sample("VEC_FromText('[1,2]')", b64(b"\x00\x00\x80?\x00\x00\x00@")), NULL),
                flavors=MARIADB,
            ),
            Variant(
                "VECTOR(2)",
                (Sample("STRING_TO_VECTOR('[1,2]')", b64(b"\x00\x00\x80?\x00\x00\x00@")), NULL),
                flavors=MYSQL,
            ),
        )
    ),
}


# --------------------------------------------------------------------------- the server's catalogue


def candidate_names(cur: Any, flavor: str) -> set[str]:
    """Every word and phrase the server's catalogue offers that might name a column type."""
    cur.execute("SELECT WORD FROM information_schema.KEYWORDS")
    names = {str(r[0]).upper() for r in cur.fetchall()}
    cur.execute(
        "SELECT t.name FROM mysql.help_topic t JOIN mysql.help_category c "
        "ON t.help_category_id = c.help_category_id "
        "WHERE c.name IN ('Data Types', 'Geographic Features', 'Geographic')"
    )
    for (topic,) in cur.fetchall():
        for part in str(topic).replace("\\_", "_").split(","):
            part = part.strip().upper()
            if re.fullmatch(r"[A-Z0-9_ ]+", part):
                names.add(part)  # a phrase: DOUBLE PRECISION, LONG VARBINARY, ...
            names.update(re.findall(r"[A-Z0-9_]+", part))
    if flavor == "mariadb":
        cur.execute("SELECT PLUGIN_NAME FROM information_schema.PLUGINS WHERE PLUGIN_TYPE = 'DATA TYPE'")
        names.update(str(r[0]).upper() for r in cur.fetchall())
    return names


def probe_types(pair: ReplicaPair, db: str) -> dict[str, list[str]]:
    """DATA_TYPE -> the type names that produced it, from temporary tables on the primary.

    Neither server lists temporary tables in information_schema.COLUMNS (MariaDB 10.11, MySQL 8.0), so
    the DATA_TYPE is read from SHOW COLUMNS (the type up to its first parenthesis or space); the tables
    made later from the matrix check it against information_schema."""
    found: dict[str, list[str]] = {}
    with pair.primary(db) as conn, conn.cursor() as cur:
        for name in sorted(candidate_names(cur, pair.flavor)):
            for form in (name, f"{name}(10)", f"{name}('a','b')"):
                try:
                    cur.execute(f"CREATE TEMPORARY TABLE type_probe (c {form})")
                except pymysql.MySQLError:
                    continue
                cur.execute("SHOW COLUMNS FROM type_probe")
                column_type = _text(cur.fetchone()[1]).lower()
                cur.execute("DROP TEMPORARY TABLE type_probe")
                match = re.match(r"[a-z0-9_]+", column_type)
                assert match, f"SHOW COLUMNS gave the type {column_type!r} for {form}"
                found.setdefault(match.group(0), []).append(form)
                break
    return found


def server_refuses_key(pair: ReplicaPair, db: str, ddl: str) -> bool:
    """Does the server refuse ``ddl`` as a primary key, whole and as a prefix?"""
    with pair.primary(db) as conn, conn.cursor() as cur:
        for key in (f"k {ddl} NOT NULL PRIMARY KEY", f"k {ddl} NOT NULL, PRIMARY KEY (k(8))"):
            try:
                cur.execute(f"CREATE TEMPORARY TABLE key_probe ({key})")
            except pymysql.MySQLError:
                continue
            cur.execute("DROP TEMPORARY TABLE key_probe")
            return False
    return True


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


# --------------------------------------------------------------------------- tables


@dataclass
class Table:
    """A value table ``id PK, n, v``, or a key table ``k PK, id, n`` (composite: ``PRIMARY KEY (g, k)``
    with every key under g = 1 and g = 2, which bounds k inside row-value comparisons)."""

    name: str
    data_type: str
    variant: Variant
    samples: tuple[Sample, ...]
    key: bool
    composite: bool = False
    refused: bool = False
    ids: dict[int, Sample] = field(default_factory=dict)

    def create(self) -> str:
        v = self.variant
        if not self.key:
            return f"CREATE TABLE `{self.name}` (id INT PRIMARY KEY, n INT NOT NULL, v {v.ddl} NULL)"
        key = f"k({v.prefix})" if v.prefix else "k"
        group = "g INT NOT NULL, " if self.composite else ""
        return (
            f"CREATE TABLE `{self.name}` ({group}k {v.ddl} NOT NULL, id INT NOT NULL UNIQUE, n INT NOT NULL, "
            f"PRIMARY KEY ({'g, ' if self.composite else ''}{key}))"
        )

    def inserts(self) -> list[str]:
        column = "k" if self.key else "v"
        out = []
        for g in (1, 2) if self.composite else (None,):
            for sample in self.samples:
                i = len(self.ids) + 1
                self.ids[i] = sample
                group = ("g, ", f"{g}, ") if g is not None else ("", "")
                into = f"INSERT INTO `{self.name}` ({group[0]}id, n, {column})"
                out.append(f"{into} VALUES ({group[1]}{i}, 0, {sample.sql})")
        return out


def plan_tables(flavor: str, found: Iterable[str]) -> list[Table]:
    tables: list[Table] = []
    for data_type in sorted(found):
        case = MATRIX[data_type]
        for i, variant in enumerate(v for v in case.variants if flavor in v.flavors):
            stem = f"{data_type}_{i}"
            tables.append(Table(f"v_{stem}", data_type, variant, variant.values, key=False))
            if variant.keys:
                refused = case.refused_key
                tables.append(Table(f"k_{stem}", data_type, variant, variant.keys, key=True, refused=refused))
                if not refused:
                    tables.append(
                        Table(f"c_{stem}", data_type, variant, variant.keys, key=True, composite=True)
                    )
    return tables


def run_engine(
    pair: ReplicaPair,
    out: Path,
    snapshot: Sequence[TableId],
    *,
    tables: Sequence[TableId] = (),
    chunk_size: int = 100,
    limit_s: float = 120.0,
) -> None:
    """``cdc.run_engine`` that fails instead of hanging: a keyset bound that does not advance selects
    the same chunk for ever, so a run not caught up within ``limit_s`` is stopped and fails the test."""
    config = make_config(pair, out, [*tables, *snapshot], chunk_size, heartbeat_s=0.5)
    with Replica(config.source) as replica:
        engine = build_engine(config, replica)
        errors: list[BaseException] = []

        def work() -> None:
            try:
                engine.run(snapshot=snapshot, until_caught_up=True)
            except BaseException as exc:  # re-raised in the test's thread
                errors.append(exc)

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        thread.join(limit_s)
        if thread.is_alive():
            engine.commands.put(Shutdown())
            thread.join(30)
            pytest.fail(f"the run did not catch up within {limit_s:.0f}s: a chunk repeating for ever?")
        if errors:
            raise errors[0]


def matches(actual: Any, expected: Any) -> bool:
    """Equality where ``ANY`` anywhere in ``expected`` matches anything (types checked: 1 is not True)."""
    if expected is ANY:
        return True
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(matches(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(matches(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, float) and isinstance(actual, float) and expected == 0.0:
        return str(actual) == str(expected)  # the sign of a zero counts
    return type(actual) is type(expected) and actual == expected


def by_id(records: Iterable[dict[str, Any]], table: str, snapshot: bool) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        if r["table"] == table and r["snapshot"] == snapshot:
            row = r["after"] if r["after"] is not None else r["before"]
            out.setdefault(row["id"], []).append(r)
    return out


# --------------------------------------------------------------------------- the test


def test_every_type_as_value_and_key(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    found = probe_types(pair, fresh_db)
    print(f"\n{pair.flavor}: {len(found)} column types in the catalogue:")
    for data_type, forms in sorted(found.items()):
        print(f"  {data_type:20} from {', '.join(forms)}")
    print(f"  vector: {'present' if 'vector' in found else 'not in this server'}")
    uncovered = sorted(set(found) - set(MATRIX))
    assert not uncovered, f"{pair.flavor} has column types the matrix does not cover: {uncovered}"

    # A type without key samples that gtidsnap does not refuse must be one the server cannot key by.
    for data_type in sorted(found):
        case = MATRIX[data_type]
        variants = [v for v in case.variants if pair.flavor in v.flavors]
        if not case.refused_key and not any(v.keys for v in variants):
            assert server_refuses_key(pair, fresh_db, variants[0].ddl), (
                f"{pair.flavor} can key a table by {data_type}: give it key samples in the matrix"
            )

    tables = plan_tables(pair.flavor, found)
    with pair.primary(fresh_db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")  # zero and invalid dates allowed
        cur.execute("SET SESSION time_zone = '+00:00'")
        for table in tables:
            cur.execute(table.create() + " DEFAULT CHARSET=utf8mb4")
            for statement in table.inserts():
                cur.execute(statement)
        pair.wait_replicated(conn)

    # information_schema agrees with the probe; refused key types say which type they are.
    usable: list[Table] = []
    with Replica(reader_settings(pair)) as replica:
        for table in tables:
            tid = TableId(fresh_db, table.name)
            if table.refused:
                with pytest.raises(SchemaError) as refused:
                    replica.schema(tid)
                assert table.data_type.upper() in str(refused.value), str(refused.value)
                continue
            column = replica.schema(tid).column("k" if table.key else "v")
            assert column.data_type == table.data_type, (table.variant.ddl, column)
            usable.append(table)

    check_packet_reader(pair, fresh_db, usable)

    values = [TableId(fresh_db, t.name) for t in usable if not t.key]
    keys = [TableId(fresh_db, t.name) for t in usable if t.key]
    by_one, by_two = tmp_path / "chunk1", tmp_path / "chunk2"
    run_engine(pair, by_one, keys, chunk_size=1)
    run_engine(pair, by_two, [*keys, *values], chunk_size=2)
    with pair.primary(fresh_db) as conn, conn.cursor() as cur:
        for table in usable:
            cur.execute(f"UPDATE `{table.name}` SET n = n + 1")
        pair.wait_replicated(conn)
    decoded, declined = row_images.decoded_here(), row_images.left_to_library()
    run_engine(pair, by_one, [], tables=keys)
    run_engine(pair, by_two, [], tables=[*keys, *values])
    # Every type's rows were read by gtidsnap.source.binlog.row_images, none by the library's own decode.
    assert row_images.decoded_here() - decoded >= len(usable), "the updates were not decoded here"
    assert row_images.left_to_library() == declined, "rows events were left to the library's decode"

    problems: list[str] = []
    for out in (by_one, by_two):
        records = read_records(out)
        for table in usable:
            if not table.key and out is by_one:
                continue
            problems += check_table(f"{fresh_db}.{table.name}", table, records, out.name)
    assert not problems, f"{len(problems)} problem(s) on {pair.flavor}:\n" + "\n".join(problems)


def check_packet_reader(pair: ReplicaPair, db: str, tables: Sequence[Table]) -> None:
    """Every type's chunk is read from the result's packets (:mod:`gtidsnap.source.result_rows`) to what
    PyMySQL's rows of the same SELECT give once normalised, with the raw last key PyMySQL reads."""
    settings = reader_settings(pair)
    with (
        Replica(settings) as replica,
        pymysql.connect(
            **settings.pymysql_kwargs(), charset="utf8mb4", init_command="SET time_zone = '+00:00'"
        ) as conn,
        conn.cursor() as cur,
    ):
        for table in tables:
            schema = replica.schema(TableId(db, table.name))
            upto = replica.max_key(schema)
            assert upto is not None, table.name
            chunk = replica.select_chunk(schema, None, upto, None)
            assert chunk.read_from_packets, f"{table.name}: the chunk was not read from its packets"
            sql, params = chunk_query(schema, None, upto, None)
            cur.execute(sql, params)
            theirs = ChunkResult(schema, [d[0] for d in cur.description], list(cur.fetchall()))
            assert chunk.count == theirs.count > 0, table.name
            assert chunk.rows == theirs.rows, f"{table.variant.ddl}: {chunk.rows} != {theirs.rows}"
            assert chunk.last_raw_key == theirs.last_raw_key, table.variant.ddl


def check_table(name: str, table: Table, records: list[dict[str, Any]], run: str) -> list[str]:
    """Every row once in the snapshot, once updated, with one form of its value and of its key."""
    kind = "composite key" if table.composite else "key" if table.key else "value"
    where = f"{run} {table.variant.ddl} ({kind} table {table.name})"
    column = "k" if table.key else "v"
    snap, upd = by_id(records, name, True), by_id(records, name, False)
    problems: list[str] = []
    for what, got_ids in (("snapshot", snap), ("update", upd)):
        if sorted(got_ids) != sorted(table.ids) or any(len(rs) != 1 for rs in got_ids.values()):
            counts = {i: len(rs) for i, rs in got_ids.items()}
            problems.append(f"{where}: {what} rows by id {counts}, expected each of {sorted(table.ids)} once")
    for i, sample in table.ids.items():
        if len(snap.get(i, ())) != 1 or len(upd.get(i, ())) != 1:
            continue
        (r,), (u,) = snap[i], upd[i]
        got, before, after = r["after"][column], u["before"][column], u["after"][column]
        if not (matches(before, got) and matches(after, got) and matches(got, before)):
            problems.append(
                f"{where} {sample.sql}: snapshot {got!r}, update before {before!r} after {after!r}"
            )
        if not matches(got, sample.expect):
            problems.append(f"{where} {sample.sql}: {got!r}, expected {sample.expect!r}")
        if json.loads(json.dumps(got)) != got:
            problems.append(f"{where} {sample.sql}: {got!r} does not survive JSON")
        if (r["after"]["n"], u["after"]["n"]) != (0, 1):
            problems.append(f"{where} {sample.sql}: n went {r['after']['n']} -> {u['after']['n']}")
        if table.key and r["key"] != u["key"]:
            problems.append(f"{where} {sample.sql}: snapshot key {r['key']!r}, update key {u['key']!r}")
    if table.key:
        snapshot_keys = [json.dumps(rs[0]["key"]) for rs in snap.values()]
        if len(set(snapshot_keys)) != len(snapshot_keys):
            problems.append(f"{where}: distinct rows share a key: {sorted(snapshot_keys)}")
    return problems


COMPOSITE_ROWS = [
    (b, t, d)
    for b in ("b'0'", "b'101'", "b'11111111'")
    for t in ("'-838:59:59'", "'-00:00:00.5'", "'00:00:00'")
    for d in ("-0.000000000000000000000000000001", "0")
]


def test_composite_key_of_types_bound_specially(pair: ReplicaPair, fresh_db: str, tmp_path: Path) -> None:
    """BIT, TIME and DECIMAL bounds inside a row-value comparison: every row once, at any chunk size."""
    table = TableId(fresh_db, "composite")
    with pair.primary(fresh_db) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE composite (b BIT(8) NOT NULL, t TIME(6) NOT NULL, d DECIMAL(65,30) NOT NULL, "
            "id INT NOT NULL UNIQUE, n INT NOT NULL, PRIMARY KEY (b, t, d))"
        )
        for i, (b, t, d) in enumerate(COMPOSITE_ROWS, start=1):
            cur.execute(f"INSERT INTO composite VALUES ({b}, {t}, {d}, {i}, 0)")
        pair.wait_replicated(conn)
    runs = {size: tmp_path / f"chunk{size}" for size in (1, 2, 5)}
    for size, out in runs.items():
        run_engine(pair, out, [table], chunk_size=size)
    with pair.primary(fresh_db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE composite SET n = n + 1")
        pair.wait_replicated(conn)
    for size, out in runs.items():
        run_engine(pair, out, [], tables=[table])
        records = read_records(out)
        snap, upd = by_id(records, str(table), True), by_id(records, str(table), False)
        ids = list(range(1, len(COMPOSITE_ROWS) + 1))
        assert sorted(snap) == ids and all(len(rs) == 1 for rs in snap.values()), (size, snap.keys())
        assert sorted(upd) == ids and all(len(rs) == 1 for rs in upd.values()), (size, upd.keys())
        assert all(snap[i][0]["key"] == upd[i][0]["key"] for i in ids), size
        assert len({json.dumps(snap[i][0]["key"]) for i in ids}) == len(ids)
        assert snap[1][0]["key"] == [0, "-838:59:59", "-0.000000000000000000000000000001"]
