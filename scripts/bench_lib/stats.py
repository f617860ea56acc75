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
