"""Delta's internal JVM API, reached over Py4J: the one module that calls it, and the gate that says
whether this JVM's Delta is the one gtidsnap was tested with.

What goes through it: the commits of data files written by pyarrow (:mod:`.file_commits`: a fresh
mirror's staged rows, a changelog's batch, the points table), the commit of a mirror's MERGE done by
rewriting files (:mod:`.mirror.file_rewrite`), and the file statistics recovery reads
(:func:`newest_files`). It is shaped like delta-rs's transaction API: actions (:class:`AddAction`,
:class:`RemoveAction`, :class:`CdcAction`), a transaction on a table (:class:`DeltaTransaction`: its
version, the app transaction versions it holds) committed with custom metadata and an app
transaction (:class:`Transaction`, Spark's ``txnAppId``/``txnVersion``). Delta's positional Scala
constructors are built here once, from named parameters.

None of this is Delta's public API (``DeltaLog``, ``OptimisticTransaction``, ``DeltaOperations``,
``Action.fromJson``): another Delta release may change it without a word. So the Delta version the JVM
loaded (``io.delta.VERSION``, from the delta-spark jar) is read once per JVM and compared with
:data:`TESTED_DELTA_VERSION`; on any other version (or none readable) the sink's fast paths step aside
for Spark's own APPEND and MERGE, and one WARNING names both versions (:func:`delta_gate`). Hadoop's
FileSystem (:mod:`.layout`) and the class loader of a spark-submit job (:mod:`.spark_session`) are
reached over Py4J elsewhere: they are Hadoop's and the JVM's public API, not Delta's, and do not change
with it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gtidsnap.sinks.delta.util import USER_METADATA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

# The delta-spark jars scripts/spark-deps.sh resolves (spark/pom.xml), which the suite runs on; the
# Python package (delta-spark on PyPI) only wraps Delta's public API and is not compared.
TESTED_DELTA_VERSION = "4.4.0"

# A table property under which Delta drops old app transactions from a table's state
_TXN_RETENTION = "delta.setTransactionRetentionDuration"

Operation = Literal["WRITE", "MERGE"]  # the commit's operation in the table's history

MERGE_METRICS = (  # the metrics of a MERGE in the table's history, reported 0 unless counted
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetRowsCopied",
    "numTargetRowsNotMatchedBySourceUpdated",
    "numTargetRowsNotMatchedBySourceDeleted",
    "numTargetDeletionVectorsAdded",
    "numTargetDeletionVectorsRemoved",
    "numTargetDeletionVectorsUpdated",
    "scanTimeMs",
    "materializeSourceTimeMs",
)


# ----------------------------------------------------------------------------- the version gate


@dataclass(frozen=True)
class DeltaGate:
    """The Delta version this JVM loaded (None: not readable) against the tested one: the fast paths
    through Delta's internal API are taken on the tested version only."""

    found: str | None
    tested: str

    @property
    def fast_paths(self) -> bool:
        return self.found == self.tested

    def warning(self) -> str:
        found = f"Delta Lake {self.found}" if self.found else "a Delta Lake whose version is not readable"
        return (
            f"{found} is loaded in this JVM, but gtidsnap is tested with Delta Lake {self.tested}: the "
            "fast paths through Delta's internal API (data files written by pyarrow and committed by "
            "Delta's transaction API, a mirror's MERGE by rewriting its files) are off, and Spark's own "
            "APPEND and MERGE write instead (slower; the same output and guarantees). Use the jars of "
            "scripts/spark-deps.sh to have them back"
        )


_LOCK = threading.Lock()
_VERSIONS: dict[str, str | None] = {}  # a Spark application (one a JVM) -> the Delta version it loaded
_WARNED: set[tuple[str, str | None, str]] = set()  # (application, found, tested) already logged


def delta_gate(spark: SparkSession) -> DeltaGate:
    """This JVM's Delta version against :data:`TESTED_DELTA_VERSION`; a WARNING, once, when they
    differ. Called when a session starts and when a sink opens."""
    return checked(delta_version(spark), TESTED_DELTA_VERSION, str(spark.sparkContext.applicationId))


def delta_version(spark: SparkSession) -> str | None:
    """The Delta version this JVM loaded, read once per JVM (None: not readable)."""
    application = str(spark.sparkContext.applicationId)
    with _LOCK:
        if application not in _VERSIONS:
            _VERSIONS[application] = _read_version(spark)
        return _VERSIONS[application]


