"""A decoder process (:mod:`gtidsnap.source.binlog.row_decoders` runs them): batches of rows events'
row bytes in, each event's keys and JSON bodies (or, for an output that wants values, its normalised
images) out, in the order asked. Kept apart from the pool so the process imports only what decoding
needs, and so the pool's watch over its processes reads on its own."""

from __future__ import annotations

import pickle
import queue
import threading
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import orjson

from gtidsnap.core.column_values import plain_value
from gtidsnap.core.model import Key, Op
from gtidsnap.core.schema import TableSchema
from gtidsnap.source.binlog import values
from gtidsnap.source.binlog.row_images import NormalImageReader, normal_image_reader, read_images

READY = -1
"""The batch id of the message a process sends once started (its imports done): the pool's clock of
the process starts then."""


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
    values.install()  # the library's value decoding as in the stream's process (source/binlog/library.py)
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    sender = threading.Thread(target=_send_answers, args=(conn, outbox), name="answers", daemon=True)
    sender.start()
    outbox.put(pickle.dumps((READY, None), pickle.HIGHEST_PROTOCOL))  # its clock starts now
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
