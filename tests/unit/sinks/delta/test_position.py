"""The Delta sink's position in a checkpoint: the pending changelog appends travel through JSON intact,
and a position another sink wrote, or one that is damaged, is refused with a message naming it."""

from __future__ import annotations

import json

import pytest

from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.changelog_appends import LogAppend
from gtidsnap.sinks.delta.file_commits import DataFile
from gtidsnap.sinks.delta.position import SinkPosition, appends_of, parse_position


def test_pending_changelog_appends_survive_the_checkpoint_json() -> None:
    append = LogAppend(
        TableId("shop.eu", "orders"),  # a dot in the schema name: kept apart from the table's
        7,
        (DataFile("part-00000-x-c000.snappy.parquet", 1234, 1_700_000_000_000, '{"numRecords": 3}', 3),),
    )
    position = SinkPosition(7, [], [append]).to_json()
    again = json.loads(json.dumps(position))
    assert parse_position(again) == SinkPosition(7, [], [append])
    assert list(appends_of(again)) == [append]
    assert SinkPosition(7).to_json() == {"delta_batch": 7}  # an older run's position, unchanged


def test_unreadable_positions_are_refused_by_name() -> None:
    assert parse_position(None) == SinkPosition(None)
    with pytest.raises(SinkError, match="not written by the Delta sink"):
        parse_position({"jsonl_offset": 3})
    with pytest.raises(SinkError, match="pending changelog commits are not readable"):
        parse_position({"delta_batch": 2, "changelog_appends": [{"table": ["a", "b"], "batch": 2}]})
