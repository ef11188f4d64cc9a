"""Is a change real? A difference counts only when it clears the noise band.

The band is the larger of a floor (the matrix's `[bench] noise_floor`, default
harness.matrix.model.NOISE_FLOOR) and the spread each side actually showed over its repeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from harness.bench.stats import median, spread


@dataclass(frozen=True)
class Change:
    kind: Literal["gain", "loss", "noise"]
    delta: float  # (candidate - baseline) / baseline, on medians
    band: float  # the relative band the delta had to clear
    baseline: float
    candidate: float


def classify(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    floor: float,
    higher_is_better: bool = True,
) -> Change:
    """Compare the medians of two sets of repeats; `higher_is_better=False` for latencies."""
    if not baseline or not candidate:
        raise ValueError("classify needs at least one value on each side")
    base, cand = median(baseline), median(candidate)
    if base is None or cand is None:
        raise ValueError("classify needs at least one value on each side")
    if not base:
        raise ValueError("baseline median is zero: a relative change is undefined")
    band = max(floor, spread(baseline) or 0.0, spread(candidate) or 0.0)
    delta = (cand - base) / abs(base)
    kind: Literal["gain", "loss", "noise"]
    if abs(delta) <= band:
        kind = "noise"
    elif (delta > 0) == higher_is_better:
        kind = "gain"
    else:
        kind = "loss"
    return Change(kind, delta, band, base, cand)
