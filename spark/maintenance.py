"""OPTIMIZE and VACUUM every Delta table gtidsnap wrote under a path, as a Spark job.

A commit per table every ``sink.batch_ms`` makes many small files: OPTIMIZE compacts them (a
``dataChange = false`` commit, invisible to Change Data Feed readers). VACUUM then deletes files no
version younger than the retention needs. The retention is never below 168 hours: time travel, Change
Data Feed readers and gtidsnap's own recovery (which reads the versions since its last checkpoint)
need those files.

Safe while gtidsnap runs: a write that loses a race with OPTIMIZE is retried by the sink, and this job
retries an OPTIMIZE that loses one.

Run it with the repo's venv (``.venv/bin/python spark/maintenance.py ...``) or ``spark-submit``::

    spark-submit spark/maintenance.py --path /lake/gtidsnap --master 'local[2]'
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:
    import gtidsnap  # noqa: F401
except ImportError:  # run from a checkout without installing: the repo root is the parent of spark/
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gtidsnap.config.loading import load_config
from gtidsnap.config.settings import DEFAULTS
from gtidsnap.sinks.delta import absolute_root, job_spark_session, list_tables
from gtidsnap.sinks.delta.catalog_names import location_of, same_place

MIN_RETENTION_HOURS = 168.0
ATTEMPTS = 3


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="maintenance.py",
        description="OPTIMIZE and VACUUM the Delta mirror and changelog tables gtidsnap wrote under --path.",
    )
    parser.add_argument("--path", help="root of the Delta tables (default: sink.path of --config)")
    parser.add_argument(
        "--config", type=Path, help="gtidsnap's config: sink.path, and the catalog of sink.database's names"
    )
    parser.add_argument(
        "--name",
        action="append",
        default=[],
        metavar="NAME",
        help="only the table of this catalog name, e.g. shop.orders__changelog (repeatable; needs the "
        "catalog: --config with sink.database, or spark-submit's settings)",
    )
    parser.add_argument(
        "--master", default=DEFAULTS["sink"]["spark_master"], help="Spark master URL (default: %(default)s)"
    )
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="DB.TABLE",
        help="only this source table (repeatable; default: every table under --path)",
    )
    parser.add_argument(
        "--retention-hours",
        type=float,
        default=MIN_RETENTION_HOURS,
        help=f"VACUUM keeps files younger than this; at least {MIN_RETENTION_HOURS:.0f} (default)",
    )
    parser.add_argument("--no-optimize", action="store_true", help="skip OPTIMIZE")
    parser.add_argument("--no-vacuum", action="store_true", help="skip VACUUM")
    parser.add_argument(
        "--dry-run", action="store_true", help="list what VACUUM would delete, delete nothing"
    )
    args = parser.parse_args(argv)
    if args.path is None and args.config is None:
        parser.error("give --path, or --config (its sink.path)")
    if args.retention_hours < MIN_RETENTION_HOURS:
        parser.error(
            f"--retention-hours {args.retention_hours:g} is below {MIN_RETENTION_HOURS:.0f}: time travel, "
            "Change Data Feed readers and gtidsnap's crash recovery need the files of recent versions"
        )
    return args


def retried(action: Callable[[], Any], what: str) -> Any:
    """Run a Delta command again when it lost a race with a concurrent writer (gtidsnap's MERGE)."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return action()
        except Exception as exc:
            if "Concurrent" not in type(exc).__name__ + str(exc)[:200] or attempt == ATTEMPTS:
                raise
            print(f"  {what}: conflicting commit, trying again", file=sys.stderr)
            time.sleep(attempt)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from delta.tables import DeltaTable

    sink = load_config(args.config).sink if args.config else None
    root = absolute_root(args.path or (sink.path if sink else ""))
    spark = job_spark_session(args.master, "gtidsnap-maintenance", sink, root)
    tables = [t for t in list_tables(spark, root) if not args.table or str(t.table) in args.table]
    if args.name:  # catalog names: the tables at their locations
        places = [location_of(spark, name) for name in args.name]
        tables = [t for t in tables if any(same_place(t.path, p) for p in places)]
    if not tables:
        print(f"no gtidsnap Delta tables under {root}", file=sys.stderr)
        return 1
    for ref in tables:
        print(f"{ref.table} ({ref.kind}) at {ref.path}")
        delta = DeltaTable.forPath(spark, ref.path)
        if not args.no_optimize:
            metrics = retried(lambda d=delta: d.optimize().executeCompaction().first(), "OPTIMIZE")
            m = metrics["metrics"] if metrics is not None else None
            print(
                f"  OPTIMIZE: {m['numFilesRemoved'] if m else 0} files compacted into "
                f"{m['numFilesAdded'] if m else 0}"
            )
        if not args.no_vacuum:
            hours = args.retention_hours
            if args.dry_run:
                files = spark.sql(f"VACUUM delta.`{ref.path}` RETAIN {hours} HOURS DRY RUN").count()
                print(
                    f"  VACUUM (dry run): {files} unreferenced files/folders older than {hours:g} h would go"
                )
            else:
                delta.vacuum(hours)
                print(f"  VACUUM: files no version of the last {hours:g} h needs are deleted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
