"""The results: a JSON file, a markdown table, a PNG plot, and docs/benchmarks.md's table between
``<!-- bench:start -->`` and ``<!-- bench:end -->``.

Files, in ``--out`` (default ``scripts/results``): ``bench-<label>.json``, ``bench-<label>.md``,
``bench-<label>.png``, and the same three as ``bench-latest.*``.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

START, END = "<!-- bench:start -->", "<!-- bench:end -->"
PARTS = "abcdefgh"
NAMES = {"mariadb": "MariaDB", "mysql": "MySQL"}
ARROW, MINUS, TIMES, DASH = "\u2192", "\u2212", "\u00d7", "\u2013"
LE, CHECK, CROSS = "\u2264", "\u2713", "\u2717"
# f.'s targets (the issue), judged at settings.latency_rows_per_s; as in bench_lib.latency, which
# needs gtidsnap and Spark to import (a report renders without them)
TARGETS = {"changelog_p50_s": 1.0, "changelog_p99_s": 3.0, "mirror_p50_s": 15.0}


def write(result: dict[str, Any], out: Path, compare: dict[str, Any] | None = None) -> list[Path]:
    """The JSON, markdown and PNG of ``result``, under its label and as ``bench-latest``."""
    out.mkdir(parents=True, exist_ok=True)
    label = result["label"]
    written = [out / f"bench-{label}.json", out / f"bench-{label}.md", out / f"bench-{label}.png"]
    written[0].write_text(json.dumps(result, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    written[1].write_text(markdown(result, compare, heading=True), encoding="utf-8")
    plot(result, written[2])
    if label != "latest":
        for path in written:
            shutil.copyfile(path, out / path.name.replace(f"bench-{label}.", "bench-latest."))
    return written


def write_side(kind: str, results: dict[str, Any], text: str, out: Path) -> None:
    """A side benchmark's results (``scripts/bench_*.py``): ``<kind>-<label>.json`` and ``.md`` in
    ``out``, the markdown ``text`` printed too."""
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{kind}-{results['label']}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    stem.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


# ----------------------------------------------------------------------------- markdown


def human(n: int) -> str:
    """1000000 -> 1M, 300000 -> 300k."""
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1_000_000:g}M"
    if n >= 1_000 and n % 100 == 0:
        return f"{n / 1_000:g}k"
    return f"{n:,}"


def _num(value: Any, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    return f"{value:,.{digits}f}"


def _share(value: Any) -> str:
    """A ratio with two significant digits below 0.1 (0.0046), two decimals above (0.33)."""
    if isinstance(value, int | float) and not math.isnan(value) and 0 < abs(value) < 0.1:
        return f"{value:.2g}"
    return _num(value, 2)


def _rate(part: dict[str, Any], key: str, *ratios: str) -> str:
    """rows/s of ``part[key]`` (``*`` when stopped at the timeout) and its ratios (default ``ratio_<key>``;
    "-" for one the result does not have, e.g. from before it was measured)."""
    run = part.get(key) or {}
    mark = "*" if run.get("timed_out") else ""
    shares = " / ".join(_share(part.get(r)) for r in ratios or (f"ratio_{key}",))
    return f"{_num(run.get('rows_per_s'))}{mark} ({shares})"


def _spark_append(part: dict[str, Any]) -> dict[str, Any] | None:
    """a.'s Spark append, if this result measured it and it did not fail."""
    append = part.get("spark_append")
    return append if isinstance(append, dict) and "error" not in append else None


def _append_cell(part: dict[str, Any]) -> str:
    """Spark's appends from Arrow and from staged Parquet: rows/s (JVM CPU s); an older result's one."""
    append = _spark_append(part)
    if append is None:
        return DASH
    if "arrow" not in append:
        return f"{_num(append.get('rows_per_s'))} ({_num(append.get('cpu_s'), 1)})"
    arrow, staged = append["arrow"], append["staged"]
    return (
        f"{_num(arrow.get('rows_per_s'))} ({_num(arrow.get('jvm_cpu_s'), 1)}) / "
        f"{_num(staged.get('rows_per_s'))} ({_num(staged.get('jvm_cpu_s'), 1)})"
    )


def _cpu_cell(part: dict[str, Any]) -> str:
    """gtidsnap's Delta snapshot: CPU µs a row of each of its processes."""
    cpu = part.get("delta_cpu_us_per_row") or {}
    return ", ".join(f"{kind} {_num(us, 1)}" for kind, us in sorted(cpu.items())) or DASH


