"""Snapshot rows staged as Parquet files in the output until one large append takes them into Delta.

Why: Spark pays for a Delta commit per commit (a job, the log, statistics) and for a write per file, so
it appends a million rows in about the time of three 100,000-row appends. Snapshot rows therefore do
not go to Delta with every batch: each batch writes its snapshot rows of a table as one Parquet file
(by pyarrow, in the committer's thread: no JVM work, Arrow's own buffers), and a table's staged files
are appended in one Spark job once they are due (enough rows, or old enough, or the run ends).

Staged files are output: the batch that wrote them is committed only once they are durable, and the
checkpoint names every staged file not yet appended (the sink's position), so a restart finds them
and appends them later; a file the checkpoint does not name (written by a batch that never reached
its checkpoint, or already appended) is deleted when the sink opens. An append of staged rows is a
Delta commit of the batch that makes it, undone like any other if that batch never reaches its
checkpoint; its files stay until a checkpoint no longer names them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from gtidsnap.core.errors import OutputRefusedError
from gtidsnap.core.model import TableId
from gtidsnap.sinks.arrow_columns import StagedRows
from gtidsnap.sinks.delta.layout import encode_name

STAGED_ROW_GROUP = 131_072  # rows of a staged file's row group: read back a row group at a time
STAGING_DIR = "_gtidsnap_staging"  # under the output's root; Spark skips names starting with "_"


@dataclass(frozen=True)
class StagedFile:
    """One batch's snapshot rows of one table, in ``path``: ``_seq`` from ``first_seq`` to
    ``last_seq``; ``fresh``: rows of the table's first snapshot into this output."""

    table: TableId
    path: str
    rows: int
    first_seq: int
    last_seq: int
    fresh: bool
    staged_at: float = field(default_factory=time.monotonic, compare=False)
    # A chunk a remote reader wrote (a split; :class:`gtidsnap.sinks.arrow_columns.StagedRows`): its data
    # columns and positions only, stamped ``source_ts``; ``dropped`` the positions its windows dropped
    # (ascending), ``positions`` the file's rows; a row's ``_seq`` is ``first_seq`` + its position
    # (``by_position``; a split staged before 2026-11-27: the kept rows numbered in order).
    split: bool = False
    dropped: tuple[int, ...] = ()
    source_ts: int = 0
    positions: int = 0
    by_position: bool = True

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "table": str(self.table),
            "path": self.path,
            "rows": self.rows,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "fresh": self.fresh,
        }
        if self.split:
            data.update(
                split=True, dropped=list(self.dropped), positions=self.positions, source_ts=self.source_ts
            )
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StagedFile:
        rows, dropped = int(data["rows"]), tuple(int(p) for p in data.get("dropped", ()))
        split = bool(data.get("split", False))
        positions = int(data.get("positions", rows + len(dropped) if split else 0))
        legacy = split and "dropped" not in data
        if legacy and data.get("kept") is not None:  # written before 2026-11-27: every kept position
            kept = {int(p) for p in data["kept"]}
            positions = max(kept, default=-1) + 1
            dropped = tuple(p for p in range(positions) if p not in kept)
        return cls(
            TableId.parse(str(data["table"])),
            str(data["path"]),
            rows,
            int(data["first_seq"]),
            int(data["last_seq"]),
            bool(data["fresh"]),
            split=split,
            dropped=dropped,
            source_ts=int(data.get("source_ts", 0)),
            positions=positions,
            by_position=not legacy,
        )


def staging_root(root: str) -> str:
    return f"{root.rstrip('/')}/{STAGING_DIR}"


def warm_up_folder(root: str) -> str:
    """Where the sink's warm-up write goes (:func:`gtidsnap.sinks.delta.tables.warm_up`), then goes;
    three levels down, so a leftover is never taken for a table of the output."""
    return f"{staging_root(root)}/warm-up/table"


def remove_folder(uri: str) -> None:
    filesystem, path = output_filesystem(uri)
    with contextlib.suppress(FileNotFoundError):
        filesystem.delete_dir(path)


def splits_folder(root: str) -> str:
    """Where remote readers stage the chunks they read."""
    return f"{staging_root(root)}/splits"


def staged_split(table: TableId, rows: StagedRows, first_seq: int, source_ts: int, fresh: bool) -> StagedFile:
    """A chunk a remote reader staged, as the sink's staged file (nothing read here)."""
    return StagedFile(
        table,
        rows.path,
        len(rows),
        first_seq,
        first_seq + rows.seq_span() - 1,
        fresh,
        split=True,
        dropped=rows.dropped,
        source_ts=source_ts,
        positions=rows.rows,
    )


def output_filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's filesystem for the output (local paths, file:, s3://, gs://, hdfs://, ...)."""
    if "://" not in uri and not uri.startswith("file:"):
        return pafs.LocalFileSystem(), uri
    try:
        return pafs.FileSystem.from_uri(uri.replace("s3a://", "s3://", 1))  # type: ignore[no-any-return]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise OutputRefusedError(
            f"snapshot rows are staged under the output, but pyarrow cannot write to {uri} ({exc}): "
            "use an output on a filesystem pyarrow knows (a local path, file:, s3, gs, hdfs, abfs)"
        ) from exc


def write_staged(root: str, table: TableId, name: str, rows: pa.Table, fresh: bool) -> StagedFile:
    """``rows`` (data columns, then ``_seq`` and the other meta columns) as the durable file ``name``
    of ``table``'s staging folder."""
    folder = f"{staging_root(root)}/{encode_name(table.schema)}/{encode_name(table.name)}"
    filesystem, base = output_filesystem(folder)
    filesystem.create_dir(base, recursive=True)
    path = f"{base}/{name}.parquet"
    with filesystem.open_output_stream(path) as stream:
        # read back once, a row group at a time: no dictionaries or statistics (a third of pyarrow's
        # writing time), row groups of what the mirror's files are written from at once
        pq.write_table(
            rows, stream, compression="snappy", use_dictionary=False, write_statistics=False,
            row_group_size=STAGED_ROW_GROUP,
        )  # fmt: skip
    if isinstance(filesystem, pafs.LocalFileSystem):
        _fsync(path)
    seqs = rows.column("_seq")
    first, last = seqs[0].as_py(), seqs[len(seqs) - 1].as_py()
    return StagedFile(table, f"{folder}/{name}.parquet", rows.num_rows, first, last, fresh)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    folder = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def remove_unlisted(root: str, keep: Iterable[StagedFile]) -> list[str]:
    """Delete every staged file of ``root`` that ``keep`` does not name; the deleted paths."""
    filesystem, base = output_filesystem(staging_root(root))
    kept = {output_filesystem(f.path)[1] for f in keep}
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return []
    removed = []
    for info in infos:
        if info.type == pafs.FileType.File and info.path not in kept:
            filesystem.delete_file(info.path)
            removed.append(info.path)
    return removed


def remove(files: Iterable[StagedFile]) -> None:
    """Delete appended staged files (a checkpoint no longer names them)."""
    for staged in files:
        filesystem, path = output_filesystem(staged.path)
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(path)
