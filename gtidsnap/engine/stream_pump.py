"""A binlog stream read on its own thread, so the engine's loop can wait on it with a timeout.

Why: the engine's loop waits on several things at once, the readers' chunk results and the binlog
stream. :meth:`gtidsnap.source.binlog.stream.BinlogStream.next` blocks for up to ``heartbeat_s`` when the
binlog is
idle; called from the loop, it would hold a finished chunk's rows back for up to a heartbeat. The
pump calls ``next`` on a thread of its own and hands the events over through a queue, which the
loop polls with any timeout it likes (0: just look).

Order is kept: one thread reads the stream and puts the events into one FIFO queue, the loop takes
them out in that order. ``None`` from the stream (nothing within a heartbeat) is not queued.

Events cross in batches: a batch is queued at the end of each transaction (its ``TxCommit``), at a
heartbeat, when the stream has nothing for a moment, and at ``BATCH_EVENTS`` events: one queue
operation (two locks and a condition each side) per batch, not per event; the engine acts only
between transactions anyway, and a transaction's events come from the server at once. The thread
itself still costs the stream about a quarter of its rate (two Python threads, one interpreter), so
the engine pumps only while chunk readers have work (:class:`PumpedStream`).

Memory stays bounded: the queue holds at most ``max_events`` events (in whole batches; a decoder's
``RowChanges`` weighs its rows); when it is full the thread waits (checking every 0.1 s whether it was
closed) with one batch at most in hand, and asks the stream for nothing more.

A failure of the stream ends the thread; :meth:`StreamPump.next` hands out every event read before
it, in order, then raises that same exception object, on that call and every later one.

Exact resume is unaffected: the engine's checkpoint names only what the engine itself processed
(the transactions it took out of the pump and handled), never what the pump read ahead. Events
still queued when the run stops are simply read again from the binlog on the next run.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from gtidsnap.core.errors import SourceError
from gtidsnap.core.model import BinlogEvent, Heartbeat, RowChanges, SchemaChange, TxCommit
from gtidsnap.core.ports import StreamPort
from gtidsnap.core.schema_cache import SchemaCache

log = logging.getLogger(__name__)

PUT_POLL_S = 0.1
"""How often a pump thread blocked on a full queue looks whether it was closed."""

BATCH_EVENTS = 1000
"""Most events in one batch (a transaction's batch ends at its commit, usually far sooner)."""

DETACH_TIMEOUT_S = 60.0
"""How long :meth:`StreamPump.detach` waits for the thread's read in progress before giving up."""

JOIN_TIMEOUT_S = 5.0
"""How long :meth:`StreamPump.close` waits for the thread (a stream's ``next`` blocks ~1 heartbeat)."""


@dataclass(frozen=True)
class _Failure:
    """Queued after the last event when the stream raised."""

    error: BaseException


class StreamPump:
    """Reads ``stream`` on a daemon thread, at most ``max_events`` ahead; see the module doc.

    One consumer thread calls :meth:`next`; :meth:`close` may come from that thread or any other.
    """

    def __init__(
        self, stream: StreamPort, max_events: int = 10_000, first: Iterable[BinlogEvent] = ()
    ) -> None:
        if max_events < 1:
            raise ValueError(f"max_events must be at least 1, not {max_events}")
        self._stream = stream
        self._max_events = max_events
        self._batch_events = min(BATCH_EVENTS, max_events)  # so a batch always fits an empty queue
        self._queue: queue.Queue[list[BinlogEvent] | _Failure] = queue.Queue()
        self._queued = 0  # events in the queue, under _room
        self._room = threading.Condition()
        self._taken: deque[BinlogEvent] = deque(first)  # the batch being handed out (``first``: before all)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._closed = False

    def start(self) -> StreamPump:
        """Start the reading thread; returns the pump itself."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the stream pump is closed")
            if self._thread is not None:
                raise RuntimeError("the stream pump is already started")
            self._thread = threading.Thread(target=self._run, name="gtidsnap-stream-pump", daemon=True)
            self._thread.start()
        return self

    @property
    def pending(self) -> int:
        """Events read ahead and not yet taken (approximate: the queue moves meanwhile)."""
        with self._queue.mutex:
            queued = sum(len(item) for item in self._queue.queue if isinstance(item, list))
        return queued + len(self._taken)

    def next(self, timeout_s: float) -> BinlogEvent | None:
        """The next event in stream order; None if none came within ``timeout_s`` (0: don't wait).

        Raises the stream's exception once every event read before it was handed out, and again on
        every later call.
        """
        if self._taken:
            return self._taken.popleft()
        if self._failure is not None:
            raise self._failure
        if self._thread is None:
            raise RuntimeError("the stream pump is not started")
        if self._closed:
            raise RuntimeError("the stream pump is closed")
        try:
            item = self._queue.get(timeout=timeout_s) if timeout_s > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None
        if isinstance(item, _Failure):
            self._failure = item.error
            raise item.error
        with self._room:
            self._queued -= _rows(item)
            self._room.notify()
        self._taken.extend(item)
        return self._taken.popleft()

    def close(self, timeout_s: float = JOIN_TIMEOUT_S) -> None:
        """Stop the thread (waiting at most ``timeout_s``), then close the stream. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
            if thread.is_alive():
                log.warning(
                    "the binlog stream's pump thread did not stop within %.1f s; closing the stream anyway",
                    timeout_s,
                )
        self._stream.close()

    def _run(self) -> None:
        """The thread: read until stopped or the stream fails. Every event read is queued, also when
        stopping (a detached pump hands them back; a closed one drops them with the stream)."""
        batch: list[BinlogEvent] = []
        weight = 0  # the batch's rows (_rows)
        try:
            while not self._stop.is_set():
                event = self._stream.next()
                if event is not None:
                    batch.append(event)
                    weight += len(event) if type(event) is RowChanges else 1
                    if weight < self._batch_events and not isinstance(event, TxCommit | Heartbeat):
                        continue
                if batch:
                    self._put(batch)
                batch, weight = [], 0
            if batch:  # stopped inside a transaction: what was read goes back too, or it would be lost
                self._put(batch)
        except BaseException as exc:  # handed to the consumer, whatever it is, after what came before
            if batch:
                self._put(batch)
            self._put(_Failure(exc))

    def _put(self, item: list[BinlogEvent] | _Failure) -> None:
        """Queue ``item``, waiting while the rows queued would pass ``max_events``, unless stopped (a
        batch larger than that alone goes in once the queue is empty)."""
        size = _rows(item) if isinstance(item, list) else 0
        with self._room:
            while self._queued and self._queued + size > self._max_events and not self._stop.is_set():
                self._room.wait(PUT_POLL_S)
            self._queued += size
        self._queue.put(item)

    def detach(self, timeout_s: float = DETACH_TIMEOUT_S) -> tuple[list[BinlogEvent], BaseException | None]:
        """Stop the thread and hand back, in order, the events it read that were not taken, and the
        stream's failure if it met one after them; the stream stays open, to be read directly from
        there on. Waits for the thread's read in progress (up to a heartbeat on an idle binlog)."""
        with self._lock:
            if self._closed or self._thread is None:
                raise RuntimeError("only a running stream pump can be detached")
            self._closed = True
            thread = self._thread
        self._stop.set()
        thread.join(timeout_s)
        if thread.is_alive():
            raise SourceError(f"the binlog stream did not return within {timeout_s:.0f} s")
        events, failure = list(self._taken), self._failure
        self._taken.clear()
        for item in self._queue.queue:  # the thread is gone: nothing else touches the queue
            if isinstance(item, _Failure):
                failure = item.error
                break
            events.extend(item)
        return events, failure


def _rows(batch: list[BinlogEvent]) -> int:
    """What a batch weighs against ``max_events``: its events, a decoder's ``RowChanges`` a row each."""
    return sum(len(e) if type(e) is RowChanges else 1 for e in batch)


class PumpedStream:
    """A binlog stream read on the caller's thread, or through a :class:`StreamPump` between
    :meth:`pump` and :meth:`unpump`: a pump only while chunk readers are at work (the loop then waits
    for events and finished reads together). Two Python threads sharing the interpreter cost the
    stream about a quarter of its rate, so the stream alone is read directly."""

    def __init__(self, stream: StreamPort, direct: StreamPort | None = None) -> None:
        """``direct``: the stream as the caller's thread reads it, if not ``stream`` (what only a pump
        thread reading ahead needs, such as :class:`ShapesForgotten`, left out)."""
        self._stream = stream
        self._direct = direct if direct is not None else stream
        self._pump: StreamPump | None = None
        self._backlog: deque[BinlogEvent] = deque()  # read by a detached pump, not taken yet
        self._failure: BaseException | None = None  # met by a detached pump after its backlog

    @property
    def pumped(self) -> bool:
        return self._pump is not None

    def next(self, timeout_s: float) -> BinlogEvent | None:
        """The next event; through the pump within ``timeout_s``, else as the stream's ``next`` does."""
        if self._pump is not None:
            return self._pump.next(timeout_s)
        if self._backlog:
            return self._backlog.popleft()
        if self._failure is not None:
            raise self._failure
        return self._direct.next()

    def reader(self, timeout_s: float) -> Callable[[], BinlogEvent | None]:
        """What reads the next events until the next :meth:`pump` or :meth:`unpump`: the stream's own
        ``next`` while nothing stands before it (no pump, backlog or failure), else :meth:`next` with
        ``timeout_s`` (one call less an event, for the loop's bursts of transactions)."""
        if self._pump is None and not self._backlog and self._failure is None:
            return self._direct.next
        return partial(self.next, timeout_s)

    def pump(self) -> None:
        """Read the stream on a thread from now on (a no-op if it is, or if it failed already)."""
        if self._pump is None and self._failure is None:
            backlog, self._backlog = self._backlog, deque()
            self._pump = StreamPump(self._stream, first=backlog).start()

    def unpump(self) -> None:
        """Read the stream on the caller's thread again, after what the pump read (a no-op if it is)."""
        if self._pump is not None:
            pump, self._pump = self._pump, None
            events, self._failure = pump.detach()
            self._backlog.extend(events)

    def close(self) -> None:
        if self._pump is not None:
            self._pump.close()
        else:
            self._stream.close()


class ShapesForgotten:
    """The stream as the pump reads it: a DDL makes the cached shapes of its tables go stale right when
    it is read, so the row events after it (translated on the pump's thread, ahead of the loop) are
    decoded with the new shape, as they were when the loop itself read the stream."""

    def __init__(self, stream: StreamPort, schemas: SchemaCache) -> None:
        self.stream = stream
        self.schemas = schemas

    def next(self) -> BinlogEvent | None:
        event = self.stream.next()
        if isinstance(event, SchemaChange):
            for table in event.tables:
                self.schemas.forget(table)
        return event

    def close(self) -> None:
        self.stream.close()
