"""A local Delta table's log read in plain Python (no Spark): per commit its version, its
``commitInfo`` and the data files it added, from ``_delta_log/<version>.json``.

For f.: which commit added each file of a changelog (the changelog has no Change Data Feed), and how
far a running gtidsnap has written its tables, polled without a second JVM beside gtidsnap's. Delta
writes a commit's JSON file atomically (a rename), so a file that is there is whole; checkpoints
(``*.checkpoint.parquet``) only summarise what the JSON files say, and the JSON files stay for the
log retention (30 days by default).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class Commit:
    version: int
    info: dict[str, Any]  # the commitInfo action ({} if the commit has none)
    added: tuple[str, ...]  # names (no folder, unquoted) of the data files it added with new data
    rearranged: tuple[str, ...]  # names of files it added without new data (OPTIMIZE and the like)

    @property
    def operation(self) -> str:
        return str(self.info.get("operation", ""))

    @property
    def metadata(self) -> dict[str, Any]:
        """The user metadata (gtidsnap writes ``{"gtidsnap_batch": N, ...}``), {} if none or not JSON."""
        try:
            data = json.loads(self.info.get("userMetadata") or "null")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    @property
    def batch(self) -> int | None:
        """The gtidsnap batch that wrote this commit, or for a mirror's background update the newest
        batch it took (``gtidsnap_mirror``); None: neither, e.g. the table's creation."""
        batch = self.metadata.get("gtidsnap_batch", self.metadata.get("gtidsnap_mirror"))
        return batch if isinstance(batch, int) else None


def commits(table: str | Path, after: int = -1) -> list[Commit]:
    """The commits of the Delta table at the local path ``table`` above version ``after``, in order;
    [] if it has no log yet."""
    log_dir = Path(table) / "_delta_log"
    try:
        entries = list(log_dir.iterdir())
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        stem, _, ext = entry.name.partition(".")
        if ext != "json" or not stem.isdigit() or int(stem) <= after:  # not .crc, checkpoints, temp files
            continue
        info: dict[str, Any] = {}
        added: list[str] = []
        rearranged: list[str] = []
        for line in entry.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
            elif "add" in action:
                name = unquote(action["add"]["path"].rsplit("/", 1)[-1])
                (added if action["add"].get("dataChange", True) else rearranged).append(name)
        found.append(Commit(int(stem), info, tuple(added), tuple(rearranged)))
    return sorted(found, key=lambda c: c.version)


def added_by(found: list[Commit]) -> dict[str, int]:
    """Data file name -> the version of the commit that added it with its rows. Raises if a file was
    rewritten without new data (compaction): its rows came in earlier, by commits not known here."""
    versions: dict[str, int] = {}
    for c in found:
        if c.rearranged:
            raise RuntimeError(
                f"Delta version {c.version} ({c.operation}) rewrote files without new data: which commit "
                "added a row can no longer be told from its file"
            )
        for name in c.added:
            versions.setdefault(name, c.version)
    return versions
