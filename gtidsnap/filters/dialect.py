"""The SQL dialect of snapshot filters: MySQL as sqlglot reads and writes it, with the functions a filter
may call parsed as plain calls and written back verbatim (:mod:`gtidsnap.filters.check` checks the tree)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

from sqlglot import TokenType, exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.generators.mysql import MySQLGenerator
from sqlglot.parsers.mysql import MySQLParser

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

DIFF_UNITS: Final = frozenset(
    {"MICROSECOND", "SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"}
)  # the units of TIMESTAMPDIFF and TIMESTAMPADD

META_NAME = "gtidsnap_function_name"
_LOGIC: Final = (exp.And, exp.Or, exp.Xor, exp.Not, exp.Paren)


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
            and first.name.upper() in DIFF_UNITS
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

    ORIGINAL_NAME_META_KEY = META_NAME
    Tokenizer = _FilterTokenizer
    Parser = _FilterParser
    Generator = _FilterGenerator

    def to_json_path(self, path: exp.Expr | None) -> exp.Expr | None:
        return path  # the path string goes to the server unchanged


DIALECT: Final = _FilterMySQL()
