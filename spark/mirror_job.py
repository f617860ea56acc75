"""Keep gtidsnap's Delta mirrors from their changelogs, as a Spark job on any cluster.

For an output whose gtidsnap runs with ``sink.mirror = "job"`` (it then appends every record to the
changelogs and never writes a mirror): each pass merges into every mirror the changelog records it
does not hold yet, the newest per key, newest ``_seq`` winning, up to gtidsnap's checkpoint. The
mirror's own commits record how far it holds its changelog, so the job keeps no state: kill it at any
instant and run it again (see :mod:`gtidsnap.sinks.delta.mirror.job`).

Run it with the repo's venv or with ``spark-submit`` (``PYSPARK_PYTHON`` a Python with gtidsnap)::

    spark-submit spark/mirror_job.py --config gtidsnap.toml --every 60 --master yarn
    .venv/bin/python spark/mirror_job.py --path /lake/gtidsnap --checkpoint /shared/checkpoint.json
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

try:
    import gtidsnap  # noqa: F401
except ImportError:  # run from a checkout without installing: the repo root is the parent of spark/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gtidsnap.config.loading import load_config
from gtidsnap.config.settings import DEFAULTS
from gtidsnap.core.errors import GtidsnapError
from gtidsnap.engine.checkpoint_store import CheckpointStore
from gtidsnap.sinks.delta import POSITION_KEY, absolute_root, job_spark_session, list_tables
from gtidsnap.sinks.delta.catalog_names import Registrar
from gtidsnap.sinks.delta.mirror.job import merge_mirrors

log = logging.getLogger("gtidsnap.mirror_job")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mirror_job.py",
        description="Merge gtidsnap's Delta changelogs into their mirrors, incrementally and exactly "
        "once, up to gtidsnap's checkpoint (for sink.mirror = job).",
    )
    parser.add_argument(
        "--config", type=Path, help="gtidsnap's TOML config: the defaults of --path and --checkpoint"
    )
    parser.add_argument("--path", help="root of the Delta tables (any Spark path or URI; default: sink.path)")
    parser.add_argument(
        "--checkpoint",
        type=Path,
        help="gtidsnap's checkpoint file: how far the changelogs are final (default: checkpoint.path)",
    )
    parser.add_argument(
        "--master", default=DEFAULTS["sink"]["spark_master"], help="Spark master URL (default: %(default)s)"
    )
    parser.add_argument(
        "--every",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="run a pass every SECONDS until killed (default: one pass)",
    )
    args = parser.parse_args(argv)
    if args.every < 0:
        parser.error("--every must be 0 (one pass) or more")
    return args


def committed_batch(checkpoint: Path) -> int | None:
    """The Delta batch gtidsnap's checkpoint names (None: no checkpoint yet)."""
    saved = CheckpointStore(checkpoint).load()
    if saved is None:
        return None
    position = saved.sink_position
    if not isinstance(position, dict) or not isinstance(position.get(POSITION_KEY), int):
        raise GtidsnapError(
            f"the checkpoint {checkpoint} was not written by gtidsnap's Delta sink "
            f"(its sink position is {position!r}): point --checkpoint at the Delta output's checkpoint"
        )
    return int(position[POSITION_KEY])


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        config = load_config(args.config) if args.config else None
        path = args.path or (config.sink.path if config else None)
        checkpoint = args.checkpoint or (config.checkpoint_path if config else None)
        if path is None or checkpoint is None:
            raise GtidsnapError("give --config, or both --path and --checkpoint")
        root = absolute_root(path)
        spark = job_spark_session(args.master, "gtidsnap-mirror-job", config.sink if config else None, root)
        names = Registrar.of(spark, config.sink, []) if config else None  # sink.database: by name too
        while True:
            started = time.monotonic()
            deletion_vectors = config.sink.deletion_vectors if config else False
            passes = merge_mirrors(spark, root, committed_batch(checkpoint), deletion_vectors)
            written = [p for p in passes if p.how != "nothing"]
            if names is not None:
                for ref in list_tables(spark, root):
                    if ref.kind != "history":
                        names.register(ref)
            print(
                f"{len(written)} of {len(passes)} mirrors under {root} brought up to their changelogs "
                f"in {time.monotonic() - started:.1f} s",
                flush=True,
            )
            if not args.every:
                return 0
            time.sleep(max(0.0, args.every - (time.monotonic() - started)))
    except GtidsnapError as exc:
        print(f"mirror_job: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
