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
with the returned position ``{"delta_batch": N, "staged": [...], "changelog_appends": [...]}`` (the
staged snapshot files not yet in their mirrors, the changelog rows of batch N written as data files but
not committed); a crash can fall between the two, or in the middle of a commit that writes several
tables.

* Every commit is batch N = previous + 1 and carries the user metadata ``{"gtidsnap_batch": N}``.
* The changelogs are only ever appended to (:mod:`gtidsnap.sinks.delta.changelog_appends`): batch N's
  changelog rows are committed once the checkpoint naming them is saved (the engine reports it,
  :meth:`DeltaSink.checkpointed`), so a changelog never holds a batch above the checkpoint. A run that
  stopped before committing them finds them in its checkpoint and commits them when the sink opens,
  unless the changelog already holds batch N. A Structured Streaming reader of a changelog needs no
  ``skipChangeCommits``.
* ``open(committed)`` walks the recent history of every table under the path. Mirror commits of
  batches above the checkpoint's (made by the batch itself: no changelog, or a sink driven by your
  own code, whose changelog appends are made in the batch, with ``txnAppId`` = the app id and
  ``txnVersion`` = N, so a retried ``commit()`` never applies a table twice) come from a run whose
  checkpoint was never saved; that run's records are replayed from the checkpoint (as new records,
  possibly different: a chunk can be read at another point), so the table's rows are first put back
  as they were just before the first such commit, in one commit tagged
  ``{"gtidsnap_undo": {"to_version": V, ...}}``: a mirror is MERGEd with each changed key's row
  as of V, taken from its Change Data Feed (so CDF readers see exactly the rows put back); a changelog
  written by the batch loses the rows appended since V (``_seq`` above its greatest at V). Should that
  fail, Delta's RESTORE does the same at the file level. A crash during recovery just repeats it on
  the next start.
* Batch numbers are never reused: after recovery the next batch is above every batch number found.
  Positions only increase.
* After recovery the sink knows the greatest ``_seq`` the tables hold, cheaply: the changelogs' file
  statistics, the mirrors' watermarks, the staged files the checkpoint names
  (:meth:`DeltaSink.greatest_seq`); the engine refuses a checkpoint whose ``next_seq`` is not above it.

Caveats: Change Data Feed readers of a mirror updated by its batch (no changelog) see the undone
batch's changes, then their undo, then the replay; a background mirror update (the default) holds
checkpointed data only and is never undone. Delta reads no feed across a widened column type (read the
versions before and after apart). A changelog's data file written for a batch whose checkpoint was
never saved is in no commit: no reader sees it, VACUUM removes it.
Tables are created empty, as their own first version, so a table created by an undone batch is left
empty. The mirror records its key in the table property ``gtidsnap.key``; a changed primary key at the
source is refused (move the tables away and snapshot again). VACUUM must keep files for longer than a
checkpoint interval (the default 168 hours is plenty), or the versions an undo reads may be gone.

The package, one concern per module: ``layout`` (names, paths, the tables under a path), ``session``
(Spark start-up of the Spark jobs), ``columns`` (the column plan of a write), ``change_rows`` (a
batch's rows as Arrow), ``staging`` (snapshot rows staged until appended), ``mirror_update`` (the rule
of a mirror's update) and ``mirror_writes`` (it, in Spark), ``batch_writes`` (a table's part of a
batch), ``changelog_appends`` (the changelog committed after its checkpoint), ``position`` (the
sink's position in a checkpoint), ``recovery`` (the undo when the sink opens, and the greatest
``_seq`` then held), ``catch_up`` (watermarks, the changelog's records a mirror lacks,
``current_state``), ``sink`` (:class:`DeltaSink`), ``tables`` and ``writes`` (its Delta writes),
``util`` (what several of them share).
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
    from gtidsnap.sinks.delta.catch_up import current_state, current_state_of
    from gtidsnap.sinks.delta.columns import ColumnPlan, PlannedColumn, plan_columns
    from gtidsnap.sinks.delta.position import POSITION_KEY
    from gtidsnap.sinks.delta.session import job_spark_session
    from gtidsnap.sinks.delta.sink import DeltaSink

# The names that need pyspark, imported on first use: a chunk reader process imports this package's
# staging module and must not pay for Spark (~40 MB of RSS and a second of start-up).
_HOMES = {
    "current_state": "gtidsnap.sinks.delta.catch_up",
    "current_state_of": "gtidsnap.sinks.delta.catch_up",
    "ColumnPlan": "gtidsnap.sinks.delta.columns",
    "PlannedColumn": "gtidsnap.sinks.delta.columns",
    "plan_columns": "gtidsnap.sinks.delta.columns",
    "job_spark_session": "gtidsnap.sinks.delta.session",
    "POSITION_KEY": "gtidsnap.sinks.delta.position",
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
    "current_state_of",
    "decode_name",
    "default_app_id",
    "encode_name",
    "job_spark_session",
    "list_tables",
    "mirror_path",
    "plan_columns",
]
