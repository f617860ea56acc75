"""Rows events decoded in decoder processes, so the stream uses a second core.

Why: the engine's thread was the stream's limit. Most of a streamed change's CPU went to reading its row
images and writing its JSON (the engine then only keeps order, windows' keys and the checkpoint), and
one Python thread runs on one core. For a JSON-lines output the stream now sends a rows event's row bytes
to a decoder process, which reads the images (:mod:`gtidsnap.source.binlog.row_images`, the same
readers), computes each row's key and writes each change's JSON; the engine's thread gets back the keys
and the bytes, one :class:`gtidsnap.core.model.RowChanges` an event, and splices the lines
(:class:`gtidsnap.core.records.ChangeLines`) as it splices a snapshot chunk's.

Order: the stream's events stay in one queue in the order read; a rows event sent away holds its place
there as a :class:`PendingRows` until its result is back. Events are sent in batches (at most
``BATCH_BYTES`` of rows a batch), a batch to each process in turn, and each process answers in the order
it was asked, so results are matched by position. Nothing a process did counts until the stream hands
its event out, so exact resume is unchanged: what was read ahead and not handed out is read again.

A row a process cannot write as JSON (text that is not valid Unicode) comes back as values, and the
stream makes ordinary ``RowChange`` s of it (the records' own fallback writes them). A process that dies
(killed, out of memory) is ``DecoderLost``: the stream drops what was read ahead, starts new processes and
reads again from what it handed out, as after a lost connection.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import pickle
import queue
import threading
from collections import deque
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import orjson

from gtidsnap.core.column_values import plain_value
from gtidsnap.core.errors import FatalSourceError, SourceError
from gtidsnap.core.gtid import Gtid
from gtidsnap.core.model import Key, Op, RowChange, RowChanges, TableId
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.binlog.row_images import NormalImageReader, normal_image_reader, read_images

log = logging.getLogger(__name__)

BATCH_BYTES = 32 * 1024
"""Most row bytes in one batch sent to a process: a message each way costs tens of microseconds, so
small transactions' events travel many to a message."""

MOST_SHAPES = 512
"""Table shapes a process keeps; past it every process forgets them and is sent them again."""

POLL_S = 1.0
"""How often a wait for a process's answer checks that the process is alive."""


class DecoderLost(SourceError):
    """A decoder process ended (killed, out of memory): what was read ahead is read again."""


@dataclass(frozen=True, slots=True)
class Decoded:
    """One rows event as a process decoded it: each row's key (and the key before an update that changed
    it), and each change's JSON body, or, where orjson could not write one, the row images instead."""

    keys: tuple[Key, ...]
    old_keys: tuple[Key | None, ...] | None
    bodies: tuple[bytes, ...] | None
    images: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class Shape:
    """What a process needs to decode a table's events: the reader of its row images and its schema."""

    read: NormalImageReader
    schema: TableSchema

    @classmethod
    def of(cls, columns: Any, errors: str, schema: TableSchema) -> Shape:
        read = normal_image_reader(columns, errors, schema.converters, plain_value)
        if read is None:  # the stream sends only what its own reader reads
            raise ValueError(f"no row image reader for {schema.table}")
        return cls(read, schema)


def decode_rows(shape: Shape, op: Op, data: bytes, json: bool = True) -> Decoded:
    """A rows event's row bytes as keys and JSON bodies, or (``json`` False: an output that wants values,
    Delta) keys and normalised images: what a process does with one event."""
    images = read_images(shape.read, data)
    key_of, names = shape.schema.key_of, shape.schema.key
    old_keys: tuple[Key | None, ...] | None = None
    if op == "u":
        if len(images) % 2:
            raise ValueError(f"an update event of {shape.schema.table} with an odd number of images")
        befores, afters = images[::2], images[1::2]
        keys = tuple(map(key_of, afters))
        olds = tuple(map(key_of, befores))
        if olds != keys:
            old_keys = tuple(o if o != k else None for k, o in zip(keys, olds, strict=True))
    else:
        keys = tuple(map(key_of, images))
    if not json:
        return Decoded(keys, old_keys, None, images)
    try:
        bodies = _bodies(names, op, images)
    except (orjson.JSONEncodeError, KeyError):
        return Decoded(keys, old_keys, None, images)
    return Decoded(keys, old_keys, bodies)


def _bodies(names: tuple[str, ...], op: Op, images: list[dict[str, Any]]) -> tuple[bytes, ...]:
    """Each change's JSON from its "key" to its "after", the bytes :meth:`Record.to_line` writes there
    (checked against it by the tests); one formatting a row, the key read by one getter."""
    dumps = orjson.dumps
    if len(names) == 1:
        one = itemgetter(names[0])

        def key(row: dict[str, Any]) -> bytes:
            return b"[%b]" % dumps(one(row))
    else:
        many = itemgetter(*names)

        def key(row: dict[str, Any]) -> bytes:
            return dumps(many(row))

    if op == "c":
        return tuple(b'"key":%b,"before":null,"after":%b' % (key(a), dumps(a)) for a in images)
    if op == "d":
        return tuple(b'"key":%b,"before":%b,"after":null' % (key(b), dumps(b)) for b in images)
    pairs = zip(images[::2], images[1::2], strict=True)
    return tuple(b'"key":%b,"before":%b,"after":%b' % (key(a), dumps(b), dumps(a)) for b, a in pairs)


