"""Read vLLM's CMake arch decisions from a build log and compare them with what was asked.

On CUDA >= 13, vLLM 0.33.0 turns TORCH_CUDA_ARCH_LIST=12.1a into `12.0f` for the SM12x NVFP4,
scaled-mm and MoE kernels, and `12.0a;12.1a` into `12.0a` only: the build succeeds and the image
has no sm_121a code. These are the two lines (CMakeLists.txt of the 0.33.0 sdist) that tell:

    message(STATUS "CUDA supported target architectures: ${CUDA_ARCHS}")
    message(STATUS "Building SM12x NVFP4 for archs: ${FP4_SM120_ARCHS}")

`pip install -v` prefixes them with spaces; a configure that never ran prints neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.matrix.archs import split_arch_list

SUPPORTED = re.compile(r"-- CUDA supported target architectures: *(?P<archs>[^\n]*?)\s*$", re.MULTILINE)
NVFP4_SM12X = re.compile(r"-- Building SM12x NVFP4 for archs: *(?P<archs>[^\n]*?)\s*$", re.MULTILINE)
NVFP4_SM12X_SKIPPED = re.compile(r"-- Not building SM12x NVFP4\b", re.MULTILINE)
SCALED_MM_SM120 = re.compile(r"-- Building scaled_mm_c3x_sm120 for archs: *(?P<archs>[^\n]*?)\s*$", re.MULTILINE)
_ARCH = re.compile(r"^(?P<cc>\d+\.\d+)(?P<suffix>[af]?)(?:\+PTX)?$")

FIX_121A = "apply patches/vllm/0001-cmake-sm121a-on-cuda13.patch (stacks.<name>.vllm.patches)"


@dataclass(frozen=True)
class BuildLogProblem:
    kind: str  # log-incomplete | nvfp4-not-built | arch-collapsed | arch-missing
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True)
class ArchDecisions:
    supported: tuple[str, ...] | None
    nvfp4_sm12x: tuple[str, ...] | None  # None: no line; () : "Not building"
    scaled_mm_sm120: tuple[str, ...] | None


def _archs(m: re.Match | None) -> tuple[str, ...] | None:
    return tuple(split_arch_list(m["archs"])) if m else None


def read_decisions(text: str) -> ArchDecisions:
    """The last decision of each kind (a log may hold a failed configure, then a good one)."""
    def last(rx: re.Pattern) -> re.Match | None:
        found = list(rx.finditer(text))
        return found[-1] if found else None

    nvfp4 = _archs(last(NVFP4_SM12X))
    if nvfp4 is None and NVFP4_SM12X_SKIPPED.search(text):
        nvfp4 = ()
    return ArchDecisions(_archs(last(SUPPORTED)), nvfp4, _archs(last(SCALED_MM_SM120)))


def _covers(built: str, wanted_cc: str, wanted_suffix: str) -> bool:
    """Does a cubin built for `built` serve a request for <wanted_cc><wanted_suffix>?"""
    m = _ARCH.match(built)
    if not m:
        return False
    if wanted_suffix == "a":  # an 'a' request wants exactly that chip's arch-specific code
        return m["cc"] == wanted_cc and m["suffix"] == "a"
    same_major = m["cc"].split(".")[0] == wanted_cc.split(".")[0]
    if m["suffix"] == "f":  # family code loads on every minor of the major
        return same_major
    if m["suffix"] == "a":  # arch-specific code loads on that exact chip only
        return m["cc"] == wanted_cc
    return same_major and tuple(map(int, m["cc"].split("."))) <= tuple(map(int, wanted_cc.split(".")))


def check_build_log(text: str, torch_cuda_arch_list: str) -> list[BuildLogProblem]:
    """Problems, empty when the SM12x NVFP4 kernels were built for what the stack asked."""
    d = read_decisions(text)
    problems: list[BuildLogProblem] = []
    if d.supported is None:
        problems.append(BuildLogProblem(
            "log-incomplete", "no 'CUDA supported target architectures:' line: the CMake configure output is "
            "missing (build with `pip install -v`, keep the whole log)"))
    wanted = [m for e in split_arch_list(torch_cuda_arch_list) if (m := _ARCH.match(e)) and m["cc"].startswith("12.")]
    if not wanted:
        return problems
    if d.nvfp4_sm12x is None:
        if d.supported is not None:
            problems.append(BuildLogProblem(
                "log-incomplete", "no 'Building SM12x NVFP4 for archs:' line although SM12x was asked"))
        return problems
    if not d.nvfp4_sm12x:
        problems.append(BuildLogProblem(
            "nvfp4-not-built", f"asked {torch_cuda_arch_list}, the log says 'Not building SM12x NVFP4'"))
        return problems
    built = ", ".join(d.nvfp4_sm12x)
    for m in wanted:
        entry = m.group(0)
        if any(_covers(b, m["cc"], m["suffix"]) for b in d.nvfp4_sm12x):
            continue
        if m["suffix"] == "a" and any(_covers(b, m["cc"], "") for b in d.nvfp4_sm12x):
            problems.append(BuildLogProblem(
                "arch-collapsed", f"asked {entry}, SM12x NVFP4 built for {built}: no {entry} arch-specific "
                f"kernels ({FIX_121A})"))
        else:
            problems.append(BuildLogProblem(
                "arch-missing", f"asked {entry}, SM12x NVFP4 built for {built}: nothing loads on "
                f"compute capability {m['cc']} ({FIX_121A})"))
    return problems
