"""Rows decoded in decoder processes against the engine's own thread's decode, on the same bytes: the
same keys, the same JSON lines, byte for byte (random shapes and values from test_row_images); and the
processes themselves: answers in order across processes and batches, a process that dies reported."""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymysqlreplication.column import Column

from gtidsnap.core.column_values import plain_value
from gtidsnap.core.errors import FatalSourceError
from gtidsnap.core.gtid import MariadbGtid
from gtidsnap.core.model import Op, RowChange, RowChanges, TableId
from gtidsnap.core.records import change_lines, change_record
from gtidsnap.core.schema import Column as SchemaColumn
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.binlog import row_images
from gtidsnap.source.binlog.decoder_process import Shape, decode_rows
from gtidsnap.source.binlog.row_decoders import DecoderLost, RowDecoders
from tests.unit.source.binlog.test_row_images import _column, _event, events

TABLE = TableId("shop", "t")
GTID = MariadbGtid(0, 1, 7)
DATA_TYPES = ["varchar", "int", "blob", "json", "datetime", "decimal", "bit"]


def _schema(columns: list[Column], types: list[str], keys: int) -> TableSchema:
    shaped = tuple(SchemaColumn(c.name, t, t) for c, t in zip(columns, types, strict=True))
    return TableSchema(TABLE, shaped, tuple(c.name for c in columns[:keys]))


def _inline_lines(op: Op, images: list[dict[str, Any]], schema: TableSchema, seq: int) -> tuple[Any, bytes]:
    """What the translator and the engine make of the images on the engine's thread."""
    changes = []
    key_of = schema.key_of
    if op == "u":
        for before, after in zip(images[::2], images[1::2], strict=True):
            key, old = key_of(after), key_of(before)
            changes.append(
                RowChange(GTID, TABLE, "u", key, before, after, old if old != key else None, 5, schema.key)
            )
    else:
        for image in images:
            after, before = (image, None) if op == "c" else (None, image)
            changes.append(RowChange(GTID, TABLE, op, key_of(image), before, after, None, 5, schema.key))
    lines = b"".join(change_record(c, seq + i).to_line() for i, c in enumerate(changes))
    return _touched(k for c in changes for k in c.touched_keys()), lines


def _touched(keys: Any) -> list[str]:
    """The keys a window records, in any order (repr: a NaN key equals itself)."""
    return sorted(map(repr, keys))


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "done", run()
    except Exception as exc:  # the same failure from both is agreement
        return "error", type(exc).__name__


@settings(max_examples=400, deadline=None)
@given(events(), st.data())
def test_a_decoders_lines_are_the_engines_own(
    case: tuple[bool, list[Column], bytes], data: st.DataObject
) -> None:
    update, columns, raw = case
    op: Op = "u" if update else data.draw(st.sampled_from(["c", "d"]))
    types = data.draw(st.lists(st.sampled_from(DATA_TYPES), min_size=len(columns), max_size=len(columns)))
    schema = _schema(columns, types, data.draw(st.integers(1, len(columns))))
    seq = data.draw(st.integers(0, 2**40))

    def inline() -> tuple[Any, bytes]:
        images = row_images.normalized_images(_event(update, columns, raw), schema.converters, plain_value)
        assert images is not None
        return _inline_lines(op, images, schema, seq)

    def decoded() -> tuple[Any, bytes]:
        result = decode_rows(Shape.of(columns, "strict", _fresh(schema)), op, raw)
        if result.bodies is None:  # orjson could not write a row: values go back, the records write them
            assert result.images is not None
            return _inline_lines(op, result.images, schema, seq)
        changes = RowChanges(GTID, TABLE, op, result.keys, result.old_keys, result.bodies, 5)
        return _touched(changes.touched_keys()), change_lines(changes, seq).to_lines()

    def values() -> tuple[Any, bytes]:  # what a decoder sends back for an output that is not JSON lines
        result = decode_rows(Shape.of(columns, "strict", _fresh(schema)), op, raw, json=False)
        assert result.bodies is None and result.images is not None
        return _inline_lines(op, result.images, schema, seq)

    ours, expected = _outcome(decoded), _outcome(inline)
    assert repr(ours) == repr(expected)  # repr: NaN keys compare equal to themselves
    assert repr(_outcome(values)) == repr(expected)


def _fresh(schema: TableSchema) -> TableSchema:
    return TableSchema(schema.table, schema.columns, schema.key)


