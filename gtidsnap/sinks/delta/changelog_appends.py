"""A changelog that is only ever appended to: a batch's changelog rows are written as data files before
its checkpoint, and committed to the changelog only once that checkpoint is saved.

Why: a changelog commit made before the checkpoint had to be undone when a crash came in between (its
batch is replayed, possibly with other records), so a Structured Streaming reader of the changelog met
commits that removed rows and needed ``skipChangeCommits``, which drops changes silently. Committed
after the checkpoint, a changelog holds checkpointed records only: recovery never touches it. The
checkpoint names each pending commit (:class:`LogAppend`: the table, the batch, the files with their
statistics); a run that stopped before committing them finds them in its checkpoint and commits them
when the sink opens, unless the changelog's log already holds that batch. A file written for a batch
whose checkpoint was never saved is named by no commit: readers never see it, ``VACUUM`` removes it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.file_commits import DataFile, commit_files
from gtidsnap.sinks.delta.layout import changelog_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

APPENDS_KEY = "changelog_appends"  # the pending commits, in the checkpoint's sink position


@dataclass(frozen=True)
class LogAppend:
    """One table's changelog rows of one batch, written as data files, to be committed once the
    batch's checkpoint is saved, tagged ``{"gtidsnap_batch": batch, "app_id": ...}``."""

    table: TableId
    batch: int
    files: tuple[DataFile, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "table": [self.table.schema, self.table.name],
            "batch": self.batch,
            "files": [asdict(f) for f in self.files],
        }

    @classmethod
    def from_json(cls, data: Any) -> LogAppend:
        schema, name = data["table"]
        files = tuple(
            DataFile(str(f["name"]), int(f["size"]), int(f["modified_ms"]), str(f["stats"]), int(f["rows"]))
            for f in data["files"]
        )
        return cls(TableId(str(schema), str(name)), int(data["batch"]), files)


def parse_appends(position: dict[str, Any]) -> list[LogAppend]:
    """The pending changelog commits a checkpoint's sink position names (none: an older checkpoint)."""
    try:
        return [LogAppend.from_json(a) for a in position.get(APPENDS_KEY) or []]
    except (KeyError, TypeError, ValueError) as exc:
        raise SinkError(f"the checkpoint's pending changelog commits are not readable: {exc!r}") from None


def commit_append(spark: SparkSession, root: str, append: LogAppend, app_id: str) -> None:
    """Commit one pending changelog append (the checkpoint naming it is saved)."""
    crash_point("delta-before-changelog-commit")
    path = changelog_path(root, append.table)
    meta = {"gtidsnap_batch": append.batch, "app_id": app_id}
    commit_files(spark, path, list(append.files), app_id, None, meta)


def holds_batch(spark: SparkSession, path: str, batch: int) -> bool:
    """Does the changelog at ``path`` hold a commit of ``batch`` (the commits after a checkpoint were
    under way when the run stopped)?"""
    from delta.tables import DeltaTable

    from gtidsnap.sinks.delta.recovery import batch_of, history_since

    commits = history_since(DeltaTable.forPath(spark, path), batch)
    return any(batch_of(c["userMetadata"]) == batch for c in commits)


def finish_appends(spark: SparkSession, root: str, appends: Sequence[LogAppend], app_id: str) -> int:
    """On open: commit the appends a checkpoint names that their changelog does not hold yet (the run
    stopped after saving the checkpoint, before or while committing them). Returns how many."""
    done = 0
    for append in appends:
        if holds_batch(spark, changelog_path(root, append.table), append.batch):
            continue
        commit_append(spark, root, append, app_id)
        done += 1
        log.info(
            "%s: committed batch %d to its changelog (checkpointed before the run stopped)",
            append.table,
            append.batch,
        )
    return done
