"""The stream's engine CPU per change, this checkout against another commit, on the same changes.

Why: part b measures gtidsnap beside Debezium once per run; a change to the stream's hot path is
judged better by the CPU the engine spends on the very same binlog changes, before and after, taken
in turns so the machine's drift (this one's varies by 10-20% within an hour) falls on both alike.

Per flavour, ``--repeats`` turns; in each, per transaction size (the sizes alternate, their order
reversed every other turn, so a drift of the machine falls on every size alike): one JSON-lines output
is primed at the replica's set, N changes go into the binlog (part b's UPDATEs of ``bench.churn``), and
each checkout streams those N changes from a copy of the primed output with ``gtidsnap run
--until-caught-up`` (the other commit's package from a ``git worktree``, put first on ``PYTHONPATH``),
alternating which goes first, and once more with nothing left to stream (its start-up and shutdown
alone). Reported: the engine process's CPU seconds (user + system) per change with that
fixed cost taken off, the rows/s over the run's work, and whether both checkouts wrote the same bytes.
Results: ``scripts/results/stream-ab-<label>.json`` and ``.md``.

Run on a quiet machine: ``.venv/bin/python scripts/bench_stream_ab.py --base e851b76 --label s33``.
"""

from __future__ import annotations

import argparse
import filecmp
import logging
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench_lib import cli_run, env, report  # scripts/ is on sys.path: this file runs from there
from bench_lib.context import Context
from bench_lib.env import DATABASE, REPO, STATE_DIR
from bench_lib.quiet import wait_quiet
from bench_lib.stats import mean, ratio
from bench_lib.streaming import CHURN_ROWS, CHURN_TABLE, generate_changes
from bench_lib.tables import ensure_table

RESULTS = Path(__file__).resolve().parent / "results"
log = logging.getLogger("bench.ab")


def worktree(ref: str) -> Path:
    """``ref`` checked out beside the repository (replaced if there), for its package only."""
    path = STATE_DIR / "bench" / "ab-base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), ref], check=True)
    return path


def drop_worktree(path: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=True)