def test_an_update_that_changes_its_key_keeps_both() -> None:
    columns = [_column(8, name="id"), _column(8, name="v")]  # two LONGLONGs
    schema = _schema(columns, ["int", "int"], 1)
    row = lambda i, v: b"\x00" + i.to_bytes(8, "little") + v.to_bytes(8, "little")  # noqa: E731
    result = decode_rows(
        Shape.of(columns, "strict", schema), "u", row(1, 5) + row(2, 5) + row(3, 1) + row(3, 2)
    )
    assert result.keys == ((2,), (3,)) and result.old_keys == ((1,), None)
    assert RowChanges(
        GTID, TABLE, "u", result.keys, result.old_keys, result.bodies or (), 0
    ).touched_keys() == (
        (2,),
        (3,),
        (1,),
    )


def _long_rows(*ids: int) -> bytes:
    return b"".join(b"\x00" + i.to_bytes(8, "little") for i in ids)


@pytest.fixture
def decoders() -> Any:
    pool = RowDecoders(2, batch_bytes=40)
    yield pool
    pool.close()


def test_answers_come_in_order_across_processes_and_batches(decoders: RowDecoders) -> None:
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    pending = [
        decoders.add(columns, "strict", schema, "c", _long_rows(*range(n, n + 3)), GTID, TABLE, n)
        for n in range(40)
    ]
    assert decoders.batches >= 2  # the batches went to both processes in turn
    got = [decoders.resolve(p) for p in reversed(pending)][::-1]  # asked out of order: matched by position
    for n, (changes,) in enumerate(got):
        assert isinstance(changes, RowChanges)
        assert changes.keys == ((n,), (n + 1,), (n + 2,)) and changes.source_ts == n
    assert decoders.ahead_bytes == 0 and decoders.started == 2


def test_a_row_orjson_cannot_write_comes_back_as_values(decoders: RowDecoders) -> None:
    columns = [_column(8, name="id"), _column(15, name="s", max_length=10, character_set_name="binary")]
    schema = _schema(columns, ["int", "varchar"], 1)
    bad = b"\x00" + (4).to_bytes(8, "little") + b"\x01\xff"  # not UTF-8, as text: a lone surrogate
    (change,) = decoders.resolve(decoders.add(columns, "strict", schema, "c", bad, GTID, TABLE, 0))
    assert isinstance(change, RowChange) and change.key == (4,) and change.key_columns == ("id",)
    record = change_record(change, 0).to_line()
    assert record.startswith(b'{"op":"c","table":"shop.t","key":[4]')


def test_without_json_every_row_comes_back_as_values() -> None:
    """A Delta output's decoders: the same keys, as ``RowChange`` s carrying the images (no JSON)."""
    columns = [_column(8, name="id"), _column(8, name="v")]
    schema = _schema(columns, ["int", "int"], 1)
    row = lambda i, v: b"\x00" + i.to_bytes(8, "little") + v.to_bytes(8, "little")  # noqa: E731
    pool = RowDecoders(1, json=False)
    try:
        got = pool.resolve(pool.add(columns, "strict", schema, "u", row(1, 5) + row(2, 6), GTID, TABLE, 3))
    finally:
        pool.close()
    assert got == [RowChange(GTID, TABLE, "u", (2,), {"id": 1, "v": 5}, {"id": 2, "v": 6}, (1,), 3, ("id",))]
    assert pool.rows == [1]


def test_a_process_that_dies_is_reported_and_replaced(decoders: RowDecoders) -> None:
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    decoders.resolve(decoders.add(columns, "strict", schema, "c", _long_rows(1), GTID, TABLE, 0))
    for pid in decoders.pids():
        os.kill(pid, signal.SIGKILL)
    pending = decoders.add(columns, "strict", schema, "c", _long_rows(*range(10)), GTID, TABLE, 0)
    with pytest.raises(DecoderLost):
        decoders.resolve(pending)
    decoders.close()
    (changes,) = decoders.resolve(decoders.add(columns, "strict", schema, "c", _long_rows(9), GTID, TABLE, 0))
    assert isinstance(changes, RowChanges) and changes.keys == ((9,),) and decoders.started == 4


def test_a_decoding_failure_names_the_table(decoders: RowDecoders) -> None:
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    with pytest.raises(FatalSourceError, match=r"rows of shop\.t: .*odd number"):
        decoders.resolve(decoders.add(columns, "strict", schema, "u", _long_rows(1, 2, 3), GTID, TABLE, 0))