def serve(conn: Any, json: bool = True) -> None:
    """A decoder process: batches in, their results out (JSON bodies, or ``json`` False values), in
    order, until told to stop (None) or the stream's end of the pipe closes. Answers go out from a
    thread of their own: a process blocked writing an answer the stream has not read yet would stop
    reading, and the stream, sending its next batch, would wait for it for ever (one pipe each way,
    both full)."""
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    sender = threading.Thread(target=_send_answers, args=(conn, outbox), name="answers", daemon=True)
    sender.start()
    shapes: dict[int, Shape] = {}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            break
        if message is None:
            break
        batch_id, reset, new_shapes, events = message
        try:
            if reset:
                shapes.clear()
            for shape_id, columns, errors, schema in new_shapes:
                shapes[shape_id] = Shape.of(columns, errors, schema)
            answer: Any = [decode_rows(shapes[shape_id], op, data, json) for shape_id, op, data in events]
        except Exception as exc:
            answer = f"{type(exc).__name__}: {exc}"[:500]
        outbox.put(pickle.dumps((batch_id, answer), pickle.HIGHEST_PROTOCOL))
    outbox.put(None)
    sender.join(timeout=1.0)


def _send_answers(conn: Any, outbox: queue.SimpleQueue[bytes | None]) -> None:
    while (answer := outbox.get()) is not None:
        try:
            conn.send_bytes(answer)
        except OSError:  # the stream is gone
            return


@dataclass(eq=False, slots=True)
class _Batch:
    id: int
    events: list[tuple[int, Op, bytes]] = field(default_factory=list)
    size: int = 0
    worker: int = -1  # -1: not sent yet
    results: list[Decoded] | str | None = None


@dataclass(eq=False, slots=True)
class PendingRows:
    """A rows event sent to a decoder process, in its place among the stream's events."""

    batch: _Batch
    index: int
    gtid: Gtid
    table: TableId
    op: Op
    source_ts: int
    size: int
    key_names: tuple[str, ...]


@dataclass(eq=False)
class _Worker:
    process: Any
    conn: Any
    known: set[int] = field(default_factory=set)  # shape ids the process has
    sent: deque[_Batch] = field(default_factory=deque)  # batches asked, not answered yet, in order
    reset: bool = False  # forget every shape before the next batch


