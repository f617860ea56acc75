"""``sink.history``: the SCD type 2 history table kept from the changelog, on real Spark + Delta. Versions
open with inserts, updates and snapshot rows, close with the next update or a delete (a key update closes
the old key's version and opens the new key's), a snapshot row restating a version opens nothing, an
update taken again changes nothing, and the history follows the changelog across updates; the same
through the sink's own thread with ``sink.history = true``."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtidsnap.config.loading import SinkSettings
from gtidsnap.core.records import Record
from gtidsnap.sinks.delta import DeltaSink
from gtidsnap.sinks.delta.history import history_watermark, update_history
from gtidsnap.sinks.delta.layout import changelog_path, history_path
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


# --------------------------------------------------------------------------- the rule, as a property


def random_changes(rnd: random.Random, keys: int, count: int) -> list[Record]:
    """A random stream of a table's records, as a writer and a snapshot make them: inserts, updates
    (now and then of the key itself), deletes, and snapshot rows of keys with no version (opening one)
    or restating the open one. Times follow ``_seq``, in whole seconds (several records a second); a
    snapshot row's stamp may lie after the key's next change (its stamp came from another run)."""
    live: dict[int, dict[str, Any]] = {}
    used: set[int] = set()
    records: list[Record] = []
    for seq in range(1, count + 1):
        ts = 1_700_000_000 + seq // 3
        key = rnd.randrange(keys)
        while key in used and key not in live and rnd.random() < 0.8:  # deleted keys come back rarely
            key = rnd.randrange(keys)
        name = f"v{seq}"
        roll = rnd.random()
        if key not in live:
            snapshot = roll < 0.35
            live[key], op = row(key, name), "r" if snapshot else "c"
            stamp = ts + rnd.choice((0, 0, 5, 40)) if snapshot else ts
            gtid = None if snapshot else f"0-1-{seq}"
            records.append(Record(op, ORDERS, (key,), None, live[key], gtid, seq, snapshot, stamp))
        elif roll < 0.25:
            stamp = ts + rnd.choice((0, 40))
            records.append(Record("r", ORDERS, (key,), None, live[key], None, seq, True, stamp))
        elif roll < 0.4:
            before = live.pop(key)
            records.append(Record("d", ORDERS, (key,), before, None, f"0-1-{seq}", seq, False, ts))
        elif roll < 0.47 and len(used) < keys * 2:
            moved = max([keys, *used]) + 1  # a key never used: the sink logs d of the old, c of the new
            before, live[moved] = live.pop(key), row(moved, name)
            records.append(Record("u", ORDERS, (moved,), before, live[moved], f"0-1-{seq}", seq, False, ts))
            used.add(moved)
        else:
            before, live[key] = live[key], row(key, name)
            records.append(Record("u", ORDERS, (key,), before, live[key], f"0-1-{seq}", seq, False, ts))
        used.add(key)
    return records


def reference_history(changelog: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """SCD type 2 built from the changelog's rows one by one (the module docstring of
    :mod:`gtidsnap.sinks.delta.history`): (id, name, _op, valid_from, valid_to, valid_from_seq,
    valid_to_seq, is_current, ended_by) of every version."""
    open_: dict[int, dict[str, Any]] = {}
    versions: list[dict[str, Any]] = []
    for rec in sorted(changelog, key=lambda r: (r["_seq"], r["_op"] != "d")):
        key, current = rec["id"], open_.get(rec["id"])
        if rec["_op"] == "r" and current is not None:
            continue  # restates the open version
        if current is not None:
            current.update(valid_to=rec["_source_ts"], valid_to_seq=rec["_seq"], is_current=False)
            current["ended_by"] = rec["_op"]
            if current["_op"] == "r":
                current["valid_from"] = min(current["valid_from"], rec["_source_ts"])
            del open_[key]
        if rec["_op"] != "d":
            open_[key] = {
                "id": key,
                "name": rec["name"],
                "_op": rec["_op"],
                "valid_from": rec["_source_ts"],
                "valid_to": None,
                "valid_from_seq": rec["_seq"],
                "valid_to_seq": None,
                "is_current": True,
                "ended_by": None,
            }
            versions.append(open_[key])
    return sorted((tuple(v[c] for c in HISTORY_COLUMNS) for v in versions), key=by_version)


HISTORY_COLUMNS = ("id", "name", "_op", "valid_from", "valid_to", "valid_from_seq", "valid_to_seq")
HISTORY_COLUMNS += ("is_current", "ended_by")


def by_version(version: tuple[Any, ...]) -> tuple[Any, ...]:
    return version[0], version[5]  # id, valid_from_seq


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_the_history_is_the_changelog_taken_row_by_row(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    """Random change streams with snapshot rows interleaved, written in several batches; the history
    updated after some of them, some updates taking records again (from an older ``_seq``), some
    taking several batches at once: it equals the SCD type 2 built row by row from the changelog, its
    versions never overlap a key's and never end before they start."""
    rnd = random.Random(seed)
    sink = opened(spark, tmp_path_factory.mktemp("history"), changelog_snapshot_rows=True)
    root = sink.root
    records = random_changes(rnd, keys=40, count=rnd.randint(150, 300))
    cuts = sorted(rnd.sample(range(1, len(records)), 3))
    for start, end in itertools.pairwise([0, *cuts, len(records)]):
        batch(sink, *records[start:end])
        roll = rnd.random()
        if roll < 0.6:
            update_history(spark, root, ORDERS)
        if roll < 0.3:  # the same records again, from an older _seq: nothing changes
            update_history(spark, root, ORDERS, since=rnd.randrange(0, records[end - 1].seq))
    update_history(spark, root, ORDERS)
    sink.close()
    logged = spark.read.format("delta").load(changelog_path(root, ORDERS))
    changelog = [r.asDict() for r in logged.select("id", "name", "_op", "_seq", "_source_ts").collect()]
    history = spark.read.format("delta").load(history_path(root, ORDERS))
    got = sorted((tuple(r) for r in history.select(*HISTORY_COLUMNS).collect()), key=by_version)
    assert got == reference_history(changelog)
    for version in got:
        assert version[4] is None or version[4] >= version[3], f"a version ends before it starts: {version}"
