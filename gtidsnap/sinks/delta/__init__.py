"""Delta Lake sink: per source table a mirror (current state, merged by key) and a changelog.

Layout under ``sink.path`` (names encoded by :func:`encode_name`: letters, digits, ``_ $ -`` stay,
any other byte becomes ``~hh``, so ``shop.order-items`` stays readable and no name needs quoting)::

    <path>/<db>/<table>             mirror: the source table's rows + _op, _seq, _gtid, _source_ts;
                                    Change Data Feed on (delta.enableChangeDataFeed)
    <path>/<db>/<table>.changelog   changelog (sink.changelog): every record appended, its row
                                    (the before image for deletes) + _op, _seq, _gtid, _source_ts,
                                    _snapshot
    <path>/<db>/<table>.history     history (sink.history): SCD type 2, kept from the changelog
    <path>/_gtidsnap_points         the point each checkpoint stands for (consistent_points)

A captured table's tables are created, empty, as soon as the run has its shape (before its first
record), so consumers can start reading with the capture.

Mirror rules. Streamed changes wait for the mirror's MERGE (every ``sink.merge_interval_s``, the
changelog holding them meanwhile), reduced to the last change per key; snapshot rows are staged as
Parquet and APPENDed in bulk where the mirror cannot hold their key (see
:mod:`gtidsnap.sinks.delta.mirror.rule` for the rule, and docs/design.md for what it costs). A change
applies only when its ``_seq`` is greater than the row's, so nothing replayed or stale rewinds a row. A
delete removes the row. An update that changes the primary key deletes the old key and writes the new
one (in the changelog it is a ``d`` row with the before image and a ``c`` row with the after image,
both with the record's ``_seq``, as Debezium does).

Schema changes. New columns are added by the MERGE (``withSchemaEvolution``) and the append
(``mergeSchema``). A dropped column stays in the Delta tables; rows written after the drop have NULL in
it. A type change keeps the Delta type when it still holds every value, widens the column (Delta
type widening, enabled on the table when first needed) when Delta supports it, and otherwise stops
with a :class:`SinkError` naming the table and the column (see :mod:`gtidsnap.sinks.delta.widening`).

Exactly once across crashes (batch numbers in the commits' metadata, changelogs only appended once
their checkpoint is saved, mirrors updated from checkpointed data, the undo of uncheckpointed batches
when the sink opens, and the caveats): docs/design.md, "Exactly once into Delta", is the one account;
:mod:`gtidsnap.sinks.delta.changelog_appends` and :mod:`gtidsnap.sinks.delta.recovery` are the code.

The package, one concern per module: ``layout`` (names, paths, the tables under a path),
``spark_session`` (Spark start-up, for the sink and the Spark jobs), ``columns`` (the column plan of a
write), ``change_rows`` (a batch's rows as Arrow), ``staging`` (snapshot rows staged until appended),
``mirror`` (a table's mirror: when it is updated, the rule, and how, in Spark or by files), ``batch_writes``
(a table's part of a batch), ``changelog_appends`` (the changelog committed after its checkpoint),
``position`` (the sink's position in a checkpoint), ``recovery`` (the undo when the sink opens, and the
greatest ``_seq`` then held), ``catch_up`` (watermarks, the changelog's records a mirror lacks,
``current_state``), ``sink`` (:class:`DeltaSink`), ``tables`` and ``writes`` (its Delta writes),
``history`` and ``history_keeper`` (the SCD type 2 tables), ``consistent_points`` (every table read at
one recorded point), ``file_commits`` (data files written by pyarrow, committed as they are),
``jvm_delta`` (Delta's internal JVM API, the one module that calls it, and the version gate that turns
the fast paths off on an untested Delta), ``util`` (what several of them share).
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
    from gtidsnap.sinks.delta.sink import DeltaSink
    from gtidsnap.sinks.delta.spark_session import job_spark_session

# The names that need pyspark, imported on first use: a chunk reader process imports this package's
# staging module and must not pay for Spark (~40 MB of RSS and a second of start-up).
_HOMES = {
    "current_state": "gtidsnap.sinks.delta.catch_up",
    "current_state_of": "gtidsnap.sinks.delta.catch_up",
    "ColumnPlan": "gtidsnap.sinks.delta.columns",
    "PlannedColumn": "gtidsnap.sinks.delta.columns",
    "plan_columns": "gtidsnap.sinks.delta.columns",
    "job_spark_session": "gtidsnap.sinks.delta.spark_session",
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
