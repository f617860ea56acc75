"""Where the Delta tables live: names as path segments, the paths of a source table's mirror and
changelog, the tables found under a path, and the table properties that describe them."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gtidsnap.core.model import TableId

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHANGELOG_SUFFIX = ".changelog"
HISTORY_SUFFIX = ".history"  # sink.history's SCD type 2 table (a "." is never left in an encoded name)
_SUFFIXES: dict[TableKind, str] = {"changelog": CHANGELOG_SUFFIX, "history": HISTORY_SUFFIX, "mirror": ""}
KEY_PROPERTY = "gtidsnap.key"  # table property: the JSON list of the key columns the table is merged by
SOURCE_PROPERTY = "gtidsnap.source"  # table property: the source table, db.table
_SAFE = re.compile(r"[A-Za-z0-9_$-]")
_ESCAPE = re.compile(r"~([0-9a-f]{2})")

TableKind = Literal["mirror", "changelog", "history"]


def encode_name(name: str) -> str:
    """A schema or table name as one path segment that needs no quoting anywhere (``a.b`` -> ``a~2eb``)."""
    return "".join(
        ch if _SAFE.fullmatch(ch) else "".join(f"~{b:02x}" for b in ch.encode("utf-8")) for ch in name
    )


def decode_name(segment: str) -> str:
    """The name :func:`encode_name` encoded."""
    out = bytearray()
    i = 0
    while i < len(segment):
        if _ESCAPE.match(segment, i):
            out.append(int(segment[i + 1 : i + 3], 16))
            i += 3
        else:
            out.extend(segment[i].encode("utf-8"))
            i += 1
    return out.decode("utf-8", errors="replace")


def absolute_root(path: str) -> str:
    """The sink path as Spark should see it: local paths absolute, URIs (s3a://, file:, ...) as given,
    but ``file:///x`` as ``file:/x``, the form Delta records (creating a table at the other form, Delta
    sees two locations and refuses)."""
    if path.startswith("file:///"):
        path = "file:/" + path.removeprefix("file:///")
    if "://" in path or path.startswith("file:"):
        return path.rstrip("/")
    return os.path.abspath(path)


def mirror_path(root: str, table: TableId) -> str:
    return f"{root}/{encode_name(table.schema)}/{encode_name(table.name)}"


def changelog_path(root: str, table: TableId) -> str:
    return mirror_path(root, table) + CHANGELOG_SUFFIX


def history_path(root: str, table: TableId) -> str:
    return mirror_path(root, table) + HISTORY_SUFFIX


def default_app_id(root: str) -> str:
    """Stable per output location, so a restarted instance recognises its own idempotent writes."""
    return "gtidsnap-" + hashlib.sha256(root.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class DeltaTableRef:
    """One Delta table of the layout: which source table, mirror, changelog or history, where."""

    table: TableId
    kind: TableKind
    path: str


_COMMITTED_LOG_FILE = re.compile(r"^(\d{20}\.(json|checkpoint.*\.parquet)|_last_checkpoint)$")


def _filesystem(spark: SparkSession, path: str) -> tuple[Any, Any, Any]:
    """Hadoop's FileSystem for ``path``, the Path class, and ``path`` as a Hadoop Path."""
    context: Any = spark.sparkContext
    jvm, conf = context._jvm, context._jsc.hadoopConfiguration()
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    where = hadoop_path(path)
    return where.getFileSystem(conf), hadoop_path, where


def _has_commit(fs: Any, log: Any) -> bool:
    """Does a ``_delta_log`` folder hold a committed version (a version file, a checkpoint)?"""
    if not fs.exists(log):
        return False
    return any(_COMMITTED_LOG_FILE.match(str(s.getPath().getName())) for s in fs.listStatus(log))


def clear_uncommitted_log(spark: SparkSession, path: str) -> bool:
    """Remove a ``_delta_log`` that holds no committed version, as a kill during a table's creation
    leaves it (a temporary file, an empty ``_staged_commits``): Delta then refuses to create the table
    there (DELTA_TABLE_NOT_FOUND) and every restart would fail. Nothing committed is touched, and
    nothing else can refer to such a log. True when something was removed."""
    fs, hadoop_path, table = _filesystem(spark, path)
    log_dir = hadoop_path(table, "_delta_log")
    if not fs.exists(log_dir) or _has_commit(fs, log_dir):
        return False
    fs.delete(log_dir, True)
    return True


def list_tables(spark: SparkSession, root: str) -> list[DeltaTableRef]:
    """Every mirror and changelog under ``root`` (through Hadoop's FileSystem, so any Spark storage);
    a folder whose ``_delta_log`` holds no committed version is no table (its creation was cut short)."""
    fs, hadoop_path, base = _filesystem(spark, root)
    if not fs.exists(base):
        return []
    found: list[DeltaTableRef] = []
    for db_status in fs.listStatus(base):
        if not db_status.isDirectory():
            continue
        db_path = db_status.getPath()
        for status in fs.listStatus(db_path):
            name = str(status.getPath().getName())
            if not status.isDirectory() or not _has_commit(fs, hadoop_path(status.getPath(), "_delta_log")):
                continue
            kind: TableKind = next(k for k, suffix in _SUFFIXES.items() if name.endswith(suffix))
            table_segment = name[: len(name) - len(_SUFFIXES[kind])]
            table = TableId(decode_name(str(db_path.getName())), decode_name(table_segment))
            path = mirror_path(root, table) + _SUFFIXES[kind]
            found.append(DeltaTableRef(table, kind, path))
    return sorted(found, key=lambda r: (r.table, r.kind))


def recorded_key(spark: SparkSession, path: str) -> list[str] | None:
    """The key a table is merged by, from its table property (None: not recorded)."""
    from delta.tables import DeltaTable

    properties = DeltaTable.forPath(spark, path).detail().select("properties").first()
    text = (properties[0] or {}).get(KEY_PROPERTY) if properties is not None else None
    return list(json.loads(text)) if text else None
