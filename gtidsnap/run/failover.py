"""A run: the engines of one ``gtidsnap run``, one after another on the replicas that can serve its
checkpoint (failover), holding its checkpoint and output throughout (:mod:`.run_lock`,
:mod:`.output_lease`), with what runs beside an engine (the signal consumer, monitoring, the retention
watch) started and stopped with it.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gtidsnap.config.loading import Config
from gtidsnap.core.checkpoint import Checkpoint, ReplicaInUse
from gtidsnap.core.errors import CheckpointError, FatalSourceError, QueryError, SourceError
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.run_stats import RunStats
from gtidsnap.engine.checkpoint_store import CheckpointStore, InUse
from gtidsnap.engine.loop import Engine
from gtidsnap.observe.monitoring import Monitoring
from gtidsnap.observe.retention_watch import RetentionWatch
from gtidsnap.run.output_lease import output_lease
from gtidsnap.run.reused_sink import ReusedSink
from gtidsnap.run.run_lock import RunLock
from gtidsnap.source.binlog.stream import BinlogStream
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.replica import Replica
from gtidsnap.source.replica_set import ReplicaSet

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from gtidsnap.run.wiring import SignalHook, build_engine, notifier_of

log = logging.getLogger(__name__)


def run_engine(
    config: Config,
    replica: Replica | None = None,
    snapshot: Sequence[TableId] = (),
    until_caught_up: bool = False,
    on_progress: Callable[[SnapshotContext, RunStats], None] | None = None,
    spark_log: Path | None = None,
) -> RunStats:
    """Build and run an engine, with the signal consumer when ``config.signals.bootstrap`` is set; the
    consumer is stopped however the run ends (a signal it read but the engine did not act on stays
    unrecorded in the checkpoint, so it is read again next time). ``replica``: one already connected
    (None: the first of ``config.replicas`` that can serve the checkpoint); it stays the caller's to
    close. ``spark_log``: where Spark's own output goes (None: the console). The run holds its checkpoint
    and output (:class:`RunLock`) throughout: a second run on either is refused, naming this one.

    A replica lost mid-run (its connection does not come back, or it refuses the stream) ends that
    engine; the next engine starts from the checkpoint on the replica :class:`ReplicaSet` finds, exactly
    as a restart after a crash would (:func:`failover_reason` says which errors move it)."""
    if config.sink.type == "delta" and config.sink.database:  # names a metastore refuses: said now
        from gtidsnap.sinks.delta.catalog_names import check_names

        check_names(config.sink, [*config.tables, *snapshot])
    with RunLock(guarded_paths(config)), output_lease(config.sink.path, config.sink.owner_lease_s):
        replicas = ReplicaSet(config.replicas, config.retry_for_s, config.catch_up_timeout_s)
        store = CheckpointStore(config.checkpoint_path)
        mine: list[Replica] = []  # connected here, closed here
        reuse: list[ReusedSink] = []  # the run's sink, kept across its engines
        try:
            current = _serving(replicas, store, first=replica)
            in_use = ReplicaInUse.now(current.settings.describe(), "the first of source.hosts that serves")
            while True:
                if current is not replica:
                    mine.append(current)
                try:
                    run_config = replace(config, source=current.settings)
                    args = (snapshot, until_caught_up, on_progress, spark_log, in_use, reuse)
                    return _run_engine(run_config, current, *args)
                except SourceError as exc:
                    why = failover_reason(exc)
                    if why is None:
                        raise
                    if reuse and (checkpoint := store.load()) is not None:
                        reuse[0].preopen(checkpoint.sink_position, checkpoint.next_seq)  # meanwhile
                    current, in_use = _failover(replicas, store, current, exc, why)
        finally:
            if reuse:
                reuse[0].discard()
            for r in mine:
                r.close()


def _failover(
    replicas: ReplicaSet, store: CheckpointStore, lost: Replica, exc: SourceError, why: str
) -> tuple[Replica, ReplicaInUse]:
    """The replica the run continues on after ``lost`` failed with ``exc``, and how ``status`` says so."""
    where = lost.settings.describe()
    lost.close()
    log.warning("lost the replica %s (%s); finding a replica that serves the checkpoint", where, why)
    retry = not isinstance(exc, FatalSourceError)  # a refusal for good: no use asking it again
    current = _serving(
        replicas, store, lost=lost.settings, retry_lost=retry, retried_s=exc.retried_s, lost_why=why
    )
    log.warning("continuing on %s", current.describe())
    return current, ReplicaInUse.now(current.settings.describe(), f"{where} was lost: {why}")


def failover_reason(exc: SourceError) -> str | None:
    """Why a failed engine's replica is given up (None: the error is not the replica's, so no other
    replica would do better: a statement the server refused fails its table's snapshot, not the run)."""
    if isinstance(exc, QueryError):
        return None
    return " ".join(str(exc).split())[:300]


