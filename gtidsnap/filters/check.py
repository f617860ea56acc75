"""Snapshot filters (the ``additional-conditions`` of a signal): parsed, checked, and sent as regenerated SQL.

A filter is one MySQL boolean expression over the columns of its own table, such as
``region = 'EU' AND amount > 10``. gtidsnap parses it with sqlglot's MySQL grammar, checks every node
of the syntax tree against a whitelist, and sends the SQL it regenerates from that tree, never the
text it was given: what was checked is exactly what runs.

A filter may use:

- the table's own columns, bare or qualified by the table itself (``orders.id``, ``shop.orders.id``;
  the qualifier is dropped);
- literals: strings (``'...'`` or ``"..."``, backslash escapes as on the server), numbers, ``NULL``,
  ``TRUE``, ``FALSE``, hex (``X'1F'``, ``0x1F``) and bit (``b'101'``, ``0b101``) values;
- operators: ``= <> != < <= > >= <=>``, ``AND OR XOR NOT`` (``&& || !``), ``IS [NOT] NULL / TRUE /
  FALSE / UNKNOWN``, ``[NOT] IN (...)``, ``[NOT] BETWEEN``, ``[NOT] LIKE ... [ESCAPE ...]``,
  ``[NOT] REGEXP`` / ``RLIKE``, ``+ - * / DIV % MOD``, unary minus, ``CASE``, parentheses,
  ``INTERVAL n unit`` in date arithmetic, ``COLLATE``, ``CAST`` / ``CONVERT`` / ``BINARY`` to CHAR,
  BINARY, SIGNED, UNSIGNED, DECIMAL, DATE, DATETIME, TIME, DOUBLE, FLOAT, JSON or YEAR, and JSON
  ``->`` / ``->>``;
- these functions (see ``FUNCTIONS``): LOWER UPPER LCASE UCASE LENGTH CHAR_LENGTH CHARACTER_LENGTH
  SUBSTRING SUBSTR LEFT RIGHT TRIM LTRIM RTRIM CONCAT CONCAT_WS REPLACE LOCATE INSTR POSITION REVERSE
  ASCII HEX UNHEX; ABS ROUND FLOOR CEIL CEILING MOD SIGN TRUNCATE GREATEST LEAST; IF IFNULL NULLIF
  COALESCE ISNULL; DATE TIME YEAR MONTH DAY DAYOFMONTH DAYOFWEEK DAYOFYEAR WEEK HOUR MINUTE SECOND
  DATE_ADD DATE_SUB ADDDATE SUBDATE DATEDIFF TIMESTAMPDIFF TIMESTAMPADD DATE_FORMAT STR_TO_DATE
  UNIX_TIMESTAMP FROM_UNIXTIME CURRENT_DATE CURDATE CURRENT_TIMESTAMP NOW UTC_TIMESTAMP UTC_DATE
  LAST_DAY; JSON_EXTRACT JSON_UNQUOTE JSON_CONTAINS JSON_LENGTH JSON_TYPE JSON_VALID.

Refused, with a one-line message that quotes the filter (or, in a long one, the offending part), says
what is wrong and what a filter may use: an empty filter or one longer than 4096 characters; comments
of any kind (``--``, ``#``, ``/* */``, ``/*! */``, optimizer hints); ``;`` or anything after the
condition; subqueries, ``SELECT``, ``EXISTS`` and any other table; columns qualified by another table
or schema, or (when the table's columns are known) not among them; user and system variables (``@x``,
``@@x``); placeholders (``?``, ``%s``, ``:name``); assignments (``:=``); every other function, among
them SLEEP, BENCHMARK, GET_LOCK, LOAD_FILE, RAND, UUID, USER, DATABASE, VERSION, REPEAT, LPAD,
aggregate and window functions, stored functions and unknown names; and anything else not listed above
(bitwise operators, row constructors, ``ANY``/``ALL``, ``MATCH``, charset introducers, ...). Also
refused, because the regenerated SQL would not mean the same: ``INTERVAL`` with a non-integer number
(``INTERVAL 1.5 DAY`` is rounded to 2 days, ``INTERVAL '1.5' DAY`` is 1 day: quote it if that is
meant) or a unit that is not MySQL's (``DAYS``); hex literals with an odd number of digits (write
``0x0F``); ``CAST(... AS REAL)``; more than 32 nested parentheses.

The regenerated SQL puts every column in backticks and every string in single quotes, writes
``NOT (...)`` with its operand in parentheses, ``a REGEXP b`` (MariaDB has no ``REGEXP_LIKE``), ``->``
as ``JSON_EXTRACT(...)`` and ``->>`` as ``JSON_UNQUOTE(JSON_EXTRACT(...))``, ``&&``/``||`` as
``AND``/``OR``. So it means the same on MariaDB and on MySQL, and whatever ``ANSI_QUOTES``,
``PIPES_AS_CONCAT`` and ``HIGH_NOT_PRECEDENCE`` say; the filter itself is read as both servers read SQL
by default (``"EU"`` is a string, ``||`` is OR). Strings are written with backslash escapes, also a
default (under ``NO_BACKSLASH_ESCAPES`` a server would read a backslash in a filter's string twice, and
never beyond the string's end).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Final

from sqlglot import Token, TokenType, exp
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError, TokenError

from gtidsnap.core.errors import FilterError
from gtidsnap.core.model import TableId
from gtidsnap.filters.allowed import QUOTE_CHARS, FilterText, check_tree, refused
from gtidsnap.filters.dialect import DIALECT, FUNCTIONS, INTERVAL_UNITS

__all__ = ["FUNCTIONS", "INTERVAL_UNITS", "MAX_LENGTH", "QUOTE_CHARS", "check_filter"]

MAX_LENGTH: Final = 4096
"""Longest filter accepted, in characters: a condition, not a program."""

MAX_PARENTHESES: Final = 32
"""Deepest nesting of parentheses accepted: the parser recurses once per level."""


_PYFORMAT = re.compile(r"%(?:\([^)]*\))?s(?![A-Za-z0-9_$])")
_SPACE = frozenset(" \t\n\r\f\v")
_LITERAL_TOKENS: Final = frozenset(
    {
        TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.HEX_STRING, TokenType.BIT_STRING,
        TokenType.IDENTIFIER, TokenType.BYTE_STRING, TokenType.RAW_STRING, TokenType.HEREDOC_STRING,
    }
)  # fmt: skip
_SUBQUERY_TOKENS: Final = frozenset(
    {TokenType.SELECT, TokenType.WITH, TokenType.EXISTS, TokenType.UNION, TokenType.TABLE}
)


# --------------------------------------------------------------------------- text and tokens


def _tokens(f: FilterText) -> list[Token]:
    try:
        tokens: list[Token] = DIALECT.tokenize(f.text)
    except TokenError as e:
        reason = str(e.__cause__ or e).splitlines()[0]
        raise refused(f, f"it is not valid SQL ({reason})") from None
    except RecursionError:
        raise refused(f, "it is nested too deeply") from None
    return tokens


def _masked(f: FilterText, tokens: list[Token]) -> str:
    """The raw text with every quoted string and identifier blanked out, so what remains is syntax."""
    chars = list(f.text)
    for tok in tokens:
        if tok.token_type in _LITERAL_TOKENS:
            chars[tok.start : tok.end + 1] = " " * (tok.end + 1 - tok.start)
    return "".join(chars)


def _check_text(f: FilterText, tokens: list[Token]) -> None:
    """Comments, statement separators, variables and placeholders, found before parsing so that the
    message names them even where the parser would only say "unexpected token"."""
    syntax = _masked(f, tokens)
    if any(tok.comments for tok in tokens) or any(m in syntax for m in ("--", "#", "/*", "*/")):
        raise refused(f, "comments (--, #, /* */) are not allowed; write - -1 for minus minus one")
    if _PYFORMAT.search(syntax):
        raise refused(f, "placeholders (?, %s, :name) are not allowed; write the value itself")
    starts = [tok.start for tok in tokens] + [len(f.text)]
    ends = [0] + [tok.end + 1 for tok in tokens]
    for gap in (f.text[end:start] for end, start in zip(ends, starts, strict=True)):
        odd = [ch for ch in gap if ch not in _SPACE]
        if odd:  # the tokenizer skipped it as space, which the server may not
            raise refused(f, f"it contains the unexpected character {odd[0]!r} (U+{ord(odd[0]):04X})")
    depth = 0
    for i, tok in enumerate(tokens):
        kind = tok.token_type
        if kind == TokenType.SEMICOLON:
            raise refused(f, "';' is not allowed: a filter is one condition, not statements")
        if kind == TokenType.SESSION_PARAMETER:
            raise refused(f, "system variables (@@name) are not allowed")
        if kind == TokenType.PARAMETER:
            raise refused(f, "user variables (@name) are not allowed")
        if kind in (TokenType.PLACEHOLDER, TokenType.COLON):
            raise refused(f, "placeholders (?, %s, :name) are not allowed; write the value itself")
        if kind == TokenType.COLON_EQ:
            raise refused(f, "assignments (:=) are not allowed")
        if kind in _SUBQUERY_TOKENS:
            raise refused(f, "subqueries are not allowed", tok.text)
        if kind == TokenType.HINT:
            raise refused(f, "optimizer hints are not allowed")
        following = tokens[i + 1].token_type if i + 1 < len(tokens) else None
        if kind == TokenType.IDENTIFIER and following == TokenType.L_PAREN:
            raise refused(f, f"quoted function names (`{tok.text}`(...)) are not allowed", tok.text)
        if kind not in _LITERAL_TOKENS and tok.text.upper() == "REAL":
            raise refused(f, "REAL is DOUBLE or FLOAT depending on sql_mode; write DOUBLE or FLOAT")
        if kind == TokenType.INTERVAL:
            _check_interval_tokens(f, tokens, i)
        if kind == TokenType.L_PAREN:
            depth += 1
            if depth > MAX_PARENTHESES:
                raise refused(f, f"it nests more than {MAX_PARENTHESES} parentheses")
        elif kind == TokenType.R_PAREN:
            depth -= 1


def _check_interval_tokens(f: FilterText, tokens: list[Token], at: int) -> None:
    """sqlglot turns ``INTERVAL 1.5 DAY`` into ``INTERVAL '1.5' DAY`` (rounded vs truncated by the
    server) and reads a unit inside the string (``INTERVAL '1 day'``, not MySQL): refuse both."""
    i = at + 1
    while i < len(tokens) and tokens[i].token_type in (TokenType.DASH, TokenType.PLUS):
        i += 1
    if i >= len(tokens):
        return
    tok = tokens[i]
    if tok.token_type == TokenType.NUMBER and not tok.text.isdigit():
        raise refused(
            f,
            f"INTERVAL {tok.text} cannot be kept as written (the server rounds it); "
            f"write an integer, or a quoted value such as INTERVAL '{tok.text}' SECOND",
            f"INTERVAL {tok.text}",
        )
    if tok.token_type == TokenType.STRING and re.search(r"[A-Za-z]", tok.text):
        raise refused(
            f, f"INTERVAL '{tok.text}' has its unit inside the quotes; write INTERVAL '1' DAY", tok.text
        )


# --------------------------------------------------------------------------- the tree


def _parse(f: FilterText, tokens: list[Token]) -> exp.Expr:
    try:
        trees = DIALECT.parser(error_level=ErrorLevel.RAISE).parse_into(exp.Condition, tokens, f.text)
    except ParseError as e:
        raise refused(f, f"it is not one valid MySQL condition ({_parse_reason(e)})") from None
    except RecursionError:
        raise refused(f, "it is nested too deeply") from None
    except Exception as e:  # a parser bug on untrusted text must still be a FilterError
        failure = f"the parser failed: {type(e).__name__}"
        raise refused(f, f"it is not one valid MySQL condition ({failure})") from None
    if len(trees) != 1 or trees[0] is None:
        raise refused(f, "it is not one condition")
    return trees[0]


def _parse_reason(e: ParseError) -> str:
    """sqlglot's first complaint with where it is, briefly."""
    for err in e.errors:
        description = str(err.get("description") or "syntax error").rstrip(".")
        highlight = str(err.get("highlight") or "").strip()
        if description.startswith("Failed to parse"):
            continue
        return f"{description} at {highlight!r}" if highlight else description
    return "syntax error"


