"""Is a replica's history the checkpoint's: the stamp of its last transaction, where a binlog dump starts
to read it again, and the verdict on what a replica shows there (pure; the reading is tested on real
servers in tests/integration/test_checkpoint_trust.py)."""

from __future__ import annotations

import pytest

from gtidsnap.core.gtid import MariadbGtid, MysqlGtid, parse_gtid_set
from gtidsnap.core.source_identity import (
    ANOTHER_PRIMARY,
    FORGET_SOURCE,
    Shown,
    TransactionStamp,
    dump_start,
    identity_problem,
    stamp_of,
)

U = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
STAMP = TransactionStamp("0-1-286", 1, 1_700_000_000, "0-1-285")


def test_a_stamp_reads_back_as_written_and_refuses_fields_of_the_wrong_type() -> None:
    assert TransactionStamp.from_json(STAMP.to_json()) == STAMP
    for bad in (
        [],
        {"gtid": 5, "server_id": 1, "timestamp": 1},
        {"gtid": "0-1-1", "server_id": "1", "timestamp": 1},
    ):
        with pytest.raises(ValueError, match="last_transaction"):
            TransactionStamp.from_json(bad)
    with pytest.raises(ValueError, match="whole numbers"):
        TransactionStamp.from_json({"gtid": "0-1-1", "server_id": True, "timestamp": 1})


def test_a_mariadb_stamp_keeps_its_domains_position_before_it() -> None:
    before = parse_gtid_set("mariadb", "0-1-285,7-3-9")
    stamp = stamp_of(MariadbGtid(0, 1, 286), 1, 1_700_000_000, before)
    assert stamp == STAMP
    first = stamp_of(MariadbGtid(5, 1, 1), 1, 1, before)
    assert first.before == "", "the domain's first transaction: no position before it"
    mysql = stamp_of(MysqlGtid.parse(f"{U}:6"), 1, 2, parse_gtid_set("mysql", f"{U}:1-5"))
    assert (mysql.gtid, mysql.before) == (f"{U}:6", "")


def test_the_dump_starts_where_the_stamped_transaction_comes_first_of_its_source() -> None:
    processed = parse_gtid_set("mariadb", "0-1-290,7-3-9")  # moved on past the stamp since (a skip)
    start = dump_start(STAMP, processed)
    assert start is not None and start.as_position() == "0-1-285,7-3-9"
    assert dump_start(TransactionStamp("0-1-1", 1, 1, ""), processed) is None
    mysql = parse_gtid_set("mysql", f"{U}:1-9")
    assert str(dump_start(TransactionStamp(f"{U}:9", 1, 1), mysql)) == f"{U}:1-8"
    assert str(dump_start(TransactionStamp(f"{U}:4", 1, 1), mysql)) == f"{U}:1-3:5-9"


@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
def test_the_same_transaction_is_the_same_history(flavor: str) -> None:
    shown = TransactionStamp(STAMP.gtid, STAMP.server_id, STAMP.timestamp)  # read back: no position
    assert identity_problem(STAMP, Shown(shown), flavor, "r") is None


@pytest.mark.parametrize(
    "other",
    [TransactionStamp("0-1-286", 1, 1_000_000_000), TransactionStamp("0-1-286", 2, 1_700_000_000)],
)
@pytest.mark.parametrize("flavor", ["mariadb", "mysql"])
def test_another_transaction_at_that_gtid_is_another_primarys_history(
    flavor: str, other: TransactionStamp
) -> None:
    problem = identity_problem(STAMP, Shown(other), flavor, "the replica r")
    assert problem is not None and ANOTHER_PRIMARY in problem and "the replica r" in problem
    assert "2023-11-14T22:13:20+00:00" in problem, "the checkpoint's transaction, its time as a date"
    assert "source.hosts" in problem, "says what to do"


def test_a_replica_that_cannot_show_it_is_accepted_on_mysql_only() -> None:
    shown = Shown(None, "purged")
    assert identity_problem(STAMP, shown, "mysql", "r") is None, "the GTID names the primary's UUID"
    problem = identity_problem(STAMP, shown, "mariadb", "r")
    assert problem is not None and ANOTHER_PRIMARY in problem and "(purged)" in problem
    assert FORGET_SOURCE in problem, "the operator's way to accept a replica of the same primary"
