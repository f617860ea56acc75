"""``[metrics] listen``: a run's monitoring, wired: the replica probe and the HTTP endpoint over one engine
(built by :mod:`gtidsnap.run` when ``metrics.listen`` is set; tests build it beside an engine)."""

from __future__ import annotations

from gtidsnap.config.loading import Config
from gtidsnap.core.model import TableId
from gtidsnap.engine.loop import Engine
from gtidsnap.observe.retention_watch import RetentionWatch
from gtidsnap.source.replica import Replica


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