def stream_once(
    ctx: Context, primed: Path, work: Path, settings: dict[str, str], name: str
) -> dict[str, Any]:
    """The primed output streamed to the end in a copy at ``work``; its facts, then an idle rerun's."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(primed, work)
    facts = run_cli(ctx, work, settings, name)
    if facts.get("records") != ctx.rows:
        raise SystemExit(f"{ctx.flavor}: {name} emitted {facts.get('records')} records, not {ctx.rows}")
    idle = run_cli(ctx, work, settings, f"{name}-idle")
    engine, fixed = facts["cpu_s"]["engine"], idle["cpu_s"]["engine"]
    return {
        "engine_cpu_s": engine,
        "idle_engine_cpu_s": fixed,
        "us_per_change": round((engine - fixed) / ctx.rows * 1e6, 2),
        "rows_per_s": round(ctx.rows / facts["work_s"], 1),
        "work_s": facts["work_s"],
    }


def run_cli(ctx: Context, work: Path, settings: dict[str, str], name: str) -> dict[str, Any]:
    result = cli_run.run(
        ["run", "--until-caught-up"], settings, ctx.log_path(name), ctx.timeout, work / "checkpoint.json"
    )
    if result.timed_out:
        raise SystemExit(f"{ctx.flavor}: {name} did not finish within {ctx.timeout:.0f} s")
    return result.facts()


def profile_once(ctx: Context, primed: Path, table: str, profiler: str, sink: str = "jsonl") -> None:
    """This checkout streams the same changes once more under ``profiler``; the stats go beside its logs.

    cProfile counts calls but inflates cheap ones; py-spy samples (raw stacks, 250 a second) and leaves
    the shares as they are, which is what small-transaction costs need."""
    work = primed.parent / f"{primed.name}-profile"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(primed, work)
    run = ["-m", "gtidsnap", "run", "--until-caught-up"]
    if profiler == "py-spy":
        stats = ctx.log_path(f"ab-{ctx.tx_rows}-profile").with_suffix(".stacks")
        spy = str(Path(sys.executable).with_name("py-spy"))
        command = [spy, "record", "-r", "250", "-f", "raw", "-o", str(stats), "--", sys.executable, *run]
    else:
        stats = ctx.log_path(f"ab-{ctx.tx_rows}-profile").with_suffix(".pstats")
        command = [sys.executable, "-m", "cProfile", "-o", str(stats), *run]
    stats.parent.mkdir(parents=True, exist_ok=True)
    settings = cli_run.cli_env(ctx.pair, work, sink, [table])
    cli_run.CliRun(command, settings, ctx.log_path(f"ab-{ctx.tx_rows}-profile")).start().wait(ctx.timeout)
    log.info("%s, %d-row tx: profile in %s", ctx.flavor, ctx.tx_rows, stats)


def measure(
    contexts: list[Context],
    checkouts: dict[str, Path],
    repeats: int,
    profile: str | None = None,
    sink: str = "jsonl",
) -> dict[int, dict[str, Any]]:
    """Each transaction size of one flavour, in turns: a turn primes an output, writes that size's
    changes and streams them with each checkout; the sizes alternate turn by turn (the machine's drift
    falls on both, as it does on both checkouts), their order reversed every other turn."""
    table = f"{DATABASE}.{CHURN_TABLE}"
    ensure_table(contexts[0].pair, CHURN_TABLE, CHURN_ROWS)  # loaded before priming: its load is no change
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {
        c.tx_rows: {n: [] for n in checkouts} for c in contexts
    }
    written: dict[int, list[float]] = {c.tx_rows: [] for c in contexts}
    outputs: dict[int, dict[str, Path]] = {c.tx_rows: {} for c in contexts}
    for turn in range(repeats):
        for ctx in contexts if turn % 2 == 0 else list(reversed(contexts)):
            primed = prime(ctx, table, sink)
            written[ctx.tx_rows].append(generate_changes(ctx, ctx.rows)["write_s"])
            order = list(checkouts) if turn % 2 == 0 else list(reversed(checkouts))
            for name in order:
                work = primed.parent / f"{primed.name}-{name}"
                settings = cli_run.cli_env(ctx.pair, work, sink, [table])
                settings["PYTHONPATH"] = str(checkouts[name])
                # Both checkouts use this one's Delta jars (a worktree has no .state of its own).
                settings.setdefault("GTIDSNAP_DELTA_JARS", str(STATE_DIR / "jars" / "delta"))
                quiet_s = wait_quiet(f"{ctx.flavor}, {ctx.tx_rows}-row tx, {name}")
                run = stream_once(ctx, primed, work, settings, f"ab-{ctx.tx_rows}-{name}-{turn}")
                run["quiet_wait_s"] = quiet_s
                log.info("%s, %d-row tx, %s: %s", ctx.flavor, ctx.tx_rows, name, run)
                runs[ctx.tx_rows][name].append(run)
                if sink == "jsonl":  # a Delta table's files differ run to run whatever they hold
                    outputs[ctx.tx_rows][name] = work / "changes.jsonl"
            if profile and turn == repeats - 1:
                profile_once(ctx, primed, table, profile, sink)
    return {
        ctx.tx_rows: summary(ctx, runs[ctx.tx_rows], outputs[ctx.tx_rows], written[ctx.tx_rows])
        for ctx in contexts
    }


def prime(ctx: Context, table: str, sink: str) -> Path:
    """An output caught up with the replica: what follows in the binlog is this turn's changes alone."""
    primed = ctx.work(f"ab-{ctx.tx_rows}-primed")
    settings = cli_run.cli_env(ctx.pair, primed, sink, [table])
    cli_run.run(["run", "--until-caught-up"], settings, ctx.log_path(f"ab-{ctx.tx_rows}-prime"), ctx.timeout)
    return primed


def summary(
    ctx: Context, runs: dict[str, list[dict[str, Any]]], outputs: dict[str, Path], written: list[float]
) -> dict[str, Any]:
    same = filecmp.cmp(*outputs.values(), shallow=False) if len(outputs) == 2 else None
    cost = {name: mean([r["us_per_change"] for r in got]) for name, got in runs.items()}
    rate = {name: mean([r["rows_per_s"] for r in got]) for name, got in runs.items()}
    return {
        "changes": ctx.rows,
        "rows_per_transaction": ctx.tx_rows,
        "write_s": written,
        "runs": runs,
        "us_per_change": {name: round(value, 2) for name, value in cost.items()},
        "rows_per_s": {name: round(value, 1) for name, value in rate.items()},
        "cpu_ratio_new_to_base": ratio(cost["new"], cost["base"]) if "base" in cost else None,
        "same_output": same,
    }


