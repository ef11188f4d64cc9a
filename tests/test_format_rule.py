"""The FP8-vs-NVFP4 expectation: a loss beyond noise fails, a tie within noise passes."""

from __future__ import annotations

import pytest

from harness.results.model import CellResult
from harness.stages.judge import compare_formats


def cell(quant: str, samples: list[float], config: str = "auto", stack: str = "s") -> CellResult:
    return CellResult.model_validate({
        "id": f"{stack}/{quant}/{config}", "stack": stack, "model": quant, "config": config,
        "quantization": quant, "status": "pass",
        "bench": {"levels": [{"concurrency": 1, "per_stream_tok_s": sorted(samples)[len(samples) // 2],
                              "samples": {"per_stream_tok_s": samples}}]}})


@pytest.mark.parametrize(
    ("fp8", "nvfp4", "ratio", "status", "words"),
    [
        # the published DGX Spark case: NVFP4 40.9 vs FP8 51.2 single stream
        ([51.2], [40.9], 1.0, "fail", "below the required 1"),
        # the H200 worked example: 247.5 vs 247.5, a tie inside the ±2 % band
        ([247.51, 247.38, 247.56], [247.45, 247.35, 247.76], 1.0, "pass", "within noise of"),
        ([100.0, 100.5, 99.8], [96.0, 96.2, 95.9], 1.0, "fail", "below"),
        ([100.0], [150.0], 1.3, "pass", "above"),
        ([100.0], [125.0], 1.3, "pass", "within noise of"),
    ],
)
def test_ratio_rule(fp8, nvfp4, ratio, status, words):
    out = compare_formats([cell("fp8", fp8), cell("nvfp4", nvfp4)], ratio, 0.02 if ratio == 1.0 else 0.05)
    assert len(out) == 1
    cell_id, verdict = out[0]
    assert cell_id == "s/nvfp4/auto"
    assert verdict.status == status, verdict.message
    assert words in verdict.message


def test_wide_spread_widens_the_band():
    # repeats that disagree by 10 % cannot prove a 5 % loss
    out = compare_formats([cell("fp8", [100.0, 110.0, 105.0]), cell("nvfp4", [99.0, 100.0, 101.0])], 1.0, 0.02)
    assert out[0][1].status == "pass" and "±9.5%" in out[0][1].message


def test_only_same_stack_and_config_pair_up():
    cells = [cell("fp8", [100.0], config="auto"), cell("nvfp4", [50.0], config="moe=marlin"),
             cell("nvfp4", [50.0], stack="other")]
    assert compare_formats(cells, 1.0, 0.02) == []
    assert compare_formats([cell("fp8", [100.0]), cell("nvfp4", [50.0])], None, 0.02) == []
