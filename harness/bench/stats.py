"""Order statistics shared by the benchmark: percentiles as numpy's default (linear), medians,
and the relative spread of repeated runs."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear interpolation between closest ranks, as `np.percentile` does by default, which
    is what `vllm bench serve` reports (vllm/benchmarks/serve.py, 0.33.0)."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def spread(values: Sequence[float | None]) -> float | None:
    """(max - min) / median of repeated measurements: the band a change must clear."""
    xs = [v for v in values if v is not None]
    if len(xs) < 2:
        return 0.0 if xs else None
    mid = statistics.median(xs)
    return (max(xs) - min(xs)) / abs(mid) if mid else None