def _own_memory_cell(part: dict[str, Any]) -> str:
    """gtidsnap's Delta snapshot: the memory of its own processes (the engine and its chunk readers)."""
    delta = part.get("delta") or {}
    if "own_peak_rss_mb" not in delta:
        return DASH
    readers = delta.get("readers_peak_rss_mb", 0.0)
    engine = delta.get("python_peak_rss_mb", 0.0)
    return (
        f"{_num(delta['own_peak_rss_mb'], 0)} (engine {_num(engine, 0)}, readers {_num(readers, 0)})"
        f" / {_num(delta.get('own_peak_pss_mb'), 0)}"
    )


Row = tuple[str, Callable[[dict[str, Any]], str]]


def _rows(result: dict[str, Any]) -> list[Row]:
    """(label, cell of one flavour's results) for every line of the table; the label starts with its part."""
    s = result["settings"]
    rows, big = human(s["rows"]), human(s["big_rows"])

    def get(part: str, fn: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
        return lambda r: fn(r[part]) if isinstance(r.get(part), dict) and "error" not in r[part] else DASH

    def pair(a: str, b: str, digits: int) -> Callable[[dict[str, Any]], str]:
        return lambda p: f"{_num(_at(p, a), digits)} / {_num(_at(p, b), digits)}"

    heartbeat = f"{s.get('heartbeat_s', 1.0):g}"
    latency_rate = _num(s.get("latency_rows_per_s", 5000))
    return [
        (
            f"a. limit: bare keyset scan of {rows} rows, rows/s",
            get("a", lambda p: _num(p["bare_rows_per_s"])),
        ),
        (f"a. snapshot {ARROW} JSON lines, rows/s (ratio to limit)", get("a", lambda p: _rate(p, "jsonl"))),
        (
            f"a. limit: Spark's append of the {rows} rows into Delta from Arrow / from staged Parquet, "
            "rows/s (JVM CPU s)",
            get("a", _append_cell),
        ),
        (
            f"a. snapshot {ARROW} Delta, rows/s (ratio to bare scan / to Spark's best append)",
            get("a", lambda p: _rate(p, "delta", "ratio_delta", "ratio_delta_to_spark_append")),
        ),
        (f"a. snapshot {ARROW} Delta: CPU µs a row by process", get("a", _cpu_cell)),
        (
            f"a. snapshot {ARROW} Delta: peak RSS of the engine + its readers (sum of each one's peak) / "
            "peak of their summed PSS, MB",
            get("a", _own_memory_cell),
        ),
        (
            f"a. snapshot {ARROW} Delta, splits read by Spark tasks, rows/s (ratio to bare scan)",
            get("a", lambda p: _rate(p, "spark_delta")),
        ),
        (
            f"b. limit: bare binlog decode of {rows} row changes, rows/s",
            get("b", lambda p: _num(p["bare_rows_per_s"])),
        ),
        (f"b. streaming {ARROW} JSON lines, rows/s (ratio to limit)", get("b", lambda p: _rate(p, "jsonl"))),
        (
            f"b. streaming {ARROW} JSON lines with /metrics scraped every second, rows/s (ratio to without)",
            get(
                "b",
                lambda p: (
                    f"{_num(p['jsonl_metrics']['rows_per_s'])} ({_share(p['ratio_metrics_on'])})"
                    if "jsonl_metrics" in p
                    else DASH
                ),
            ),
        ),
        (f"b. streaming {ARROW} Delta, rows/s (ratio to limit)", get("b", lambda p: _rate(p, "delta"))),
        (
            f"b. peer: Debezium embedded {ARROW} JSON lines, rows/s from its start (gtidsnap JSON lines"
            " / it)",
            get("b", lambda p: _rate(p, "debezium", "ratio_jsonl_to_debezium")),
        ),
        (
            f"c. binlog pause per chunk {MINUS} its SELECT, p50 / p99 ms",
            get("c", pair("p50_ms", "p99_ms", 1)),
        ),
        (
            "c. binlog pause per chunk (SELECT included), p50 / p99 ms",
            get("c", pair("pause.p50_ms", "pause.p99_ms", 1)),
        ),
        (
            f"d. window close on an idle source (heartbeat {heartbeat} s), p50 / max ms",
            get("d", pair("p50_ms", "max_ms", 1)),
        ),
        (
            f"e. peak RSS, {rows} / {big} rows table, MB (ratio)",
            get("e", lambda p: f"{pair('rss_mb', 'big_rss_mb', 0)(p)} ({_share(p['ratio'])})"),
        ),
        (
            f"e. peak RSS of the engine and its readers together, {rows} / {big} rows table, MB (ratio)",
            get(
                "e",
                lambda p: (
                    f"{pair('with_readers_rss_mb', 'with_readers_big_rss_mb', 0)(p)}"
                    f" ({_share(p['ratio_with_readers'])}, {p['readers']} readers)"
                    if "ratio_with_readers" in p
                    else DASH
                ),
            ),
        ),
        (
            f"f. commit-to-visible in the Delta changelog at {latency_rate} rows/s, p50 / p99 s",
            get("f", lambda p: _table_cell(_at_rate(p, s.get("latency_rows_per_s", 5000)), "changelog")),
        ),
        (
            f"f. commit-to-visible in the Delta mirror at {latency_rate} rows/s, p50 / p99 s",
            get("f", lambda p: pair("p50_s", "p99_s", 2)(p) + ("*" if p.get("lower_bound") else "")),
        ),
        (
            "f. rows/s gtidsnap sustained into Delta meanwhile",
            get("f", lambda p: _num(p.get("sustained_rows_per_s"))),
        ),
        (
            "f. the stream's lag into JSON lines (source commit to the line written) at the highest rate: "
            "rows/s, p50 / p99 s (target p99 <= 1 s at 10,000)",
            get("f", _stream_lag_cell),
        ),
        (
            f"g. limit: bare keyset scan of {rows} rows, rows/s",
            get("g", lambda p: _num(p["limit_rows_per_s"])),
        ),
        *[
            (
                f"g. snapshot {ARROW} JSON lines with {n} reader(s), rows/s (ratio to limit)",
                get("g", lambda p, n=n: _by_readers(p, n)),
            )
            for n in ("0", "1", "2")
        ],
        (
            "g. snapshot with 2 splits at a time read by Spark tasks (local[2]), rows/s (ratio to limit)",
            get("g", _spark_cell),
        ),
        (
            "g. 2 readers under a 2,000 rows/s writer: rows/s (ratio to no writer, median of the pairs); "
            "stream lag p50 / p99 s",
            get("g", _under_writer_cell),
        ),
        *[
            (
                f"h. replica killed mid-snapshot {ARROW} {name}: s to continuing on the next / to its first "
                "checkpoint there (target: retry_for_s + 5)",
                get("h", lambda p, sink=sink: _failover_cell(p, sink)),
            )
            for sink, name in (("jsonl", "JSON lines"), ("delta", "Delta"))
        ],
    ]


def _stream_lag_cell(part: dict[str, Any]) -> str:
    """f.'s JSON-lines run at its highest offered rate (bench_lib.stream_lag)."""
    runs = [r for r in part.get("stream_lag_jsonl") or [] if "error" not in r]
    if not runs:
        return DASH
    top = max(runs, key=lambda r: r["offered_rows_per_s"])
    grows = ", backlog growing" if top.get("backlog_growing") else ""
    return (
        f"{_num(top['offered_rows_per_s'])}: {_num(top['lag_p50_s'], 3)} / {_num(top['lag_p99_s'], 3)}"
        f"{'*' if top.get('lower_bound') else ''}{grows}"
    )


def _failover_cell(part: dict[str, Any], sink: str) -> str:
    one = part.get(sink)
    if not isinstance(one, dict):
        return DASH
    target = part["target_s"]
    mark = "" if one["first_checkpoint_s"] <= target else " (over)"
    return f"{_num(one['continued_s'], 1)} / {_num(one['first_checkpoint_s'], 1)} of {_num(target, 0)}{mark}"


def _by_readers(part: dict[str, Any], n: str) -> str:
    run = part.get("by_readers", {}).get(n)
    if not isinstance(run, dict):
        return DASH
    return f"{_num(run.get('rows_per_s'))} ({_share(part.get('ratio_by_readers', {}).get(n))})"


def _spark_cell(part: dict[str, Any]) -> str:
    run = part.get("spark_readers")
    if not isinstance(run, dict):
        return DASH
    return f"{_num(run.get('rows_per_s'))} ({_share(part.get('ratio_spark_readers'))})"


def _under_writer_cell(part: dict[str, Any]) -> str:
    run = part.get("under_writer", {})
    pairs = part.get("writer_pairs") or []
    each = f" [pairs: {', '.join(_share(p.get('ratio')) for p in pairs)}]" if len(pairs) > 1 else ""
    return (
        f"{_num(run.get('rows_per_s'))} ({_share(part.get('ratio_under_writer'))}{each}); "
        f"{_num(run.get('lag_p50_s'), 2)} / {_num(run.get('lag_p99_s'), 2)}"
    )


def _rates(part: Any) -> list[dict[str, Any]]:
    """f.'s measured rates, slowest first ([] for a result from before f. measured several, or failed)."""
    if not isinstance(part, dict) or "error" in part or not isinstance(part.get("rates"), list):
        return []
    done = [r for r in part["rates"] if isinstance(r, dict) and "error" not in r]
    return sorted(done, key=lambda r: r["offered_rows_per_s"])


def _at_rate(part: Any, rate: float) -> dict[str, Any] | None:
    return next((r for r in _rates(part) if r["offered_rows_per_s"] == rate), None)


def _table_cell(
    entry: dict[str, Any] | None, table: str, target: float | None = None, target_p99: float | None = None
) -> str:
    """``p50 / p99`` of f.'s ``table`` (changelog or mirror) at one rate, ``*`` for lower bounds, and
    against ``target`` (a p50, and ``target_p99``) a check mark or a cross."""
    if entry is None or not isinstance(entry.get(table), dict):
        return DASH
    t = entry[table]
    text = f"{_num(t.get('p50_s'), 2)} / {_num(t.get('p99_s'), 2)}{'*' if t.get('lower_bound') else ''}"
    if target is not None and t.get("p50_s") is not None:
        held = t["p50_s"] <= target
        if target_p99 is not None:
            held = held and t.get("p99_s") is not None and t["p99_s"] <= target_p99
        text += f" {CHECK if held else CROSS}"
    return text


def _backlog_cell(entry: dict[str, Any], judge: bool) -> str:
    growth = entry.get("backlog_growth_s")
    if growth is None:
        return DASH
    text = f"{'growing' if entry.get('backlog_growing') else 'none'} ({growth:+.2f} s)"
    return f"{text} {CROSS if entry.get('backlog_growing') else CHECK}" if judge else text


def freshness(result: dict[str, Any], compare: dict[str, Any] | None = None) -> list[str]:
    """f.'s table against the offered rate (markdown lines); [] if no result here measured several."""
    s = result["settings"]
    target_rate = s.get("latency_rows_per_s", 5000)
    runs: list[tuple[str, dict[str, Any]]] = []
    for f in [f for f in s["flavors"] if f in result["results"]]:
        if compare is not None and _rates(compare.get("results", {}).get(f, {}).get("f")):
            runs.append((f"{NAMES.get(f, f)} `{compare['label']}`", compare["results"][f]["f"]))
            runs.append((f"{NAMES.get(f, f)} `{result['label']}`", result["results"][f].get("f")))
        else:
            runs.append((NAMES.get(f, f), result["results"][f].get("f")))
    if not any(_rates(part) for _, part in runs):
        return []
    interval = s.get("merge_interval_s")
    merged = f"every {interval:g} s" if isinstance(interval, int | float) else "at its interval"
    lines = [
        "f. Freshness against the offered rate: commit-to-visible latency of every inserted row, "
        "p50 / p99 s, in the changelog and in the mirror; the writer inserts for "
        f"{_num(s.get('latency_seconds'))} s per rate (100 transactions/s), gtidsnap at its defaults "
        f"(a batch every {_num(s.get('batch_ms', 1000))} ms; the mirror, created by the run, takes the rows "
        f"of new keys by APPEND every batch and MERGEs the others {merged}). "
        f"Targets (the issue), judged at {_num(target_rate)} rows/s: changelog p50 {LE} "
        f"{TARGETS['changelog_p50_s']:g} s and p99 {LE} {TARGETS['changelog_p99_s']:g} s, mirror p50 {LE} "
        f"{TARGETS['mirror_p50_s']:g} s, "
        "sustained without a growing backlog (backlog: the changelog's median latency over the writer's "
        "last quarter of rows minus its first quarter; \\* a lower bound: not caught up by `--timeout`).",
        "",
        "| f. freshness | offered rows/s | writer reached rows/s | gtidsnap sustained rows/s "
        "| changelog p50 / p99 s | mirror p50 / p99 s | backlog |",
        "|---|---|---|---|---|---|---|",
        f"| target | {_num(target_rate)} | | | p50 {LE} {TARGETS['changelog_p50_s']:g}, "
        f"p99 {LE} {TARGETS['changelog_p99_s']:g} "
        f"| p50 {LE} {TARGETS['mirror_p50_s']:g} | not growing |",
    ]
    changelog_targets = (TARGETS["changelog_p50_s"], TARGETS["changelog_p99_s"])
    for name, part in runs:
        entries = _rates(part)
        if not entries:
            lines.append(f"| {name} | {DASH} | {DASH} | {DASH} | {DASH} | {DASH} | {DASH} |")
        for r in entries:
            judge = r["offered_rows_per_s"] == target_rate
            lines.append(
                f"| {name} | {_num(r['offered_rows_per_s'])} | {_num(r.get('writer_rows_per_s'))} "
                f"| {_num(r.get('sustained_rows_per_s'))} "
                f"| {_table_cell(r, 'changelog', *(changelog_targets if judge else (None, None)))} "
                f"| {_table_cell(r, 'mirror', TARGETS['mirror_p50_s'] if judge else None)} "
                f"| {_backlog_cell(r, judge)} |"
            )
    return lines


def _at(d: dict[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        d = d.get(key) if isinstance(d, dict) else None  # type: ignore[assignment]
    return d


def describe(result: dict[str, Any]) -> str:
    m, s, g = result["machine"], result["settings"], result["git"]
    servers = ", ".join(f"{NAMES.get(f, f)} {v}" for f, v in result.get("servers", {}).items())
    return (
        f"{result['date'][:10]}, label `{result['label']}`, gtidsnap `{g['commit'][:10]}`"
        f"{' (uncommitted changes)' if g.get('dirty') else ''}: {m['cpu']}, {m['cores']} cores, "
        f"{m['ram_gb']:g} GB RAM, {m['os']}, Python {m['python']}; {servers}; "
        f"chunk size {s['chunk_size']:,}, concurrent writer {_num(s.get('writer_rows_per_s'))} rows/s "
        f"during snapshots (a, c, e); `{s['command']}`"
    )


def markdown(result: dict[str, Any], compare: dict[str, Any] | None = None, heading: bool = False) -> str:
    flavors = [f for f in result["settings"]["flavors"] if f in result["results"]]
    columns: list[tuple[str, dict[str, Any]]] = []
    for f in flavors:
        if compare is not None and f in compare.get("results", {}):
            columns.append((f"{NAMES.get(f, f)} `{compare['label']}`", compare["results"][f]))
            columns.append((f"{NAMES.get(f, f)} `{result['label']}`", result["results"][f]))
        else:
            columns.append((NAMES.get(f, f), result["results"][f]))
    ran = set(result["settings"]["parts"])
    lines = []
    if heading:
        lines += [f"# gtidsnap benchmark `{result['label']}`", ""]
    lines += [describe(result) + ".", ""]
    if compare is not None:
        lines += [f"Compared with `{compare['label']}`: {describe(compare)}.", ""]
    lines += ["| measurement | " + " | ".join(c for c, _ in columns) + " |"]
    lines += ["|---|" + "---|" * len(columns)]
    for label, cell in _rows(result):
        if label[0] in ran:
            lines.append(f"| {label} | " + " | ".join(cell(r) for _, r in columns) + " |")
    fresh = freshness(result, compare) if "f" in ran else []
    if fresh:
        lines += ["", *fresh]
    if any(_flagged(r) for _, r in columns):
        lines += [
            "",
            f"\\* stopped unfinished at the run's `--timeout` ({_num(result['settings'].get('timeout_s'))} s "
            "here): rows/s as far as it got (committed); latencies counting the rows not yet visible then "
            "with the time they had waited (lower bounds).",
        ]
    errors = [
        f"- {NAMES.get(f, f)} {p}: {r[p]['error']}"
        for f, r in result["results"].items()
        for p in PARTS
        if isinstance(r.get(p), dict) and "error" in r[p]
    ]
    errors += [
        f"- {NAMES.get(f, f)} a (Spark append): {r['a']['spark_append']['error']}"
        for f, r in result["results"].items()
        if isinstance(r.get("a"), dict)
        and isinstance(r["a"].get("spark_append"), dict)
        and "error" in r["a"]["spark_append"]
    ]
    errors += [
        f"- {NAMES.get(f, f)} f at {_num(e.get('offered_rows_per_s'))} rows/s: {e['error']}"
        for f, r in result["results"].items()
        if isinstance(r.get("f"), dict) and isinstance(r["f"].get("rates"), list)
        for e in r["f"]["rates"]
        if isinstance(e, dict) and "error" in e
    ]
    if errors:
        lines += ["", "Failed:", *errors]
    return "\n".join(lines) + "\n"


def _flagged(results: dict[str, Any]) -> bool:
    for part in results.values():
        if isinstance(part, dict) and (
            part.get("lower_bound") or any(isinstance(v, dict) and v.get("timed_out") for v in part.values())
        ):
            return True
        if any(r[t].get("lower_bound") for r in _rates(part) for t in ("changelog", "mirror")):
            return True
    return False


def update_docs(doc: Path, result: dict[str, Any], compare: dict[str, Any] | None = None) -> None:
    text = doc.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{doc} has no {START} ... {END} section to fill in")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{START}\n{markdown(result, compare)}{END}{tail}", encoding="utf-8")


# ----------------------------------------------------------------------------- plot


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = result["results"]
    flavors = [f for f in result["settings"]["flavors"] if f in results]
    fig, axes = plt.subplots(4, 2, figsize=(14, 18.5))
    fig.suptitle(f"gtidsnap benchmark `{result['label']}`\n{_wrap(describe(result), 150)}", fontsize=9)
    _throughput(
        axes[0][0],
        results,
        flavors,
        "a",
        "a. snapshot: rows/s (bare keyset scan = limit; Delta also against Spark's append)",
    )
    _throughput(axes[0][1], results, flavors, "b", "b. binlog streaming: rows/s (bare decode = limit)")
    _pauses(axes[1][0], results, flavors)
    _idle(axes[1][1], results, flavors)
    _memory(axes[2][0], results, flavors, result["settings"])
    _latency(axes[2][1], results, flavors, result["settings"])
    _freshness(axes[3][0], results, flavors, result["settings"])
    _offered(axes[3][1], results, flavors)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if len(line) + len(w) + 1 > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}".strip()
    return "\n".join([*lines, line])


def _ok(results: dict[str, Any], flavor: str, part: str) -> dict[str, Any] | None:
    r = results[flavor].get(part)
    return r if isinstance(r, dict) and "error" not in r else None


def _empty(ax: Any, title: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes, color="grey")


def _finish(ax: Any, title: str, xlabel: str | None, ylabel: str, legend_size: int = 8) -> None:
    """Axis labels, title and legend: the same on every panel."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=legend_size)


def _percentiles(ax: Any, quantiles: list[float], *style: str, **kwargs: Any) -> None:
    """A distribution given as evenly spaced quantiles, percentile on the y axis."""
    ax.plot(quantiles, [i / (len(quantiles) - 1) * 100 for i in range(len(quantiles))], *style, **kwargs)


def _throughput(ax: Any, results: dict[str, Any], flavors: list[str], part: str, title: str) -> None:
    data = {f: d for f in flavors if (d := _ok(results, f, part)) is not None}
    if not data:
        _empty(ax, title)
        return
    bares = "bare_scans" if part == "a" else "bare_decodes"
    paths = [("limit (bare)", "grey", ""), ("JSON lines", "tab:blue", ""), ("Delta", "tab:orange", "")]
    appends = {f: _spark_append(d) for f, d in data.items()} if part == "a" else {}
    if any(appends.values()):  # a. since the Spark append is measured; older results have no such bar
        paths.append(("limit: Spark append into Delta", "silver", "//"))
    width = 0.8 / len(paths)
    for i, f in enumerate(data):
        d = data[f]
        limits = [b["rows_per_s"] for b in d[bares]]
        append = appends.get(f)
        values = [d["bare_rows_per_s"], d["jsonl"]["rows_per_s"], d["delta"]["rows_per_s"]]
        values += [append["rows_per_s"] if append else math.nan] if len(paths) > 3 else []
        for j, ((name, color, hatch), value) in enumerate(zip(paths, values, strict=True)):
            x = i + (j - (len(paths) - 1) / 2) * width
            if math.isnan(value):
                continue
            ax.bar(x, value, width, color=color, hatch=hatch, label=name if i == 0 else None)
            if j == 0:
                ax.errorbar(
                    x, value, yerr=[[value - min(limits)], [max(limits) - value]], color="black", capsize=3
                )
            elif j in (1, 2):
                sink = "jsonl" if j == 1 else "delta"
                mark = "*" if d[sink].get("timed_out") else ""  # stopped at --timeout, unfinished
                text = f"{_share(d[f'ratio_{sink}'])}{TIMES}{mark}"
                if sink == "delta" and append:
                    text += f"\n({_share(d.get('ratio_delta_to_spark_append'))}{TIMES} append)"
                ax.annotate(text, (x, value), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(data)), [NAMES.get(f, f) for f in data])
    _finish(ax, title, None, "rows/s")


def _pauses(ax: Any, results: dict[str, Any], flavors: list[str]) -> None:
    title = "c. binlog pause per chunk: distribution (ms)"
    plotted = False
    styles = {"pause": "-", "query": ":", "pause_minus_query": "--"}
    labels = {
        "pause": "pause",
        "query": "SELECT (SQL round trip)",
        "pause_minus_query": f"pause {MINUS} SELECT",
    }
    for f, color in zip(flavors, ("tab:blue", "tab:orange"), strict=False):
        d = _ok(results, f, "c")
        if d is None:
            continue
        for key, style in styles.items():
            q = d["quantiles_ms"].get(key)
            if q:
                _percentiles(ax, q, style, color=color, label=f"{NAMES.get(f, f)}: {labels[key]}")
                plotted = True
    if not plotted:
        _empty(ax, title)
        return
    ax.set_xscale("log")
    _finish(ax, title, "ms per chunk (log)", "percentile", legend_size=7)


def _idle(ax: Any, results: dict[str, Any], flavors: list[str]) -> None:
    title = f"d. idle source: SELECT returned {ARROW} window closed, per chunk (ms)"
    plotted = False
    for f, color in zip(flavors, ("tab:blue", "tab:orange"), strict=False):
        d = _ok(results, f, "d")
        if d is None:
            continue
        ax.plot(
            range(1, len(d["close_ms"]) + 1),
            d["close_ms"],
            "o-",
            color=color,
            markersize=3,
            label=f"{NAMES.get(f, f)} (heartbeat {d['heartbeat_s']:g} s)",
        )
        plotted = True
    if not plotted:
        _empty(ax, title)
        return
    ax.set_ylim(bottom=0)
    _finish(ax, title, "chunk", "ms")


def _memory(ax: Any, results: dict[str, Any], flavors: list[str], settings: dict[str, Any]) -> None:
    title = "e. peak RSS of `gtidsnap run` into JSON lines (MB)"
    data = {f: d for f in flavors if (d := _ok(results, f, "e")) is not None}
    if not data:
        _empty(ax, title)
        return
    width = 0.35
    for i, d in enumerate(data.values()):
        for j, (key, color) in enumerate((("rss_mb", "tab:blue"), ("big_rss_mb", "tab:green"))):
            rows = human(settings["rows"] if j == 0 else settings["big_rows"])
            label = f"{rows} rows" if i == 0 else None
            ax.bar(i + (j - 0.5) * width, d[key], width, color=color, label=label)
        top = (i + 0.5 * width, d["big_rss_mb"])
        ax.annotate(f"{_share(d['ratio'])}{TIMES}", top, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(data)), [NAMES.get(f, f) for f in data])
    _finish(ax, title, None, "MB")


def _latency(ax: Any, results: dict[str, Any], flavors: list[str], settings: dict[str, Any]) -> None:
    rate = settings.get("latency_rows_per_s", 5000)
    title = f"f. commit-to-visible in Delta at {_num(rate)} rows/s: mirror, changelog (dashed)"
    plotted = changelog = False
    for f, color in zip(flavors, ("tab:blue", "tab:orange"), strict=False):
        d = _ok(results, f, "f")
        if d is None or not d.get("quantiles_s"):
            continue
        label = f"{NAMES.get(f, f)} mirror: p50 {d['p50_s']:.2f} s, p99 {d['p99_s']:.2f} s"
        _percentiles(ax, d["quantiles_s"], color=color, label=label)
        plotted = True
        entry = _at_rate(d, rate)
        if entry is not None and entry["changelog"].get("quantiles_s"):
            c = entry["changelog"]
            label = f"{NAMES.get(f, f)} changelog: p50 {c['p50_s']:.2f} s, p99 {c['p99_s']:.2f} s"
            _percentiles(ax, c["quantiles_s"], "--", color=color, label=label)
            changelog = True
    if not plotted:
        _empty(ax, title)
        return
    if changelog:  # a second next to fifteen: both readable
        ax.set_xscale("log")
        _log_ticks(ax.xaxis, lambda v: f"{v:g}")
    _finish(ax, title, "seconds" + (" (log)" if changelog else ""), "percentile")


def _log_ticks(axis: Any, text: Callable[[float], str]) -> None:
    """Ticks at 1, 2, 5 of every decade of a log axis, as plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: text(v)))
    axis.set_minor_locator(NullLocator())