# --------------------------------------------------------------------------- rendering


def _portable(node: exp.Expr) -> exp.Expr:
    """Rewrites to SQL both servers read alike: bare column names, and ``->``/``->>`` as functions."""
    if isinstance(node, exp.Column):
        return exp.Column(this=node.this.copy())
    if isinstance(node, exp.JSONExtract):
        return exp.Anonymous(this="JSON_EXTRACT", expressions=[node.this, node.expression])
    if isinstance(node, exp.JSONExtractScalar):
        extract = exp.Anonymous(this="JSON_EXTRACT", expressions=[node.this, node.expression])
        return exp.Anonymous(this="JSON_UNQUOTE", expressions=[extract])
    return node


def _render(f: FilterText, tree: exp.Expr) -> str:
    try:
        sql: str = tree.transform(_portable).sql(
            dialect=DIALECT, identify=True, comments=False, unsupported_level=ErrorLevel.RAISE
        )
    except RecursionError:
        raise refused(f, "it is nested too deeply") from None
    except SqlglotError as e:
        raise refused(f, f"it cannot be written back as MySQL ({str(e).splitlines()[0]})") from None
    return sql


def _canonical(f: FilterText, columns: frozenset[str] | None, max_length: int) -> str:
    if not f.text.strip():
        raise refused(f, "it is empty; leave the filter out to snapshot every row")
    if len(f.text) > max_length:
        raise refused(f, f"it is {len(f.text)} characters long, more than the {max_length} allowed")
    tokens = _tokens(f)
    if not tokens:
        raise refused(f, "it is empty; leave the filter out to snapshot every row")
    _check_text(f, tokens)
    tree = _parse(f, tokens)
    check_tree(f, tree, columns)
    return _render(f, tree)


def check_filter(text: str, table: TableId, columns: Collection[str] | None = None) -> str:
    """The filter ``text`` for ``table`` as canonical MySQL SQL regenerated from its syntax tree, or
    :class:`FilterError` saying what is refused and what a filter may use.

    ``columns`` are the table's column names (compared case-insensitively); ``None`` when not known yet,
    and then only the structural rules apply. The result is what must be sent to the server, not
    ``text``; it is stable (checking it again returns it unchanged), and that is verified here, so a
    rendering sqlglot would not read back the same way is refused rather than sent.
    """
    known = None if columns is None else frozenset(c.lower() for c in columns)
    given = FilterText(text, table)
    rendered = _canonical(given, known, MAX_LENGTH)
    try:  # quoting and spacing may lengthen the text: the limit is on what users write
        again = _canonical(FilterText(rendered, table), known, 4 * MAX_LENGTH)
    except FilterError:
        again = None
    if again != rendered:
        raise refused(given, "its regenerated SQL does not read back the same, so it cannot be sent")
    return rendered