def markdown(results: dict[str, Any]) -> str:
    against = f"against {results['base']} (base)" if results["base"] else "alone (no base)"
    lines = [
        f"# Engine CPU per change streaming into {_SINKS[results.get('sink', 'jsonl')]}: this checkout (new)"
        f" {against},"
        f" {results['rows']:,} changes, {results['repeats']} runs each, in turns",
        "",
        "| flavour | rows/tx | base µs/change | new µs/change | new/base | base rows/s | new rows/s"
        " | same bytes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rates: dict[str, dict[int, float]] = {}
    for key, got in results["results"].items():
        flavor = key.split("-")[0]
        cost, rate, same = got["us_per_change"], got["rows_per_s"], got["same_output"]
        rates.setdefault(flavor, {})[got["rows_per_transaction"]] = rate["new"]
        lines.append(
            f"| {flavor} | {got['rows_per_transaction']:,} | {cost.get('base', '-')} | {cost['new']}"
            f" | {got['cpu_ratio_new_to_base'] or '-'} | {_rate(rate.get('base'))} | {_rate(rate['new'])}"
            f" | {'-' if same is None else 'yes' if same else '**no**'} |"
        )
    for flavor, by_size in rates.items():
        if len(by_size) > 1:  # the streaming issue's "small transactions as cheap as large ones"
            small, large = min(by_size), max(by_size)
            lines.append(
                f"\n{flavor}: new, {small}-row over {large}-row transactions' rate:"
                f" {ratio(by_size[small], by_size[large])}"
            )
    return "\n".join(lines) + "\n"


_SINKS = {"jsonl": "JSON lines", "delta": "Delta"}


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def sizes(text: str) -> list[int]:
    """``--tx-rows``: positive integers, comma-separated, each once."""
    try:
        chosen = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        chosen = []
    if not chosen or min(chosen) < 1:
        raise argparse.ArgumentTypeError(f"rows per transaction: {text!r}; positive integers, e.g. 1000,10")
    return list(dict.fromkeys(chosen))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument(
        "--base", help="the commit to compare with (any git revision; none: this checkout only)"
    )
    parser.add_argument("--rows", type=int, default=200_000, help="row changes streamed by each run")
    parser.add_argument(
        "--tx-rows", default="1000,10", type=sizes, help="rows per transaction, comma-separated"
    )
    parser.add_argument("--flavors", default="mariadb,mysql", type=env.flavors)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each checkout, in turns")
    parser.add_argument(
        "--sink",
        choices=["jsonl", "delta"],
        default="jsonl",
        help="the output streamed into (delta: no byte check)",
    )
    parser.add_argument(
        "--profile",
        nargs="?",
        const="cprofile",
        choices=["cprofile", "py-spy"],
        help="and stream once more under cProfile or py-spy (stats beside the logs)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a gtidsnap run may take")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    base = worktree(args.base) if args.base else None
    checkouts = {"base": base, "new": REPO} if base is not None else {"new": REPO}
    results: dict[str, Any] = {
        "label": args.label,
        "base": args.base,
        "new": env.git_commit(),
        "rows": args.rows,
        "repeats": args.repeats,
        "sink": args.sink,
        "results": {},
    }
    try:
        for flavor in args.flavors:
            contexts = [
                Context(env.Pair.of(flavor), args.rows, 0, 0, 0.0, args.label, args.timeout, tx_rows=tx_rows)
                for tx_rows in args.tx_rows
            ]
            for tx_rows, got in measure(contexts, checkouts, args.repeats, args.profile, args.sink).items():
                results["results"][f"{flavor}-{tx_rows}"] = got
    finally:
        if base is not None:
            drop_worktree(base)
    report.write_side("stream-ab", results, markdown(results), RESULTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
