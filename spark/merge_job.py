"""Merge gtidsnap's JSON-lines output into Delta Lake tables, as a Spark job.

Reads the changes file of ``gtidsnap run`` with ``sink.type = "jsonl"`` from where this job stopped
last time, up to what gtidsnap has checkpointed, and writes the mirror and changelog tables under
``--path`` with the Delta sink itself (:class:`gtidsnap.sinks.delta.DeltaSink`): the same layout, types,
merge rules and exactly-once protocol as ``gtidsnap run`` with ``sink.type = "delta"``.

* Column types and keys come from the replica of ``--config`` ([source], the read-only user, and
  [capture] surrogate keys): JSON values do not say their MySQL type. Columns the replica no longer has
  are not written.
* Only bytes up to the gtidsnap checkpoint's ``sink_position`` are read ([checkpoint] path of the
  config): gtidsnap truncates anything after it when it restarts. ``--to-end`` reads to the end of the
  file instead, for an output whose gtidsnap has stopped for good.
* ``--state`` is this job's own checkpoint ``{"offset": ..., "sink_position": ...}``, replaced atomically
  after every Delta commit; a killed job resumes from it and the sink undoes a batch committed after it.

Run it with the repo's venv (``.venv/bin/python spark/merge_job.py ...``) or ``spark-submit`` (with
``PYSPARK_PYTHON`` pointing at a Python that has gtidsnap installed)::

    spark-submit spark/merge_job.py --config gtidsnap.toml --input gtidsnap-out/changes.jsonl \\
        --path /lake/gtidsnap --master 'local[2]'
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

try:
    import gtidsnap  # noqa: F401
except ImportError:  # run from a checkout without installing: the repo root is the parent of spark/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gtidsnap.config.loading import Config, SinkSettings, load_config
from gtidsnap.config.settings import DEFAULTS
from gtidsnap.core.errors import GtidsnapError
from gtidsnap.core.model import TableId
from gtidsnap.core.records import Record
from gtidsnap.core.schema_cache import SchemaCache
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.sinks.delta import DeltaSink, job_spark_session
from gtidsnap.source.replica import Replica

log = logging.getLogger("gtidsnap.merge_job")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="merge_job.py",
        description="Merge gtidsnap's JSON-lines changes into Delta mirror and changelog tables "
        "(the same code, types and exactly-once protocol as the Delta sink).",
    )
    parser.add_argument(
        "--config",
        type=Path,
        required=True,
        help="gtidsnap TOML config: [source] for "
        "the table shapes, [checkpoint] for how far the input is committed",
    )
    parser.add_argument("--input", type=Path, help="the changes file (default: the config's sink.path)")
    parser.add_argument("--path", required=True, help="root of the Delta tables (any Spark path or URI)")
    parser.add_argument(
        "--state", type=Path, help="this job's checkpoint (default: <input>.merge-state.json)"
    )
    parser.add_argument(
        "--master", default=DEFAULTS["sink"]["spark_master"], help="Spark master URL (default: %(default)s)"
    )
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=DEFAULTS["sink"]["batch_rows"],
        help="records per Delta commit (default: %(default)s)",
    )
    parser.add_argument(
        "--app-id", default="", help="txnAppId of the Delta writes (default: derived from --path)"
    )
    parser.add_argument("--no-changelog", action="store_true", help="write the mirror tables only")
    parser.add_argument(
        "--to-end",
        action="store_true",
        help="read to the end of the input, not only "
        "to gtidsnap's checkpoint (only for an output gtidsnap no longer writes)",
    )
    args = parser.parse_args(argv)
    if args.batch_rows < 1:
        parser.error("--batch-rows must be at least 1")
    return args


def refresh_for(shapes: SchemaCache, records: Sequence[Record]) -> None:
    """Read a table's shape again when its records show columns the known shape lacks (a column
    added since the shape was read)."""
    for table in {r.table for r in records}:
        names = {c.name for c in shapes.current_or_last(table).columns}
        if any(set(r.after or r.before or {}) - names for r in records if r.table == table):
            shapes.forget(table)


def record_of(data: dict[str, Any]) -> Record:
    """A line of the JSON-lines sink (:meth:`Record.to_json`) back as a record."""
    return Record(
        op=data["op"],
        table=TableId.parse(data["table"]),
        key=tuple(data["key"]),
        before=data["before"],
        after=data["after"],
        gtid=data["gtid"],
        seq=int(data["seq"]),
        snapshot=bool(data["snapshot"]),
        source_ts=int(data["source_ts"]),
    )


def batches(path: Path, start: int, stop: int, rows: int) -> Iterator[tuple[list[Record], int]]:
    """Records of whole lines in bytes [start, stop), ``rows`` at a time, each with the offset after it."""
    with path.open("rb") as f:
        f.seek(start)
        batch: list[Record] = []
        offset = start
        for line in f:
            if offset + len(line) > stop or not line.endswith(b"\n"):
                break
            batch.append(record_of(json.loads(line)))
            offset += len(line)
            if len(batch) >= rows:
                yield batch, offset
                batch = []
        if batch:
            yield batch, offset


def load_state(path: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return state


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (write, fsync, rename), like gtidsnap's checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def committed_bytes(config: Config, input_path: Path, to_end: bool) -> int:
    """How far the input may be read: gtidsnap's committed length, or the whole file with --to-end."""
    size = input_path.stat().st_size
    if to_end:
        return size
    checkpoint = CheckpointStore(config.checkpoint_path).load()
    if checkpoint is None or not isinstance(checkpoint.sink_position, int):
        raise GtidsnapError(
            f"no JSON-lines checkpoint at {config.checkpoint_path}: the input's committed length is "
            "unknown; point --config at gtidsnap's config, or pass --to-end for an output gtidsnap "
            "no longer writes"
        )
    return min(size, checkpoint.sink_position)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_config(args.config)
        input_path = args.input or Path(config.sink.path)
        state_path = args.state or input_path.with_name(input_path.name + ".merge-state.json")
        state = load_state(state_path)
        start = int(state["offset"]) if state else 0
        stop = committed_bytes(config, input_path, args.to_end)
        if stop < start:
            raise GtidsnapError(
                f"{input_path} has {stop} committed bytes but {state_path} says {start} were merged: "
                "the input was replaced; merge it into a new --path with a new --state"
            )
        settings = SinkSettings(
            type="delta",
            path=args.path,
            spark_master=args.master,
            changelog=not args.no_changelog,
            app_id=args.app_id,
        )
        spark = job_spark_session(args.master, "gtidsnap-merge")
        started, merged = time.monotonic(), 0
        with Replica(config.source) as replica:
            keys = dict(config.surrogate_keys)
            shapes = SchemaCache(lambda table: replica.schema(table, keys.get(table)))
            sink = DeltaSink(settings, lambda: spark, shapes.current_or_last)
            sink.open(state["sink_position"] if state else None)
            try:
                offset = start
                for records, offset in batches(input_path, start, stop, args.batch_rows):
                    refresh_for(shapes, records)
                    sink.write(records)
                    position = sink.commit()
                    save_state(state_path, {"offset": offset, "sink_position": position})
                    merged += len(records)
                    log.info("merged %d records, %s at byte %d of %d", merged, position, offset, stop)
                sink.drain()  # the mirrors take every change still waiting for their MERGE
                save_state(state_path, {"offset": offset, "sink_position": sink.commit()})
            finally:
                sink.close()
    except GtidsnapError as exc:
        print(f"merge_job: {exc}", file=sys.stderr)
        return 1
    took = time.monotonic() - started
    print(f"merged {merged} records into {sink.root} in {took:.1f} s; state in {state_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
