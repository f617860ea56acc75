"""Percentiles and small helpers shared by the measurements."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(values_s: Sequence[float]) -> dict[str, float | int]:
    """p50, p90, p99, max and mean of durations in seconds, as milliseconds."""
    if not values_s:
        return {"n": 0}
    return {
        "n": len(values_s),
        "p50_ms": round(percentile(values_s, 50) * 1000, 3),
        "p90_ms": round(percentile(values_s, 90) * 1000, 3),
        "p99_ms": round(percentile(values_s, 99) * 1000, 3),
        "max_ms": round(max(values_s) * 1000, 3),
        "mean_ms": round(sum(values_s) / len(values_s) * 1000, 3),
    }


def quantiles(values: Sequence[float], points: int = 101) -> list[float]:
    """``points`` evenly spaced quantiles from min to max (a distribution small enough for the JSON)."""
    if not values:
        return []
    ordered = sorted(values)
    last = len(ordered) - 1
    return [ordered[round(i * last / (points - 1))] for i in range(points)]


def ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else math.nan


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def latencies(source: dict[int, float], visible: dict[int, float], stopped_at: float) -> list[float]:
    """Each row's latency, in the order of its source commit: when it became visible minus when it was
    committed (a row not visible by ``stopped_at`` counts until then)."""
    ordered = sorted(source.items(), key=lambda item: item[1])
    return [min(visible.get(i, stopped_at), stopped_at) - at for i, at in ordered]


def backlog_growth(ordered: Sequence[float]) -> float:
    """Median latency of the writer's last quarter of rows minus that of its first quarter
    (``ordered``: by source commit, as :func:`latencies` gives them)."""
    quarter = max(1, len(ordered) // 4)
    return percentile(ordered[-quarter:], 50) - percentile(ordered[:quarter], 50)
