"""GTID algebra: laws against a brute-force model of plain Python sets, and real server strings."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtidsnap.core.errors import GtidParseError
from gtidsnap.core.gtid import (
    MariadbGtid,
    MariadbGtidSet,
    MysqlGtid,
    MysqlGtidSet,
    normalize_intervals,
    parse_gtid_set,
)

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"
SOURCES = [(U1, ""), (U1, "alpha"), (U2, ""), (U2, "beta")]
UNIVERSE = 24

# ----------------------------------------------------------------------------- brute-force model

Model = frozenset[tuple[tuple[str, str], int]]


def to_intervals(numbers: set[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def messy_text(model: Model, rnd: random.Random) -> str:
    """Server-like text for a model: shuffled, split, overlapping, upper-case, newlines."""
    elements = []
    for source in SOURCES:
        numbers = {n for s, n in model if s == source}
        if not numbers:
            continue
        pieces = [f"{a}-{b}" if a != b or rnd.random() < 0.3 else f"{a}" for a, b in to_intervals(numbers)]
        # split one interval into two overlapping ones sometimes
        rnd.shuffle(pieces)
        uuid = source[0].upper() if rnd.random() < 0.5 else source[0]
        head = f"{uuid}:{source[1]}" if source[1] else uuid
        elements.append(":".join([head, *pieces]))
    rnd.shuffle(elements)
    return ",\n".join(elements)


def build(model: Model) -> MysqlGtidSet:
    grouped: dict[tuple[str, str], set[int]] = {}
    for source, n in model:
        grouped.setdefault(source, set()).add(n)
    return MysqlGtidSet({s: to_intervals(ns) for s, ns in grouped.items()})


def members(s: MysqlGtidSet) -> Model:
    return frozenset((g.source, g.gno) for g in s)


models = st.frozensets(
    st.tuples(st.sampled_from(SOURCES), st.integers(min_value=1, max_value=UNIVERSE)), max_size=40
)
EXAMPLES = settings(max_examples=300, deadline=None)


@EXAMPLES
@given(models, st.randoms(use_true_random=False))
def test_mysql_parse_of_messy_text_equals_model(model: Model, rnd: random.Random) -> None:
    parsed = MysqlGtidSet.parse(messy_text(model, rnd))
    assert members(parsed) == model
    assert parsed == build(model)


@EXAMPLES
@given(models)
def test_mysql_canonical_round_trip(model: Model) -> None:
    s = build(model)
    text = str(s)
    assert "\n" not in text and " " not in text
    assert MysqlGtidSet.parse(text) == s
    assert str(MysqlGtidSet.parse(text)) == text


@EXAMPLES
@given(models, models)
def test_mysql_union_difference_subset_match_model(a: Model, b: Model) -> None:
    sa, sb = build(a), build(b)
    assert members(sa | sb) == a | b
    assert members(sa - sb) == a - b
    assert (sa <= sb) == (a <= b)
    assert (sa == sb) == (a == b)
    assert bool(sa) == bool(a)
    if sa == sb:
        assert hash(sa) == hash(sb)


@EXAMPLES
@given(models, st.sampled_from(SOURCES), st.integers(min_value=1, max_value=UNIVERSE + 2))
def test_mysql_contains_add_and_max_match_model(a: Model, source: tuple[str, str], n: int) -> None:
    s = build(a)
    g = MysqlGtid(source[0], source[1], n)
    assert (g in s) == ((source, n) in a)
    assert (str(g) in s) == ((source, n) in a)
    assert members(s.add(g)) == a | {(source, n)}
    general = s | MysqlGtidSet({g.source: [(n, n)]})
    assert s.add(g) == general and hash(s.add(g)) == hash(general) and str(s.add(g)) == str(general)
    expected_max: dict[object, int] = {}
    for src, num in a:
        expected_max[src] = max(expected_max.get(src, 0), num)
    assert s.max_per_source() == expected_max


def test_mysql_real_server_strings() -> None:
    # what SHOW MASTER STATUS / SHOW BINARY LOG STATUS print, newline after each comma
    text = (
        "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5:7-9,\n"
        "8a94f357-aab4-11df-86ab-c80aa9429562:1-3:5:alpha:1-4:beta:2"
    )
    s = MysqlGtidSet.parse(text)
    assert str(s) == f"{U1}:1-5:7-9,{U2}:1-3:5:alpha:1-4:beta:2"
    assert f"{U1}:6" not in s, "a gap must never be widened"
    assert f"{U1}:9" in s and f"{U1}:10" not in s
    assert f"{U2}:alpha:4" in s and f"{U2}:alpha:5" not in s and f"{U2}:beta:2" in s
    assert f"{U2}:4" not in s
    assert s.max_per_source() == {(U1, ""): 9, (U2, ""): 5, (U2, "alpha"): 4, (U2, "beta"): 2}
    assert MysqlGtidSet.parse("") == MysqlGtidSet() and not MysqlGtidSet.parse("  \n")
    assert str(MysqlGtidSet.parse(f"{U1}:1-3:4-6:8")) == f"{U1}:1-6:8"
    assert str(MysqlGtidSet.parse(f"{U1}:7")) == f"{U1}:7"
    # tags are case-insensitive, written in lower case; intervals after a tag belong to it;
    # the same uuid may appear in several elements; untagged intervals are written first
    assert str(MysqlGtidSet.parse(f"{U1}:Alpha:3:1-2")) == f"{U1}:alpha:1-3"
    assert str(MysqlGtidSet.parse(f"{U1}:Alpha:3,{U1}:1-2")) == f"{U1}:1-2:alpha:3"
    hw = MysqlGtidSet.parse(f"{U1}:1-12") - MysqlGtidSet.parse(f"{U1}:1-5:7-9")
    assert str(hw) == f"{U1}:6:10-12"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not-a-uuid:1-5", "not a server UUID"),
        (f"{U1}", "no transactions"),
        (f"{U1}:5-3", "ends before it starts"),
        (f"{U1}:0", "outside 1.."),
        (f"{U1}:1-x", "not a whole number"),
        (f"{U1}:1,,{U2}:1", "empty element"),
        (f"{U1}:tag", "has no transactions"),
        (f"{U1}:9tag:1", "not a whole number"),
        (f"{U1}:a-b:1", "not a GTID tag"),
        (f"{U1}:{'t' * 33}:1", "not a GTID tag"),
        (f"{U1}:{2**63}", "outside 1.."),
    ],
)
def test_mysql_rejects_bad_text_quoting_it(text: str, fragment: str) -> None:
    with pytest.raises(GtidParseError) as err:
        MysqlGtidSet.parse(text)
    assert fragment in str(err.value)
    assert repr(text) in str(err.value)


def test_mysql_single_gtid_parse() -> None:
    assert MysqlGtid.parse(f"{U1}:7") == MysqlGtid(U1, "", 7)
    assert MysqlGtid.parse(f"{U1.upper()}:Tag_1:7") == MysqlGtid(U1, "tag_1", 7)
    assert str(MysqlGtid(U1, "t", 3)) == f"{U1}:t:3"
    with pytest.raises(GtidParseError):
        MysqlGtid.parse(f"{U1}:1-2")


# ----------------------------------------------------------------------------- MariaDB

DOMAINS = [0, 1, 7]
MModel = frozenset[tuple[int, int]]
mmodels = st.frozensets(
    st.tuples(st.sampled_from(DOMAINS), st.integers(min_value=1, max_value=UNIVERSE)), max_size=40
)


def mbuild(model: MModel) -> MariadbGtidSet:
    grouped: dict[int, set[int]] = {}
    for d, n in model:
        grouped.setdefault(d, set()).add(n)
    return MariadbGtidSet({d: to_intervals(ns) for d, ns in grouped.items()}, {d: d + 10 for d in grouped})


def mmembers(s: MariadbGtidSet) -> MModel:
    return frozenset((d, n) for d, iv in s.intervals().items() for a, b in iv for n in range(a, b + 1))


@EXAMPLES
@given(mmodels, mmodels)
def test_mariadb_algebra_matches_model(a: MModel, b: MModel) -> None:
    sa, sb = mbuild(a), mbuild(b)
    assert mmembers(sa | sb) == a | b
    assert mmembers(sa - sb) == a - b
    assert (sa <= sb) == (a <= b)
    assert (sa == sb) == (a == b)
    assert MariadbGtidSet.parse(str(sa)) == sa
    assert str(MariadbGtidSet.parse(str(sa))) == str(sa)


@EXAMPLES
@given(mmodels, st.sampled_from(DOMAINS), st.integers(min_value=1, max_value=UNIVERSE + 2))
def test_mariadb_contains_and_add_as_position(a: MModel, domain: int, seq: int) -> None:
    s = mbuild(a)
    g = MariadbGtid(domain, 99, seq)
    assert (g in s) == ((domain, seq) in a)
    advanced = s.add(g)
    assert mmembers(advanced) == a | {(domain, n) for n in range(1, seq + 1)}
    general = s | MariadbGtidSet({domain: [(1, seq)]}, {domain: 99})
    assert advanced == general and hash(advanced) == hash(general) and str(advanced) == str(general)
    top = max((n for d, n in a if d == domain), default=0)
    if seq >= top:
        assert advanced.as_position().count(f"{domain}-99-{seq}") == 1


def test_mariadb_real_positions() -> None:
    pos = MariadbGtidSet.parse("0-1-100,5-2-3")
    assert "0-1-100" in pos and "0-9-50" in pos, "containment is per domain, server id ignored"
    assert "0-1-101" not in pos and "5-2-4" not in pos and "1-1-1" not in pos
    assert str(pos) == "0-1-100,5-2-3" and pos.as_position() == "0-1-100,5-2-3"
    now = MariadbGtidSet.parse("0-1-150,5-2-3,9-3-2")
    hw = now - pos
    assert str(hw) == "0-1-101..150,9-3-2"
    assert MariadbGtidSet.parse(str(hw)) == hw
    assert hw.max_per_source() == {0: 150, 9: 2}
    assert "0-1-100" not in hw and "0-1-101" in hw
    assert pos | hw == now and hw <= now and not now <= pos
    assert MariadbGtidSet.parse("") == MariadbGtidSet() and not MariadbGtidSet.parse("0-1-0")
    assert str(MariadbGtidSet.parse("0-1-5..9:12..12")) == "0-1-5..9:12..12"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("0-1", "not domain-server-seq"),
        ("x-1-2", "not a whole number"),
        ("0-1-9..3", "ends before it starts"),
        ("0-1-3-4", "neither a seq nor a range"),
        ("4294967296-1-1", "larger than 4294967295"),
        (f"0-1-{2**64}", "larger than"),
    ],
)
def test_mariadb_rejects_bad_text(text: str, fragment: str) -> None:
    with pytest.raises(GtidParseError) as err:
        MariadbGtidSet.parse(text)
    assert fragment in str(err.value)


def test_flavour_dispatch_and_type_safety() -> None:
    assert isinstance(parse_gtid_set("mysql", f"{U1}:1"), MysqlGtidSet)
    assert isinstance(parse_gtid_set("mariadb", "0-1-1"), MariadbGtidSet)
    with pytest.raises(ValueError, match="unknown server flavour"):
        parse_gtid_set("postgres", "")
    with pytest.raises(TypeError):
        MysqlGtidSet().add(MariadbGtid(0, 1, 1))
    assert MariadbGtid(0, 1, 1) not in MysqlGtidSet.parse(f"{U1}:1")


def test_normalize_keeps_gaps() -> None:
    assert normalize_intervals([(7, 9), (1, 5)]) == ((1, 5), (7, 9))
    assert normalize_intervals([(1, 5), (6, 9)]) == ((1, 9),)
    assert normalize_intervals([(1, 5), (2, 3)]) == ((1, 5),)


def test_add_in_stream_order_equals_the_parsed_range() -> None:
    """The fast path of ``add`` (the next transaction of a source) builds the same set as parsing."""
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    mysql, maria = MysqlGtidSet.parse(f"{uuid}:1-3"), MariadbGtidSet.parse("0-1-3")
    for n in range(4, 60):
        mysql = mysql.add(MysqlGtid(uuid, "", n))
        maria = maria.add(MariadbGtid(0, 1 + n % 2, n))
    parsed = MysqlGtidSet.parse(f"{uuid}:1-59")
    assert mysql == parsed and hash(mysql) == hash(parsed)
    assert str(maria) == "0-2-59" and maria == MariadbGtidSet.parse("0-2-59")
    assert mysql.add(MysqlGtid(uuid, "", 10)) is mysql  # already in: the same set


@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(1, 2**64 - 1))
def test_mariadb_of_is_the_constructor(domain: int, server: int, seq: int) -> None:
    made, built = MariadbGtid.of(domain, server, seq), MariadbGtid(domain, server, seq)
    assert made == built and hash(made) == hash(built) and str(made) == str(built) and not made < built
    assert made in MariadbGtidSet().add(built) and vars(made) == vars(built)


@given(st.uuids(), st.sampled_from(["", "tag"]), st.integers(1, 2**63 - 1))
def test_mysql_of_is_the_constructor(uuid: Any, tag: str, gno: int) -> None:
    made, built = MysqlGtid.of(str(uuid), tag, gno), MysqlGtid(str(uuid), tag, gno)
    assert made == built and hash(made) == hash(built) and str(made) == str(built) and not made < built
    assert made in MysqlGtidSet().add(built) and vars(made) == vars(built)
