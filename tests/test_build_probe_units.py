"""`harness build --probe` pieces that run without an engine: the units table, and what
probe_build.py (run inside the image) reads from a real configure log and build.ninja of the
vLLM 0.25.1 sdist with patches 0001 + 0002, TORCH_CUDA_ARCH_LIST="9.0a;12.1a", nvcc 13.0."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness.image.probe import ProbeReport, ProbeRow, judge, load_units
from harness.matrix.archs import ccs_of

ROOT = Path(__file__).resolve().parent.parent
CMAKE = ROOT / "tests" / "fixtures" / "build" / "cmake"
spec = importlib.util.spec_from_file_location("probe_build", ROOT / "docker" / "probe_build.py")
probe_build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe_build)


def test_units_of_0251_are_found_in_the_real_configure_log_and_build_ninja():
    units = load_units("0.25.1")
    assert [u.fp4 for u in units] == [True, False, False]
    log = (CMAKE / "vllm-0.25.1-cut-9.0a_12.1a.configure.log").read_text()
    ninja = (CMAKE / "vllm-0.25.1-cut-build.ninja.excerpt").read_text()
    got = {u.family: (probe_build.decision(log, u.decision), probe_build.object_target(ninja, u.source))
           for u in units}
    assert got == {
        "NVFP4 GEMM (SM12x)": ("12.1a", "CMakeFiles/_C_stable_libtorch.dir/csrc/libtorch_stable/quantization/"
                                        "fp4/nvfp4_scaled_mm_sm120_kernels.cu.o"),
        "scaled_mm c3x SM12x (FP8)": ("12.1a", "CMakeFiles/_C_stable_libtorch.dir/csrc/libtorch_stable/"
                                               "quantization/w8a8/cutlass/c3x/scaled_mm_sm120_fp8.cu.o"),
        "CUTLASS MoE data": ("9.0a;12.1a", "CMakeFiles/_C_stable_libtorch.dir/csrc/libtorch_stable/"
                                           "quantization/w8a8/cutlass/moe/moe_data.cu.o"),
    }
    assert load_units("0.0.1") is None


def test_the_uncut_log_still_states_the_decisions():
    log = (CMAKE / "vllm-0.25.1-uncut-no-network.configure.log").read_text()
    assert probe_build.decision(log, "Building SM12x NVFP4 for archs:") == "12.1a"
    assert probe_build.decision(log, "Building nothing for archs:") is None


def test_judge_and_targets():
    ok = ProbeRow("f", "s", "12.0f", "12.1a", "sm_121a=1", ("SM_121: pass: native",), True)
    bad = ProbeRow("f", "s", "12.0f", "12.0f", "sm_120f=1", ("SM_121: fail: no native FP4 MMA",), True)
    good = ProbeReport.model_validate({"configure_rc": {"patched": 0}, "compile_rc": 0})
    assert judge([ok], good) == ("pass", "")
    assert judge([ok, bad], good)[0] == "fail"
    assert judge([ok], ProbeReport.model_validate({"configure_rc": {"patched": 1}}))[0] == "fail"
    assert judge([ok], ProbeReport.model_validate({"configure_rc": {"patched": 0}, "compile_rc": 2}))[0] == "fail"
    assert judge([ok], ProbeReport())[0] == "fail"  # no patched configure recorded: it did not configure
    assert ccs_of("9.0a;12.1a") == {"9.0", "12.1"} and ccs_of("12.0f 8.0+PTX") == {"12.0", "8.0"}


def test_the_probe_records_read_the_helpers_files_and_write_probe_json_as_before():
    """probe.json and packaging.json (written in the image) become typed records, unknown keys
    kept; probe-<stack>.json keeps its shape (timings {} when the units probe did not finish)."""
    from harness.image.probe import PackagingReport, ProbeOutcome, ProbeTimings, judge_packaging
    from harness.results.build import CompileCache

    report = ProbeReport.model_validate({
        "units": [{"family": "f", "source": "a.cu", "decision": "d", "fp4": True, "stock": "12.0f",
                   "patched": "12.1a", "target": "t.o", "object": "a.cu.o"}],
        "configure_s": {"stock": 3.5, "patched": 4.0}, "configure_rc": {"stock": 0, "patched": 0},
        "compile_s": 9.1, "compile_rc": 0, "newer": 1})
    assert (report.units[0].patched, report.units[0].object) == ("12.1a", "a.cu.o")
    assert report.model_extra == {"newer": 1} and report.units[0].model_extra == {"decision": "d", "fp4": True}
    skipped = ProbeOutcome("s", "", "skipped", "", (), None, "")
    assert skipped.as_json()["timings"] == {} and skipped.as_json()["compile_cache"] is None
    done = ProbeOutcome("s", "ref", "pass", "", (), ProbeTimings(configure_s=report.configure_s, compile_s=9.1,
                                                                  image_build_s=60.0), "log",
                        compile_cache=CompileCache(hits=2, misses=1))
    doc = done.as_json()
    assert list(doc) == ["stack", "image_ref", "status", "reason", "rows", "timings", "log_path", "packaging",
                         "units_status", "compile_cache"]
    assert doc["timings"] == {"configure_s": {"stock": 3.5, "patched": 4.0}, "compile_s": 9.1, "image_build_s": 60.0}
    assert doc["compile_cache"]["hits"] == 2 and doc["compile_cache"]["misses"] == 1

    pkg = PackagingReport.model_validate({"vllm": "0.33.0+cu130", "pip_check_rc": 1, "pip_check": ["x 1 needs y"]})
    assert judge_packaging(pkg, "0.33.0") == ("fail", "pip check: x 1 needs y")
    assert judge_packaging(PackagingReport(), None)[0] == "fail"  # nothing installed
    unmet = PackagingReport.model_validate({"vllm": "0.33.0", "build_requirements_rc": 1,
                                            "build_requirements": ["ok: a", "harness: b unmet"]})
    assert judge_packaging(unmet, "0.33.0") == ("fail", "build requirements not met in the image: harness: b unmet")
    assert judge_packaging(PackagingReport.model_validate({"vllm": "0.33.0"}), "0.33.0") == ("pass", "")