def checked(found: str | None, tested: str, where: str) -> DeltaGate:
    """The gate of ``found`` against ``tested``; its WARNING logged once per ``where`` (a JVM) and pair."""
    gate = DeltaGate(found, tested)
    if not gate.fast_paths:
        with _LOCK:
            first = (where, found, tested) not in _WARNED
            _WARNED.add((where, found, tested))
        if first:
            log.warning("%s", gate.warning())
    return gate


def _read_version(spark: SparkSession) -> str | None:
    """``io.delta.VERSION`` (Delta's own constant), else the delta-spark jar's manifest; None: neither."""
    jvm: Any = spark._jvm
    try:
        return str(jvm.io.delta.package.VERSION())
    except Exception:  # not there in this release: the manifest says it
        pass
    try:
        jar = jvm.org.apache.spark.sql.delta.DeltaLog._java_lang_class.getPackage()
        version = jar.getImplementationVersion()
    except Exception:
        return None
    return str(version) if version is not None else None


# ----------------------------------------------------------------------------- actions


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class AddAction:
    """A data file the commit adds (Delta's ``add`` action): its path relative to the table, its size,
    time, and statistics (Delta's ``stats`` JSON; None: none)."""

    path: str
    size: int
    modification_time: int
    stats: str | None = None
    data_change: bool = True

    def to_log(self) -> dict[str, Any]:
        add: dict[str, Any] = {
            "path": self.path,
            "partitionValues": {},
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
        }
        if self.stats is not None:
            add["stats"] = self.stats
        return {"add": add}


@dataclass(frozen=True)
class RemoveAction:
    """A data file the commit removes (Delta's ``remove`` action), with what its ``add`` said of it."""

    path: str
    size: int
    deletion_timestamp: int
    stats: str | None = None
    tags: Mapping[str, str] | None = None
    data_change: bool = True

    @classmethod
    def of(cls, add: Mapping[str, Any], deletion_timestamp: int) -> RemoveAction:
        """The removal of the file an ``add`` action of the table (as :meth:`DeltaTransaction.files`
        gives it) names."""
        return cls(str(add["path"]), int(add["size"]), deletion_timestamp, add.get("stats"), add.get("tags"))

    def to_log(self) -> dict[str, Any]:
        remove: dict[str, Any] = {
            "path": self.path,
            "deletionTimestamp": self.deletion_timestamp,
            "dataChange": self.data_change,
            "extendedFileMetadata": True,
            "partitionValues": {},
            "size": self.size,
        }
        if self.stats is not None:
            remove["stats"] = self.stats
        if self.tags is not None:
            remove["tags"] = dict(self.tags)
        return {"remove": remove}


@dataclass(frozen=True)
class CdcAction:
    """A Change Data Feed file the commit adds (Delta's ``cdc`` action), under ``_change_data``."""

    path: str
    size: int

    def to_log(self) -> dict[str, Any]:
        return {"cdc": {"path": self.path, "partitionValues": {}, "size": self.size, "dataChange": False}}


Action = AddAction | RemoveAction | CdcAction


@dataclass(frozen=True)
class Transaction:
    """An app transaction (Delta's ``txn`` action, Spark's ``txnAppId``/``txnVersion``): a table
    takes one commit of ``version`` or below per ``app_id``."""

    app_id: str
    version: int
    last_updated: int = field(default_factory=now_ms)

    def to_log(self) -> dict[str, Any]:
        return {"txn": {"appId": self.app_id, "version": self.version, "lastUpdated": self.last_updated}}


@dataclass(frozen=True)
class TableMetadata:
    """What a table's ``metaData`` action says: its schema (Spark's JSON), partition columns, and
    configuration (its table properties)."""

    schema_json: str
    partition_columns: tuple[str, ...]
    configuration: dict[str, str]


# ----------------------------------------------------------------------------- a transaction


