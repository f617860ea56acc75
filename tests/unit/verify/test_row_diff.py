"""The rule ``gtidsnap verify`` compares rows by: equal rows are the same whatever their values, one
changed value, a key on one side only, and keys that changed while read are left out."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.verify.row_diff import Difference, diff_rows, same_value

VALUES = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.datetimes(),
    st.lists(st.sampled_from("abc"), max_size=3),
)
ROWS = st.dictionaries(st.integers(0, 50), st.fixed_dictionaries({"v": VALUES, "w": VALUES}), max_size=20)


@given(ROWS)
def test_the_same_rows_never_differ(rows: dict[int, dict[str, Any]]) -> None:
    source = {(k,): r for k, r in rows.items()}
    mirror = {(k,): dict(r) for k, r in rows.items()}
    assert diff_rows(source, mirror, ["v", "w"], single_precision=["w"]) == []


@given(ROWS, st.integers(0, 50), st.integers(0, 50))
def test_a_changed_value_a_missing_key_and_an_extra_key_are_each_found(
    rows: dict[int, dict[str, Any]], changed: int, gone: int
) -> None:
    source = {(k,): r for k, r in rows.items()}
    mirror = {(k,): dict(r) for k, r in rows.items()}
    if (changed,) in mirror:
        mirror[(changed,)]["v"] = "changed by hand"
    mirror.pop((gone,), None)
    mirror[(99,)] = {"v": 1, "w": 2}
    found = {(d.key, d.kind, d.columns) for d in diff_rows(source, mirror, ["v", "w"])}
    expected = {((99,), "extra", ())}
    if (gone,) in source:
        expected.add(((gone,), "missing", ()))
    if (changed,) in source and changed != gone and source[(changed,)]["v"] != "changed by hand":
        expected.add(((changed,), "different", ("v",)))
    assert found == expected
    assert diff_rows(source, mirror, ["v", "w"], skipped=[(99,), (gone,), (changed,)]) == []


def test_values_compare_as_the_mirror_holds_them() -> None:
    assert same_value(float("nan"), float("nan"))
    assert not same_value(float("nan"), 1.0)
    assert same_value(1.1, 1.100000023841858, single_precision=True)  # a FLOAT read as text or binary
    assert not same_value(1.1, 1.100000023841858)
    assert same_value(Decimal("1.50"), Decimal("1.5"))
    assert not same_value(dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 1))
    assert same_value(None, None) and not same_value(None, 0)


def test_a_difference_says_what_and_where() -> None:
    row, held = {"v": 1, "s": "a"}, {"v": 2, "s": "a"}
    assert Difference((7, "x"), "different", ("v",), row, held).describe(["id", "k"]) == (
        "(id=7, k='x') differs: v: source 1, mirror 2"
    )
    assert Difference((7,), "missing", source=row).describe(["id"]) == "(id=7) is missing from the mirror"
    assert (
        Difference((7,), "extra", mirror=held).describe(["id"])
        == "(id=7) is in the mirror but not in the source"
    )
