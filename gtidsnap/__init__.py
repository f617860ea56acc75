"""gtidsnap: read-only, lock-free GTID watermark snapshots of MySQL/MariaDB replicas, merged with the
binlog stream into Delta Lake (or JSON lines).

The public surface, for programs that run gtidsnap rather than its command line::

    from gtidsnap import Replica, TableId, load_config, run_engine

    config = load_config(Path("gtidsnap.toml"))
    with Replica(config.source) as replica:
        run_engine(config, replica, snapshot=[TableId("shop", "orders")], until_caught_up=True)

Readers of a Delta output use :func:`current_state` and :func:`read_as_of` (imported on first use:
they need pyspark).
Everything else is internal; the package's folders map the design (``docs/design.md``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gtidsnap.config.loading import Config, load_config
    from gtidsnap.core.errors import (
        CheckpointError,
        ConfigError,
        FilterError,
        GtidsnapError,
        PrerequisiteError,
        QueryError,
        SchemaError,
        SignalError,
        SinkError,
        SourceError,
    )
    from gtidsnap.core.gtid import GtidSet, parse_gtid_set
    from gtidsnap.core.model import TableId
    from gtidsnap.core.run_stats import RunStats
    from gtidsnap.engine.loop import Engine
    from gtidsnap.run import build_engine, read_checkpoint, run_engine
    from gtidsnap.sinks.delta import current_state, current_state_of
    from gtidsnap.sinks.delta.consistent_points import read_as_of, recorded_points
    from gtidsnap.source.replica import Replica

__version__ = "0.1.0"

# Each public name and the module it lives in. Imported on first use: a chunk reader process (or a
# Spark executor's worker) imports gtidsnap.snapshot.readers and must not pay for Kafka, Spark or the
# engine; current_state needs pyspark.
_HOMES = {
    "Config": "gtidsnap.config.loading",
    "load_config": "gtidsnap.config.loading",
    **dict.fromkeys(
        [
            "CheckpointError",
            "ConfigError",
            "FilterError",
            "GtidsnapError",
            "PrerequisiteError",
            "QueryError",
            "SchemaError",
            "SignalError",
            "SinkError",
            "SourceError",
        ],
        "gtidsnap.core.errors",
    ),
    "GtidSet": "gtidsnap.core.gtid",
    "parse_gtid_set": "gtidsnap.core.gtid",
    "TableId": "gtidsnap.core.model",
    "RunStats": "gtidsnap.core.run_stats",
    "Engine": "gtidsnap.engine.loop",
    "build_engine": "gtidsnap.run",
    "read_checkpoint": "gtidsnap.run",
    "run_engine": "gtidsnap.run",
    "current_state": "gtidsnap.sinks.delta",
    "current_state_of": "gtidsnap.sinks.delta",
    "read_as_of": "gtidsnap.sinks.delta.consistent_points",
    "recorded_points": "gtidsnap.sinks.delta.consistent_points",
    "Replica": "gtidsnap.source.replica",
}

__all__ = [
    "CheckpointError",
    "Config",
    "ConfigError",
    "Engine",
    "FilterError",
    "GtidSet",
    "GtidsnapError",
    "PrerequisiteError",
    "QueryError",
    "Replica",
    "RunStats",
    "SchemaError",
    "SignalError",
    "SinkError",
    "SourceError",
    "TableId",
    "__version__",
    "build_engine",
    "current_state",
    "current_state_of",
    "load_config",
    "parse_gtid_set",
    "read_as_of",
    "read_checkpoint",
    "recorded_points",
    "run_engine",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gtidsnap' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
