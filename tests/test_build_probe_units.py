"""`harness build --probe` pieces that run without an engine: the units table, and what
probe_build.py (run inside the image) reads from a real configure log and build.ninja of the
vLLM 0.25.1 sdist with patches 0001 + 0002, TORCH_CUDA_ARCH_LIST="9.0a;12.1a", nvcc 13.0."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.archs import CC, ArchList
from harness.image.probe import ProbeReport, ProbeRow, judge, load_units

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
    assert ArchList.read("9.0a;12.1a").ccs == {CC(9, 0), CC(12, 1)}
    assert ArchList.read("12.0f 8.0+PTX").ccs == {CC(12, 0), CC(8, 0)}


def test_the_probe_judges_the_silent_override_as_the_trap_whatever_the_sass_holds():
    """Asked 12.1a, the configure built the SM12x NVFP4 kernels for 12.0f: the units probe fails
    with the trap's reason (as a full build's log check does), although the 12.0f kernels hold
    OMMA.SF and load on a 12.1 chip; the SASS finding stays in the row beside it. The patched
    decision 12.1a passes; a 12.0a;12.1a request built for 12.0a only is the trap too."""
    sass = ("SM_121: pass: NVFP4/FP4 GEMM kernels exist only as sm_120f: 12.1 loads sm_120f (family "
            "SASS); 4 of 4 kernels use the native block-scaled FP4 MMA",)
    row = ProbeRow("NVFP4 GEMM (SM12x)", "s", "12.0f", "12.0f", "sm_120f=1", sass, True)

    def report(nvfp4: str) -> ProbeReport:
        return ProbeReport.model_validate({"configure_rc": {"patched": 0}, "compile_rc": 0,
                                           "decisions": {"stock": {"SM12x NVFP4": "12.0f"},
                                                         "patched": {"SM12x NVFP4": nvfp4}}})

    status, reason = judge([row], report("12.0f"), ArchList.read("12.1a"))
    assert status == "fail" and reason.startswith("the trap: arch-collapsed: asked 12.1a")
    assert "built for 12.0f" in reason and "0001-cmake-sm121a-on-cuda13.patch" in reason
    assert judge([row], report("12.1a"), ArchList.read("12.1a")) == ("pass", "")
    assert judge([row], report("12.0a"), ArchList.read("12.0a")) == ("pass", "")
    status, reason = judge([row], report("12.0a"), ArchList.read("12.0a;12.1a"))
    assert status == "fail" and "arch-missing: asked 12.1a" in reason
    # a release whose configure printed no SM12x NVFP4 decision is judged by its objects alone
    assert judge([row], ProbeReport.model_validate({"configure_rc": {"patched": 0}, "compile_rc": 0}),
                 ArchList.read("12.1a")) == ("pass", "")


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
                         "units_status", "compile_cache", "labels", "toolchain", "decisions"]
    assert (doc["labels"], doc["toolchain"], doc["decisions"]) == ({}, {}, {})
    stood = replace(done, labels=(("harness.base.stand-in-for", "nvidia/cuda:13.0.1-devel-ubuntu24.04"),),
                    toolchain=(("cxx", "g++-13 13.3.0"),), decisions=(("stock", (("SM12x NVFP4", "12.0f"),)),))
    assert stood.as_json()["labels"] == {"harness.base.stand-in-for": "nvidia/cuda:13.0.1-devel-ubuntu24.04"}
    assert stood.as_json()["decisions"] == {"stock": {"SM12x NVFP4": "12.0f"}}
    assert doc["timings"] == {"configure_s": {"stock": 3.5, "patched": 4.0}, "compile_s": 9.1, "image_build_s": 60.0}
    assert doc["compile_cache"]["hits"] == 2 and doc["compile_cache"]["misses"] == 1

    pkg = PackagingReport.model_validate({"vllm": "0.33.0+cu130", "pip_check_rc": 1, "pip_check": ["x 1 needs y"]})
    assert judge_packaging(pkg, "0.33.0") == ("fail", "pip check: x 1 needs y")
    assert judge_packaging(PackagingReport(), None)[0] == "fail"  # nothing installed
    unmet = PackagingReport.model_validate({"vllm": "0.33.0", "build_requirements_rc": 1,
                                            "build_requirements": ["ok: a", "harness: b unmet"]})
    assert judge_packaging(unmet, "0.33.0") == ("fail", "build requirements not met in the image: harness: b unmet")
    assert judge_packaging(PackagingReport.model_validate({"vllm": "0.33.0"}), "0.33.0") == ("pass", "")


def test_every_arch_decision_and_the_0330_units_are_read_from_a_0330_configure_log():
    """A configure log of the 0.33.0 sdist (trimmed by tools/default-release-inputs.sh) with patch
    0001 and the probe patch, `12.1a`, in the devel stand-in base (GCC 13.3, torch 2.14.0, nvcc
    13.0), written by examples/default-release/device.sh sample on the 2-core build machine
    (tests/fixtures/build/cmake/vllm-0.33.0-0001-12.1a.configure.log): each unit's decision, and
    every decision line kept by name."""
    log = (CMAKE / "vllm-0.33.0-0001-12.1a.configure.log").read_text()
    units = load_units("0.33.0")
    assert [u.family for u in units if u.fp4] == ["NVFP4 GEMM (SM12x)", "NVFP4 MoE grouped GEMM (SM12x)"]
    assert {u.family: probe_build.decision(log, u.decision) for u in units} == {
        "NVFP4 GEMM (SM12x)": "12.1a", "NVFP4 MoE grouped GEMM (SM12x)": "12.1a",
        "scaled_mm c3x SM12x (FP8)": "12.1a", "CUTLASS MoE data": "12.1a"}
    found = probe_build.decisions(log)
    assert found["SM12x NVFP4"] == "12.1a" and found["Marlin kernels"] == "8.0+PTX"
    assert found["dsv3_fused_a_gemm"] == "12.0f" and found["fused GDN decode"] == "12.0f"
    assert all(n not in found for n in ("deepgemm", "DeepGEMM"))  # left out by the probe patch
    # patch 0001's own lines: every list it sets, with the stock one beside it
    assert found["SM12x arch list FP4_SM120_ARCHS"] == "12.1a (stock: 12.0f)"
    assert found["SM12x arch list MARLIN_MOE_FP8_ARCHS"] == "12.1a (stock: 12.0f)"


def test_each_units_own_compile_time_is_read_from_ninja_log(tmp_path):
    log = tmp_path / ".ninja_log"
    log.write_text("# ninja log v6\n0\t156300\t0\tCMakeFiles/x.dir/a.cu.o\tabc\n10\t4010\t0\tCMakeFiles/x.dir/b.cu.o\tdef\n"
                   "garbage line\n")
    assert probe_build.step_seconds(log) == {"CMakeFiles/x.dir/a.cu.o": 156.3, "CMakeFiles/x.dir/b.cu.o": 4.0}
    assert probe_build.step_seconds(tmp_path / "none") == {}


@pytest.mark.parametrize(("record", "arch_list", "status"), [
    ("spark/amd64/probe-spark-stock.json", "12.1a", "fail"),
    ("spark/amd64/probe-spark-121a.json", "12.1a", "pass"),
    ("rtx-pro-6000/amd64/probe-rtx-120a.json", "12.0a", "pass"),
])
def test_the_default_release_records_judged_again_from_their_stored_decisions(record, arch_list, status):
    """examples/default-release: the three probes of vLLM 0.33.0 judged from what they stored (the
    decisions, the objects' audit): the stock Spark stack is the trap (12.1a asked, 12.0f built),
    though its FP4 kernels hold OMMA.SF; the patched one and the RTX stack pass."""
    doc = json.loads((ROOT / "examples/default-release" / record).read_text())
    data = ProbeReport.model_validate({"configure_rc": {"patched": 0}, "compile_rc": 0,
                                       "decisions": doc["decisions"]})
    rows = [ProbeRow(**{k: (tuple(v) if k == "verdicts" else v) for k, v in r.items()}) for r in doc["rows"]]
    got, reason = judge(rows, data, ArchList.read(arch_list))
    assert got == status, reason
    if status == "fail":
        assert reason.startswith("the trap: arch-collapsed: asked 12.1a, SM12x NVFP4 built for 12.0f")
        assert any("OMMA.SF" in v for r in rows for v in r.verdicts)  # the SASS finding stays beside it
