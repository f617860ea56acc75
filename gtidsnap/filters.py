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
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from sqlglot import Token, TokenType, exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import ErrorLevel, ParseError, SqlglotError, TokenError
from sqlglot.generators.mysql import MySQLGenerator
from sqlglot.parsers.mysql import MySQLParser

from gtidsnap.errors import FilterError
from gtidsnap.model import TableId

MAX_LENGTH: Final = 4096
"""Longest filter accepted, in characters: a condition, not a program."""

MAX_PARENTHESES: Final = 32
"""Deepest nesting of parentheses accepted: the parser recurses once per level."""

MAX_DEPTH: Final = 1000
"""Deepest syntax tree accepted; ``a+a+...`` chains nest without parentheses, one level per operator."""

QUOTE_CHARS: Final = 80
"""How much of the filter (or of its offending part) a message quotes."""

FUNCTIONS: Final[Mapping[str, tuple[int, int | None]]] = {
    # name: (fewest, most arguments); None means no upper bound. Each is a deterministic built-in
    # scalar function (or a clock) that reads only its arguments; the regenerated SQL writes it as given.
    # strings
    "LOWER": (1, 1), "UPPER": (1, 1), "LCASE": (1, 1), "UCASE": (1, 1), "LENGTH": (1, 1),
    "CHAR_LENGTH": (1, 1), "CHARACTER_LENGTH": (1, 1), "LEFT": (2, 2), "RIGHT": (2, 2),
    "LTRIM": (1, 1), "RTRIM": (1, 1), "CONCAT": (1, None), "CONCAT_WS": (2, None), "REPLACE": (3, 3),
    "LOCATE": (2, 3), "INSTR": (2, 2), "REVERSE": (1, 1), "ASCII": (1, 1), "HEX": (1, 1), "UNHEX": (1, 1),
    # numbers
    "ABS": (1, 1), "ROUND": (1, 2), "CEILING": (1, 1), "MOD": (2, 2), "SIGN": (1, 1), "TRUNCATE": (2, 2),
    "GREATEST": (2, None), "LEAST": (2, None),
    # control flow
    "IFNULL": (2, 2), "NULLIF": (2, 2), "COALESCE": (1, None), "ISNULL": (1, 1),
    # dates and times
    "DATE": (1, 1), "TIME": (1, 1), "YEAR": (1, 1), "MONTH": (1, 1), "DAY": (1, 1), "DAYOFMONTH": (1, 1),
    "DAYOFWEEK": (1, 1), "DAYOFYEAR": (1, 1), "WEEK": (1, 2), "HOUR": (1, 1), "MINUTE": (1, 1),
    "SECOND": (1, 1), "DATE_ADD": (2, 2), "DATE_SUB": (2, 2), "ADDDATE": (2, 2), "SUBDATE": (2, 2),
    "DATEDIFF": (2, 2), "TIMESTAMPDIFF": (3, 3), "TIMESTAMPADD": (3, 3), "DATE_FORMAT": (2, 3),
    "STR_TO_DATE": (2, 2), "UNIX_TIMESTAMP": (0, 1), "FROM_UNIXTIME": (1, 2), "CURRENT_DATE": (0, 0),
    "CURDATE": (0, 0), "CURRENT_TIMESTAMP": (0, 1), "NOW": (0, 1), "UTC_TIMESTAMP": (0, 1),
    "UTC_DATE": (0, 0), "LAST_DAY": (1, 1),
    # JSON
    "JSON_EXTRACT": (2, None), "JSON_UNQUOTE": (1, 1), "JSON_CONTAINS": (2, 3), "JSON_LENGTH": (1, 2),
    "JSON_TYPE": (1, 1), "JSON_VALID": (1, 1),
}  # fmt: skip
"""Functions written as plain calls, parsed as such and regenerated verbatim. SUBSTRING, SUBSTR, TRIM,
POSITION, FLOOR, CEIL, IF, CASE, CAST and CONVERT have syntax of their own and are checked as nodes."""

