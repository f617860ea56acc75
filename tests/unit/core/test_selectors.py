"""Table selectors: names and RE2 patterns, matched in linear time (no server)."""

from __future__ import annotations

import contextlib
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.core.model import TableId
from gtidsnap.core.selectors import (
    MAX_SELECTOR_CHARS,
    SelectorError,
    check_selector,
    literal_table,
    resolve,
    selects,
)

CATALOG = [
    TableId("shop", "orders"),
    TableId("shop", "audit_1"),
    TableId("shop", "audit_2"),
    TableId("hr", "x" * 60),
]


@pytest.mark.parametrize(
    ("selectors", "found"),
    [
        (["shop.orders"], [TableId("shop", "orders")]),
        (["shop\\.orders"], [TableId("shop", "orders")]),
        (["shop\\.audit_.*"], [TableId("shop", "audit_1"), TableId("shop", "audit_2")]),
        (["shop\\.audit_.*", "shop.audit_1"], [TableId("shop", "audit_1"), TableId("shop", "audit_2")]),
        (["shop.missing"], [TableId("shop", "missing")]),  # named: the engine says why it cannot be had
        (["(?i)SHOP\\.ORDERS"], [TableId("shop", "orders")]),
    ],
)
def test_resolve(selectors: list[str], found: list[TableId]) -> None:
    assert resolve(selectors, CATALOG) == found


@pytest.mark.parametrize(
    ("selector", "reason"),
    [
        ("shop\\.zzz.*", "matches no table"),
        ("shop.(", "not a valid regular expression for RE2"),
        ("shop\\.(a)\\1", "back-references"),
        ("shop\\.(?=o).*", "RE2"),
        ("mysql.user", "system schema mysql"),
        ("Performance_Schema.threads", "system schema"),
        ("shop." + "a" * MAX_SELECTOR_CHARS, f"at most {MAX_SELECTOR_CHARS}"),
    ],
)
def test_refused(selector: str, reason: str) -> None:
    with pytest.raises(SelectorError) as refused:
        resolve([selector], CATALOG)
    assert reason in str(refused.value) and "\n" not in str(refused.value)


def test_catastrophic_pattern_matches_in_linear_time() -> None:
    """``(x+x+)+y`` against 60 x's takes exponential time in Python's re; RE2 answers at once. (A hang
    guard, not a speed target: the bound is generous.)"""
    started = time.monotonic()
    with pytest.raises(SelectorError, match="matches no table"):
        resolve(["hr\\.(x+x+)+y"], CATALOG)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("selector", "table"),
    [
        ("db.t", TableId("db", "t")),
        ("db\\.t", TableId("db", "t")),
        ("db\\.t_1", TableId("db", "t_1")),
        ("db\\.t\\$1", TableId("db", "t$1")),
        ("db.t.x", TableId("db", "t.x")),
        ("db\\.t.*", None),
        ("db.(a|b)", None),
        ("db\\d.t", None),
        ("nodot", None),
    ],
)
def test_literal_table(selector: str, table: TableId | None) -> None:
    assert literal_table(selector) == table


def test_selects() -> None:
    assert selects("shop\\.audit_.*", TableId("shop", "audit_9"))
    assert selects("shop.orders", TableId("shop", "orders"))
    assert not selects("shop.orders", TableId("shop", "orders2"))


@given(st.text(max_size=80))
def test_any_text_is_a_selector_or_a_selector_error(text: str) -> None:
    with contextlib.suppress(SelectorError):
        check_selector(text)
