"""JSON lines: one object per record. What tests verify against and what users debug with.

Exactly once across crashes: the checkpoint stores the file's byte length at each commit; on start
the file is truncated back to it, dropping anything written after the last checkpoint (those
records are produced again by the replay from the checkpoint's GTID set). Before it is cut, the file
must match the checkpoint (:meth:`JsonlSink.open_checked`): the line ending at that length is the
record ``next_seq - 1`` (none for ``next_seq`` 1) and the one after it, if whole, ``next_seq``; any
other cut would remove records nothing writes again. The last line left then holds the greatest
``seq`` (they only grow down the file): read from the end, it tells the engine whether the
checkpoint's ``next_seq`` was already used (:meth:`JsonlSink.greatest_seq`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO

from gtidsnap.core.errors import OutputRefusedError, SinkError
from gtidsnap.core.ports import HeldSeq
from gtidsnap.core.records import Emitted, LineBodies, SnapshotColumns, encoded_line

WRITE_BUFFER = 1 << 20  # a stream of small transactions writes a few KB at a time: a system call a MB
TAIL_BLOCK = 64 * 1024  # read backwards a block at a time: the file may be gigabytes, its lines short


class JsonlSink:
    """Appends records to one file; ``commit`` fsyncs and returns the committed byte length."""

    def chunk_renderer(self, remote: bool) -> LineBodies:
        """A snapshot row's JSON is written by its reader and spliced into its line here."""
        return LineBodies()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None
        self._committed = 0  # the file's length as open cut it back

    def open(self, committed: Any) -> None:
        if committed is not None and (type(committed) is not int or committed < 0):
            raise OutputRefusedError(
                f"the checkpoint's sink position {str(committed)[:80]!r} is not a JSON-lines byte length "
                "(was sink.type changed?): use the checkpoint that belongs to this output, or a new "
                "checkpoint and sink.path"
            )
        offset = committed or 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a"):
                pass
            size = self.path.stat().st_size
            if committed is None and size:
                raise OutputRefusedError(
                    f"{self.path} already holds {size:,} bytes of records but there is no checkpoint: a "
                    "first run would cut it to nothing; restore the checkpoint, or move the output away to "
                    "start over"
                )
            if size < offset:
                raise OutputRefusedError(
                    f"{self.path} has {size} bytes but the checkpoint says {offset} were committed: "
                    "the output was truncated or replaced; move the checkpoint away to start over"
                )
            os.truncate(self.path, offset)
            self._file = self.path.open("ab", buffering=WRITE_BUFFER)
            self._committed = offset
        except OSError as exc:
            raise SinkError(f"cannot open {self.path}: {exc}") from exc

    def open_checked(self, committed: Any, next_seq: int) -> str | None:
        """:meth:`open` at ``committed`` if the file matches the checkpoint (see the module doc);
        otherwise what differs, the file untouched."""
        mismatch = self.cut_mismatch(committed, next_seq)
        if mismatch is None:
            self.open(committed)
        return mismatch

    def cut_mismatch(self, committed: Any, next_seq: int) -> str | None:
        """Why cutting the file back to ``committed`` bytes does not fit ``next_seq`` (None: it fits,
        or :meth:`open` has its own error for that position). Reads two lines; changes nothing."""
        if type(committed) is not int or committed < 0:
            return None
        try:
            with self.path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < committed:
                    return None  # truncated or replaced: open says so
                before = last_line(f, committed) if committed else None
                f.seek(committed - 1 if committed else 0)
                ends_line = not committed or f.read(1) == b"\n"
                f.seek(committed)
                after = f.read(TAIL_BLOCK).partition(b"\n")
        except FileNotFoundError:
            return None
        except OSError as exc:
            return f"{self.path} cannot be read ({exc.strerror or exc})"
        where = f"{self.path} at the checkpoint's position (byte {committed:,})"
        if not ends_line:
            return f"{where} is inside a line, not at a record's end"
        held = line_seq(before) if before is not None else None
        if committed and held != next_seq - 1:
            return f"the record before {where} is {_seq_text(held)}, not next_seq - 1 = {next_seq - 1}"
        if not committed and next_seq != 1:
            return f"{where} holds no record before it, but the checkpoint's next_seq is {next_seq}, not 1"
        following = line_seq(after[0]) if after[1] else None
        if after[1] and following != next_seq:
            return (
                f"the record after {where} is {_seq_text(following)}, not next_seq = {next_seq}: cutting "
                "there would remove records the checkpoint counts as written"
            )
        return None

    def greatest_seq(self) -> HeldSeq | None:
        """The ``seq`` of the last committed line (None: no line, or not a record's)."""
        try:
            with self.path.open("rb") as f:
                line = last_line(f, self._committed)
        except OSError as exc:
            raise SinkError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        seq = line_seq(line) if line is not None else None
        return HeldSeq(seq, str(self.path)) if seq is not None else None

    def write(self, records: Sequence[Emitted]) -> None:
        if self._file is None:
            raise SinkError("the JSON-lines sink is not open")
        lines = []
        for record in records:
            if isinstance(record, SnapshotColumns):
                raise SinkError("the JSON-lines sink takes records and line bodies, not columns")
            lines.append(encoded_line(record))
        try:
            self._file.write(b"".join(lines))
        except OSError as exc:
            raise self._failed(exc) from None

    def commit(self) -> int:
        if self._file is None:
            raise SinkError("the JSON-lines sink is not open")
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as exc:
            raise self._failed(exc) from None
        return self._file.tell()

    def _failed(self, exc: OSError) -> SinkError:
        """A write the system refused (a full disk, a file size limit): retryable, since the next start
        truncates the file to what the checkpoint says was committed."""
        return SinkError(f"writing {self.path} failed: {exc.strerror or exc}; what was committed is kept")

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):  # a failed write was raised already; nothing more to keep
                file.close()


def last_line(file: BinaryIO, end: int, block: int = TAIL_BLOCK) -> bytes | None:
    """The last complete line (without its newline) of the file's first ``end`` bytes, read backwards
    from ``end``; None: no complete line. Bytes after the last newline belong to no complete line."""
    tail, at = b"", end
    while at > 0:
        start = max(0, at - block)
        file.seek(start)
        tail = file.read(at - start) + tail
        at = start
        last = tail.rfind(b"\n")
        if last >= 0 and tail.rfind(b"\n", 0, last) >= 0:
            break
    last = tail.rfind(b"\n")
    if last < 0:
        return None
    return tail[tail.rfind(b"\n", 0, last) + 1 : last]


def _seq_text(seq: int | None) -> str:
    return f"seq {seq}" if seq is not None else "not a record"


def line_seq(line: bytes) -> int | None:
    """The ``seq`` of a record's JSON line (None: not a record's line)."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    seq = data.get("seq") if isinstance(data, dict) else None
    return seq if type(seq) is int else None
