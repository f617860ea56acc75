"""Rows events decoded in decoder processes, so the stream uses a second core.

Why: the engine's thread was the stream's limit. Most of a streamed change's CPU went to reading its row
images and writing its JSON (the engine then only keeps order, windows' keys and the checkpoint), and one
Python thread runs on one core. For a JSON-lines output the stream now sends a rows event's row bytes to
a decoder process (:mod:`gtidsnap.source.binlog.decoder_process`), which reads the images
(:mod:`gtidsnap.source.binlog.row_images`, the same readers), computes each row's key and writes each
change's JSON; the engine's thread gets back the keys and the bytes, one
:class:`gtidsnap.core.model.RowChanges` an event, and splices the lines
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

A process that neither answers nor dies (stopped with SIGSTOP, swapped out, stuck in the kernel) is
watched like a chunk reader: once the oldest batch it was sent has not come back within ``hung_after_s``
(plus a second a MiB of the batch's rows), or a send to it or a receive of its answer has not moved a byte
for that long (its socket buffer full, an answer stopped half-written), it is reported with one WARNING
naming it, killed, and the same ``DecoderLost`` follows: the batch is decoded again by new processes,
nothing lost or repeated. The clock of a process starts once it said it is ready (its imports done), so a
slow start on a busy machine is not taken for a hang.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from gtidsnap.core.errors import FatalSourceError, SourceError
from gtidsnap.core.gtid import Gtid
from gtidsnap.core.model import Op, RowChange, RowChanges, TableId
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.binlog.decoder_process import READY, Decoded, serve

log = logging.getLogger(__name__)

BATCH_BYTES = 32 * 1024
"""Most row bytes in one batch sent to a process: a message each way costs tens of microseconds, so
small transactions' events travel many to a message."""

MOST_SHAPES = 512
"""Table shapes a process keeps; past it every process forgets them and is sent them again."""

POLL_S = 1.0
"""How often a wait for a process's answer checks that the process is alive and not hung."""

HUNG_AFTER_S = 20.0
"""How long a process may hold its oldest batch before it counts as stopped or hung. A batch is at most
``BATCH_BYTES`` of rows (milliseconds of work) or one larger event (``HUNG_BYTES_PER_S`` more), so this is
all slack for a busy machine; it stays under the 30 s after which ``/readyz`` says the stream is quiet."""

HUNG_BYTES_PER_S = 1024 * 1024
"""Bytes of a batch's rows a process is given a second for, on top of ``hung_after_s`` (one event of a
row with a large BLOB is a batch of its own)."""

MIN_HUNG_AFTER_S = 1.0
"""The shortest ``hung_after_s``: a healthy process taken for hung costs a restart and a re-read."""

START_S = 60.0
"""How long a new process may take to start (its imports: half a second of CPU) before it counts as hung."""

MAX_HUNG_AFTER_S = 600.0
"""The longest ``hung_after_s``: a stream held longer than this by one process is not waiting, it is stuck."""


class DecoderLost(SourceError):
    """A decoder process ended (killed, out of memory) or hung: what was read ahead is read again."""


class DecoderHung(DecoderLost):
    """A decoder process held a batch past the bound (reported and killed already)."""


@dataclass(eq=False, slots=True)
class _Batch:
    id: int
    events: list[tuple[int, Op, bytes]] = field(default_factory=list)
    size: int = 0
    worker: int = -1  # -1: not sent yet
    results: list[Decoded] | str | None = None
    sent_at: float = 0.0  # time.monotonic() when it went to its process


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
    number: int  # its place (its name: gtidsnap-decoder-<number>)
    started_at: float  # time.monotonic() when it was started
    known: set[int] = field(default_factory=set)  # shape ids the process has
    sent: deque[_Batch] = field(default_factory=deque)  # batches asked, not answered yet, in order
    reset: bool = False  # forget every shape before the next batch
    ready_at: float | None = None  # when it said it had started (None: not yet)
    hung: bool = False  # reported and killed: nothing more is sent to it

    def describe(self) -> str:
        return f"gtidsnap-decoder-{self.number} (pid {self.process.pid})"


