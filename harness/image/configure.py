"""vLLM's CMake configure, run locally and offline, read for its kernel arch decisions.

vLLM's CMakeLists.txt decides, per kernel family, which archs of TORCH_CUDA_ARCH_LIST each
family is compiled for, and prints each decision (`-- Building moe_data for archs: 12.0f`)
long before anything compiles. A configure takes tens of seconds without a GPU, so the decision
of a release or a commit can be read without building it.

What the configure needs, and nothing else (no network, no GPU):
- nvcc (CUDA 13 gives the decisions of a CUDA 13 build) and cmake >= 3.26;
- a Python with a CUDA build of torch (its CMake config is what `find_package(Torch)` reads);
- libnvrtc (the torch CUDA wheel's `nvidia/cu13/lib`) and a libcuda stub (any shared library
  named libcuda.so: the configure links nothing);
- a CUTLASS folder for `VLLM_CUTLASS_SRC_DIR` (an empty folder is enough to configure: the
  decisions are string logic; only the compile reads CUTLASS's headers), and
  FETCHCONTENT_FULLY_DISCONNECTED=ON so nothing is fetched.

The external projects vLLM fetches after its own kernels (triton_kernels, DeepGEMM, FlashMLA,
flash-attention) and recent releases' `GCC >= 13` check come after every decision line: the
configure may stop there, and the decisions printed before it still stand. `configure()` keeps
the exit status and the first CMake error so a reader sees where it stopped.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import proc
from harness.archs import ArchEntry, split
from harness.image.buildlog import SUPPORTED
from harness.safety import writes

# Each kernel family: the `-- Building <name> for archs: ...` lines that decide it. vLLM up to
# the 0.2x releases printed the SM12x FP4 block as `Building NVFP4 for archs:` (the SM10x block
# printed the same words): only its 12.x archs belong to the SM12x family.
FAMILIES: dict[str, tuple[re.Pattern, re.Pattern, bool]] = {
    # family: (the line that builds it, the line that does not, keep only 12.x archs)
    "nvfp4_sm12x": (re.compile(r"^-- Building (?:SM12x )?NVFP4 for archs: *(?P<archs>.*?)\s*$", re.M),
                    re.compile(r"^-- Not building (?:SM12x )?NVFP4\b", re.M), True),
    "scaled_mm_sm120": (re.compile(r"^-- Building scaled_mm_c3x_sm120 for archs: *(?P<archs>.*?)\s*$", re.M),
                        # 0.33.0 prints `scaled_mm_c3x_120` in this one message
                        re.compile(r"^-- Not building scaled_mm_c3x_(?:sm)?120\b", re.M), False),
    "moe_data": (re.compile(r"^-- Building moe_data for archs: *(?P<archs>.*?)\s*$", re.M),
                 re.compile(r"^-- Not building moe_data\b", re.M), False),
}
DEFAULT_FAMILIES = tuple(FAMILIES)
NOT_BUILT = "not built"
# Any `Building X for archs: Y` line: every decision is kept in the step record, compared or not.
ANY_DECISION = re.compile(r"^-- Building (?P<what>.+?) for archs: *(?P<archs>.*?)\s*$", re.M)
CMAKE_ERROR = re.compile(r"^CMake Error at (?P<where>\S+?)(?: \((?P<what>\w+)\))?:\s*$", re.M)
GCC_REQUIRED = re.compile(r"GCC >= (?P<version>[\d.]+) is required")


@dataclass(frozen=True)
class Toolchain:
    """What the configure runs with; `find()` fills it from this host."""

    cmake: str
    python: str  # a Python whose torch is a CUDA build
    nvcc: str
    cuda_home: str
    nvrtc: str | None = None
    libcuda: str | None = None
    cutlass_dir: str | None = None

    def problems(self) -> list[str]:
        out = []
        for name, value in (("cmake", self.cmake), ("python", self.python), ("nvcc", self.nvcc)):
            if not value or not Path(value).exists():
                out.append(f"{name}: {value or 'not found'}")
        if Path(self.python).exists():
            res = proc.run([self.python, "-c", "import torch; print(torch.version.cuda or '')"], timeout=300,
                           max_output=64 << 10)  # a Python that floods its output is ended
            if not res.ok or not res.stdout.strip():
                out.append(f"python: {self.python} has no CUDA build of torch")
        return out


@dataclass(frozen=True)
class ConfigureOutcome:
    returncode: int
    seconds: float
    supported: tuple[str, ...] | None
    decisions: dict[str, tuple[str, ...] | None]  # family -> archs; () not built; None: no line seen
    every_decision: dict[str, str] = field(default_factory=dict)
    stopped_at: str | None = None  # the first CMake error, when the configure did not finish
    log_tail: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        """The families configured (a key each in `decisions`) whose decision the log never printed."""
        return [f for f, archs in self.decisions.items() if archs is None]


def _torch_nvrtc(python: str) -> str | None:
    res = proc.run([python, "-c", "import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))"], timeout=120,
                   max_output=64 << 10)
    if not res.ok:
        return None
    for lib in Path(res.stdout.strip()).glob("nvidia/cu*/lib/libnvrtc.so*"):
        if "builtins" not in lib.name and ".alt." not in lib.name:
            return str(lib)
    return None


def find(python: str | None = None, *, cutlass_dir: str | None = None, libcuda: str | None = None) -> Toolchain:
    """The toolchain of this host: nvcc from PATH (or CUDA_HOME), cmake and torch from `python`'s
    environment (default: this interpreter)."""
    python = python or sys.executable
    bindir = Path(python).parent
    cmake = str(bindir / "cmake") if (bindir / "cmake").exists() else (proc.which("cmake") or "")
    nvcc = proc.which("nvcc") or str(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc")
    cuda_home = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if Path("/usr/local/cuda/include").is_dir()
                                                 else str(Path(nvcc).resolve().parent.parent))
    return Toolchain(cmake, python, nvcc, cuda_home, _torch_nvrtc(python), libcuda, cutlass_dir)


def _stub_libcuda(folder: Path) -> str:
    """An empty shared library named libcuda.so: find_library wants one, nothing links it."""
    src = folder / "stub.c"
    writes.write_text(src, "int harness_libcuda_stub;\n", flag="stub source")
    out = folder / "libcuda.so"
    res = proc.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(out), str(src)], timeout=120)
    return str(out) if res.ok else ""


def _major(word: str) -> int | None:
    try:
        return ArchEntry.parse(word).major
    except ValueError:
        return None


def decisions_of(text: str, families=DEFAULT_FAMILIES) -> tuple[tuple[str, ...] | None, dict[str, tuple[str, ...] | None]]:
    """(supported archs, family -> archs): `()` when the log says the family is not built, None
    when it says nothing about it (the configure stopped before, or the release has no such line)."""
    sup = list(SUPPORTED.finditer(text))
    supported = tuple(split(sup[-1]["archs"])) if sup else None
    out: dict[str, tuple[str, ...] | None] = {}
    for fam in families:
        building, not_building, only12 = FAMILIES[fam]
        found = list(building.finditer(text))
        archs = [a for m in found for a in split(m["archs"]) if not only12 or _major(a) == 12]
        out[fam] = tuple(dict.fromkeys(archs)) if found or not_building.search(text) else None
    return supported, out


def configure(tree: Path, arch_list: str, tool: Toolchain, *, log_path: Path | None = None,
              families=DEFAULT_FAMILIES, timeout: float = 900) -> ConfigureOutcome:
    """Configure `tree` (an unpacked vLLM source) for `arch_list` in a scratch build folder."""
    scratch = Path(tempfile.mkdtemp(prefix="harness-configure-"))
    try:
        cutlass = tool.cutlass_dir or str(scratch / "cutlass-empty")
        Path(cutlass).mkdir(parents=True, exist_ok=True)
        libcuda = tool.libcuda or _stub_libcuda(scratch)
        cuda_bin = str(Path(tool.nvcc).parent)
        env = {**os.environ, "TORCH_CUDA_ARCH_LIST": arch_list, "VLLM_CUTLASS_SRC_DIR": cutlass,
               "CUDACXX": tool.nvcc, "CUDA_HOME": tool.cuda_home, "MAX_JOBS": "1",
               "PATH": os.pathsep.join([cuda_bin, str(Path(tool.python).parent), os.environ.get("PATH", "")])}
        argv = [tool.cmake, "-S", str(tree), "-B", str(scratch / "build"), "-DCMAKE_BUILD_TYPE=Release",
                f"-DVLLM_PYTHON_EXECUTABLE={tool.python}", "-DVLLM_TARGET_DEVICE=cuda",
                "-DFETCHCONTENT_FULLY_DISCONNECTED=ON", f"-DCUDA_TOOLKIT_ROOT_DIR={tool.cuda_home}",
                # both names: torch's FindCUDA reads the first, CMake's FindCUDAToolkit the second
                f"-DCUDA_CUDA_LIB={libcuda}", f"-DCUDA_cuda_driver_LIBRARY={libcuda}"]
        if tool.nvrtc:
            argv.append(f"-DCUDA_nvrtc_LIBRARY={tool.nvrtc}")
        if shutil.which("ninja", path=env["PATH"]):
            argv += ["-G", "Ninja"]
        t0 = time.monotonic()
        res = proc.run(argv, timeout=timeout, env=env)
        seconds = time.monotonic() - t0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = res.stdout + ("\n" + res.stderr if res.stderr else "")
    if log_path is not None:
        writes.write_text(log_path, text, make_parents=True, flag="configure log")
    supported, decisions = decisions_of(text, families)
    stopped = None
    if not res.ok:
        m = CMAKE_ERROR.search(text)
        gcc = GCC_REQUIRED.search(text)
        where = f"{m['where']} ({m['what']})" if m and m["what"] else m["where"] if m else None
        stopped = (where or f"exit {res.returncode}") + (
            f": GCC >= {gcc['version']} required" if gcc else "")
    every: dict[str, str] = {}
    for m in ANY_DECISION.finditer(text):  # a name printed twice (old NVFP4 blocks) keeps both
        every[m["what"]] = f"{every[m['what']]} | {m['archs']}" if m["what"] in every else m["archs"]
    return ConfigureOutcome(res.returncode, round(seconds, 1), supported, decisions, every, stopped,
                            tuple(text.splitlines()[-15:]))
