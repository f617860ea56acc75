"""Wiring: from a :class:`Config` to a ready :class:`Engine` with the real adapters (the sink, the chunk
readers, the binlog stream, the checkpoint store, the signal hook and the notifications producer).

Kept apart from the CLI so that tests, benchmarks and other front ends build the same thing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gtidsnap.config.cpus import usable_cpus
from gtidsnap.config.loading import Config, SignalSettings, notifications_problem
from gtidsnap.core.errors import ConfigError
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
from gtidsnap.run.reused_sink import ReusedSink
from gtidsnap.signals.consumer import SignalConsumer
from gtidsnap.signals.notifier import Notifier, NotifyingStore
from gtidsnap.sinks import Sink
from gtidsnap.sinks.jsonl import JsonlSink
from gtidsnap.snapshot.readers import ProcessChunkReaders
from gtidsnap.source.binlog.stream import BinlogStream
from gtidsnap.source.replica import Replica

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
            decoder_hung_after_s=config.decoder_hung_after_s,
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
            compiled_reads=config.snapshot.compiled_reads,
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


def notifier_of(signals: SignalSettings) -> Notifier | None:
    """The notifications topic's producer, started (its topic made and read back), or None."""
    if not signals.notifications_topic:
        return None
    problem = notifications_problem(signals)  # a Config built in code (load_config refuses it already)
    if problem is not None:
        raise ConfigError(problem)
    return Notifier(signals).start()