def _rate_axis(ax: Any, offered: list[float]) -> None:
    """A log x axis of offered rows/s, ticked at the rates measured."""
    ax.set_xscale("log")
    ticks = sorted(set(offered))
    ax.set_xticks(ticks, [_num(t) for t in ticks])
    ax.minorticks_off()


def _freshness(ax: Any, results: dict[str, Any], flavors: list[str], settings: dict[str, Any]) -> None:
    title = "f. freshness against the offered rate: p50 (o) and p99 (^) s, changelog and mirror (dashed)"
    offered: list[float] = []
    seconds: list[float] = []
    for f, color in zip(flavors, ("tab:blue", "tab:orange"), strict=False):
        entries = _rates(results[f].get("f"))
        if not entries:
            continue
        x = [r["offered_rows_per_s"] for r in entries]
        offered += x
        for table, style in (("changelog", "-"), ("mirror", "--")):
            for stat, marker, alpha in (("p50_s", "o", 1.0), ("p99_s", "^", 0.55)):
                y = [r[table][stat] if r[table][stat] > 0 else math.nan for r in entries]
                name = f"{NAMES.get(f, f)} {table} {stat[:3]}"
                ax.plot(x, y, style + marker, color=color, alpha=alpha, label=name)
                low = [
                    (xi, yi) for xi, yi, r in zip(x, y, entries, strict=True) if r[table].get("lower_bound")
                ]
                if low:  # hollow: a lower bound
                    ax.plot(
                        *zip(*low, strict=True), marker, color=color, alpha=alpha, markerfacecolor="white"
                    )
                seconds += [v for v in y if not math.isnan(v)]
    if not offered:
        _empty(ax, title)
        return
    ax.set_yscale("log")
    top = max([*seconds, *TARGETS.values()])
    ax.set_ylim(min([*seconds, *TARGETS.values()]) / 1.5, top * 1.6)
    _log_ticks(ax.yaxis, lambda v: f"{v:g}")
    for key, style, what in (("changelog_p50_s", "-", "changelog"), ("mirror_p50_s", "--", "mirror")):
        ax.axhline(TARGETS[key], color="grey", linestyle=style, linewidth=0.8)
        ax.annotate(
            f"target: {what} p50 {LE} {TARGETS[key]:g} s",
            (0.01, TARGETS[key]),
            xycoords=("axes fraction", "data"),
            va="bottom",
            fontsize=7,
            color="grey",
        )
    ax.axvline(settings.get("latency_rows_per_s", 5000), color="grey", linestyle=":", linewidth=0.8)
    _rate_axis(ax, offered)
    _finish(ax, title, "offered rows/s (log; hollow: a lower bound)", "seconds (log)", legend_size=6)


