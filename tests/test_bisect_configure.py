"""vLLM's CMake arch decisions, read from real configure logs (the ones the example bisect in
examples/bisect-sm121a/ stored: vLLM 0.10.0, 0.10.1, 0.10.2 and 0.33.0 PyPI sdists configured with
TORCH_CUDA_ARCH_LIST=12.1a, nvcc 13.0), and the CMake diff between two trees.

One test runs the real configure; it needs what CI does not have (nvcc 13, a Python with a CUDA
build of torch and cmake named by HARNESS_BISECT_PYTHON, the vLLM 0.33.0 sdist in the cache), and
says so when it skips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness.bisect.cmakediff import arch_hunks
from harness.image import configure

LOGS = Path(__file__).resolve().parent.parent / "examples" / "bisect-sm121a" / "run" / "logs"


@pytest.mark.parametrize("log,supported,nvfp4,scaled_mm,moe_data", [
    ("0000-0.10.0.log", ("12.0",), (), ("12.0a",), ()),
    ("0001-0.10.1.log", ("12.0",), ("12.0a",), ("12.0a",), ()),
    ("0003-0.10.2.log", ("12.0",), ("12.0a",), ("12.0a",), ()),
    ("0038-0.33.0.log", ("12.0",), ("12.0f",), ("12.0f",), ("12.0f",)),
])
def test_decisions_of_real_configure_logs(log, supported, nvfp4, scaled_mm, moe_data):
    got_supported, got = configure.decisions_of((LOGS / log).read_text())
    assert got_supported == supported
    assert got == {"nvfp4_sm12x": nvfp4, "scaled_mm_sm120": scaled_mm, "moe_data": moe_data}


def test_a_configure_that_stopped_early_decides_nothing_for_what_it_did_not_reach():
    text = (LOGS / "0038-0.33.0.log").read_text()
    cut = text[:text.index("-- Building moe_data")]
    _s, got = configure.decisions_of(cut)
    assert got["moe_data"] is None and got["scaled_mm_sm120"] == ("12.0f",)
    assert got["nvfp4_sm12x"] is None  # printed after moe_data in 0.33.0


def test_old_nvfp4_lines_keep_only_the_sm12x_archs():
    # before the SM12x block had its own words, the SM10x block printed the same line
    text = "-- Building NVFP4 for archs: 12.0a\n-- Building NVFP4 for archs: 10.0a\n"
    assert configure.decisions_of(text)[1]["nvfp4_sm12x"] == ("12.0a",)
    text = "-- Not building NVFP4 as no compatible archs were found.\n-- Building NVFP4 for archs: 10.0a\n"
    assert configure.decisions_of(text)[1]["nvfp4_sm12x"] == ()


def test_arch_hunks_keep_only_the_hunks_that_touch_an_arch_list(tmp_path):
    for side, fp4, cuda in (("old", '"12.0a"', "12.8"), ("new", '"12.0f"', "12.9")):
        (tmp_path / side / "cmake").mkdir(parents=True)
        body = "\n".join([f"line {i}" for i in range(30)] + [
            f"cuda_archs_loose_intersection(FP4_ARCHS {fp4} \"${{CUDA_ARCHS}}\")"] +
            [f"line {i}" for i in range(30, 60)] + [f"if(VERSION_GREATER_EQUAL {cuda})"])
        (tmp_path / side / "CMakeLists.txt").write_text(body + "\n")
        (tmp_path / side / "cmake" / "utils.cmake").write_text(f"# {side}\n")
    text = arch_hunks(tmp_path / "old", tmp_path / "new", "A", "B")
    assert '-cuda_archs_loose_intersection(FP4_ARCHS "12.0a"' in text
    assert '+cuda_archs_loose_intersection(FP4_ARCHS "12.0f"' in text
    assert "VERSION_GREATER_EQUAL" not in text and "utils.cmake" not in text  # a CUDA version and a comment
    assert text.count("\n@@") == 1 and text.startswith("--- A/CMakeLists.txt\n+++ B/CMakeLists.txt\n@@")


def _real_toolchain_problem() -> str | None:
    python = os.environ.get("HARNESS_BISECT_PYTHON")
    if not python:
        return "set HARNESS_BISECT_PYTHON to a Python with a CUDA build of torch and cmake>=3.26 (CI has none)"
    if not shutil.which("nvcc"):
        return "no nvcc on PATH"
    return None


@pytest.mark.network
@pytest.mark.skipif(_real_toolchain_problem() is not None, reason=str(_real_toolchain_problem()))
def test_real_configure_of_the_vllm_0_33_0_sdist(tmp_path, pinned_sources):
    import tarfile

    with tarfile.open(pinned_sources.sdist("vllm", "0.33.0")) as tar:
        tar.extractall(tmp_path, filter="data")
    tool = configure.find(os.environ["HARNESS_BISECT_PYTHON"])
    out = configure.configure(tmp_path / "vllm-0.33.0", "12.1a", tool, log_path=tmp_path / "configure.log")
    assert out.decisions == {"nvfp4_sm12x": ("12.0f",), "scaled_mm_sm120": ("12.0f",), "moe_data": ("12.0f",)}
    assert out.supported == ("12.0",)
    # with GCC < 13 the configure stops after every decision, at 0.33.0's compiler check
    assert out.returncode == 0 or out.stopped_at
