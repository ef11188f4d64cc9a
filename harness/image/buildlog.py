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

from harness.archs import ArchList, Load, split

SUPPORTED = re.compile(r"-- CUDA supported target architectures: *(?P<archs>[^\n]*?)\s*$", re.MULTILINE)
NVFP4_SM12X = re.compile(r"-- Building SM12x NVFP4 for archs: *(?P<archs>[^\n]*?)\s*$", re.MULTILINE)
NVFP4_SM12X_SKIPPED = re.compile(r"-- Not building SM12x NVFP4\b", re.MULTILINE)
SCALED_MM_SM120 = re.compile(r"-- Building scaled_mm_c3x_sm120 for archs: *(?P<archs>[^\n]*?)\s*$", re.MULTILINE)

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
    return tuple(split(m["archs"])) if m else None


def read_decisions(text: str) -> ArchDecisions:
    """The last decision of each kind (a log may hold a failed configure, then a good one)."""
    def last(rx: re.Pattern) -> re.Match | None:
        found = list(rx.finditer(text))
        return found[-1] if found else None

    nvfp4 = _archs(last(NVFP4_SM12X))
    if nvfp4 is None and NVFP4_SM12X_SKIPPED.search(text):
        nvfp4 = ()
    return ArchDecisions(_archs(last(SUPPORTED)), nvfp4, _archs(last(SCALED_MM_SM120)))


def check_build_log(text: str, asked: ArchList) -> list[BuildLogProblem]:
    """Problems, empty when the SM12x NVFP4 kernels were built for what the stack asked: for each
    12.x entry asked, built code that loads on that chip, and for an `a` entry its own `a` code
    (the arch-specific features were what was asked for)."""
    d = read_decisions(text)
    problems: list[BuildLogProblem] = []
    if d.supported is None:
        problems.append(BuildLogProblem(
            "log-incomplete", "no 'CUDA supported target architectures:' line: the CMake configure output is "
            "missing (build with `pip install -v`, keep the whole log)"))
    wanted = [e for e in asked if e.major == 12]
    if not wanted:
        return problems
    if d.nvfp4_sm12x is None:
        if d.supported is not None:
            problems.append(BuildLogProblem(
                "log-incomplete", "no 'Building SM12x NVFP4 for archs:' line although SM12x was asked"))
        return problems
    if not d.nvfp4_sm12x:
        problems.append(BuildLogProblem(
            "nvfp4-not-built", f"asked {asked}, the log says 'Not building SM12x NVFP4'"))
        return problems
    return problems + nvfp4_problems(asked, d.nvfp4_sm12x)


def nvfp4_problems(asked: ArchList, nvfp4_sm12x: tuple[str, ...]) -> list[BuildLogProblem]:
    """What the SM12x NVFP4 decision (`Building SM12x NVFP4 for archs: ...`) did to the 12.x
    entries asked: for each, built code that loads on that chip, and for an `a` entry its own `a`
    code. The full build's log check and the units probe both judge by it: asked 12.1a, got
    12.0f is THE trap (a silent override), whatever the SASS of the 12.0f code holds."""
    problems: list[BuildLogProblem] = []
    built = ArchList.read(";".join(nvfp4_sm12x))
    shown = ", ".join(nvfp4_sm12x)
    for e in (e for e in asked if e.major == 12):
        loads = built.load_on(e.cc) is not Load.NO
        own = e.suffix != "a" or any(b.cc == e.cc and b.suffix == "a" for b in built)
        if loads and own:
            continue
        if loads:
            problems.append(BuildLogProblem(
                "arch-collapsed", f"asked {e}, SM12x NVFP4 built for {shown}: no {e} arch-specific "
                f"kernels ({FIX_121A})"))
        else:
            problems.append(BuildLogProblem(
                "arch-missing", f"asked {e}, SM12x NVFP4 built for {shown}: nothing loads on "
                f"compute capability {e.cc} ({FIX_121A})"))
    return problems