def _offered(ax: Any, results: dict[str, Any], flavors: list[str]) -> None:
    title = "f. rows/s against the offered rate: the writer reached (s), gtidsnap sustained (o)"
    offered: list[float] = []
    for f, color in zip(flavors, ("tab:blue", "tab:orange"), strict=False):
        entries = _rates(results[f].get("f"))
        if not entries:
            continue
        x = [r["offered_rows_per_s"] for r in entries]
        offered += x
        ax.plot(
            x, [r["writer_rows_per_s"] for r in entries], "s:", color=color, label=f"{NAMES.get(f, f)} writer"
        )
        sustained = [r["sustained_rows_per_s"] for r in entries]
        ax.plot(x, sustained, "o-", color=color, label=f"{NAMES.get(f, f)} gtidsnap sustained")
        for xi, yi, r in zip(x, sustained, entries, strict=True):
            if r.get("backlog_growing"):
                ax.annotate("backlog grows", (xi, yi), ha="center", va="top", fontsize=7, color=color)
    if not offered:
        _empty(ax, title)
        return
    line = [min(offered), max(offered)]
    ax.plot(line, line, color="grey", linewidth=0.8, label="offered")
    ax.set_yscale("log")
    _log_ticks(ax.yaxis, lambda v: _num(v))
    _rate_axis(ax, offered)
    _finish(ax, title, "offered rows/s (log)", "rows/s (log)")
