"""Who keeps the history tables (``sink.history``), and when: a thread of its own, on a Spark session
of its own, takes each changelog's new records into its history every ``sink.merge_interval_s``
(:func:`gtidsnap.sinks.delta.history.update_history`), and once more when a run ends after draining,
so the history is whole then. It reads the changelogs only, which hold checkpointed records only: it
needs nothing from the batches, and a restart continues from each history's own watermark."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.history import update_history
from gtidsnap.sinks.delta.layout import DeltaTableRef, history_path, list_tables
from gtidsnap.sinks.delta.util import short_error

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gtidsnap.sinks.delta.catalog_names import Registrar

log = logging.getLogger("gtidsnap.sinks.delta")

POOL = "gtidsnap-history"  # the Spark scheduler pool of its jobs


class HistoryKeeper:
    def __init__(
        self, spark: SparkSession, root: str, interval_s: float, names: Registrar | None = None
    ) -> None:
        self.spark, self.root, self.interval_s = spark, root, max(1.0, interval_s)
        self.names = names  # sink.database: a history is registered by name once created
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gtidsnap-history", daemon=True)
            self._thread.start()

    def check(self) -> None:
        """Raise (once) the error of a failed update, in the caller's thread (the run stops on it)."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def finish(self, final: bool) -> None:
        """Stop the thread; with ``final`` (the run drained: the changelogs are whole), one last pass
        on the caller's thread, raising what fails."""
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is not None:
            thread.join()
        if final:
            self.check()
            self.update_all()

    def update_all(self) -> None:
        for table in self.tables():
            update = update_history(self.spark, self.root, table, missing_ok=True)  # being created
            if self.names is not None and update.exists:
                self.names.register(DeltaTableRef(table, "history", history_path(self.root, table)))

    def tables(self) -> list[TableId]:
        return sorted({ref.table for ref in list_tables(self.spark, self.root) if ref.kind == "changelog"})

    def _run(self) -> None:
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", POOL)
        while not self._stop.wait(self.interval_s):
            try:
                self.update_all()
            except BaseException as exc:  # the engine raises it on its thread (check)
                log.error("updating a history table failed: %s", short_error(exc))
                self._error = exc
                return
