"""Wiring: from a :class:`Config` to a ready :class:`Engine` with the real adapters.

Kept apart from the CLI so that tests, benchmarks and other front ends build the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gtidsnap.binlog import BinlogStream
from gtidsnap.checkpoint import Checkpoint, CheckpointStore
from gtidsnap.config import Config
from gtidsnap.engine import Engine, EngineSettings, RunStats
from gtidsnap.errors import ConfigError
from gtidsnap.gtid import GtidSet
from gtidsnap.model import TableId
from gtidsnap.plan import SnapshotContext
from gtidsnap.replica import Replica
from gtidsnap.schema import TableSchema
from gtidsnap.sinks import Sink
from gtidsnap.sinks.jsonl import JsonlSink


def make_sink(config: Config) -> Sink:
    if config.sink.type == "jsonl":
        return JsonlSink(Path(config.sink.path))
    raise ConfigError(f"sink type {config.sink.type!r} is not available in this version; use jsonl")


def build_engine(
    config: Config,
    replica: Replica,
    on_progress: Callable[[SnapshotContext, RunStats], None] | None = None,
) -> Engine:
    """An engine reading ``replica`` and its binlog, writing ``config.sink``, checkpointing to disk."""

    def open_stream(start: GtidSet, schema_of: Callable[[TableId], TableSchema | None]) -> BinlogStream:
        return BinlogStream(
            config.source,
            replica.flavor,
            start,
            schema_of,
            heartbeat_s=config.heartbeat_s,
            server_id=config.server_id or None,
        )

    return Engine(
        replica,
        open_stream,
        make_sink(config),
        CheckpointStore(config.checkpoint_path),
        EngineSettings(
            chunk_size=config.snapshot.chunk_size,
            chunk_delay_s=config.snapshot.chunk_delay_s,
            checkpoint_interval_s=config.checkpoint_interval_s,
            commit_rows=config.sink.batch_rows,
        ),
        captured=config.tables,
        surrogate_keys=dict(config.surrogate_keys),
        on_progress=on_progress,
    )


def read_checkpoint(config: Config) -> Checkpoint | None:
    """The last checkpoint, for ``gtidsnap status`` (no connection needed)."""
    return CheckpointStore(config.checkpoint_path).load()
