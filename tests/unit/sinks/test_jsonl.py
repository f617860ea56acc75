"""The JSON-lines sink's tail reading: the greatest ``seq`` of the output is the last committed line's,
read backwards from the committed length (the file may be large, its last line longer than a block);
and its check before the cut: a checkpoint's position that does not fit its ``next_seq`` is refused,
the file untouched."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gtidsnap.core.errors import OutputRefusedError, SinkError
from gtidsnap.core.ports import CutCheckingSink, HeldSeq, SeqReportingSink
from gtidsnap.sinks.jsonl import JsonlSink, last_line, line_seq


def lines(*seqs: int, pad: int = 0) -> bytes:
    return b"".join(
        json.dumps({"op": "c", "seq": s, "after": {"x": "y" * pad}}).encode() + b"\n" for s in seqs
    )


@pytest.mark.parametrize("block", [1, 2, 7, 64, 1 << 16])
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", None),
        (b"no newline at all", None),
        (b"a\n", b"a"),
        (b"a\nbb\n", b"bb"),
        (b"a\nbb\nccc", b"bb"),  # a piece after the last newline belongs to no complete line
        (b"a\n\n", b""),
        (b"\n", b""),
        (b"x" * 300 + b"\n" + b"y" * 200 + b"\n", b"y" * 200),
    ],
)
def test_the_last_complete_line_is_read_backwards(content: bytes, expected: bytes | None, block: int) -> None:
    assert last_line(io.BytesIO(content), len(content), block) == expected


def test_only_the_first_end_bytes_count() -> None:
    content = b"a\nbb\nccc\n"
    assert last_line(io.BytesIO(content), 5, 2) == b"bb"
    assert last_line(io.BytesIO(content), 4, 2) == b"a"
    assert last_line(io.BytesIO(content), 0, 2) is None


def test_a_long_last_line_reads_only_what_it_needs() -> None:
    content = lines(*range(1, 1000)) + lines(1000, pad=200_000)

    class Counting(io.BytesIO):
        read_bytes = 0

        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            Counting.read_bytes += len(data)
            return data

    line = last_line(Counting(content), len(content), 4096)
    assert line is not None and line_seq(line) == 1000
    assert Counting.read_bytes < 200_000 + 2 * 4096, "the file before the last two lines stays unread"


@pytest.mark.parametrize(
    ("line", "seq"),
    [
        (b'{"seq": 7}', 7),
        (b'{"op":"r","table":"a.b","seq":12,"ts":1}', 12),
        (b'{"seq": "7"}', None),
        (b'{"seq": true}', None),
        (b'{"seq": 1.5}', None),
        (b"[7]", None),
        (b"not json", None),
        (b"\xff\xfe", None),
        (b"", None),
    ],
)
def test_the_seq_of_a_line(line: bytes, seq: int | None) -> None:
    assert line_seq(line) == seq


def test_the_greatest_seq_is_the_last_committed_lines(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl"
    committed = lines(1, 2, 3)
    path.write_bytes(committed + lines(4, 5) + b'{"seq": 6, "cut')  # written after the last checkpoint
    sink = JsonlSink(path)
    assert isinstance(sink, SeqReportingSink)
    sink.open(len(committed))
    try:
        assert sink.greatest_seq() == HeldSeq(3, str(path))
    finally:
        sink.close()
    assert path.read_bytes() == committed


def test_an_empty_or_foreign_output_tells_no_seq(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl"
    sink = JsonlSink(path)
    sink.open(None)
    assert sink.greatest_seq() is None
    sink.close()
    path.write_bytes(b"not a record\n")
    sink.open(path.stat().st_size)
    assert sink.greatest_seq() is None
    sink.close()


def test_an_output_that_cannot_be_read_is_a_sink_error(tmp_path: Path) -> None:
    path = tmp_path / "o.jsonl"
    sink = JsonlSink(path)
    sink.open(None)
    sink.close()
    path.unlink()
    path.mkdir()
    with pytest.raises(SinkError, match="cannot read"):
        sink.greatest_seq()


def test_a_position_that_fits_next_seq_is_cut_to(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    content = lines(1, 2, 3, 4)
    out.write_bytes(content + b'{"seq": 5, "op": "c"')  # a crash mid-line after the checkpoint
    at = len(lines(1, 2, 3))
    sink = JsonlSink(out)
    assert isinstance(sink, CutCheckingSink)
    assert sink.open_checked(at, 4) is None
    sink.close()
    assert out.read_bytes() == lines(1, 2, 3)
    assert JsonlSink(out).cut_mismatch(0, 1) is None, "an empty checkpoint of an output to start"


@pytest.mark.parametrize(
    ("at", "next_seq", "problem"),
    [
        (len(lines(1, 2, 3)) // 2, 7, "is inside a line"),  # sink_position halved
        (len(lines(1, 2, 3)), 7, "the record before"),  # next_seq raised: 4 .. 6 would be missing
        (len(lines(1, 2, 3)), 3, "is seq 3, not next_seq - 1 = 2"),  # lowered: seq 3 written twice
        (0, 7, "holds no record before it, but the checkpoint's next_seq is 7"),  # sink_position 0
        (len(lines(1)), 2, "the record after"),  # both lowered alike: no, the next line is not seq 2
    ],
)
def test_a_position_that_does_not_fit_next_seq_is_refused_untouched(
    tmp_path: Path, at: int, next_seq: int, problem: str
) -> None:
    out = tmp_path / "o.jsonl"
    content = lines(1, 3, 4, 5, 6) if problem == "the record after" else lines(1, 2, 3, 4, 5, 6)
    out.write_bytes(content)
    sink = JsonlSink(out)
    mismatch = sink.open_checked(at, next_seq)
    assert mismatch is not None and problem in mismatch and str(out) in mismatch, mismatch
    assert out.read_bytes() == content and sink._file is None, "nothing cut, nothing opened"


def test_a_position_open_refuses_itself_is_left_to_open(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    out.write_bytes(lines(1))
    sink = JsonlSink(out)
    assert sink.cut_mismatch(10**9, 2) is None and sink.cut_mismatch({"delta_batch": 3}, 2) is None
    with pytest.raises(SinkError, match="truncated"):
        sink.open_checked(10**9, 2)


def test_an_output_with_records_and_no_checkpoint_is_refused_untouched(tmp_path: Path) -> None:
    """A first run (no checkpoint) on a file that holds records would cut it to nothing: refused, the
    file as it was (the checkpoint deleted by hand, or another run's output named by mistake)."""
    path = tmp_path / "o.jsonl"
    path.write_bytes(lines(1, 2, 3))
    with pytest.raises(OutputRefusedError, match="no checkpoint"):
        JsonlSink(path).open(None)
    assert path.read_bytes() == lines(1, 2, 3)
    path.write_bytes(b"")
    JsonlSink(path).open(None)  # an empty file is no one's output
