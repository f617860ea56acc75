"""Wiring: from a :class:`Config` to a ready :class:`Engine` with the real adapters.

Kept apart from the CLI so that tests, benchmarks and other front ends build the same thing.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gtidsnap.config.loading import Config, SignalSettings
from gtidsnap.config.settings import usable_cpus
from gtidsnap.core.checkpoint import Checkpoint, ReplicaInUse
from gtidsnap.core.errors import CheckpointError, ConfigError, FatalSourceError, QueryError, SourceError
from gtidsnap.core.gtid import GtidSet
from gtidsnap.core.model import TableId
from gtidsnap.core.plan import SnapshotContext
from gtidsnap.core.ports import CheckpointPort, ChunkReaderPool
from gtidsnap.core.run_stats import RunStats
from gtidsnap.core.schema import TableSchema
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.engine.checkpoint_store import CheckpointStore, InUse, StampingStore
from gtidsnap.engine.loop import Engine
from gtidsnap.engine.loop_step import EngineSettings
from gtidsnap.engine.output_lease import output_lease
from gtidsnap.engine.reused_sink import ReusedSink
from gtidsnap.engine.run_lock import RunLock
from gtidsnap.observe.retention_watch import RetentionWatch
from gtidsnap.signals.consumer import SignalConsumer
from gtidsnap.signals.notifier import Notifier, NotifyingStore
from gtidsnap.sinks import Sink
from gtidsnap.sinks.jsonl import JsonlSink
from gtidsnap.snapshot.readers import ProcessChunkReaders
from gtidsnap.source.binlog.stream import BinlogStream
from gtidsnap.source.connection import ConnectionSettings
from gtidsnap.source.replica import Replica
from gtidsnap.source.replica_set import ReplicaSet

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
READERS_PER_CPU = 2  # more reader processes than this a CPU are warned about: each is memory and a connection


def make_sink(
    config: Config,
    schema_of: Callable[[TableId], TableSchema] | None = None,
    spark_factory: Callable[[], SparkSession] | None = None,
) -> Sink:
    """The configured sink. The Delta sink needs ``schema_of`` (the captured tables' current shapes) and
    starts Spark through ``spark_factory`` when it opens (default: ``sink.spark_master``)."""
    if config.sink.type == "jsonl":
        return JsonlSink(Path(config.sink.path))
    if config.sink.type == "delta":
        from gtidsnap.sinks.delta import DeltaSink  # imported late: pyspark is only needed for Delta

        return DeltaSink(config.sink, spark_factory, schema_of)
    raise ConfigError(f"sink type {config.sink.type!r} is not available; use jsonl or delta")


def build_engine(
    config: Config,
    replica: Replica,
    on_progress: Callable[[SnapshotContext, RunStats], None] | None = None,
    on_started: Callable[[Engine], None] | None = None,
    spark_factory: Callable[[], SparkSession] | None = None,
    notifier: Notifier | None = None,
    in_use: InUse | None = None,
    opened: list[BinlogStream] | None = None,
    reuse: list[ReusedSink] | None = None,
) -> Engine:
    """An engine reading ``replica`` and its binlog, writing ``config.sink``, checkpointing to disk.
    ``on_started`` is e.g. a :class:`SignalHook` (:func:`run_engine` adds one when signals are set);
    ``spark_factory`` replaces the Delta sink's own SparkSession (tests pass theirs); ``notifier``
    sends the outbox of each checkpoint saved to the notifications topic; ``in_use`` is written into
    each checkpoint (which replica, since when, why), for ``status``; ``opened`` gets each binlog
    stream the engine opens; ``reuse`` holds the run's sink across engines (made by the first)."""

    def open_stream(start: GtidSet, schema_of: Callable[[TableId], TableSchema | None]) -> BinlogStream:
        stream = BinlogStream(
            config.source,
            replica.flavor,
            start,
            schema_of,
            heartbeat_s=config.heartbeat_s,
            server_id=config.server_id or None,
            retry_for_s=config.retry_for_s,
            decoders=config.decoders,
            decoder_json=config.sink.type == "jsonl",
        )
        if opened is not None:
            opened.append(stream)
        return stream

    surrogate_keys = dict(config.surrogate_keys)
    store: CheckpointPort = CheckpointStore(config.checkpoint_path)
    if in_use is not None:
        store = StampingStore(store, in_use)
    schemas = SchemaCache(lambda table: replica.schema(table, surrogate_keys.get(table)))
    interval = config.checkpoint_interval_s
    snapshot_interval = None
    if config.sink.type == "delta":  # a Delta commit is a Spark job per table: batch at least batch_ms
        interval = max(interval, config.sink.batch_ms / 1000)
        snapshot_interval = max(interval, config.sink.snapshot_batch_ms / 1000)
    if reuse is None:
        sink: Sink = make_sink(config, schemas.current_or_last, spark_factory)
    else:
        if not reuse:
            reuse.append(ReusedSink(make_sink(config, schemas.current_or_last, spark_factory)))
        elif hasattr(reuse[0].sink, "schema_of"):  # the shapes of this engine's replica from now on
            reuse[0].sink.schema_of = schemas.current_or_last
        sink = reuse[0]
    engine = Engine(
        replica,
        open_stream,
        sink,
        NotifyingStore(store, notifier) if notifier is not None else store,
        EngineSettings(
            chunk_size=config.snapshot.chunk_size,
            chunk_delay_s=config.snapshot.chunk_delay_s,
            checkpoint_interval_s=interval,
            batch_rows=config.sink.batch_rows,
            snapshot_interval_s=snapshot_interval,
            snapshot_batch_rows=config.sink.snapshot_batch_rows if config.sink.type == "delta" else None,
        ),
        captured=config.tables,
        surrogate_keys=surrogate_keys,
        on_progress=on_progress,
        on_started=on_started,
        schemas=schemas,
        readers=chunk_readers(config, spark_factory),
    )
    if notifier is not None:
        engine.delivered = lambda: notifier.delivered
    return engine


def chunk_readers(
    config: Config, spark_factory: Callable[[], SparkSession] | None = None
) -> ChunkReaderPool | None:
    """The configured chunk readers: None (on the engine's thread), reader processes, or Spark's
    executors (:mod:`gtidsnap.snapshot.spark_readers`, in the session ``spark_factory`` gives, default
    ``sink.spark_master``'s; a Delta sink shares it)."""
    snapshot = config.snapshot
    if not snapshot.readers:
        return None
    if snapshot.reader_pool == "spark":
        from gtidsnap.snapshot.spark_readers import SparkChunkReaders  # pyspark only when asked for

        return SparkChunkReaders(config.source, snapshot.readers, spark_factory or _spark_of(config))
    cpus = usable_cpus()
    if snapshot.readers > READERS_PER_CPU * cpus:
        log.warning(
            "snapshot.readers = %d on %d CPU(s): each reader is a process (45-80 MB) and a connection to "
            "the replica, and more than %d a CPU only add those",
            snapshot.readers,
            cpus,
            READERS_PER_CPU,
        )
    return ProcessChunkReaders(config.source, snapshot.readers, hung_after_s=snapshot.hung_after_s)


def _spark_of(config: Config) -> Callable[[], SparkSession]:
    def spark() -> SparkSession:
        from gtidsnap.sinks.delta.catalog_names import sink_spark_session
        from gtidsnap.sinks.delta.layout import absolute_root

        return sink_spark_session(config.sink, absolute_root(config.sink.path))

    return spark


class SignalHook:
    """The engine's ``on_started`` hook: starts the signal consumer once the checkpoint is loaded, so it
    reads the topic from the offsets recorded there; :meth:`stop` ends it when the run ends."""

    def __init__(self, settings: SignalSettings) -> None:
        self.settings = settings
        self.consumer: SignalConsumer | None = None

    def __call__(self, engine: Engine) -> None:
        self.stop()  # a second run of the same engine gets a consumer at its own offsets
        self.consumer = SignalConsumer(self.settings, engine.commands, dict(engine.signals.offsets)).start()

    def stop(self) -> None:
        if self.consumer is not None:
            self.consumer.stop()
            self.consumer = None


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
                        reuse[0].preopen(checkpoint.sink_position)  # while the next replica is sought
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
    current = _serving(replicas, store, lost=lost.settings, retry_lost=retry, retried_s=exc.retried_s)
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
) -> Replica:
    checkpoint = store.load()
    try:
        return replicas.serving(
            checkpoint, first=first, lost=lost, retry_lost=retry_lost, retried_s=retried_s
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
    notifier = _notifier(config.signals)
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


def _notifier(signals: SignalSettings) -> Notifier | None:
    """The notifications topic's producer, started (its topic made and read back), or None."""
    if not signals.notifications_topic:
        return None
    if not signals.bootstrap:
        raise ConfigError(
            f"signals.notifications_topic = {signals.notifications_topic!r} needs signals.bootstrap (the "
            "Kafka brokers it is on)"
        )
    return Notifier(signals).start()


class Monitoring:
    """``[metrics] listen``: the replica probe and the HTTP endpoint of one run."""

    def __init__(
        self, config: Config, replica: Replica, engine: Engine, watch: RetentionWatch | None = None
    ) -> None:
        from gtidsnap.observe.metrics import RunView  # prometheus_client only when asked for
        from gtidsnap.observe.probe import ReplicaProbe
        from gtidsnap.observe.server import MonitoringServer

        def tables() -> list[TableId]:
            context = getattr(engine, "context", None)
            return [t.table for t in context.pending()] if context is not None else []

        settings = config.metrics
        stats = engine.stats
        self.probe = ReplicaProbe(
            config.source,
            settings.probe_interval_s,
            lambda: stats.committed_processed,
            tables,
            lambda: stats.events,
        )
        where = f"{config.source.host}:{config.source.port}"
        view = RunView(
            engine,
            self.probe,
            where,
            str(replica.flavor),
            settings.stall_after_s,
            config.heartbeat_s,
            settings.probe_interval_s,
            lambda: watch.latest if watch is not None else None,
        )
        self.server = MonitoringServer(settings.listen, view)
        self.probe.start()
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        self.probe.stop()


def read_checkpoint(config: Config) -> Checkpoint | None:
    """The last checkpoint, for ``gtidsnap status`` (no connection needed)."""
    return CheckpointStore(config.checkpoint_path).load()
