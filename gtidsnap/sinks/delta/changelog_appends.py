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
On a Delta version gtidsnap was not tested with (:mod:`.jvm_delta`), the commit is Spark's APPEND of
the files' rows, with the same metadata; nothing else changes.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from gtidsnap.core.crashpoints import crash_point
from gtidsnap.core.errors import SinkError
from gtidsnap.core.model import TableId, quote_ident
from gtidsnap.sinks.delta.catch_up import FIRST_SEQ
from gtidsnap.sinks.delta.file_commits import DataFile, commit_files
from gtidsnap.sinks.delta.layout import changelog_path
from gtidsnap.sinks.delta.staging import output_filesystem

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


def commit_append(spark: SparkSession, root: str, append: LogAppend, app_id: str, by_files: bool) -> None:
    """Commit one pending changelog append (the checkpoint naming it is saved): its data files as they
    are, through Delta's transaction API (``by_files``: on the tested Delta version); else their rows
    by Spark's own APPEND (:func:`_append_by_spark`)."""
    crash_point("delta-before-changelog-commit")
    path = changelog_path(root, append.table)
    meta: dict[str, Any] = {"gtidsnap_batch": append.batch, "app_id": app_id}
    lows = (json.loads(f.stats).get("minValues", {}).get("_seq") for f in append.files)
    seqs = [seq for seq in lows if isinstance(seq, int)]
    if seqs:  # the lowest _seq it writes (recovery never undoes one below a checkpoint's next_seq)
        meta[FIRST_SEQ] = min(seqs)
    if by_files:
        commit_files(spark, path, list(append.files), app_id, None, meta)
    else:
        _append_by_spark(spark, path, append.files, meta)


def _append_by_spark(spark: SparkSession, path: str, files: Sequence[DataFile], meta: dict[str, Any]) -> None:
    """The batch's data files read by Spark and APPENDed by it (in files of its own), with the same user
    metadata, as the table's columns (a column they lack NULL); then deleted: no commit names them.
    A crash in between leaves them to ``VACUUM``; the checkpoint's append is then done already
    (:func:`finish_appends` finds its batch)."""
    from pyspark.sql import functions as F

    from gtidsnap.sinks.delta.tables import append_by_spark

    filesystem, base = output_filesystem(path)
    names = [f"{path.rstrip('/')}/{f.name}" for f in files]
    read = spark.read.parquet(*names)
    have = {c.casefold(): c for c in read.columns}
    columns = [
        (F.col(quote_ident(have[f.name.casefold()])) if f.name.casefold() in have else F.lit(None))
        .cast(f.dataType)
        .alias(f.name)
        for f in spark.read.format("delta").load(path).schema.fields
    ]
    append_by_spark(path, read.select(*columns), meta)
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(f"{base.rstrip('/')}/{f.name}")


def holds_batch(spark: SparkSession, path: str, batch: int) -> bool:
    """Does the changelog at ``path`` hold a commit of ``batch`` (the commits after a checkpoint were
    under way when the run stopped)?"""
    from delta.tables import DeltaTable

    from gtidsnap.sinks.delta.recovery import batch_of, history_since

    commits = history_since(DeltaTable.forPath(spark, path), batch)
    return any(batch_of(c["userMetadata"]) == batch for c in commits)


def finish_appends(
    spark: SparkSession, root: str, appends: Sequence[LogAppend], app_id: str, by_files: bool
) -> int:
    """On open: commit the appends a checkpoint names that their changelog does not hold yet (the run
    stopped after saving the checkpoint, before or while committing them). Returns how many."""
    done = 0
    for append in appends:
        if holds_batch(spark, changelog_path(root, append.table), append.batch):
            continue
        commit_append(spark, root, append, app_id, by_files)
        done += 1
        log.info(
            "%s: committed batch %d to its changelog (checkpointed before the run stopped)",
            append.table,
            append.batch,
        )
    return done