def test_many_batches_sent_before_any_answer_is_read_never_stall() -> None:
    """Answers pile up unread while batches keep going out (the stream reads ahead): with one pipe each
    way, a process blocked writing its answers would stop reading, and the next send would wait for ever."""
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    pool = RowDecoders(1, batch_bytes=9 * 500)
    try:
        pending = [
            pool.add(columns, "strict", schema, "c", _long_rows(*range(n, n + 500)), GTID, TABLE, 0)
            for n in range(0, 200 * 500, 500)
        ]  # 100,000 rows: megabytes of answers, far past a pipe's buffer
        assert pool.batches == 200
        last = pool.resolve(pending[-1])[0]
        assert isinstance(last, RowChanges) and last.keys[-1] == (200 * 500 - 1,)
    finally:
        pool.close()


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Has ``pid`` ended (no process, or a zombie)?"""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_stopped_process_is_reported_killed_and_replaced(caplog: pytest.LogCaptureFixture) -> None:
    """SIGSTOP: the process neither answers nor dies. Its batch is overdue after ``hung_after_s``: one
    WARNING naming it, the process killed, ``DecoderHung`` (a ``DecoderLost``: the stream reads again)."""
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    pool = RowDecoders(1, hung_after_s=1.0)
    try:
        pool.resolve(pool.add(columns, "strict", schema, "c", _long_rows(1), GTID, TABLE, 0))
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGSTOP)
        pending = pool.add(columns, "strict", schema, "c", _long_rows(2), GTID, TABLE, 0)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(DecoderLost, match="hung"):
            pool.resolve(pending)
        assert time.monotonic() - started < 1.0 + 3 * 0.25 + 1.0  # the bound, a poll or so, slack
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and f"gtidsnap-decoder-0 (pid {pid})" in warned[0], warned
        assert _gone(pid), "the stopped decoder was not killed"
        pool.close()
        (changes,) = pool.resolve(pool.add(columns, "strict", schema, "c", _long_rows(2), GTID, TABLE, 0))
        assert isinstance(changes, RowChanges) and changes.keys == ((2,),) and pool.started == 2
    finally:
        pool.close()


def test_a_send_to_a_stopped_process_does_not_wait_for_ever() -> None:
    """Batches keep going to a stopped process until its socket's buffer is full: the send that moves no
    byte for ``hung_after_s`` fails as ``DecoderHung`` instead of blocking the stream for good."""
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    pool = RowDecoders(1, batch_bytes=9 * 1000, hung_after_s=1.0)
    try:
        pool.resolve(pool.add(columns, "strict", schema, "c", _long_rows(1), GTID, TABLE, 0))
        (pid,) = pool.pids()
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(DecoderLost, match="hung"):
            for n in range(0, 10_000_000, 1000):  # ~90 MB at most: far past any socket buffer
                pool.add(columns, "strict", schema, "c", _long_rows(*range(n, n + 1000)), GTID, TABLE, 0)
        assert time.monotonic() - started < 10.0
        assert _gone(pid), "the stopped decoder was not killed"
    finally:
        pool.close()


def test_closing_never_waits_on_a_stopped_process() -> None:
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    pool = RowDecoders(2)
    pool.resolve(pool.add(columns, "strict", schema, "c", _long_rows(1), GTID, TABLE, 0))
    pids = pool.pids()
    os.kill(pids[0], signal.SIGSTOP)
    started = time.monotonic()
    pool.close()
    assert time.monotonic() - started < 5.0
    assert all(_gone(pid) for pid in pids)


@pytest.mark.parametrize("bound", [0.5, float("nan"), 1e9, 601.0])
def test_a_hung_bound_out_of_range_is_refused(bound: float) -> None:
    with pytest.raises(ValueError, match="hung_after_s"):
        RowDecoders(1, hung_after_s=bound)


def test_a_process_stopped_in_the_middle_of_an_answer_is_replaced() -> None:
    """A process stopped while it writes a large answer: the stream sees the answer begin and waits for
    its rest, which never comes; that receive is bounded too."""
    columns = [_column(8, name="id")]
    schema = _schema(columns, ["int"], 1)
    pool = RowDecoders(1, batch_bytes=9 * 200_000, hung_after_s=1.0)
    try:
        pool.resolve(pool.add(columns, "strict", schema, "c", _long_rows(1), GTID, TABLE, 0))
        (pid,) = pool.pids()
        pending = pool.add(columns, "strict", schema, "c", _long_rows(*range(200_000)), GTID, TABLE, 0)
        pool.flush()
        sock = socket.socket(fileno=os.dup(pool._workers[0].conn.fileno()))
        try:  # the answer's first bytes are in: stop the process now, mid-answer
            deadline = time.monotonic() + 30
            while not select.select([sock], [], [], 0.001)[0]:
                assert time.monotonic() < deadline, "no answer began"
        finally:
            sock.close()
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(DecoderLost):
            pool.resolve(pending)
        assert time.monotonic() - started < 10.0
        assert _gone(pid)
    finally:
        pool.close()
