"""The latency figures every bench reports, computed one way."""

from __future__ import annotations

import statistics


def percentile(values: list[float], fraction: float) -> float:
    """The value ``fraction`` of the way up the sorted samples (nearest rank, no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency_figures(latencies_ms: list[float], digits: int = 3) -> dict[str, float]:
    """``p50_ms`` and ``p99_ms`` of the samples, rounded to ``digits``."""
    return {
        "p50_ms": round(statistics.median(latencies_ms), digits),
        "p99_ms": round(percentile(latencies_ms, 0.99), digits),
    }
