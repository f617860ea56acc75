"""Running gtidsnap: ``wiring`` builds an engine from a :class:`~gtidsnap.config.loading.Config` with the
real adapters; ``failover`` runs the engines of one ``gtidsnap run`` on the replicas that can serve its
checkpoint; ``run_lock`` and ``output_lease`` hold the checkpoint and the output for one run at a time;
``reused_sink`` keeps the run's sink open across its engines. The one place that knows every layer."""

from gtidsnap.run.failover import failover_reason, guarded_paths, read_checkpoint, run_engine
from gtidsnap.run.wiring import SignalHook, build_engine, chunk_readers, make_sink

__all__ = [
    "SignalHook",
    "build_engine",
    "chunk_readers",
    "failover_reason",
    "guarded_paths",
    "make_sink",
    "read_checkpoint",
    "run_engine",
]
