"""Decode speed against the memory-bandwidth roofline, and the FP8-vs-NVFP4 check.

Single-stream decode reads every active weight once per token, so the ceiling is
bandwidth / (active parameters x bytes per parameter). This weight-only roofline ignores KV
cache and activations, so it is an upper bound; at concurrency c one weight read serves c
streams, so the aggregate ceiling is c times higher.

NVFP4 stores 4-bit values plus one FP8 scale per 16 values: 4.5 bits, 0.5625 bytes per
parameter, against 1 byte for FP8. A working NVFP4 path should therefore decode faster than
FP8; a published DGX Spark measurement (Qwen3.5 35B-A3B on GB10) found it slower (40.9 vs 51.2 tok/s), which is the
failure this check exists to catch.
"""

from __future__ import annotations

from dataclasses import dataclass

FP8_BYTES_PER_PARAM = 1.0
NVFP4_BYTES_PER_PARAM = 0.5625


def roofline_tok_s(active_params: float, bytes_per_param: float, bandwidth_gbs: float) -> float:
    """Weight-bandwidth ceiling on single-stream decode, tokens per second."""
    return bandwidth_gbs * 1e9 / (active_params * bytes_per_param)


def roofline_efficiency(
    tok_s: float, active_params: float, bytes_per_param: float, bandwidth_gbs: float
) -> float:
    """Measured single-stream tok/s as a fraction of the weight-bandwidth roofline."""
    return tok_s / roofline_tok_s(active_params, bytes_per_param, bandwidth_gbs)


@dataclass(frozen=True)
class ComparisonRow:
    metric: str  # "decode per stream" or "aggregate @c"
    fp8_tok_s: float
    nvfp4_tok_s: float
    ratio: float  # nvfp4 / fp8
    fp8_efficiency: float
    nvfp4_efficiency: float
    min_ratio: float
    passed: bool

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"


def _row(
    metric: str,
    fp8: float,
    nvfp4: float,
    streams: int,
    active_params: float,
    bandwidth_gbs: float,
    min_ratio: float,
) -> ComparisonRow:
    ratio = nvfp4 / fp8
    return ComparisonRow(
        metric=metric,
        fp8_tok_s=fp8,
        nvfp4_tok_s=nvfp4,
        ratio=ratio,
        fp8_efficiency=roofline_efficiency(
            fp8 / streams, active_params, FP8_BYTES_PER_PARAM, bandwidth_gbs
        ),
        nvfp4_efficiency=roofline_efficiency(
            nvfp4 / streams, active_params, NVFP4_BYTES_PER_PARAM, bandwidth_gbs
        ),
        min_ratio=min_ratio,
        passed=ratio >= min_ratio,
    )


def fp8_vs_nvfp4(
    *,
    fp8_per_stream: float,
    nvfp4_per_stream: float,
    active_params: float,
    bandwidth_gbs: float,
    fp8_aggregate: float | None = None,
    nvfp4_aggregate: float | None = None,
    aggregate_concurrency: int = 8,
    min_ratio: float = 1.0,
) -> tuple[ComparisonRow, ...]:
    """Rows for decode per stream and (if given) aggregate; each passes when
    NVFP4 >= min_ratio x FP8. Aggregate efficiency is per stream against the roofline."""
    rows = [
        _row(
            "decode per stream",
            fp8_per_stream,
            nvfp4_per_stream,
            1,
            active_params,
            bandwidth_gbs,
            min_ratio,
        )
    ]
    if fp8_aggregate is not None and nvfp4_aggregate is not None:
        rows.append(
            _row(
                f"aggregate @{aggregate_concurrency}",
                fp8_aggregate,
                nvfp4_aggregate,
                aggregate_concurrency,
                active_params,
                bandwidth_gbs,
                min_ratio,
            )
        )
    return tuple(rows)
