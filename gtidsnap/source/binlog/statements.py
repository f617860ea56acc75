"""Statements of the binlog read as text (pure): what kind a query event is (begin, end, DML, DDL,
nothing of ours), which tables a DDL or a DML statement names, and the statement with its secrets
redacted before anything logs or emits it. The binlog translator (:mod:`gtidsnap.source.binlog.translator`)
applies them.
"""

from __future__ import annotations

import re
from typing import Literal

from gtidsnap.core.model import TableId

_COMMENT_RE = re.compile(r"/\*(?!!)(?:.|\n)*?\*/|--[ \t][^\n]*|#[^\n]*")
_VERSIONED_RE = re.compile(r"/\*!\d*((?:.|\n)*?)\*/")
_NAME = r"(?:`(?:[^`]|``)+`|[0-9A-Za-z_$\u0080-\uffff]+)"
_QNAME = rf"{_NAME}(?:\s*\.\s*{_NAME})?"
_QNAME_RE = re.compile(rf"({_NAME})(?:\s*\.\s*({_NAME}))?")

_DDL_PATTERNS = [
    re.compile(
        rf"^ALTER\s+(?:ONLINE\s+|OFFLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?({_QNAME})", re.I
    ),
    re.compile(
        rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?({_QNAME})", re.I
    ),
    re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?({_QNAME})", re.I),
    re.compile(
        rf"^(?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:ONLINE\s+|OFFLINE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?"
        rf"INDEX\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}\s+(?:USING\s+\w+\s+)?ON\s+({_QNAME})",
        re.I,
    ),
]
_DROP_RE = re.compile(
    rf"^DROP\s+(?:TEMPORARY\s+)?TABLES?\s+(?:IF\s+EXISTS\s+)?({_QNAME}(?:\s*,\s*{_QNAME})*)", re.I
)
_RENAME_RE = re.compile(r"^RENAME\s+TABLES?\s+(.*)$", re.I | re.S)
_RENAME_PAIR_RE = re.compile(rf"({_QNAME})\s+TO\s+({_QNAME})", re.I)
_ALTER_RENAME_RE = re.compile(rf"\bRENAME\s+(?!COLUMN\b|INDEX\b|KEY\b)(?:TO\s+|AS\s+)?({_QNAME})", re.I)
_DML_RE = re.compile(
    rf"^(?:INSERT|REPLACE)\s+(?:LOW_PRIORITY\s+|DELAYED\s+|HIGH_PRIORITY\s+|IGNORE\s+)*(?:INTO\s+)?({_QNAME})"
    rf"|^UPDATE\s+(?:LOW_PRIORITY\s+|IGNORE\s+)*({_QNAME})\s+SET\b"
    rf"|^DELETE\s+(?:LOW_PRIORITY\s+|QUICK\s+|IGNORE\s+)*FROM\s+({_QNAME})\s*(?:WHERE\b|ORDER\b|LIMIT\b|;|$)",
    re.I,
)

StatementKind = Literal["ignore", "begin", "end", "dml", "ddl"]


def classify_statement(statement: str) -> tuple[StatementKind, str]:
    """What a query event means for the stream, and its text without comments (for parsing).

    ``begin``: opens an explicit transaction; ``end``: ends the current one (COMMIT, ROLLBACK,
    XA COMMIT/ROLLBACK); ``ignore``: savepoints, XA START/END; ``dml``: a statement-logged row
    change; ``ddl``: everything else, reported as a schema change."""
    text = _VERSIONED_RE.sub(r" \1 ", _COMMENT_RE.sub(" ", statement)).strip().rstrip(";").strip()
    upper = " ".join(text.upper().split()[:3])
    first = upper.split(" ", 1)[0] if upper else ""
    if upper in ("BEGIN", "BEGIN WORK") or upper.startswith("XA START") or upper.startswith("XA BEGIN"):
        return "begin", text
    if upper.startswith("ROLLBACK TO") or upper.startswith("ROLLBACK WORK TO"):
        return "ignore", text
    if first in ("COMMIT", "ROLLBACK") or upper.startswith(("XA COMMIT", "XA ROLLBACK")):
        return "end", text
    if first == "SAVEPOINT" or upper.startswith("RELEASE SAVEPOINT") or upper.startswith("XA END"):
        return "ignore", text
    if first in ("INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD"):
        return "dml", text
    return "ddl", text


_LITERAL = r"'(?:[^'\\]|\\.|'')*'"
_SENSITIVE_RE = re.compile(
    r"\b(?:IDENTIFIED|PASSWORD|MASTER_PASSWORD|SOURCE_PASSWORD)\b|^\s*(?:CREATE|ALTER)\s+(?:OR\s+REPLACE\s+)?SERVER\b",
    re.I,
)
_SECRET_AFTER_WORD_RE = re.compile(
    rf"(\b(?:BY|AS|PASSWORD|USING|MASTER_PASSWORD|SOURCE_PASSWORD)\s*(?:=\s*)?(?:\(\s*)?){_LITERAL}", re.I
)
_SET_PASSWORD_RE = re.compile(rf"^(\s*SET\s+PASSWORD\b.*?=\s*){_LITERAL}", re.I | re.S)


def redact_statement(statement: str) -> str:
    """Account and server statements (CREATE/ALTER USER, GRANT ... IDENTIFIED BY, SET PASSWORD,
    CREATE SERVER, CHANGE MASTER) carry a password or its hash in the binlog, in clear on MariaDB:
    hide the literals that follow BY, AS, PASSWORD, USING or ``SET PASSWORD ... =``."""
    if not _SENSITIVE_RE.search(statement):
        return statement
    redacted = _SECRET_AFTER_WORD_RE.sub(r"\1'<redacted>'", statement)
    return _SET_PASSWORD_RE.sub(r"\1'<redacted>'", redacted)


def ddl_tables(text: str, default_schema: str) -> frozenset[TableId]:
    """Best effort: the tables an ALTER/CREATE/DROP/TRUNCATE/RENAME TABLE or index statement names.

    Unqualified names take the statement's default schema; other statements yield no table."""
    names: list[str] = []
    for pattern in _DDL_PATTERNS:
        match = pattern.match(text)
        if match:
            names.append(match.group(1))
            if text[:5].upper() == "ALTER":
                names.extend(m.group(1) for m in _ALTER_RENAME_RE.finditer(text, match.end()))
            break
    else:
        if match := _DROP_RE.match(text):
            names.extend(n.strip() for n in _split_names(match.group(1)))
        elif match := _RENAME_RE.match(text):
            for pair in _RENAME_PAIR_RE.finditer(match.group(1)):
                names.extend((pair.group(1), pair.group(2)))
    tables = (_table_id(n, default_schema) for n in names)
    return frozenset(t for t in tables if t is not None)


def dml_tables(text: str, default_schema: str) -> frozenset[TableId] | None:
    """The target of a simple single-table DML statement; None when it cannot be told."""
    match = _DML_RE.match(text)
    if not match:
        return None
    name = next(g for g in match.groups() if g)
    table = _table_id(name, default_schema)
    return frozenset([table]) if table is not None else None


def _split_names(text: str) -> list[str]:
    return [m.group(0) for m in re.finditer(_QNAME, text)]


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _table_id(qualified: str, default_schema: str) -> TableId | None:
    match = _QNAME_RE.fullmatch(qualified.strip())
    if not match:
        return None
    first, second = match.group(1), match.group(2)
    if second is not None:
        return TableId(_unquote(first), _unquote(second))
    return TableId(default_schema, _unquote(first)) if default_schema else None
