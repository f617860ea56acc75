"""gtidsnap's own files beside the checkpoint and the output (the checkpoint, the run locks, a local
output's lease), opened without following a symbolic link, and replaced atomically.

Why: these files sit in folders other users or programs may write too, and gtidsnap writes them as
itself. A link planted in a file's place (``ln -sf victim.txt checkpoint.json.lock``) made a run write
its holder's JSON into whatever the link pointed at. So a link where one of these files goes is refused
with an error naming it (``O_NOFOLLOW``: the kernel refuses, no window between a check and the open), a
file is created only where nothing is (``O_EXCL``), and a file's new content goes to a fresh temporary
file that is then renamed over it (a rename replaces a link; it never writes through one), fsynced with
its folder, so a crash leaves the old content or the new one whole. Only the last part of a path is
guarded: the folders are the user's to choose.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from gtidsnap.core.errors import ConfigError


def link_refused(path: Path, what: str) -> ConfigError:
    """The error for a symbolic link found where gtidsnap's ``what`` goes."""
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return ConfigError(
        f"the {what} {path} is a symbolic link{target}: gtidsnap does not follow links for its own files "
        "(one could make it overwrite another file); remove the link, or point the setting at a real file"
    )


def refuse_link(path: Path, what: str) -> None:
    """Raise :func:`link_refused` when ``path`` is a symbolic link (read before a file is trusted)."""
    if path.is_symlink():
        raise link_refused(path, what)


def open_no_follow(path: Path, flags: int, what: str, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symbolic link at ``path`` with a ConfigError naming it."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_refused(path, what) from None
        raise


def replace_atomically(path: Path, data: bytes, what: str) -> None:
    """``path`` holds ``data`` afterwards, whole: written to ``<path>.tmp`` (made anew: a link or file left
    there is removed first, never written through), fsynced, renamed over ``path``, the folder fsynced.
    A link at ``path`` itself is refused. OSError when the filesystem refuses."""
    refuse_link(path, what)
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover of a crash, or a planted link: the link goes, not its target
    fd = open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
