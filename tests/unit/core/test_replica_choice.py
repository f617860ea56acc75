"""Which replica can serve a checkpoint: serves, behind (waited for), refused (why), per flavour."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gtidsnap.core.gtid import GtidSet, parse_gtid_set
from gtidsnap.core.replica_choice import Behind, Refused, ReplicaPosition, Serves, judge

U1 = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
U2 = "8a94f357-aab4-11df-86ab-c80aa9429562"


def at(flavor: str, applied: str, purged: str = "") -> ReplicaPosition:
    return ReplicaPosition(
        "the replica r", flavor, parse_gtid_set(flavor, applied), parse_gtid_set(flavor, purged)
    )


def gtids(flavor: str, text: str) -> GtidSet:
    return parse_gtid_set(flavor, text)


@pytest.mark.parametrize(
    ("flavor", "processed", "position", "verdict"),
    [
        ("mysql", f"{U1}:1-5", at("mysql", f"{U1}:1-9"), Serves),
        ("mysql", f"{U1}:1-5", at("mysql", f"{U1}:1-3"), Behind),  # lags
        ("mysql", f"{U1}:1-5,{U2}:1-2", at("mysql", f"{U1}:1-5,{U2}:1"), Behind),
        ("mysql", f"{U1}:1-5,{U2}:1", at("mysql", f"{U1}:1-9"), Refused),  # a source it never applied
        ("mysql", f"{U1}:1-5", at("mysql", f"{U1}:1-2:4-9"), Refused),  # went past 3 without it
        ("mysql", f"{U1}:1-5", at("mysql", f"{U1}:1-9", f"{U1}:1-7"), Refused),  # 6-7 purged
        ("mysql", f"{U1}:1-5", at("mysql", f"{U1}:1-9", f"{U1}:1-5"), Serves),  # a backup-provisioned one
        ("mysql", "", at("mysql", f"{U1}:1-9"), Serves),
        ("mariadb", "0-1-5", at("mariadb", "0-1-9"), Serves),
        ("mariadb", "0-1-5", at("mariadb", "0-1-4"), Behind),
        ("mariadb", "0-1-5,77-1-204", at("mariadb", "0-1-9,77-1-204"), Serves),  # slave_pos has domain 77
        ("mariadb", "0-1-5,77-1-204", at("mariadb", "0-1-9"), Refused),  # a domain it never applied
        ("mariadb", "0-1-5", at("mariadb", "0-1-9", "0-1-7"), Refused),
        ("mariadb", "0-1-5", at("mysql", f"{U1}:1-9"), Refused),  # another flavour
    ],
)
def test_judge(flavor: str, processed: str, position: ReplicaPosition, verdict: type[Any]) -> None:
    found = judge(flavor, gtids(flavor, processed), position)
    assert isinstance(found, verdict), found
    if isinstance(found, Refused):
        assert "r" in found.reason and "\n" not in found.reason
        assert found.start_over == ("purged" not in found.reason), "purged binlogs: another replica may serve"


def test_behind_counts_the_missing_transactions() -> None:
    found = judge("mysql", gtids("mysql", f"{U1}:1-50"), at("mysql", f"{U1}:1-20"))
    assert isinstance(found, Behind) and found.transactions == 30
    found = judge("mariadb", gtids("mariadb", "0-1-50,1-2-7"), at("mariadb", "0-1-20,1-2-5"))
    assert isinstance(found, Behind) and found.transactions == 32


@given(st.integers(1, 1000), st.integers(0, 1000))
def test_a_replica_that_applied_a_prefix_of_one_source_is_behind_or_serves(done: int, extra: int) -> None:
    """A replica applies a source's transactions in order: one that has applied fewer of them lags,
    one that has applied as many or more serves; never a refusal, never advice to start over."""
    for flavor, processed, applied in (
        ("mysql", f"{U1}:1-{done}", f"{U1}:1-{max(1, done - extra)}"),
        ("mysql", f"{U1}:1-{done}", f"{U1}:1-{done + extra}"),
        ("mariadb", f"0-1-{done}", f"0-1-{max(1, done - extra)}"),
        ("mariadb", f"0-1-{done}", f"0-1-{done + extra}"),
    ):
        found = judge(flavor, gtids(flavor, processed), at(flavor, applied))
        assert isinstance(found, Serves | Behind), found


R = "9b0f8c2e-1111-11f1-8000-02fc00000002"  # the replica the checkpoint was written on


@pytest.mark.parametrize(
    ("flavor", "processed", "applied", "origins", "verdict", "excused"),
    [
        # its own local writes (errant) are not asked of a sibling
        ("mysql", f"{U1}:1-5,{R}:1-2", f"{U1}:1-9", (R,), Serves, f"{R}:1-2"),
        ("mysql", f"{U1}:1-5,{R}:1-2", f"{U1}:1-9", (), Refused, None),  # unknown writer: another server
        ("mysql", f"{U1}:1-5,{R}:1-2", f"{U1}:1-3", (R,), Behind, None),  # lagging on the primary's part
        (
            "mysql",
            f"{U1}:1-5,{R}:1-2",
            f"{U1}:1-9,{R}:1-2",
            (R,),
            Serves,
            None,
        ),  # it has them: nothing excused
        # MariaDB: a domain whose newest GTID carries the replica's server id (2)
        ("mariadb", "0-1-5,9000-2-3", "0-1-9", ("2",), Serves, "9000-2-3"),
        ("mariadb", "0-1-5,9000-2-3", "0-1-9", ("3",), Refused, None),
    ],
)
def test_errant_transactions_of_a_replica_the_checkpoint_was_written_on_are_excused(
    flavor: str,
    processed: str,
    applied: str,
    origins: tuple[str, ...],
    verdict: type[Any],
    excused: str | None,
) -> None:
    found = judge(flavor, gtids(flavor, processed), at(flavor, applied), origins)
    assert isinstance(found, verdict), found
    if isinstance(found, Serves):
        assert (str(found.excused) if found.excused else None) == excused


def test_its_own_purged_errant_transactions_are_skipped_not_asked_for() -> None:
    """A replica rebuilt from a backup whose gtid_purged holds its own local writes: the checkpoint never
    streamed them and cannot now; only the primary's transactions count, so the run starts past them."""
    position = ReplicaPosition(
        "the replica r", "mysql", gtids("mysql", f"{U1}:1-9,{R}:1-2"), gtids("mysql", f"{U1}:1-4,{R}:1-2"), R
    )
    found = judge("mysql", gtids("mysql", f"{U1}:1-5"), position)
    assert isinstance(found, Serves) and str(found.skipped) == f"{R}:1-2"
    other = ReplicaPosition("r", "mysql", position.applied, position.purged, "someone-else")
    assert isinstance(judge("mysql", gtids("mysql", f"{U1}:1-5"), other), Refused), "not its own: lost"
