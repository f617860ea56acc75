"""The run's sink across engines: opened ahead at the checkpoint's position, used as is by the next
engine at that position, opened again otherwise; it still is what it wraps to the engine's checks."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from gtidsnap.core.ports import (
    CheckpointedSink,
    CutCheckingSink,
    DrainingSink,
    RenderingSink,
    SealingSink,
    SeqReportingSink,
)
from gtidsnap.run.reused_sink import ReusedSink
from gtidsnap.sinks.jsonl import JsonlSink


class Recording:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail = fail
        self.thread: str | None = None

    def open(self, committed: Any) -> None:
        self.calls.append(("open", committed))
        self.thread = threading.current_thread().name
        if self.fail:
            self.fail = False
            raise OSError("disk gone")

    def close(self) -> None:
        self.calls.append(("close", None))

    def write(self, records: Any) -> None: ...
    def commit(self) -> Any: ...


def test_the_next_engine_at_the_same_position_finds_it_open() -> None:
    inner = Recording()
    sink = ReusedSink(inner)  # type: ignore[arg-type]
    sink.preopen({"batch": 3})
    sink.open({"batch": 3})
    assert inner.calls == [("open", {"batch": 3})] and inner.thread == "gtidsnap-sink-reopen"
    sink.discard()  # used: nothing to close
    assert inner.calls == [("open", {"batch": 3})]


def test_at_another_position_it_is_opened_again() -> None:
    inner = Recording()
    sink = ReusedSink(inner)  # type: ignore[arg-type]
    sink.preopen(10)
    sink.open(12)
    assert inner.calls == [("open", 10), ("close", None), ("open", 12)]


def test_a_failed_opening_ahead_is_opened_again_by_the_engine(caplog: pytest.LogCaptureFixture) -> None:
    inner = Recording(fail=True)
    sink = ReusedSink(inner)  # type: ignore[arg-type]
    sink.preopen(10)
    sink.open(10)
    assert inner.calls == [("open", 10), ("open", 10)]
    assert "opening the output ahead failed (disk gone)" in caplog.text


def test_an_opening_never_used_is_closed_when_the_run_ends() -> None:
    inner = Recording()
    sink = ReusedSink(inner)  # type: ignore[arg-type]
    sink.preopen(10)
    sink.discard()
    assert inner.calls == [("open", 10), ("close", None)]


def test_the_engine_sees_what_the_wrapped_sink_can_do(tmp_path: Path) -> None:
    plain = JsonlSink(tmp_path / "o.jsonl")
    wrapped = ReusedSink(plain)
    for protocol in (CheckpointedSink, DrainingSink, RenderingSink, SealingSink, SeqReportingSink):
        assert isinstance(wrapped, protocol) == isinstance(plain, protocol), protocol
    assert isinstance(wrapped, SeqReportingSink)
    assert not isinstance(ReusedSink(Recording()), SeqReportingSink)  # type: ignore[arg-type]


class Checking(Recording):
    """A sink that checks its output against the checkpoint before the cut: ``bad`` positions mismatch."""

    def __init__(self, bad: Any = None) -> None:
        super().__init__()
        self.bad = bad

    def open_checked(self, committed: Any, next_seq: int) -> str | None:
        self.calls.append(("open_checked", (committed, next_seq)))
        return "it differs" if committed == self.bad else None


def test_an_opening_ahead_is_checked_against_the_checkpoint_and_its_verdict_kept() -> None:
    inner = Checking(bad=10)
    sink = ReusedSink(inner)  # type: ignore[arg-type]
    assert isinstance(sink, CutCheckingSink)
    sink.preopen(10, 5)
    assert sink.open_checked(10, 5) == "it differs", "said again, not opened again: nothing was touched"
    assert inner.calls == [("open_checked", (10, 5))]
    sink.preopen(12, 7)
    assert sink.open_checked(12, 8) is None, "another next_seq: closed and checked again"
    assert inner.calls[1:] == [("open_checked", (12, 7)), ("close", None), ("open_checked", (12, 8))]
    plain = ReusedSink(Recording())  # type: ignore[arg-type]
    assert plain.open_checked(3, 4) is None and plain.sink.calls == [("open", 3)]  # type: ignore[attr-defined]
