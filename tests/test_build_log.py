"""check_build_log on real CMake configure output of the vLLM 0.33.0 sdist (nvcc 13.0, no GPU).

Fixtures in tests/fixtures/build/cmake/ were captured here on 2026-11-30 with
`cmake -S vllm-0.33.0 ...` and TORCH_CUDA_ARCH_LIST as named; `patched-*` ran on the sdist with
patches/vllm/0001-cmake-sm121a-on-cuda13.patch applied. The configure stops later (no GCC 13,
no triton_kernels), after every arch decision is printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.archs import ArchList
from harness.image.buildlog import check_build_log, read_decisions

CMAKE = Path(__file__).resolve().parent / "fixtures" / "build" / "cmake"

CASES = [
    # fixture, TORCH_CUDA_ARCH_LIST, supported, NVFP4 archs, problem kinds
    ("stock-12.1a", "12.1a", ("12.0",), ("12.0f",), ["arch-collapsed"]),
    ("stock-12.0a_12.1a", "12.0a;12.1a", ("12.0a",), ("12.0a",), ["arch-missing"]),
    ("stock-12.0", "12.0", ("12.0",), ("12.0f",), []),
    ("patched-12.1a", "12.1a", ("12.0",), ("12.1a",), []),
    ("patched-12.0a_12.1a", "12.0a;12.1a", ("12.0a",), ("12.0a", "12.1a"), []),
    # the same logs judged against what another stack would ask
    ("stock-12.0", "12.1", ("12.0",), ("12.0f",), []),
    ("stock-12.1a", "9.0a", ("12.0",), ("12.0f",), []),
]


@pytest.mark.parametrize(("fixture", "asked", "supported", "nvfp4", "kinds"), CASES)
def test_real_configure_logs(fixture, asked, supported, nvfp4, kinds):
    text = (CMAKE / f"{fixture}.log").read_text()
    d = read_decisions(text)
    assert d.supported == supported
    assert d.nvfp4_sm12x == nvfp4
    problems = check_build_log(text, ArchList.parse(asked))
    assert [p.kind for p in problems] == kinds
    for p in problems:
        assert "0001-cmake-sm121a-on-cuda13.patch" in p.message


SYNTHETIC = [
    # pip -v indents the CMake lines
    ("  -- CUDA supported target architectures: 12.0\n  -- Building SM12x NVFP4 for archs: 12.1a\n", "12.1a", []),
    ("-- CUDA supported target architectures: 12.0\n-- Not building SM12x NVFP4 as no compatible archs were found.\n",
     "12.1a", ["nvfp4-not-built"]),
    ("Successfully installed vllm\n", "12.1a", ["log-incomplete"]),
    ("-- CUDA supported target architectures: 12.0\n", "12.1a", ["log-incomplete"]),
    # a retried configure: the last decision wins
    ("-- CUDA supported target architectures: 12.0\n-- Building SM12x NVFP4 for archs: 12.0f\n"
     "-- CUDA supported target architectures: 12.0\n-- Building SM12x NVFP4 for archs: 12.1a\n", "12.1a", []),
    ("-- CUDA supported target architectures: 12.0\n-- Building SM12x NVFP4 for archs: 12.0f\n", "12.0f;12.1f", []),
]


@pytest.mark.parametrize(("text", "asked", "kinds"), SYNTHETIC)
def test_line_forms(text, asked, kinds):
    assert [p.kind for p in check_build_log(text, ArchList.parse(asked))] == kinds