INTERVAL_UNITS: Final = frozenset(
    {
        "MICROSECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR",
        "SECOND_MICROSECOND", "MINUTE_MICROSECOND", "MINUTE_SECOND", "HOUR_MICROSECOND", "HOUR_SECOND",
        "HOUR_MINUTE", "DAY_MICROSECOND", "DAY_SECOND", "DAY_MINUTE", "DAY_HOUR", "YEAR_MONTH",
    }
)  # fmt: skip
"""MySQL's units for INTERVAL; sqlglot also reads plurals and other dialects' names, which MySQL does not."""

_DIFF_UNITS: Final = frozenset(
    {"MICROSECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"}
)  # the units of TIMESTAMPDIFF and TIMESTAMPADD

_CAST_TYPES: Final = frozenset(
    {
        exp.DType.CHAR, exp.DType.CHARACTER_SET, exp.DType.BINARY, exp.DType.BIGINT, exp.DType.UBIGINT,
        exp.DType.INT, exp.DType.DECIMAL, exp.DType.DATE, exp.DType.DATETIME, exp.DType.TIME,
        exp.DType.DOUBLE, exp.DType.FLOAT, exp.DType.JSON, exp.DType.YEAR,
    }
)  # fmt: skip
"""CAST targets, as sqlglot types: SIGNED is BIGINT, UNSIGNED is UBIGINT, INT is written SIGNED."""

_ALLOWED = "a filter may only use the columns of {table}, literals, operators and plain functions"
_META_NAME = "gtidsnap_function_name"
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")
_PYFORMAT = re.compile(r"%(?:\([^)]*\))?s(?![A-Za-z0-9_$])")
_SPACE = frozenset(" \t\n\r\f\v")
_LITERAL_TOKENS: Final = frozenset(
    {
        TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.HEX_STRING, TokenType.BIT_STRING,
        TokenType.IDENTIFIER, TokenType.BYTE_STRING, TokenType.RAW_STRING, TokenType.HEREDOC_STRING,
    }
)  # fmt: skip
_LOGIC: Final = (exp.And, exp.Or, exp.Xor, exp.Not, exp.Paren)
_SUBQUERY_NODES: Final = (exp.Subquery, exp.Select, exp.Exists, exp.Union, exp.Table, exp.From, exp.Query)
_BITWISE: Final = (
    exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot, exp.BitwiseLeftShift,
    exp.BitwiseRightShift,
)  # fmt: skip
_SUBQUERY_TOKENS: Final = frozenset(
    {TokenType.SELECT, TokenType.WITH, TokenType.EXISTS, TokenType.UNION, TokenType.TABLE}
)


# --------------------------------------------------------------------------- the dialect


def _plain_call(name: str) -> Callable[[list[exp.Expr]], exp.Expr]:
    """A builder that keeps an allowed function as written, so sqlglot cannot rewrite it."""

    def build(args: list[exp.Expr]) -> exp.Expr:
        return exp.Anonymous(this=name, expressions=args)

    return build


def _unit_call(name: str) -> Callable[[list[exp.Expr]], exp.Expr]:
    """TIMESTAMPDIFF/TIMESTAMPADD: the first argument is a unit keyword, not a column."""

    def build(args: list[exp.Expr]) -> exp.Expr:
        first = args[0] if args else None
        if (
            isinstance(first, exp.Column)
            and not first.table
            and isinstance(first.this, exp.Identifier)
            and not first.this.quoted
            and first.name.upper() in _DIFF_UNITS
        ):
            args = [exp.Var(this=first.name.upper()), *args[1:]]
        return exp.Anonymous(this=name, expressions=args)

    return build


def _regexp_sql(gen: Any, node: exp.RegexpLike) -> str:
    """``a REGEXP b`` (MariaDB has no REGEXP_LIKE); operands that are not plain values get parentheses."""
    return f"{_operand_sql(gen, node.this)} REGEXP {_operand_sql(gen, node.expression)}"