def _serving(
    replicas: ReplicaSet,
    store: CheckpointStore,
    first: Replica | None = None,
    lost: ConnectionSettings | None = None,
    retry_lost: bool = True,
    retried_s: float = 0.0,
    lost_why: str = "",
) -> Replica:
    checkpoint = store.load()
    try:
        return replicas.serving(
            checkpoint, first=first, lost=lost, retry_lost=retry_lost, retried_s=retried_s, lost_why=lost_why
        )
    except CheckpointError as exc:
        raise CheckpointError(f"checkpoint {store.path} cannot be continued: {exc}") from None


def guarded_paths(config: Config) -> list[Path]:
    """What one run at a time may write: the checkpoint, and the output when it is a local path."""
    paths = [config.checkpoint_path]
    if "://" not in config.sink.path:  # s3a://, abfss://: no OS lock there
        paths.append(Path(config.sink.path))
    return list(dict.fromkeys(p.resolve() for p in paths if p.resolve().name))  # "/" has no sibling


def _run_engine(
    config: Config,
    replica: Replica,
    snapshot: Sequence[TableId],
    until_caught_up: bool,
    on_progress: Callable[[SnapshotContext, RunStats], None] | None,
    spark_log: Path | None,
    in_use: ReplicaInUse | None = None,
    reuse: list[ReusedSink] | None = None,
) -> RunStats:
    hook = SignalHook(config.signals) if config.signals.bootstrap else None
    notifier = notifier_of(config.signals)
    spark_factory = None
    if spark_log is not None and (config.sink.type == "delta" or config.snapshot.reader_pool == "spark"):
        from gtidsnap.sinks.delta.catalog_names import sink_spark_session
        from gtidsnap.sinks.delta.layout import absolute_root

        def spark_factory() -> SparkSession:
            return sink_spark_session(config.sink, absolute_root(config.sink.path), log_file=spark_log)

    def started(engine: Engine) -> None:
        # What start-up made (modules, Spark's Py4J machinery: ~hundreds of thousands of objects) is
        # left out of the collector's full passes, which walked it again and again while the stream's
        # rows came and went (measured: streaming 1M changes into Delta ~4% faster).
        gc.collect()  # what is garbage already is not frozen
        gc.freeze()
        if hook is not None:
            hook(engine)

    monitoring: Monitoring | None = None
    stamp = InUse(in_use or ReplicaInUse.now(replica.settings.describe(), "the replica configured"))
    stamp.streamed_on(read_checkpoint(config), replica.identity())
    watch = RetentionWatch(
        replica.settings,
        config.checkpoint_path,
        config.retention_warn_s,
        config.retention_check_s,
        stamp.measured,
    ).start()
    try:
        opened: list[BinlogStream] = []
        engine = build_engine(
            config, replica, on_progress, started, spark_factory, notifier, stamp, opened, reuse
        )
        monitoring = Monitoring(config, replica, engine, watch) if config.metrics.listen else None
        try:
            return engine.run(snapshot=snapshot, until_caught_up=until_caught_up)
        except SourceError as exc:  # how long the replica was failing: its stream knows best
            since = [s.failing_since for s in opened if s.failing_since is not None]
            exc.retried_s = max([exc.retried_s, *(time.monotonic() - t for t in since)])
            raise
    finally:
        gc.unfreeze()  # a process that runs engines again (tests, an embedding) frees what a run held
        watch.stop()
        if hook is not None:
            hook.stop()
        if monitoring is not None:
            monitoring.stop()
        if notifier is not None:
            notifier.stop()  # what the last checkpoint holds goes out


def read_checkpoint(config: Config) -> Checkpoint | None:
    """The last checkpoint, for ``gtidsnap status`` (no connection needed)."""
    return CheckpointStore(config.checkpoint_path).load()
