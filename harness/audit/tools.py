"""cuobjdump and nvdisasm: where they are, and how the audit runs them (through harness.proc).

They come from the CUDA toolkit or from the pip packages `nvidia-cuda-cuobjdump` /
`nvidia-cuda-nvdisasm` (the `audit` extra), which install them under
site-packages/nvidia/cu13/bin. The audit itself reads binaries in Python; these tools are
needed only to disassemble the few NVFP4 cubins and to cross-check our reader.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import TypeVar

from harness import proc
from harness.errors import EnvironmentProblem

T = TypeVar("T")
_INSTALL_HINT = "pip install -e '.[audit]' (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) or put a CUDA toolkit's bin/ on PATH"


@cache
def find(tool: str) -> Path | None:
    """Path of `tool` (cuobjdump, nvdisasm, nvcc), or None."""
    found = shutil.which(tool)
    if found:
        return Path(found)
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    roots.update(p for p in sys.path if p.endswith("site-packages"))
    for root in sorted(roots):
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cuda_nvdisasm/bin"):
            candidate = Path(root) / sub / tool
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    for cuda in ("/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin"):
        candidate = Path(cuda) / tool
        if candidate.is_file():
            return candidate
    return None


def require(tool: str) -> Path:
    path = find(tool)
    if path is None:
        raise EnvironmentProblem(f"{tool} not found", hint=_INSTALL_HINT)
    return path


def read_lines(
    tool: str, *args: str | os.PathLike[str], consume: Callable[[Iterator[str]], T], timeout: float = 300
) -> T:
    """Run a CUDA binary tool and hand its stdout to `consume` line by line (nvdisasm's text
    for a 60 MB cubin is never held whole); a failure names the command, as `run` does."""
    value, result = proc.stream([str(require(tool)), *map(str, args)], consume, timeout=timeout)
    _check(tool, result, timeout)
    return value


def _check(tool: str, result: proc.Result, timeout: float) -> None:
    cmd = " ".join(result.argv)
    if len(cmd) > 400:  # `nvdisasm -fun` with hundreds of symbol indices
        cmd = f"{cmd[:200]} ... {cmd[-150:]}"
    if result.returncode == 124:
        raise EnvironmentProblem(
            f"{tool} took over {timeout:.0f} s: {cmd}",
            hint="audit fewer files, or pass --no-sass to skip disassembly",
        )
    if not result.ok:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise EnvironmentProblem(
            f"{tool} failed (exit {result.returncode}): {cmd}: {' | '.join(tail)}",
            hint="check that the file is a CUDA binary and that the tool is CUDA 12.8 or newer",
        )


def run(tool: str, *args: str | os.PathLike[str], timeout: float = 300, ok_if: str = "") -> str:
    """Run a CUDA binary tool and return its stdout; a failure names the command.

    `ok_if`: text in stderr that makes a non-zero exit an empty answer (cuobjdump exits 255
    with "does not contain device code" on a host-only library).
    """
    result = proc.run([str(require(tool)), *map(str, args)], timeout=timeout)
    if not result.ok and ok_if and ok_if in result.stderr + result.stdout:
        return ""
    _check(tool, result, timeout)
    return result.stdout