class RowDecoders:
    """``count`` decoder processes, started on the first event sent and again after one is lost.
    ``json``: they write each change's JSON (a JSON-lines output); False: they send the normalised
    values back (Delta builds its columns from them), still sparing the engine's thread the decoding."""

    def __init__(self, count: int, batch_bytes: int = BATCH_BYTES, json: bool = True) -> None:
        if count < 1:
            raise ValueError(f"decoder processes must be at least 1, got {count}")
        self.count = count
        self.json = json
        self._batch_bytes = batch_bytes
        self._workers: list[_Worker] = []
        self._turn = 0
        self._open: _Batch | None = None
        self._next_batch = 0
        # (id of the table map's columns, id of the schema, errors) -> shape id; the id's shape (the
        # entry holds the objects, so their ids are not reused meanwhile)
        self._shape_ids: dict[tuple[int, int, str], int] = {}
        self._shapes: dict[int, tuple[Any, str, TableSchema]] = {}
        self._next_shape = 0
        self.ahead_bytes = 0  # row bytes sent (or about to be) whose events were not resolved yet
        self.batches = 0  # batches sent (progress, tests)
        self.started = 0  # processes started, restarts included
        self.rows = [0] * count  # rows decoded by each process (its place: the same across restarts)

    def add(
        self,
        columns: Any,
        errors: str,
        schema: TableSchema,
        op: Op,
        data: bytes,
        gtid: Gtid,
        table: TableId,
        source_ts: int,
    ) -> PendingRows:
        """Send a rows event's row bytes (``columns``: its table map's; ``errors``: the decode-errors
        mode) to be decoded; the event's place in the stream."""
        key = (id(columns), id(schema), errors)
        shape_id = self._shape_ids.get(key)
        if shape_id is None:
            if len(self._shapes) >= MOST_SHAPES:
                self._forget_shapes()
            shape_id = self._shape_ids[key] = self._next_shape
            self._shapes[shape_id] = (columns, errors, schema)
            self._next_shape += 1
        batch = self._open
        if batch is None:
            batch = self._open = _Batch(self._next_batch)
            self._next_batch += 1
        batch.events.append((shape_id, op, data))
        batch.size += len(data)
        self.ahead_bytes += len(data)
        pending = PendingRows(batch, len(batch.events) - 1, gtid, table, op, source_ts, len(data), schema.key)
        if batch.size >= self._batch_bytes:
            self.flush()
        return pending

    def flush(self) -> None:
        """Send the batch being filled, if any, to the next process in turn."""
        batch, self._open = self._open, None
        if batch is None:
            return
        if not self._workers:
            self._start()
        index = self._turn
        self._turn = (index + 1) % len(self._workers)
        worker = self._workers[index]
        new_shapes = []
        for shape_id, _, _ in batch.events:
            if shape_id not in worker.known:
                columns, errors, schema = self._shapes[shape_id]
                new_shapes.append((shape_id, columns, errors, _bare(schema)))
                worker.known.add(shape_id)
        reset, worker.reset = worker.reset, False
        try:
            worker.conn.send((batch.id, reset, new_shapes, batch.events))
        except (OSError, ValueError) as exc:
            raise DecoderLost(f"decoder process {worker.process.pid} is gone ({exc})") from exc
        batch.worker = index
        worker.sent.append(batch)
        self.batches += 1

    def done(self, pending: PendingRows) -> bool:
        """Whether ``pending``'s result was read already (a look at the pipe costs more than it saves)."""
        return pending.batch.results is not None

    def resolve(self, pending: PendingRows) -> list[RowChanges | RowChange]:
        """``pending``'s changes, waiting for them if need be: one ``RowChanges``, or a ``RowChange`` a
        row where a process sent values back. Raises ``DecoderLost`` if a process ended."""
        batch = pending.batch
        if batch.worker < 0:
            self.flush()
        worker = self._workers[batch.worker]
        while batch.results is None:
            if not worker.conn.poll(POLL_S) and not worker.process.is_alive():
                raise DecoderLost(f"decoder process {worker.process.pid} ended ({worker.process.exitcode})")
            if worker.conn.poll(0):
                self._receive(worker)
        results = batch.results
        if isinstance(results, str):
            raise FatalSourceError(f"a decoder process could not decode rows of {pending.table}: {results}")
        self.ahead_bytes -= pending.size
        decoded = results[pending.index]
        self.rows[batch.worker] += len(decoded.keys)
        gtid, table, op, ts = pending.gtid, pending.table, pending.op, pending.source_ts
        if decoded.bodies is not None:
            return [RowChanges(gtid, table, op, decoded.keys, decoded.old_keys, decoded.bodies, ts)]
        return _row_changes(pending, decoded)

    def discard(self) -> None:
        """Forget everything in flight (the stream will read it again); answers still due are dropped
        when they come."""
        self._open = None
        self.ahead_bytes = 0

    def close(self) -> None:
        """Stop the processes (a new event starts new ones)."""
        self.discard()
        workers, self._workers = self._workers, []
        for worker in workers:
            with contextlib.suppress(OSError, ValueError):
                worker.conn.send(None)
        for worker in workers:
            worker.process.join(timeout=1.0)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(timeout=1.0)
            worker.conn.close()
        self._shape_ids.clear()
        self._shapes.clear()

    def pids(self) -> list[int]:
        """The running processes' ids (tests kill one)."""
        return [w.process.pid for w in self._workers]

    def _forget_shapes(self) -> None:
        self._shape_ids.clear()
        self._shapes.clear()
        for worker in self._workers:
            worker.known.clear()
            worker.reset = True

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        for n in range(self.count):
            ours, theirs = context.Pipe(duplex=True)
            process = context.Process(
                target=serve, args=(theirs, self.json), name=f"gtidsnap-decoder-{n}", daemon=True
            )
            process.start()
            theirs.close()  # ours sees EOF once the process ends
            self._workers.append(_Worker(process, ours))
            self.started += 1
        self._turn = 0

    def _receive(self, worker: _Worker) -> None:
        try:
            batch_id, results = worker.conn.recv()
        except (EOFError, OSError) as exc:
            raise DecoderLost(f"decoder process {worker.process.pid} ended ({exc or 'pipe closed'})") from exc
        batch = worker.sent.popleft()
        if batch.id != batch_id:  # answers come in the order asked; anything else is a bug
            raise FatalSourceError(f"decoder answered batch {batch_id} for batch {batch.id}")
        batch.results = results


def _bare(schema: TableSchema) -> TableSchema:
    """The schema without its cached readers (closures do not pickle); the process makes its own."""
    return TableSchema(schema.table, schema.columns, schema.key)


def _row_changes(pending: PendingRows, decoded: Decoded) -> list[RowChanges | RowChange]:
    """The ``RowChange`` s of an event a process sent back as values, as the translator makes them."""
    images = decoded.images or []
    gtid, table, op, ts, keys = pending.gtid, pending.table, pending.op, pending.source_ts, decoded.keys
    key_names = pending.key_names
    if op == "u":
        olds = decoded.old_keys or (None,) * len(keys)
        pairs = zip(images[::2], images[1::2], keys, olds, strict=True)
        return [RowChange(gtid, table, "u", k, b, a, o, ts, key_names) for b, a, k, o in pairs]
    if op == "c":
        return [
            RowChange(gtid, table, "c", k, None, a, None, ts, key_names)
            for a, k in zip(images, keys, strict=True)
        ]
    return [
        RowChange(gtid, table, "d", k, b, None, None, ts, key_names)
        for b, k in zip(images, keys, strict=True)
    ]
