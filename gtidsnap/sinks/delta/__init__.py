"""Delta Lake sink: per source table a mirror (current state, merged by key) and a changelog.

Layout under ``sink.path`` (names encoded by :func:`encode_name`: letters, digits, ``_ $ -`` stay,
any other byte becomes ``~hh``, so ``shop.order-items`` stays readable and no name needs quoting)::

    <path>/<db>/<table>             mirror: the source table's rows + _op, _seq, _gtid, _source_ts;
                                    Change Data Feed on (delta.enableChangeDataFeed)
    <path>/<db>/<table>.changelog   changelog (sink.changelog): every record appended, its row
                                    (the before image for deletes) + _op, _seq, _gtid, _source_ts,
                                    _snapshot

Mirror rules. Streamed changes wait for the mirror's MERGE (every ``sink.merge_interval_s``, the
changelog holding them meanwhile), reduced to the last change per key; snapshot rows are staged as
Parquet and APPENDed in bulk where the mirror cannot hold their key (see
:mod:`gtidsnap.sinks.delta.mirror_update` for the rule, and docs/design.md for what it costs). A change
applies only when its ``_seq`` is greater than the row's, so nothing replayed or stale rewinds a row. A
delete removes the row. An update that changes the primary key deletes the old key and writes the new
one (in the changelog it is a ``d`` row with the before image and a ``c`` row with the after image,
both with the record's ``_seq``, as Debezium does).

Schema changes. New columns are added by the MERGE (``withSchemaEvolution``) and the append
(``mergeSchema``). A dropped column stays in the Delta tables; rows written after the drop have NULL in
it. A type change keeps the Delta type when it still holds every value, widens the column (Delta
type widening, enabled on the table when first needed) when Delta supports it, and otherwise stops
with a :class:`SinkError` naming the table and the column (see :mod:`gtidsnap.sinks.delta.widening`).

Exactly once across crashes. The engine calls :meth:`DeltaSink.commit` and then saves its checkpoint
with the returned position ``{"delta_batch": N, "staged": [...]}`` (the staged snapshot files not yet
in their mirrors); a crash can fall between the two, or in the middle of a commit that writes several
tables.

* Every commit is batch N = previous + 1. Each Delta write of it carries ``txnAppId`` = the app id
  (``sink.app_id``, default derived from the path) and ``txnVersion`` = N, so Delta skips a write it
  already has: a ``commit()`` retried after a failure never applies a table twice. Each commit also
  carries the user metadata ``{"gtidsnap_batch": N}``.
* ``open(committed)`` walks the recent history of every table under the path. Commits of batches above
  the checkpoint's come from a run whose checkpoint was never saved; that run's records are replayed
  from the checkpoint (as new records, possibly different: a chunk can be read at another point), so
  the table's rows are first put back as they were just before the first such commit, in one commit
  tagged ``{"gtidsnap_undo": {"to_version": V, ...}}``: a mirror is MERGEd with each changed key's row
  as of V, taken from its Change Data Feed (so CDF readers see exactly the rows put back); a changelog
  loses the rows appended since V (``_seq`` above its greatest at V). Should that fail, Delta's RESTORE
  does the same at the file level. A crash during recovery just repeats it on the next start.
* Delta keeps a txn version per app id across an undo (even across RESTORE), so batch numbers are never
  reused: after recovery the next batch is above every batch number found. Positions only increase.
* After recovery the sink knows the greatest ``_seq`` the tables hold, cheaply: the changelogs' file
  statistics, the mirrors' watermarks, the staged files the checkpoint names
  (:meth:`DeltaSink.greatest_seq`); the engine refuses a checkpoint whose ``next_seq`` is not above it.

Caveats: Change Data Feed readers see the undone batch's changes, then their undo, then the replay;
Delta reads no feed across a widened column type (read the versions before and after apart). A
Delta streaming reader of a changelog needs ``skipChangeCommits`` to read past an undo.
Tables are created empty, as their own first version, so a table created by an undone batch is left
empty. The mirror records its key in the table property ``gtidsnap.key``; a changed primary key at the
source is refused (move the tables away and snapshot again). VACUUM must keep files for longer than a
checkpoint interval (the default 168 hours is plenty), or the versions an undo reads may be gone.

The package, one concern per module: ``layout`` (names, paths, the tables under a path), ``session``
(Spark start-up of the Spark jobs), ``columns`` (the column plan of a write), ``change_rows`` (a
batch's rows as Arrow), ``staging`` (snapshot rows staged until appended), ``mirror_update`` (the rule
of a mirror's update) and ``mirror_writes`` (it, in Spark), ``batch_writes`` (a table's part of a
batch), ``recovery`` (the undo when the sink opens, and the greatest ``_seq`` then held), ``catch_up``
(watermarks, the changelog's records a mirror lacks, ``current_state``), ``sink`` (:class:`DeltaSink`),
``tables`` and ``writes`` (its Delta writes), ``util`` (what several of them share).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gtidsnap.sinks.delta.layout import (
    CHANGELOG_SUFFIX,
    KEY_PROPERTY,
    SOURCE_PROPERTY,
    DeltaTableRef,
    TableKind,
    absolute_root,
    changelog_path,
    clear_uncommitted_log,
    decode_name,
    default_app_id,
    encode_name,
    list_tables,
    mirror_path,
)

if TYPE_CHECKING:
    from gtidsnap.sinks.delta.catch_up import current_state
    from gtidsnap.sinks.delta.columns import ColumnPlan, PlannedColumn, plan_columns
    from gtidsnap.sinks.delta.session import job_spark_session
    from gtidsnap.sinks.delta.sink import POSITION_KEY, DeltaSink

# The names that need pyspark, imported on first use: a chunk reader process imports this package's
# staging module and must not pay for Spark (~40 MB of RSS and a second of start-up).
_HOMES = {
    "current_state": "gtidsnap.sinks.delta.catch_up",
    "ColumnPlan": "gtidsnap.sinks.delta.columns",
    "PlannedColumn": "gtidsnap.sinks.delta.columns",
    "plan_columns": "gtidsnap.sinks.delta.columns",
    "job_spark_session": "gtidsnap.sinks.delta.session",
    "POSITION_KEY": "gtidsnap.sinks.delta.sink",
    "DeltaSink": "gtidsnap.sinks.delta.sink",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gtidsnap.sinks.delta' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "CHANGELOG_SUFFIX",
    "KEY_PROPERTY",
    "POSITION_KEY",
    "SOURCE_PROPERTY",
    "ColumnPlan",
    "DeltaSink",
    "DeltaTableRef",
    "PlannedColumn",
    "TableKind",
    "absolute_root",
    "changelog_path",
    "clear_uncommitted_log",
    "current_state",
    "decode_name",
    "default_app_id",
    "encode_name",
    "job_spark_session",
    "list_tables",
    "mirror_path",
    "plan_columns",
]
