"""The allow-list of snapshot filters: which syntax-tree nodes a filter may hold, with which arguments,
and the one-line error that names what is refused (:mod:`gtidsnap.filters.check` parses and renders)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from sqlglot import exp
from sqlglot.errors import ErrorLevel

from gtidsnap.core.errors import FilterError
from gtidsnap.core.model import TableId
from gtidsnap.filters.dialect import DIALECT, DIFF_UNITS, FUNCTIONS, INTERVAL_UNITS, META_NAME

MAX_DEPTH: Final = 1000
"""Deepest syntax tree accepted; ``a+a+...`` chains nest without parentheses, one level per operator."""

QUOTE_CHARS: Final = 80
"""How much of the filter (or of its offending part) a message quotes."""

_CAST_TYPES: Final = frozenset(
    {
        exp.DType.CHAR, exp.DType.CHARACTER_SET, exp.DType.BINARY, exp.DType.BIGINT, exp.DType.UBIGINT,
        exp.DType.INT, exp.DType.DECIMAL, exp.DType.DATE, exp.DType.DATETIME, exp.DType.TIME,
        exp.DType.DOUBLE, exp.DType.FLOAT, exp.DType.JSON, exp.DType.YEAR,
    }
)  # fmt: skip
"""CAST targets, as sqlglot types: SIGNED is BIGINT, UNSIGNED is UBIGINT, INT is written SIGNED."""

_ALLOWED = "a filter may only use the columns of {table}, literals, operators and plain functions"
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]+")
_SUBQUERY_NODES: Final = (exp.Subquery, exp.Select, exp.Exists, exp.Union, exp.Table, exp.From, exp.Query)
_BITWISE: Final = (
    exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor, exp.BitwiseNot, exp.BitwiseLeftShift,
    exp.BitwiseRightShift,
)  # fmt: skip


# --------------------------------------------------------------------------- messages


@dataclass(frozen=True)
class FilterText:
    """What a message needs: the text as given and the table it filters."""

    text: str
    table: TableId


def one_line(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` on one printable line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    flat = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in flat)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def refused(f: FilterText, problem: str, part: str | None = None) -> FilterError:
    """The error for ``problem``: quotes the whole filter when short, else the offending ``part``."""
    shown = f.text if part is None or len(f.text.strip()) <= QUOTE_CHARS else part
    return FilterError(
        f'filter "{one_line(shown.strip())}" is refused: {one_line(problem, 300)}; '
        + _ALLOWED.format(table=f.table)
    )


def walk(tree: exp.Expr) -> Iterator[tuple[exp.Expr, int]]:
    """Every node with its depth, without recursion (deep trees are refused, not crashed on)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        yield node, depth
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def sql_of(node: exp.Expr) -> str:
    """A node as SQL, for a message only: never raises, never logs."""
    try:
        sql: str = node.sql(dialect=DIALECT, unsupported_level=ErrorLevel.IGNORE)
    except Exception:  # quoting a refused node must not turn a refusal into a crash
        return node.key.upper()
    return sql


