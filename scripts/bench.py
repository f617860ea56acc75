"""The gtidsnap benchmark, on the local replicas of the harness (run it through ``scripts/bench``).

Measures, per flavour (MariaDB, MySQL), on tables of ``--rows`` rows (BIGINT key, VARCHAR(64), INT,
DATETIME, DECIMAL(12,2), TEXT) in the database ``bench`` (loaded once, reused):

  a. snapshot rows/s into JSON lines and into Delta (the real CLI) against a bare PyMySQL keyset scan
     (the limit), a writer changing ~1,000 rows/s on the primary meanwhile -> ratios; the Delta run
     also against Spark's best append of the same rows (read once more and rendered by gtidsnap's
     own Arrow renderer with the mirror's meta columns) into a fresh Delta table, in a SparkSession
     built as gtidsnap builds its own, after a warm-up: from Arrow in 250,000-row Arrow batches, and
     from Parquet staged by pyarrow (250,000-row files) -> ratios to both; CPU-seconds per row of
     each process of the gtidsnap run (engine, readers, JVM);
  b. binlog streaming rows/s of ``--rows`` row changes into JSON lines and into Delta (the real CLI)
     against a bare python-mysql-replication decode of the same changes (the limit) -> ratios, and
     Debezium's embedded engine (the peer, jars by scripts/debezium/deps.sh) on the same changes;
  c. binlog pause per chunk minus the chunk SELECT's own time, p50 and p99 (in process);
  d. time for a chunk's window to close on an idle source, default heartbeat (in process);
  e. peak RSS of the CLI's snapshot into JSON lines of ``--rows`` and ``--big-rows`` tables -> ratio;
  f. freshness of the Delta output against the offered rate (``--latency-rates``, default 1,000,
     2,000, 5,000, 10,000 rows/s): per rate one ``gtidsnap run`` (default settings: a batch every
     second into the changelog and the mirror's new keys, the others MERGEd every
     ``sink.merge_interval_s``) following a fresh
     table into which a writer inserts at that rate for ``--latency-seconds``; commit-to-visible
     latency p50 and p99 of every row in the changelog (the commit that added its file) and in the
     mirror (its first insert in the Change Data Feed), the rate the writer reached and the rate
     gtidsnap sustained, against the issue's targets (changelog p50 <= 1 s and p99 <= 3 s, mirror
     p50 <= 15 s at 5,000 rows/s, no growing backlog).
  g. parallel chunk readers (``snapshot.readers``): snapshot rows/s into JSON lines with 0, 1 and 2
     readers against the bare keyset scan, then 2 readers while a writer inserts 2,000 rows/s into a
     second captured table: the stream's lag (source commit to the line in the output), p50/p99, and
     the snapshot's rate against its rate with no writer (scripts/bench_lib/parallel.py).
  h. failover: a snapshot into JSON lines and into Delta on ``source.hosts`` (the second replica, then
     the first) under the ~1,000 rows/s writer; the second replica's server killed (SIGKILL) once a
     tenth of the table is read: seconds from the kill to the run continuing on the first replica and
     to its first checkpoint there, against ``source.retry_for_s`` + 5 s (scripts/bench_lib/failover.py).

Every limit is measured in the same run, right before and after what it is compared with (the
machine is shared and noisy). Asserts nothing: the figures go to ``--out``/bench-<label>.json (and
.md, .png, and bench-latest.*); ``--update-docs`` puts the table into docs/benchmarks.md.

    scripts/bench                                     # everything, 1M / 5M rows, both flavours
    scripts/bench --rows 100000 --big-rows 300000 --label dev
    scripts/bench --only a,c --flavors mysql --label after --compare before --update-docs
    scripts/bench --render-only --label after --compare before --update-docs   # no measuring
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import logging
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_lib import env, failover, latency, parallel, pauses, report, snapshot, streaming
from bench_lib.context import WRITER_RATE, Context, stop_spark
from bench_lib.tables import ensure_table

from gtidsnap.config.loading import DEFAULTS

log = logging.getLogger("bench")

MEASURES: dict[str, Callable[[Context], dict[str, Any]]] = {
    "a": snapshot.measure_a,
    "b": streaming.measure_b,
    "c": pauses.measure_c,
    "d": pauses.measure_d,
    "e": snapshot.measure_e,
    "f": latency.measure_f,
    "g": parallel.measure_g,
    "h": failover.measure_h,
}


def _parts(text: str) -> list[str]:
    """``a,c`` (or ``ac``) -> ["a", "c"], always in the order a..f (e. reuses a.'s 1M-row run)."""
    chosen = env.choices(",".join(c for c in text if c not in ", "), tuple(report.PARTS), "parts")
    return [p for p in report.PARTS if p in chosen]


def _rates(text: str) -> list[float]:
    """``1000,5000`` -> [1000.0, 5000.0]: positive rows/s, each once, in the order given."""
    try:
        rates = [float(t) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"rates: {text!r}: {exc}") from None
    if not rates or any(not 0 < r < float("inf") for r in rates):
        raise argparse.ArgumentTypeError(f"rates: {text!r}; give positive rows/s, e.g. 1000,5000")
    return list(dict.fromkeys(rates))


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="scripts/bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--rows", type=int, default=1_000_000, help="rows of the table (a, c, e) and row changes (b)"
    )
    ap.add_argument("--big-rows", type=int, default=5_000_000, help="rows of the second table of e.")
    ap.add_argument(
        "--tx-rows",
        type=int,
        default=1_000,
        help="rows per transaction of b.'s changes (a divisor of 10,000)",
    )
    ap.add_argument("--flavors", default="mariadb,mysql", type=env.flavors)
    ap.add_argument("--only", default="abcdefgh", type=_parts, help="parts to run, e.g. a,c (default: all)")
    ap.add_argument(
        "--chunk-size", type=int, default=int(DEFAULTS["snapshot"]["chunk_size"]), help="rows per chunk"
    )
    ap.add_argument(
        "--latency-seconds", type=float, default=60.0, help="how long f.'s writer runs, at each rate"
    )
    ap.add_argument(
        "--latency-rates",
        type=_rates,
        default=",".join(f"{r:g}" for r in latency.RATES),
        help="f.'s offered rates, rows/s, comma-separated (default: %(default)s); one gtidsnap run each",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds a gtidsnap run (or f.'s catching up) may take; then it is stopped and measured as "
        "far as it got (marked in the results)",
    )
    ap.add_argument("--out", type=Path, default=env.REPO / "scripts" / "results", help="results folder")
    ap.add_argument("--label", default="run", help='stored in the JSON and the file names, e.g. "before"')
    ap.add_argument("--compare", metavar="LABEL", help="put bench-LABEL.json's figures beside these")
    ap.add_argument(
        "--update-docs", action="store_true", help="fill docs/benchmarks.md's table from the results"
    )
    ap.add_argument(
        "--render-only", action="store_true", help="measure nothing: render bench-<label>.json again"
    )
    a = ap.parse_args(argv)
    if a.rows < 10 * a.chunk_size or a.big_rows < a.rows:
        ap.error("--rows must be at least 10 chunks, and --big-rows at least --rows")
    if a.tx_rows < 1 or 10_000 % a.tx_rows:
        ap.error("--tx-rows must divide 10,000 (the rows of b.'s table)")
    return a


def measure(a: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    started = time.monotonic()
    pairs = {f: env.Pair.of(f) for f in a.flavors}
    result: dict[str, Any] = {
        "label": a.label,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": env.machine(),
        "git": env.git_commit(),
        "settings": {
            "command": shlex.join(["scripts/bench", *argv]),
            "rows": a.rows,
            "big_rows": a.big_rows,
            "tx_rows": a.tx_rows,
            "chunk_size": a.chunk_size,
            "flavors": a.flavors,
            "parts": a.only,
            "writer_rows_per_s": WRITER_RATE,
            "latency_rows_per_s": latency.RATE,
            "latency_rates": a.latency_rates,
            "latency_seconds": a.latency_seconds,
            "batch_ms": int(DEFAULTS["sink"]["batch_ms"]),
            "merge_interval_s": DEFAULTS["sink"].get("merge_interval_s"),
            "merge_rows": DEFAULTS["sink"].get("merge_rows"),
            "timeout_s": a.timeout,
            "heartbeat_s": float(DEFAULTS["binlog"]["heartbeat_s"]),
        },
        "servers": {f: p.version() for f, p in pairs.items()},
        "results": {f: {} for f in a.flavors},
        "durations_s": {f: {} for f in a.flavors},
    }
    contexts = {
        f: Context(
            p, a.rows, a.big_rows, a.chunk_size, a.latency_seconds, a.label, a.timeout, tx_rows=a.tx_rows
        )
        for f, p in pairs.items()
    }
    for f, ctx in contexts.items():  # the big tables first: loading them is slow, and reused next time
        t0 = time.monotonic()
        if set(a.only) & set("acegh"):  # the parts that read the --rows table
            ensure_table(ctx.pair, ctx.table, ctx.rows)
        if "e" in a.only:
            ensure_table(ctx.pair, ctx.big_table, ctx.big_rows)
        result["durations_s"][f]["load"] = round(time.monotonic() - t0, 1)
    measures: dict[str, Callable[[Context], dict[str, Any]]] = {
        **MEASURES,
        "f": functools.partial(latency.measure_f, rates=a.latency_rates),
    }
    json_path = a.out / f"bench-{a.label}.json"
    a.out.mkdir(parents=True, exist_ok=True)
    for part in a.only:  # a part for every flavour, then the next: the flavours are measured close in time
        for f, ctx in contexts.items():
            log.info("=== %s: %s", f, part)
            t0 = time.monotonic()
            try:
                result["results"][f][part] = measures[part](ctx)
            except Exception as exc:  # one failed part must not waste the others
                log.error("%s %s failed:\n%s", f, part, traceback.format_exc())
                result["results"][f][part] = {"error": f"{type(exc).__name__}: {exc}"[:1000]}
            result["durations_s"][f][part] = round(time.monotonic() - t0, 1)
            log.info("=== %s: %s took %.0f s", f, part, result["durations_s"][f][part])
            json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")  # progress so far
        if part == "f":
            stop_spark()
    result["total_s"] = round(time.monotonic() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("pymysqlreplication", "py4j", "gtidsnap"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    result = report.load(a.out / f"bench-{a.label}.json") if a.render_only else measure(a, argv)
    compare = report.load(a.out / f"bench-{a.compare}.json") if a.compare else None
    written = report.write(result, a.out, compare)
    if a.update_docs:
        report.update_docs(env.REPO / "docs" / "benchmarks.md", result, compare)
        written.append(env.REPO / "docs" / "benchmarks.md")
    print(report.markdown(result, compare))
    for path in written:
        print(f"wrote {path}")
    failed = [(f, p) for f, r in result["results"].items() for p, v in r.items() if "error" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
