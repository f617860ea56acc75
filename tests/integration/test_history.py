"""``sink.history``: the SCD type 2 history table kept from the changelog, on real Spark + Delta. Versions
open with inserts, updates and snapshot rows, close with the next update or a delete (a key update closes
the old key's version and opens the new key's), a snapshot row restating a version opens nothing, an
update taken again changes nothing, and the history follows the changelog across updates; the same
through the sink's own thread with ``sink.history = true``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gtidsnap.config.loading import SinkSettings
from gtidsnap.sinks.delta import DeltaSink
from gtidsnap.sinks.delta.history import history_watermark, update_history
from gtidsnap.sinks.delta.layout import history_path
from tests.integration.test_delta_sink import ORDERS, SCHEMAS, change, row

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def opened(spark: SparkSession, path: Path, **more: Any) -> DeltaSink:
    settings = SinkSettings(type="delta", path=str(path), app_id="test-app", merge_interval_s=600.0, **more)
    sink = DeltaSink(settings, lambda: spark, lambda table: SCHEMAS[table])
    sink.report_checkpoints()
    sink.open(None)
    return sink


def batch(sink: DeltaSink, *records: Any) -> None:
    sink.write(list(records))
    sink.checkpointed(sink.commit())


def versions(spark: SparkSession, root: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(history_path(root, ORDERS))
    columns = ("id", "name", "_op", "valid_from_seq", "valid_to_seq", "is_current", "ended_by")
    return sorted(tuple(r) for r in frame.select(*columns).collect())


def at(seq: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(1_700_000_000 + seq, dt.UTC).replace(tzinfo=None)


def test_the_history_holds_every_version_once(spark: SparkSession, tmp_path: Path) -> None:
    sink = opened(spark, tmp_path, changelog_snapshot_rows=True)
    root = sink.root
    batch(
        sink,
        change("r", 1, None, row(1, "one")),
        change("r", 2, None, row(2, "two")),
        change("r", 3, None, row(3, "three")),
        change("u", 4, row(1, "one"), row(1, "uno")),
        change("d", 5, row(2, "two"), None),
        change("c", 6, None, row(4, "four")),
    )
    first = update_history(spark, root, ORDERS)
    assert (first.records, first.watermark) == (6, 6)
    assert versions(spark, root) == [
        (1, "one", "r", 1, 4, False, "u"),
        (1, "uno", "u", 4, None, True, None),
        (2, "two", "r", 2, 5, False, "d"),
        (3, "three", "r", 3, None, True, None),
        (4, "four", "c", 6, None, True, None),
    ]
    # a snapshot row restating key 3, a key update 4 -> 5, and 1 updated again
    batch(
        sink,
        change("r", 7, None, row(3, "three")),
        change("u", 8, row(4, "four"), row(5, "five")),  # the sink logs it as d of 4 and c of 5
        change("u", 9, row(1, "uno"), row(1, "eins")),
    )
    assert update_history(spark, root, ORDERS).records == 4
    assert update_history(spark, root, ORDERS).records == 0, "nothing new: nothing taken"
    got = versions(spark, root)
    assert got == [
        (1, "eins", "u", 9, None, True, None),
        (1, "one", "r", 1, 4, False, "u"),
        (1, "uno", "u", 4, 9, False, "u"),
        (2, "two", "r", 2, 5, False, "d"),
        (3, "three", "r", 3, None, True, None),
        (4, "four", "c", 6, 8, False, "d"),
        (5, "five", "c", 8, None, True, None),
    ]
    frame = spark.read.format("delta").load(history_path(root, ORDERS))
    span = frame.where("id = 1 AND valid_from_seq = 4").select("valid_from", "valid_to").first()
    assert span is not None and (span[0], span[1]) == (at(4), at(9)), "valid_from/valid_to: source times"
    # the same records taken again (a replay from an older watermark): the MERGE changes nothing
    assert update_history(spark, root, ORDERS, since=3).records == 7  # the key update is two rows
    assert versions(spark, root) == got, "taking records again changed the history"
    assert history_watermark(spark, history_path(root, ORDERS)) == 9
    sink.close()


def test_the_sink_keeps_the_history_with_sink_history(spark: SparkSession, tmp_path: Path) -> None:
    """``sink.history = true``: the snapshot rows go to the changelog (not asked for here) and the
    sink's thread keeps the history; a run that drains leaves it whole."""
    sink = opened(spark, tmp_path, history=True)
    batch(sink, change("r", 1, None, row(1, "one")), change("u", 2, row(1, "one"), row(1, "uno")))
    sink.drain()
    batch(sink, change("c", 3, None, row(2, "two")))
    assert history_watermark(spark, history_path(sink.root, ORDERS)) == 3, "the drained run's last pass"
    sink.close()
    assert versions(spark, sink.root) == [
        (1, "one", "r", 1, 2, False, "u"),
        (1, "uno", "u", 2, None, True, None),
        (2, "two", "c", 3, None, True, None),
    ]