class RowDecoders:
    """``count`` decoder processes, started on the first event sent and again after one is lost.
    ``json``: they write each change's JSON (a JSON-lines output); False: they send the normalised
    values back (Delta builds its columns from them), still sparing the engine's thread the decoding."""

    def __init__(
        self,
        count: int,
        batch_bytes: int = BATCH_BYTES,
        json: bool = True,
        hung_after_s: float | None = None,
    ) -> None:
        """``hung_after_s``: how long a process may hold a batch before it counts as stopped or hung and
        is replaced (None: ``HUNG_AFTER_S``; at least ``MIN_HUNG_AFTER_S``)."""
        if count < 1:
            raise ValueError(f"decoder processes must be at least 1, got {count}")
        hung = HUNG_AFTER_S if hung_after_s is None else hung_after_s
        if not MIN_HUNG_AFTER_S <= hung <= MAX_HUNG_AFTER_S:  # NaN too
            raise ValueError(
                f"hung_after_s = {hung!r}: a decoder must be given from {MIN_HUNG_AFTER_S:g} to "
                f"{MAX_HUNG_AFTER_S:g} s for a batch before it counts as hung"
            )
        self.hung_after_s = hung
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
        if worker.ready_at is None and worker.conn.poll(0):
            self._receive(worker)  # it is ready: sends to it get hung_after_s from now on
        reset, worker.reset = worker.reset, False
        batch.worker = index
        batch.sent_at = time.monotonic()
        worker.sent.append(batch)  # before it is sent: a send that times out is the batch held too long
        try:
            worker.conn.send((batch.id, reset, new_shapes, batch.events))
        except BlockingIOError as exc:  # no byte moved for hung_after_s: its socket buffer stayed full
            raise self._hung(worker, time.monotonic() - batch.sent_at) from exc
        except (OSError, ValueError) as exc:
            raise DecoderLost(f"decoder process {worker.process.pid} is gone ({exc})") from exc
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
        wait_s = min(POLL_S, self.hung_after_s / 4)
        while batch.results is None:
            if worker.conn.poll(wait_s):
                self._receive(worker)
                continue
            if not worker.process.is_alive():
                raise DecoderLost(f"decoder process {worker.process.pid} ended ({worker.process.exitcode})")
            self._check_hung(worker)
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
        """Stop the processes (a new event starts new ones); one that is hung or stopped is killed (a
        send to it could wait, and it would never end by itself)."""
        self.discard()
        workers, self._workers = self._workers, []
        for worker in workers:
            if worker.hung or _stopped(worker.process.pid):
                worker.process.kill()
                continue
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
            _timeouts(ours, max(START_S, self.hung_after_s))  # hung_after_s once it is ready
            process = context.Process(
                target=serve, args=(theirs, self.json), name=f"gtidsnap-decoder-{n}", daemon=True
            )
            process.start()
            theirs.close()  # ours sees EOF once the process ends
            self._workers.append(_Worker(process, ours, n, time.monotonic()))
            self.started += 1
        self._turn = 0

    def _check_hung(self, worker: _Worker) -> None:
        """Raise ``DecoderHung`` (the process reported and killed) if its oldest batch is overdue: sent
        ``hung_after_s`` ago (plus its bytes' allowance), counted from its start once it is ready."""
        if not worker.sent:
            return
        head, now = worker.sent[0], time.monotonic()
        if worker.ready_at is None:
            since, allowed = worker.started_at, max(START_S, self.hung_after_s)
        else:
            since, allowed = max(head.sent_at, worker.ready_at), self.hung_after_s
        waited = now - since
        if waited > allowed + head.size / HUNG_BYTES_PER_S:
            raise self._hung(worker, waited)

    def _hung(self, worker: _Worker, waited: float) -> DecoderHung:
        """Report ``worker`` as hung, once, and kill it; the error for the stream to read again."""
        state = "never said it started" if worker.ready_at is None else "has not answered its batch"
        log.warning(
            "binlog decoder %s %s in %.0f s (the process is stopped or hung): it is killed, the decoders "
            "are started again and the rows read again",
            worker.describe(),
            state,
            waited,
        )
        worker.hung = True
        with contextlib.suppress(OSError):
            worker.process.kill()
        return DecoderHung(f"decoder process {worker.process.pid} hung ({state} in {waited:.0f} s)")

    def _receive(self, worker: _Worker) -> None:
        try:
            batch_id, results = worker.conn.recv()
        except BlockingIOError as exc:  # an answer begun and not finished within hung_after_s
            since = worker.sent[0].sent_at if worker.sent else worker.started_at
            raise self._hung(worker, time.monotonic() - since) from exc
        except (EOFError, OSError) as exc:
            raise DecoderLost(f"decoder process {worker.process.pid} ended ({exc or 'pipe closed'})") from exc
        if batch_id == READY:
            worker.ready_at = time.monotonic()
            _timeouts(worker.conn, self.hung_after_s)
            return
        batch = worker.sent.popleft()
        if batch.id != batch_id:  # answers come in the order asked; anything else is a bug
            raise FatalSourceError(f"decoder answered batch {batch_id} for batch {batch.id}")
        batch.results = results


def _timeouts(conn: Any, seconds: float) -> None:
    """A send or a receive on ``conn`` (a socket pair's end) that moves no byte for ``seconds`` fails with
    ``BlockingIOError`` instead of waiting for ever on a process that stopped: one that no longer reads
    (its buffer full), or one stopped in the middle of writing an answer (the rest never comes)."""
    sock = socket.socket(fileno=conn.fileno())
    try:
        whole = int(seconds)
        timeval = struct.pack("ll", whole, int((seconds - whole) * 1e6))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    finally:
        sock.detach()  # the descriptor stays the connection's


def _stopped(pid: int) -> bool:
    """Is the process stopped (SIGSTOP, a debugger): it would never read a request to end."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


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