def _name_of(node: exp.Expr) -> str:
    """A function's name as the user wrote it (or as MySQL spells it), for messages."""
    if isinstance(node, exp.Anonymous):
        return node.name.upper() if isinstance(node.this, str) else node.name
    written = node.meta.get(META_NAME) if node.meta else None
    if isinstance(written, str):
        return written.upper()
    if isinstance(node, exp.JSONArrayContains):
        return "MEMBER OF"
    call = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\(", sql_of(node))
    if call:
        return call.group(1).upper()
    return node.sql_name() if isinstance(node, exp.Func) else node.key.upper()


_ARGS: Final[Mapping[type[exp.Expr], frozenset[str]]] = {
    cls: frozenset(args)
    for classes, args in (
        ((exp.And, exp.Or, exp.Xor), {"this", "expression"}),
        ((exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ), {"this", "expression"}),
        ((exp.Add, exp.Sub, exp.Mul, exp.IntDiv), {"this", "expression"}),
        ((exp.Mod,), {"this", "expression", "safe"}),  # safe: NULL on a zero divisor, as MySQL does
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


_REFUSED: tuple[tuple[type[exp.Expr] | tuple[type[exp.Expr], ...], str], ...] = (
    (_SUBQUERY_NODES, "subqueries are not allowed"),
    (exp.SessionParameter, "system variables (@@name) are not allowed"),
    (exp.Parameter, "user variables (@name) are not allowed"),
    (exp.Placeholder, "placeholders (?, %s, :name) are not allowed; write the value itself"),
    (exp.PropertyEQ, "assignments (:=) are not allowed"),
    (exp.Window, "window functions are not allowed"),
    (exp.AggFunc, "aggregate function {name} is not allowed"),
    (exp.Func, "function {name} is not allowed"),
    (exp.Tuple, "row constructors (a, b) are not allowed"),
    (exp.Alias, "aliases are not allowed"),
    (_BITWISE, "bitwise operators (& | ^ ~ << >>) are not allowed"),
)
"""Why a node outside the whitelist is refused, by its class (the first that matches; ``{name}``: the
function's name)."""


def _problem(node: exp.Expr) -> tuple[str, str]:
    """Why a node outside the whitelist is refused, and how to quote it."""
    part = sql_of(node)
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        return "stored functions (schema.function(...)) are not allowed", part
    if isinstance(node, exp.Dot | exp.Bracket):
        return f"{part!r} is not a column of this table", part
    for classes, reason in _REFUSED:
        if isinstance(node, classes):
            return (reason.format(name=_name_of(node)) if "{name}" in reason else reason), part
    return f"{one_line(part, 60)!r} is not allowed", part


def check_tree(f: FilterText, tree: exp.Expr, columns: frozenset[str] | None) -> None:
    """Every node must be in ``_ARGS``, with only the arguments listed there, and pass its own check."""
    for node, depth in walk(tree):
        if depth > MAX_DEPTH:
            raise refused(f, f"it is nested deeper than {MAX_DEPTH} levels")
        if node.comments:
            raise refused(f, "comments (--, #, /* */) are not allowed")
        allowed = _ARGS.get(type(node))
        if allowed is None:
            problem, part = _problem(node)
            raise refused(f, problem, part)
        if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous) and node.meta.get(META_NAME):
            # An allowed function class comes from syntax (TRIM(x FROM y), ->, REGEXP, 'a' 'b', a bare
            # CURRENT_DATE); reached by a plain call of another name (MID, REGEXP_LIKE) it is refused.
            raise refused(f, f"function {_name_of(node)} is not allowed", sql_of(node))
        for key, value in node.args.items():
            if key not in allowed and value not in (None, False, [], ""):
                part = sql_of(node)
                problem = f"this form of {_name_of(node)} ({one_line(part, 40)}) is not allowed"
                raise refused(f, problem, part)
        _CHECKS.get(type(node), _no_check)(f, node, columns)


def _no_check(f: FilterText, node: Any, columns: frozenset[str] | None) -> None:
    return None


def _check_column(f: FilterText, node: exp.Column, columns: frozenset[str] | None) -> None:
    if not isinstance(node.this, exp.Identifier):
        raise refused(f, f"{sql_of(node)!r} is not a column", sql_of(node))
    name = node.this.name
    if not name:
        raise refused(f, "a column name cannot be empty")
    catalog, db, table = node.args.get("catalog"), node.args.get("db"), node.args.get("table")
    own_table = table is None or table.name.lower() == f.table.name.lower()
    own_db = db is None or db.name.lower() == f.table.schema.lower()
    if catalog is not None or not own_table or not own_db:
        written = ".".join(p.name for p in (catalog, db, table) if p is not None)
        raise refused(f, f"column {written}.{name} belongs to another table or schema")
    if columns is not None and name.lower() not in columns:
        raise refused(f, f"column {name} is not a column of {f.table}")


def _check_literal(f: FilterText, node: exp.Literal, columns: frozenset[str] | None) -> None:
    if not node.is_string and not _NUMBER.fullmatch(node.this):
        raise refused(f, f"{node.this!r} is not a number MySQL reads the same way", node.this)


def _check_hex(f: FilterText, node: exp.HexString, columns: frozenset[str] | None) -> None:
    digits = node.this
    if not re.fullmatch(r"[0-9A-Fa-f]*", digits):
        raise refused(f, f"{digits!r} is not a hex literal", digits)
    if len(digits) % 2:
        raise refused(
            f, f"hex literal 0x{digits} has an odd number of digits; write 0x0{digits}", f"0x{digits}"
        )


def _check_bits(f: FilterText, node: exp.BitString, columns: frozenset[str] | None) -> None:
    if not re.fullmatch(r"[01]*", node.this):
        raise refused(f, f"{node.this!r} is not a bit literal", node.this)


def _check_trim(f: FilterText, node: exp.Trim, columns: frozenset[str] | None) -> None:
    if node.args.get("position") not in (None, "BOTH", "LEADING", "TRAILING"):
        raise refused(f, "TRIM takes BOTH, LEADING or TRAILING", sql_of(node))


def _check_is(f: FilterText, node: exp.Is, columns: frozenset[str] | None) -> None:
    if not isinstance(node.expression, exp.Null | exp.Boolean):
        raise refused(f, "IS may only be followed by [NOT] NULL, TRUE, FALSE or UNKNOWN")


def _check_in(f: FilterText, node: exp.In, columns: frozenset[str] | None) -> None:
    if not node.expressions:
        raise refused(f, "IN () needs at least one value")


def _check_escape(f: FilterText, node: exp.Escape, columns: frozenset[str] | None) -> None:
    if not isinstance(node.this, exp.Like) or not (
        isinstance(node.expression, exp.Literal) and node.expression.is_string
    ):
        raise refused(f, "ESCAPE may only follow LIKE, with a quoted character")


def _check_collate(f: FilterText, node: exp.Collate, columns: frozenset[str] | None) -> None:
    name = node.expression
    if not isinstance(name, exp.Var | exp.Identifier | exp.Literal) or not _PLAIN_NAME.fullmatch(name.name):
        raise refused(f, "COLLATE must name a collation, such as utf8mb4_bin")


def _check_interval(f: FilterText, node: exp.Interval, columns: frozenset[str] | None) -> None:
    unit = node.args.get("unit")
    if not isinstance(unit, exp.Var) or unit.name.upper() not in INTERVAL_UNITS:
        written = sql_of(unit) if isinstance(unit, exp.Expr) else "none"
        raise refused(
            f,
            f"INTERVAL needs one of MySQL's units (DAY, HOUR, YEAR_MONTH, ...), not {written}",
            sql_of(node),
        )
    if isinstance(node.this, exp.Tuple) or node.this is None:
        raise refused(f, "INTERVAL needs a value and a unit", sql_of(node))


def _check_var(f: FilterText, node: exp.Var, columns: frozenset[str] | None) -> None:
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
        and node.name in DIFF_UNITS
    ):
        return
    raise refused(f, f"{node.name!r} is not allowed here", node.name)


def _check_datatype(f: FilterText, node: exp.DataType, columns: frozenset[str] | None) -> None:
    if node.this in (exp.DType.TIMESTAMP, exp.DType.TIMESTAMPTZ, exp.DType.TIMESTAMPLTZ):
        raise refused(f, "TIMESTAMP values are not allowed; write the string, or CAST(... AS DATETIME)")
    if not isinstance(node.parent, exp.Cast) or node.this not in _CAST_TYPES:
        written = node.this.value if isinstance(node.this, exp.DType) else sql_of(node)
        raise refused(
            f,
            f"CAST to {written} is not allowed; use CHAR, BINARY, SIGNED, UNSIGNED, "
            "DECIMAL, DATE, DATETIME, TIME, DOUBLE, FLOAT, JSON or YEAR",
        )
    kind = node.args.get("kind")
    if kind is not None and not (
        isinstance(kind, exp.Var | exp.Literal | exp.Identifier) and _PLAIN_NAME.fullmatch(kind.name)
    ):
        raise refused(f, f"CAST to {sql_of(node)} needs a plain character set name")
    for param in node.expressions:
        if not isinstance(param, exp.DataTypeParam) or not (
            isinstance(param.this, exp.Literal) and param.this.this.isdigit()
        ):
            raise refused(f, f"CAST to {sql_of(node)} needs plain integer sizes")


def _check_anonymous(f: FilterText, node: exp.Anonymous, columns: frozenset[str] | None) -> None:
    name = node.name.upper()
    if not isinstance(node.this, str) or name not in FUNCTIONS:
        raise refused(f, f"function {node.name} is not allowed", sql_of(node))
    fewest, most = FUNCTIONS[name]
    count = len(node.expressions)
    if count < fewest or (most is not None and count > most):
        wanted = f"{fewest} or more" if most is None else f"{fewest}-{most}" if fewest < most else f"{most}"
        raise refused(f, f"{name} takes {wanted} argument(s), not {count}", sql_of(node))
    if name in ("TIMESTAMPDIFF", "TIMESTAMPADD") and not isinstance(node.expressions[0], exp.Var):
        raise refused(f, f"{name} needs a unit first: {', '.join(sorted(DIFF_UNITS))}")
    if name in ("DATE_ADD", "DATE_SUB") and not isinstance(node.expressions[1], exp.Interval):
        raise refused(f, f"{name} needs an INTERVAL second, as in {name}(d, INTERVAL 1 DAY)")


_CHECKS: Final[Mapping[type[exp.Expr], Callable[[FilterText, Any, frozenset[str] | None], None]]] = {
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
