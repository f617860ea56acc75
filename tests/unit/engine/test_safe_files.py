"""gtidsnap's own files (checkpoint, run locks, a local output's lease) are never written through a
symbolic link planted where they go, and are replaced whole (engine/safe_files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gtidsnap.core.checkpoint import Checkpoint
from gtidsnap.core.errors import ConfigError
from gtidsnap.core.gtid import parse_gtid_set
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.engine.safe_files import replace_atomically

CHECKPOINT = Checkpoint("mariadb", parse_gtid_set("mariadb", "0-1-5"), 7, 120)


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    return path


def test_a_checkpoint_that_is_a_link_is_refused_on_load_and_on_save(tmp_path: Path) -> None:
    target = victim(tmp_path)
    (tmp_path / "cp.json").symlink_to(target)
    store = CheckpointStore(tmp_path / "cp.json")
    with pytest.raises(
        ConfigError, match=r"the checkpoint .*cp\.json is a symbolic link \(to .*victim\.txt\)"
    ):
        store.load()
    with pytest.raises(ConfigError, match="is a symbolic link"):
        store.save(CHECKPOINT)
    assert target.read_text() == "precious\n"


def test_a_link_at_the_temporary_name_is_replaced_never_written_through(tmp_path: Path) -> None:
    target = victim(tmp_path)
    (tmp_path / "cp.json.tmp").symlink_to(target)
    store = CheckpointStore(tmp_path / "cp.json")
    store.save(CHECKPOINT)
    assert target.read_text() == "precious\n" and not (tmp_path / "cp.json.tmp").exists()
    loaded = store.load()
    assert loaded is not None and loaded.next_seq == 7 and loaded.sink_position == 120


def test_a_file_is_replaced_whole_and_a_failed_write_leaves_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    replace_atomically(path, b"one", "file")
    replace_atomically(path, b"two", "file")
    assert path.read_bytes() == b"two" and os.listdir(tmp_path) == ["f.json"]
    (tmp_path / "f.json.tmp").mkdir()  # the temporary name cannot be made: nothing changes
    with pytest.raises(OSError):
        replace_atomically(path, b"three", "file")
    assert path.read_bytes() == b"two"
