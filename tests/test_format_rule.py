"""The FP8-vs-NVFP4 expectation: a loss beyond noise fails, a tie within noise passes."""

from __future__ import annotations

import pytest

from harness.results.model import CellResult
from harness.stages.judge import compare_formats


def cell(quant: str, samples: list[float], config: str = "auto", stack: str = "s",
         aggregate_c8: list[float] | None = None, model: str | None = None,
         vs: str | None = "fp8") -> CellResult:
    """A cell of model `model` (default: named as its format); an NVFP4 cell is paired, as the
    matrix would pair it, with model `vs` on its own stack and config."""
    levels = [{"concurrency": 1, "per_stream_tok_s": sorted(samples)[len(samples) // 2],
               "samples": {"per_stream_tok_s": samples}}]
    if aggregate_c8:
        levels.append({"concurrency": 8, "aggregate_tok_s": sorted(aggregate_c8)[len(aggregate_c8) // 2],
                       "samples": {"aggregate_tok_s": aggregate_c8}})
    model = model or quant
    pair = f"{stack}/{vs}/{config}" if quant == "nvfp4" and vs else None
    return CellResult.model_validate({
        "id": f"{stack}/{model}/{config}", "stack": stack, "model": model, "config": config,
        "quantization": quant, "status": "pass", "bench": {"levels": levels}, "compare_with": pair})


@pytest.mark.parametrize(
    ("fp8", "nvfp4", "ratio", "status", "words"),
    [
        # a DGX Spark case: NVFP4 40.9 vs FP8 51.2 tok/s single stream
        ([51.2], [40.9], 1.0, "fail", "below the required 1x"),
        # the H200 worked example: 247.5 vs 247.5, a tie inside the ±2 % band
        ([247.51, 247.38, 247.56], [247.45, 247.35, 247.76], 1.0, "pass", "(within the ±2.0% noise band)"),
        ([100.0, 100.5, 99.8], [96.0, 96.2, 95.9], 1.0, "fail", "below"),
        ([100.0], [150.0], 1.3, "pass", "above the required 1.3x"),
        ([100.0], [125.0], 1.3, "pass", "(within the"),
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


def test_every_level_is_judged_aggregate_included():
    """The H200 Docker example: a tie per stream at c=1, 0.74x of FP8's aggregate at c=8."""
    fp8 = cell("fp8", [243.5, 243.7, 243.8], aggregate_c8=[1527.2, 1546.0, 1547.1])
    nv = cell("nvfp4", [247.5, 247.6, 247.7], aggregate_c8=[1145.9, 1148.7, 1213.6])
    ((cell_id, verdict),) = compare_formats([fp8, nv], 1.0, 0.02)
    assert verdict.status == "fail" and verdict.got == "0.743"
    assert "c=1 per stream 247.6 vs 243.7 tok/s = 1.016x (within the ±2.0% noise band)" in verdict.message
    assert "c=8 aggregate 1148.7 vs 1546.0 tok/s = 0.743x (below the required 1x" in verdict.message
    assert verdict.message.endswith("Fails at c=8")
    cmp = verdict.comparison  # the figures, for readers that must not parse the message
    assert (cmp.nvfp4, cmp.fp8, cmp.deciding) == ("s/nvfp4/auto", "s/fp8/auto", 8)
    assert [(lv.concurrency, lv.metric, lv.kind) for lv in cmp.levels] == [
        (1, "per_stream", "noise"), (8, "aggregate", "loss")]
    assert cmp.deciding_level.ratio == pytest.approx(1148.7 / 1546.0)
    assert cmp.deciding_level.band == pytest.approx((1213.6 - 1145.9) / 1148.7)  # NVFP4 repeats spread wider than the floor


def test_two_nvfp4_models_of_one_config_each_meet_their_own_fp8():
    """The rtx-pro-6000 matrix: nemotron-nvfp4 (no FP8 of its own) beside qwen3-fp8 and
    qwen3-nvfp4 on config auto. Pairing by stack and config judged nemotron against qwen3's FP8
    (and dropped qwen3-nvfp4); the matrix's families compare qwen3 with qwen3 only."""
    fp8 = cell("fp8", [100.0], model="qwen3-fp8")
    qwen = cell("nvfp4", [101.0], model="qwen3-nvfp4", vs="qwen3-fp8")
    nemo = cell("nvfp4", [75.0], model="nemotron-nvfp4", vs=None)
    out = dict(compare_formats([fp8, nemo, qwen], 1.0, 0.02))
    assert list(out) == ["s/qwen3-nvfp4/auto"]
    assert out["s/qwen3-nvfp4/auto"].comparison.fp8 == "s/qwen3-fp8/auto"
    assert out["s/qwen3-nvfp4/auto"].status == "pass"


def test_an_aggregate_inside_its_spread_is_not_a_loss():
    fp8 = cell("fp8", [100.0], aggregate_c8=[700.0, 800.0, 760.0])
    nv = cell("nvfp4", [100.5], aggregate_c8=[720.0, 740.0, 760.0])
    ((_, verdict),) = compare_formats([fp8, nv], 1.0, 0.02)
    assert verdict.status == "pass", verdict.message
    assert "c=8 aggregate" in verdict.message and "(within the" in verdict.message


def test_a_level_only_one_side_measured_is_left_out():
    fp8 = cell("fp8", [100.0], aggregate_c8=[800.0])
    ((_, verdict),) = compare_formats([fp8, cell("nvfp4", [101.0])], 1.0, 0.02)
    assert "c=8" not in verdict.message and verdict.status == "pass"


def test_a_run_applies_the_matrix_thresholds_it_is_handed_not_run_json_s_copy(tmp_path):
    """One class per threshold: the live run hands its matrix's Expect and Bench, and the rule
    reads nothing else (run.json's copy below says 1.0; the matrix says 0.5, and 0.5 judges)."""
    from harness.matrix.model import Bench, Expect
    from harness.results.model import MatrixInfo, RunRecord
    from harness.results.store import RunStore, new_run_id
    from harness.run.outcome import apply_format_rule
    from harness.stages.judge import FORMAT_CHECK

    run = RunRecord(run_id=new_run_id("rule"), tool_version="t", argv=[], k=None,
                    matrix=MatrixInfo(name="rule", expect={"nvfp4_over_fp8_min_ratio": 1.0}),
                    cells=["s/fp8/auto", "s/nvfp4/auto"])
    store = RunStore.create(tmp_path, run)
    for c in (cell("fp8", [100.0]), cell("nvfp4", [60.0])):
        store.write_cell(c)
    changed = dict((after.id, after) for after, _ in apply_format_rule(
        store, Expect(nvfp4_over_fp8_min_ratio=0.5), Bench()))
    verdict = changed["s/nvfp4/auto"].verdict(FORMAT_CHECK)
    assert verdict is not None and verdict.status == "pass" and verdict.asked == "0.5"
    changed = dict((after.id, after) for after, _ in apply_format_rule(
        store, Expect(nvfp4_over_fp8_min_ratio=0.9), Bench(noise_floor=0.02)))
    assert changed["s/nvfp4/auto"].verdict(FORMAT_CHECK).status == "fail"
