"""Whether the stream's memory is bounded: the peak RSS of ``gtidsnap run --until-caught-up`` into JSON
lines over N row changes and over 5N, in one run (issue 30's "RSS ratio 5M/1M changes <= 1.1").

Per flavour: two outputs are primed at the replica's current set (a first ``run --until-caught-up``
each), N changes go into the binlog (part b's UPDATEs of ``bench.churn``), the first output streams
them; then 4N more, and the second output streams all 5N from the same start. Each run's peak RSS is
the kernel's high-water mark of the engine's Python process (``VmHWM``) and of its chunk readers; the
ratio is 5N over N. Results: ``scripts/results/stream-memory-<label>.json`` and ``.md``.

Run on a quiet machine: ``.venv/bin/python scripts/bench_stream_memory.py --label s32``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from bench_lib import cli_run, env, report  # scripts/ is on sys.path: this file runs from there
from bench_lib.context import Context
from bench_lib.env import DATABASE
from bench_lib.stats import ratio
from bench_lib.streaming import CHURN_ROWS, CHURN_TABLE, generate_changes
from bench_lib.tables import ensure_table

RESULTS = Path(__file__).resolve().parent / "results"
log = logging.getLogger("bench.memory")


def run_once(ctx: Context, work: Path, settings: dict[str, str], name: str, changes: int) -> dict[str, Any]:
    """One ``run --until-caught-up`` over ``changes`` row changes; its facts (it must emit them all)."""
    result = cli_run.run(
        ["run", "--until-caught-up"], settings, ctx.log_path(name), ctx.timeout, work / "checkpoint.json"
    )
    facts = result.facts()
    if result.timed_out or facts.get("records") != changes:
        raise SystemExit(f"{ctx.flavor}: {name} emitted {facts.get('records')} records, not {changes}")
    facts["rows_per_s"] = round(changes / result.seconds(), 1)
    log.info(
        "%s: %s: %d changes, engine peak RSS %.1f MB, %.0f rows/s",
        ctx.flavor,
        name,
        changes,
        facts["python_peak_rss_mb"],
        facts["rows_per_s"],
    )
    return facts


def measure(ctx: Context) -> dict[str, Any]:
    table = f"{DATABASE}.{CHURN_TABLE}"
    ensure_table(ctx.pair, CHURN_TABLE, CHURN_ROWS)  # loaded before the priming runs, so not streamed
    works = {size: ctx.work(f"memory-{size}") for size in ("n", "5n")}
    envs = {size: cli_run.cli_env(ctx.pair, work, "jsonl", [table]) for size, work in works.items()}
    for size, settings in envs.items():  # checkpoints at the replica's current set, before the changes
        cli_run.run(["run", "--until-caught-up"], settings, ctx.log_path(f"memory-{size}-prime"), ctx.timeout)
    first = generate_changes(ctx, ctx.rows)
    small = run_once(ctx, works["n"], envs["n"], "memory-n", ctx.rows)
    more = generate_changes(ctx, 4 * ctx.rows)
    big = run_once(ctx, works["5n"], envs["5n"], "memory-5n", 5 * ctx.rows)
    return {
        "changes": ctx.rows,
        "rows_per_transaction": ctx.tx_rows,
        "generate_s": [first["write_s"], more["write_s"]],
        "n": small,
        "5n": big,
        "engine_rss_ratio": ratio(big["python_peak_rss_mb"], small["python_peak_rss_mb"]),
        "own_rss_ratio": ratio(big["own_peak_rss_mb"], small["own_peak_rss_mb"]),
    }


def markdown(results: dict[str, Any]) -> str:
    rows = results["rows"]
    lines = [
        f"# Peak RSS of `gtidsnap run` into JSON lines over {rows:,} and {5 * rows:,} row changes "
        f"({results['tx_rows']}-row transactions)",
        "",
        "| flavour | engine MB, N | 5N | ratio | engine + readers MB, N | 5N | ratio | rows/s, N / 5N |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for flavor, got in results["results"].items():
        n, big = got["n"], got["5n"]
        lines.append(
            f"| {flavor} | {n['python_peak_rss_mb']} | {big['python_peak_rss_mb']}"
            f" | {got['engine_rss_ratio']}"
            f" | {n['own_peak_rss_mb']} | {big['own_peak_rss_mb']} | {got['own_rss_ratio']}"
            f" | {n['rows_per_s']:,.0f} / {big['rows_per_s']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--rows", type=int, default=1_000_000, help="N: row changes of the first run")
    parser.add_argument(
        "--tx-rows", type=int, default=1_000, help="rows per transaction (a divisor of 10,000)"
    )
    parser.add_argument("--flavors", default="mariadb,mysql", type=env.flavors, help="comma-separated")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a gtidsnap run may take")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    results: dict[str, Any] = {"label": args.label, "rows": args.rows, "tx_rows": args.tx_rows, "results": {}}
    for flavor in args.flavors:
        ctx = Context(
            env.Pair.of(flavor), args.rows, 0, 0, 0.0, args.label, args.timeout, tx_rows=args.tx_rows
        )
        results["results"][flavor] = measure(ctx)
    report.write_side("stream-memory", results, markdown(results), RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