class DeltaTransaction:
    """One optimistic transaction on the Delta table at ``path``, as of its newest version (Delta's
    ``OptimisticTransaction``): its commit is checked against the commits made since, as Delta checks
    its own (a conflict raises, and the caller tries again)."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self._spark = spark
        jvm: Any = spark._jvm
        self._jvm = jvm
        self._txn = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
            spark._jsparkSession, path
        ).startTransaction()

    def version(self) -> int:
        """The table's version the transaction reads."""
        return int(self._txn.snapshot().version())

    def transaction_version(self, app_id: str) -> int:
        """The greatest app transaction version of ``app_id`` the table holds (-1: none).

        Read from the version's checksum (its ``.crc``: Delta writes the app transactions there with
        each commit), else from the table's state. Delta's own answer (``txnVersion``) reconstructs
        the state: three Spark jobs, ~0.8 s and ~1.2 s of JVM CPU a commit on a fresh snapshot, 3-7 s
        cold (measured 2026-12-08), and every idempotent commit asks, once a batch and table; the
        checksum answers in ~0.01 s. Unlike ``txnVersion``, it does not add the app to what the
        commit is checked against: a commit of the same app by another process in between would not
        conflict. One writer per output is what the run's lock and lease guarantee (:mod:`gtidsnap.run`)."""
        from_crc = self._crc_app_version(app_id)
        return from_crc if from_crc is not None else int(self._txn.txnVersion(app_id))

    def _crc_app_version(self, app_id: str) -> int | None:
        """The app's version in the snapshot's checksum; None where it has none to say (no ``.crc``,
        too many apps in it, or expiring app transactions: the state then drops old ones)."""
        if self._txn.metadata().configuration().contains(_TXN_RETENTION):
            return None
        checksum = self._txn.snapshot().checksumOpt()
        if not checksum.isDefined():
            return None
        apps = checksum.get().setTransactions()
        if not apps.isDefined():
            return None
        found = -1
        it = apps.get().iterator()
        while it.hasNext():
            app = it.next()
            if app.appId() == app_id:
                found = max(found, int(app.version()))
        return found

    def metadata(self) -> TableMetadata:
        meta = json.loads(self._txn.metadata().json())["metaData"]
        configuration = {str(k): str(v) for k, v in (meta.get("configuration") or {}).items()}
        return TableMetadata(
            str(meta["schemaString"]), tuple(meta.get("partitionColumns") or ()), configuration
        )

    def protocol(self) -> dict[str, Any]:
        """The table's ``protocol`` action (reader and writer versions, table features)."""
        return dict(json.loads(self._txn.protocol().json())["protocol"])

    def read_whole_table(self) -> None:
        """The commit then conflicts with any commit made since that changed the table's files."""
        self._txn.readWholeTable()

    def file_count(self) -> int:
        return int(self._txn.snapshot().numOfFiles())

    def files(self) -> list[dict[str, Any]]:
        """The table's data files as of the transaction (their ``add`` actions), by a Spark job."""
        return [json.loads(j) for j in self._txn.snapshot().allFiles().toJSON().collectAsList()]

    def commit(
        self,
        actions: Sequence[Action],
        operation: Operation,
        custom_metadata: Mapping[str, Any],
        app_transaction: Transaction | None = None,
        metrics: Mapping[str, int] | None = None,
    ) -> int:
        """Commit ``actions`` as ``operation`` with the user metadata ``custom_metadata`` (and the app
        transaction, and the operation's ``metrics`` in the table's history); the version committed.
        A ``WRITE`` is an append. A ``MERGE`` reports :data:`MERGE_METRICS` (0 unless counted)."""
        logged = ([app_transaction.to_log()] if app_transaction is not None else []) + [
            a.to_log() for a in actions
        ]
        jvm = self._jvm
        scala_actions = _seq(
            jvm, [jvm.org.apache.spark.sql.delta.actions.Action.fromJson(json.dumps(a)) for a in logged]
        )
        if operation == "MERGE":
            self._register_metrics({**dict.fromkeys(MERGE_METRICS, 0), **(metrics or {})})
            with _user_metadata_of_merge(self._spark, custom_metadata):
                return int(self._txn.commit(scala_actions, _merge_operation(jvm)))
        if metrics:
            self._register_metrics(metrics)
        user_metadata = json.dumps(dict(custom_metadata))
        write = _write_operation(
            jvm, mode=jvm.org.apache.spark.sql.SaveMode.Append, user_metadata=user_metadata
        )
        return int(self._txn.commit(scala_actions, write))

    def _register_metrics(self, values: Mapping[str, int]) -> None:
        """The commit's figures as the SQL metrics an operation reports in the table's history."""
        jvm, spark = self._jvm, self._spark
        create = jvm.org.apache.spark.sql.execution.metric.SQLMetrics.createMetric
        metrics = {}
        for name, value in values.items():
            metric = create(spark.sparkContext._jsc.sc(), name)
            metric.set(int(value))
            metrics[name] = metric
        self._txn.registerSQLMetrics(
            spark._jsparkSession, jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(metrics)
        )