def _operand_sql(gen: Any, node: exp.Expr) -> str:
    sql: str = gen.sql(node)
    if isinstance(node, exp.Binary | exp.Not | exp.Predicate | exp.Between | exp.In | exp.Escape):
        return f"({sql})"
    return sql


class _FilterTokenizer(MySQL.Tokenizer):
    COMMANDS: ClassVar[set[TokenType]] = set()  # `REPLACE(...)` first in a filter is the function


class _FilterParser(MySQLParser):
    FUNCTIONS: ClassVar[dict[str, Callable[..., exp.Expr]]] = {
        **MySQLParser.FUNCTIONS,
        **{name: _plain_call(name) for name in FUNCTIONS},
        "TIMESTAMPDIFF": _unit_call("TIMESTAMPDIFF"),
        "TIMESTAMPADD": _unit_call("TIMESTAMPADD"),
    }

    def _warn_unsupported(self) -> None:
        """Silent: what sqlglot cannot parse becomes a Command node, which is refused anyway, and text
        from a signal must not reach the logs through sqlglot's logger."""


class _FilterGenerator(MySQLGenerator):
    TRANSFORMS: ClassVar[dict[type[exp.Expr], Callable[..., str]]] = {
        **MySQLGenerator.TRANSFORMS,
        exp.RegexpLike: _regexp_sql,
    }

    def not_sql(self, expression: exp.Not) -> str:
        """``NOT (x)``, itself in parentheses unless under AND/OR/XOR/NOT: the same meaning whatever
        NOT's precedence (HIGH_NOT_PRECEDENCE), and valid after ``=`` (``x = NOT y`` is not)."""
        inner = expression.this
        body: str = self.sql(inner)
        if not isinstance(inner, exp.Paren | exp.Column | exp.Literal | exp.Boolean | exp.Null):
            body = f"({body})"
        sql = f"NOT {body}"
        if expression.parent is not None and not isinstance(expression.parent, _LOGIC):
            sql = f"({sql})"
        return sql


class _FilterMySQL(MySQL):
    """MySQL as sqlglot knows it, bent to keep a filter's text: no statement keywords, no JSON path
    rewriting, allowed functions kept verbatim, and SQL that MariaDB reads too."""

    ORIGINAL_NAME_META_KEY = _META_NAME
    Tokenizer = _FilterTokenizer
    Parser = _FilterParser
    Generator = _FilterGenerator

    def to_json_path(self, path: exp.Expr | None) -> exp.Expr | None:
        return path  # the path string goes to the server unchanged


_DIALECT: Final = _FilterMySQL()


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class _Filter:
    """What a message needs: the text as given and the table it filters."""

    text: str
    table: TableId