@contextmanager
def _user_metadata_of_merge(spark: SparkSession, custom_metadata: Mapping[str, Any]) -> Iterator[None]:
    """A MERGE's user metadata can only come from the settings of the JVM thread's active session (the
    operation has no field for it): ``spark`` (a background thread's own session) is made active for
    the commit, and both are restored after."""
    jvm: Any = spark._jvm
    sessions = jvm.org.apache.spark.sql.SparkSession
    before = sessions.getActiveSession()
    conf = spark.conf
    held = conf.get(USER_METADATA, None)
    sessions.setActiveSession(spark._jsparkSession)
    conf.set(USER_METADATA, json.dumps(dict(custom_metadata)))
    try:
        yield
    finally:
        if held is None:
            conf.unset(USER_METADATA)
        else:
            conf.set(USER_METADATA, held)
        if before.isDefined():
            sessions.setActiveSession(before.get())
        else:
            sessions.clearActiveSession()


def newest_files(spark: SparkSession, path: str) -> DataFrame:
    """The data files of the table's newest version (their ``add`` actions: path, size, stats,
    deletionVector, ...) as a frame, read from its log: no data file is read."""
    from pyspark.sql import DataFrame

    return DataFrame(DeltaTransaction(spark, path)._txn.snapshot().allFiles().toDF(), spark)


# ----------------------------------------------------------------------------- Scala constructors


def _option(jvm: Any, value: Any) -> Any:
    return jvm.scala.Option.empty() if value is None else jvm.scala.Option.apply(value)


def _seq(jvm: Any, values: Sequence[Any]) -> Any:
    """A Scala list of ``values`` (a Python list crosses as a Java one; an empty one is made there)."""
    items = list(values) if values else jvm.java.util.ArrayList()
    return jvm.scala.jdk.javaapi.CollectionConverters.asScala(items).toList()


def _write_operation(
    jvm: Any,
    *,
    mode: Any,
    partition_by: Sequence[str] | None = None,
    predicate: str | None = None,
    user_metadata: str | None = None,
    is_dynamic_partition_overwrite: bool | None = None,
    can_overwrite_schema: bool | None = None,
    can_merge_schema: bool | None = None,
    replace_on_cond: str | None = None,
    replace_using_cols: str | None = None,
) -> Any:
    """Delta's ``DeltaOperations.Write`` (a ``WRITE`` in the table's history), its nine positional
    Scala parameters named."""
    return jvm.org.apache.spark.sql.delta.DeltaOperations.Write(
        mode,
        _option(jvm, None if partition_by is None else _seq(jvm, partition_by)),
        _option(jvm, predicate),
        _option(jvm, user_metadata),
        _option(jvm, is_dynamic_partition_overwrite),
        _option(jvm, can_overwrite_schema),
        _option(jvm, can_merge_schema),
        _option(jvm, replace_on_cond),
        _option(jvm, replace_using_cols),
    )


def _merge_operation(
    jvm: Any,
    *,
    predicate: Any = None,
    update_predicate: str | None = None,
    delete_predicate: str | None = None,
    insert_predicate: str | None = None,
    matched_predicates: Sequence[Any] = (),
    not_matched_predicates: Sequence[Any] = (),
    not_matched_by_source_predicates: Sequence[Any] = (),
) -> Any:
    """Delta's ``DeltaOperations.Merge`` (a ``MERGE`` in the table's history, as the Spark MERGE it
    replaces, its predicates unnamed by default), its seven positional Scala parameters named."""
    return jvm.org.apache.spark.sql.delta.DeltaOperations.Merge(
        _option(jvm, predicate),
        _option(jvm, update_predicate),
        _option(jvm, delete_predicate),
        _option(jvm, insert_predicate),
        _seq(jvm, matched_predicates),
        _seq(jvm, not_matched_predicates),
        _seq(jvm, not_matched_by_source_predicates),
    )