def _one_line(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` on one printable line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    flat = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in flat)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _refused(f: _Filter, problem: str, part: str | None = None) -> FilterError:
    """The error for ``problem``: quotes the whole filter when short, else the offending ``part``."""
    shown = f.text if part is None or len(f.text.strip()) <= QUOTE_CHARS else part
    return FilterError(
        f'filter "{_one_line(shown.strip())}" is refused: {_one_line(problem, 300)}; '
        + _ALLOWED.format(table=f.table)
    )


# --------------------------------------------------------------------------- text and tokens


def _tokens(f: _Filter) -> list[Token]:
    try:
        tokens: list[Token] = _DIALECT.tokenize(f.text)
    except TokenError as e:
        reason = str(e.__cause__ or e).splitlines()[0]
        raise _refused(f, f"it is not valid SQL ({reason})") from None
    except RecursionError:
        raise _refused(f, "it is nested too deeply") from None
    return tokens


def _masked(f: _Filter, tokens: list[Token]) -> str:
    """The raw text with every quoted string and identifier blanked out, so what remains is syntax."""
    chars = list(f.text)
    for tok in tokens:
        if tok.token_type in _LITERAL_TOKENS:
            chars[tok.start : tok.end + 1] = " " * (tok.end + 1 - tok.start)
    return "".join(chars)


def _check_text(f: _Filter, tokens: list[Token]) -> None:
    """Comments, statement separators, variables and placeholders, found before parsing so that the
    message names them even where the parser would only say "unexpected token"."""
    syntax = _masked(f, tokens)
    if any(tok.comments for tok in tokens) or any(m in syntax for m in ("--", "#", "/*", "*/")):
        raise _refused(f, "comments (--, #, /* */) are not allowed; write - -1 for minus minus one")
    if _PYFORMAT.search(syntax):
        raise _refused(f, "placeholders (?, %s, :name) are not allowed; write the value itself")
    starts = [tok.start for tok in tokens] + [len(f.text)]
    ends = [0] + [tok.end + 1 for tok in tokens]
    for gap in (f.text[end:start] for end, start in zip(ends, starts, strict=True)):
        odd = [ch for ch in gap if ch not in _SPACE]
        if odd:  # the tokenizer skipped it as space, which the server may not
            raise _refused(f, f"it contains the unexpected character {odd[0]!r} (U+{ord(odd[0]):04X})")
    depth = 0
    for i, tok in enumerate(tokens):
        kind = tok.token_type
        if kind == TokenType.SEMICOLON:
            raise _refused(f, "';' is not allowed: a filter is one condition, not statements")
        if kind == TokenType.SESSION_PARAMETER:
            raise _refused(f, "system variables (@@name) are not allowed")
        if kind == TokenType.PARAMETER:
            raise _refused(f, "user variables (@name) are not allowed")
        if kind in (TokenType.PLACEHOLDER, TokenType.COLON):
            raise _refused(f, "placeholders (?, %s, :name) are not allowed; write the value itself")
        if kind == TokenType.COLON_EQ:
            raise _refused(f, "assignments (:=) are not allowed")
        if kind in _SUBQUERY_TOKENS:
            raise _refused(f, "subqueries are not allowed", tok.text)
        if kind == TokenType.HINT:
            raise _refused(f, "optimizer hints are not allowed")
        following = tokens[i + 1].token_type if i + 1 < len(tokens) else None
        if kind == TokenType.IDENTIFIER and following == TokenType.L_PAREN:
            raise _refused(f, f"quoted function names (`{tok.text}`(...)) are not allowed", tok.text)
        if kind not in _LITERAL_TOKENS and tok.text.upper() == "REAL":
            raise _refused(f, "REAL is DOUBLE or FLOAT depending on sql_mode; write DOUBLE or FLOAT")
        if kind == TokenType.INTERVAL:
            _check_interval_tokens(f, tokens, i)
        if kind == TokenType.L_PAREN:
            depth += 1
            if depth > MAX_PARENTHESES:
                raise _refused(f, f"it nests more than {MAX_PARENTHESES} parentheses")
        elif kind == TokenType.R_PAREN:
            depth -= 1


def _check_interval_tokens(f: _Filter, tokens: list[Token], at: int) -> None:
    """sqlglot turns ``INTERVAL 1.5 DAY`` into ``INTERVAL '1.5' DAY`` (rounded vs truncated by the
    server) and reads a unit inside the string (``INTERVAL '1 day'``, not MySQL): refuse both."""
    i = at + 1
    while i < len(tokens) and tokens[i].token_type in (TokenType.DASH, TokenType.PLUS):
        i += 1
    if i >= len(tokens):
        return
    tok = tokens[i]
    if tok.token_type == TokenType.NUMBER and not tok.text.isdigit():
        raise _refused(
            f,
            f"INTERVAL {tok.text} cannot be kept as written (the server rounds it); "
            f"write an integer, or a quoted value such as INTERVAL '{tok.text}' SECOND",
            f"INTERVAL {tok.text}",
        )
    if tok.token_type == TokenType.STRING and re.search(r"[A-Za-z]", tok.text):
        raise _refused(
            f, f"INTERVAL '{tok.text}' has its unit inside the quotes; write INTERVAL '1' DAY", tok.text
        )


# --------------------------------------------------------------------------- the tree


def _parse(f: _Filter, tokens: list[Token]) -> exp.Expr:
    try:
        trees = _DIALECT.parser(error_level=ErrorLevel.RAISE).parse_into(exp.Condition, tokens, f.text)
    except ParseError as e:
        raise _refused(f, f"it is not one valid MySQL condition ({_parse_reason(e)})") from None
    except RecursionError:
        raise _refused(f, "it is nested too deeply") from None
    except Exception as e:  # a parser bug on untrusted text must still be a FilterError
        failure = f"the parser failed: {type(e).__name__}"
        raise _refused(f, f"it is not one valid MySQL condition ({failure})") from None
    if len(trees) != 1 or trees[0] is None:
        raise _refused(f, "it is not one condition")
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


def _walk(tree: exp.Expr) -> Iterator[tuple[exp.Expr, int]]:
    """Every node with its depth, without recursion (deep trees are refused, not crashed on)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def _sql_of(node: exp.Expr) -> str:
    """A node as SQL, for a message only: never raises, never logs."""
    try:
        sql: str = node.sql(dialect=_DIALECT, unsupported_level=ErrorLevel.IGNORE)
    except Exception:  # quoting a refused node must not turn a refusal into a crash
        return node.key.upper()
    return sql


def _name_of(node: exp.Expr) -> str:
    """A function's name as the user wrote it (or as MySQL spells it), for messages."""
    if isinstance(node, exp.Anonymous):
        return node.name.upper() if isinstance(node.this, str) else node.name
    written = node.meta.get(_META_NAME) if node.meta else None
    if isinstance(written, str):
        return written.upper()
    if isinstance(node, exp.JSONArrayContains):
        return "MEMBER OF"
    call = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\(", _sql_of(node))
    if call:
        return call.group(1).upper()
    return node.sql_name() if isinstance(node, exp.Func) else node.key.upper()


_ARGS: Final[Mapping[type[exp.Expr], frozenset[str]]] = {
    cls: frozenset(args)
    for classes, args in (
        ((exp.And, exp.Or, exp.Xor), {"this", "expression"}),
        ((exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ), {"this", "expression"}),
        ((exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod), {"this", "expression"}),
        ((exp.Div,), {"this", "expression", "typed", "safe"}),
        ((exp.Not, exp.Paren, exp.Neg), {"this"}),
        ((exp.Is,), {"this", "expression"}),
        ((exp.In,), {"this", "expressions"}),
        ((exp.Between,), {"this", "low", "high"}),
        ((exp.Like,), {"this", "expression", "negate"}),
        ((exp.Escape, exp.RegexpLike), {"this", "expression"}),
        ((exp.Case,), {"this", "ifs", "default"}),
        ((exp.If,), {"this", "true", "false"}),
        ((exp.Cast,), {"this", "to"}),
        ((exp.DataType,), {"this", "expressions", "kind"}),
        ((exp.DataTypeParam,), {"this"}),
        ((exp.Collate,), {"this", "expression"}),
        ((exp.Interval,), {"this", "unit"}),
        ((exp.Concat,), {"expressions"}),
        ((exp.CurrentDate,), set()),
        ((exp.CurrentTimestamp,), {"this"}),
        ((exp.Substring,), {"this", "start", "length"}),
        ((exp.Trim,), {"this", "expression", "position"}),
        ((exp.StrPosition,), {"this", "substr"}),
        ((exp.Floor, exp.Ceil), {"this"}),
        ((exp.JSONExtract, exp.JSONExtractScalar), {"this", "expression"}),
        ((exp.Anonymous,), {"this", "expressions"}),
        ((exp.Column,), {"this", "table", "db", "catalog"}),
        ((exp.Identifier,), {"this", "quoted"}),
        ((exp.Literal,), {"this", "is_string"}),
        ((exp.Null,), set()),
        ((exp.Boolean,), {"this"}),
        ((exp.HexString,), {"this", "is_integer"}),
        ((exp.BitString, exp.National, exp.Var), {"this"}),
    )
    for cls in classes
}
"""The whitelist: each node class allowed, and which of its arguments may be set."""


def _problem(node: exp.Expr) -> tuple[str, str]:
    """Why a node outside the whitelist is refused, and how to quote it."""
    part = _sql_of(node)
    if isinstance(node, _SUBQUERY_NODES):
        return "subqueries are not allowed", part
    if isinstance(node, exp.SessionParameter):
        return "system variables (@@name) are not allowed", part
    if isinstance(node, exp.Parameter):
        return "user variables (@name) are not allowed", part
    if isinstance(node, exp.Placeholder):
        return "placeholders (?, %s, :name) are not allowed; write the value itself", part
    if isinstance(node, exp.PropertyEQ):
        return "assignments (:=) are not allowed", part
    if isinstance(node, exp.Window):
        return "window functions are not allowed", part
    if isinstance(node, exp.AggFunc):
        return f"aggregate function {_name_of(node)} is not allowed", part
    if isinstance(node, exp.Func):
        return f"function {_name_of(node)} is not allowed", part
    if isinstance(node, exp.Tuple):
        return "row constructors (a, b) are not allowed", part
    if isinstance(node, exp.Alias):
        return "aliases are not allowed", part
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        return "stored functions (schema.function(...)) are not allowed", part
    if isinstance(node, exp.Dot | exp.Bracket):
        return f"{part!r} is not a column of this table", part
    if isinstance(node, _BITWISE):
        return "bitwise operators (& | ^ ~ << >>) are not allowed", part
    return f"{_one_line(part, 60)!r} is not allowed", part


def _check_tree(f: _Filter, tree: exp.Expr, columns: frozenset[str] | None) -> None:
    """Every node must be in ``_ARGS``, with only the arguments listed there, and pass its own check."""
    for node, depth in _walk(tree):
        if depth > MAX_DEPTH:
            raise _refused(f, f"it is nested deeper than {MAX_DEPTH} levels")
        if node.comments:
            raise _refused(f, "comments (--, #, /* */) are not allowed")
        allowed = _ARGS.get(type(node))
        if allowed is None:
            problem, part = _problem(node)
            raise _refused(f, problem, part)
        if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous) and node.meta.get(_META_NAME):
            # An allowed function class comes from syntax (TRIM(x FROM y), ->, REGEXP, 'a' 'b', a bare
            # CURRENT_DATE); reached by a plain call of another name (MID, REGEXP_LIKE) it is refused.
            raise _refused(f, f"function {_name_of(node)} is not allowed", _sql_of(node))
        for key, value in node.args.items():
            if key not in allowed and value not in (None, False, [], ""):
                part = _sql_of(node)
                problem = f"this form of {_name_of(node)} ({_one_line(part, 40)}) is not allowed"
                raise _refused(f, problem, part)
        _CHECKS.get(type(node), _no_check)(f, node, columns)


def _no_check(f: _Filter, node: Any, columns: frozenset[str] | None) -> None:
    return None


def _check_column(f: _Filter, node: exp.Column, columns: frozenset[str] | None) -> None:
    if not isinstance(node.this, exp.Identifier):
        raise _refused(f, f"{_sql_of(node)!r} is not a column", _sql_of(node))
    name = node.this.name
    if not name:
        raise _refused(f, "a column name cannot be empty")
    catalog, db, table = node.args.get("catalog"), node.args.get("db"), node.args.get("table")
    own_table = table is None or table.name.lower() == f.table.name.lower()
    own_db = db is None or db.name.lower() == f.table.schema.lower()
    if catalog is not None or not own_table or not own_db:
        written = ".".join(p.name for p in (catalog, db, table) if p is not None)
        raise _refused(f, f"column {written}.{name} belongs to another table or schema")
    if columns is not None and name.lower() not in columns:
        raise _refused(f, f"column {name} is not a column of {f.table}")


def _check_literal(f: _Filter, node: exp.Literal, columns: frozenset[str] | None) -> None:
    if not node.is_string and not _NUMBER.fullmatch(node.this):
        raise _refused(f, f"{node.this!r} is not a number MySQL reads the same way", node.this)


def _check_hex(f: _Filter, node: exp.HexString, columns: frozenset[str] | None) -> None:
    digits = node.this
    if not re.fullmatch(r"[0-9A-Fa-f]*", digits):
        raise _refused(f, f"{digits!r} is not a hex literal", digits)
    if len(digits) % 2:
        raise _refused(
            f, f"hex literal 0x{digits} has an odd number of digits; write 0x0{digits}", f"0x{digits}"
        )


def _check_bits(f: _Filter, node: exp.BitString, columns: frozenset[str] | None) -> None:
    if not re.fullmatch(r"[01]*", node.this):
        raise _refused(f, f"{node.this!r} is not a bit literal", node.this)


def _check_trim(f: _Filter, node: exp.Trim, columns: frozenset[str] | None) -> None:
    if node.args.get("position") not in (None, "BOTH", "LEADING", "TRAILING"):
        raise _refused(f, "TRIM takes BOTH, LEADING or TRAILING", _sql_of(node))


def _check_is(f: _Filter, node: exp.Is, columns: frozenset[str] | None) -> None:
    if not isinstance(node.expression, exp.Null | exp.Boolean):
        raise _refused(f, "IS may only be followed by [NOT] NULL, TRUE, FALSE or UNKNOWN")


def _check_in(f: _Filter, node: exp.In, columns: frozenset[str] | None) -> None:
    if not node.expressions:
        raise _refused(f, "IN () needs at least one value")


def _check_escape(f: _Filter, node: exp.Escape, columns: frozenset[str] | None) -> None:
    if not isinstance(node.this, exp.Like) or not (
        isinstance(node.expression, exp.Literal) and node.expression.is_string
    ):
        raise _refused(f, "ESCAPE may only follow LIKE, with a quoted character")


def _check_collate(f: _Filter, node: exp.Collate, columns: frozenset[str] | None) -> None:
    name = node.expression
    if not isinstance(name, exp.Var | exp.Identifier | exp.Literal) or not _PLAIN_NAME.fullmatch(name.name):
        raise _refused(f, "COLLATE must name a collation, such as utf8mb4_bin")


def _check_interval(f: _Filter, node: exp.Interval, columns: frozenset[str] | None) -> None:
    unit = node.args.get("unit")
    if not isinstance(unit, exp.Var) or unit.name.upper() not in INTERVAL_UNITS:
        written = _sql_of(unit) if isinstance(unit, exp.Expr) else "none"
        raise _refused(
            f,
            f"INTERVAL needs one of MySQL's units (DAY, HOUR, YEAR_MONTH, ...), not {written}",
            _sql_of(node),
        )
    if isinstance(node.this, exp.Tuple) or node.this is None:
        raise _refused(f, "INTERVAL needs a value and a unit", _sql_of(node))


def _check_var(f: _Filter, node: exp.Var, columns: frozenset[str] | None) -> None:
    """A bare word is only a unit, a collation or a character set name; anything else is refused."""
    parent, key = node.parent, node.arg_key
    if (  # the unit and the collation are checked by their parents
        (isinstance(parent, exp.Interval) and key == "unit")
        or (isinstance(parent, exp.Collate) and key == "expression")
        or (isinstance(parent, exp.DataType) and key == "kind" and _PLAIN_NAME.fullmatch(node.name))
    ):
        return
    if (
        isinstance(parent, exp.Anonymous)
        and parent.name.upper() in ("TIMESTAMPDIFF", "TIMESTAMPADD")
        and parent.expressions
        and parent.expressions[0] is node
        and node.name in _DIFF_UNITS
    ):
        return
    raise _refused(f, f"{node.name!r} is not allowed here", node.name)


def _check_datatype(f: _Filter, node: exp.DataType, columns: frozenset[str] | None) -> None:
    if node.this in (exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ):
        raise _refused(f, "TIMESTAMP values are not allowed; write the string, or CAST(... AS DATETIME)")
    if not isinstance(node.parent, exp.Cast) or node.this not in _CAST_TYPES:
        written = node.this.value if isinstance(node.this, exp.DType) else _sql_of(node)
        raise _refused(
            f,
            f"CAST to {written} is not allowed; use CHAR, BINARY, SIGNED, UNSIGNED, "
            "DECIMAL, DATE, DATETIME, TIME, DOUBLE, FLOAT, JSON or YEAR",
        )
    kind = node.args.get("kind")
    if kind is not None and not (
        isinstance(kind, exp.Var | exp.Literal | exp.Identifier) and _PLAIN_NAME.fullmatch(kind.name)
    ):
        raise _refused(f, f"CAST to {_sql_of(node)} needs a plain character set name")
    for param in node.expressions:
        if not isinstance(param, exp.DataTypeParam) or not (
            isinstance(param.this, exp.Literal) and param.this.this.isdigit()
        ):
            raise _refused(f, f"CAST to {_sql_of(node)} needs plain integer sizes")


def _check_anonymous(f: _Filter, node: exp.Anonymous, columns: frozenset[str] | None) -> None:
    name = node.name.upper()
    if not isinstance(node.this, str) or name not in FUNCTIONS:
        raise _refused(f, f"function {node.name} is not allowed", _sql_of(node))
    fewest, most = FUNCTIONS[name]
    count = len(node.expressions)
    if count < fewest or (most is not None and count > most):
        wanted = f"{fewest} or more" if most is None else f"{fewest}-{most}" if fewest < most else f"{most}"
        raise _refused(f, f"{name} takes {wanted} argument(s), not {count}", _sql_of(node))
    if name in ("TIMESTAMPDIFF", "TIMESTAMPADD") and not isinstance(node.expressions[0], exp.Var):
        raise _refused(f, f"{name} needs a unit first: {', '.join(sorted(_DIFF_UNITS))}")
    if name in ("DATE_ADD", "DATE_SUB") and not isinstance(node.expressions[1], exp.Interval):
        raise _refused(f, f"{name} needs an INTERVAL second, as in {name}(d, INTERVAL 1 DAY)")


_CHECKS: Final[Mapping[type[exp.Expr], Callable[[_Filter, Any, frozenset[str] | None], None]]] = {
    exp.Column: _check_column,
    exp.Literal: _check_literal,
    exp.HexString: _check_hex,
    exp.BitString: _check_bits,
    exp.Trim: _check_trim,
    exp.Is: _check_is,
    exp.In: _check_in,
    exp.Escape: _check_escape,
    exp.Collate: _check_collate,
    exp.Interval: _check_interval,
    exp.Var: _check_var,
    exp.DataType: _check_datatype,
    exp.Anonymous: _check_anonymous,
}


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


def _render(f: _Filter, tree: exp.Expr) -> str:
    try:
        sql: str = tree.transform(_portable).sql(
            dialect=_DIALECT, identify=True, comments=False, unsupported_level=ErrorLevel.RAISE
        )
    except RecursionError:
        raise _refused(f, "it is nested too deeply") from None
    except SqlglotError as e:
        raise _refused(f, f"it cannot be written back as MySQL ({str(e).splitlines()[0]})") from None
    return sql


def _canonical(f: _Filter, columns: frozenset[str] | None, max_length: int) -> str:
    if not f.text.strip():
        raise _refused(f, "it is empty; leave the filter out to snapshot every row")
    if len(f.text) > max_length:
        raise _refused(f, f"it is {len(f.text)} characters long, more than the {max_length} allowed")
    tokens = _tokens(f)
    if not tokens:
        raise _refused(f, "it is empty; leave the filter out to snapshot every row")
    _check_text(f, tokens)
    tree = _parse(f, tokens)
    _check_tree(f, tree, columns)
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
    given = _Filter(text, table)
    rendered = _canonical(given, known, MAX_LENGTH)
    try:  # quoting and spacing may lengthen the text: the limit is on what users write
        again = _canonical(_Filter(rendered, table), known, 4 * MAX_LENGTH)
    except FilterError:
        again = None
    if again != rendered:
        raise _refused(given, "its regenerated SQL does not read back the same, so it cannot be sent")
    return rendered
