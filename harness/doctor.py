"""`harness doctor`: can this host run the matrix? Each check passes or says how to fix it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from harness import gpus
from harness.console import out
from harness.errors import EnvironmentProblem, HarnessError

MIN_BUILD_DISK_GIB = 60  # a vLLM + FlashInfer build image with ccache is about 30-50 GB


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def find_cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    for root in filter(None, (os.environ.get("CUDA_HOME"), "/usr/local/cuda")):
        cand = Path(root) / "bin" / "cuobjdump"
        if cand.is_file():
            return str(cand)
    try:
        import nvidia  # the nvidia-cuda-cuobjdump wheel installs under nvidia/cu13/bin

        for base in nvidia.__path__:
            for cand in Path(base).glob("cu*/bin/cuobjdump"):
                return str(cand)
    except ImportError:
        pass
    return None


def run_checks(*, need_docker: bool = True, need_gpu: bool = True, need_gpu_runtime: bool = True,
               local_pythons: tuple[str, ...] = (), build_dir: str = ".") -> list[Check]:
    checks: list[Check] = []
    engine_info = None
    try:
        from harness.engine import connect

        engine_info = connect(timeout=10).info()
        checks.append(Check("docker engine", True,
                            f"{engine_info.version} (API {engine_info.api_version}) at {engine_info.host}, "
                            f"{engine_info.os}", required=need_docker))
    except HarnessError as exc:
        checks.append(Check("docker engine", False, exc.message, exc.hint or "", required=need_docker))
    if engine_info is not None:
        gpu_rt = engine_info.gpu_capable
        checks.append(Check(
            "gpu container runtime", gpu_rt,
            f"runtimes: {', '.join(engine_info.runtimes) or 'none'}; CDI dirs: "
            f"{', '.join(engine_info.cdi_spec_dirs) or 'none'}",
            "install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker` "
            "(or generate a CDI spec with `nvidia-ctk cdi generate`), then restart dockerd",
            required=need_gpu_runtime,
        ))
    probe = gpus.probe()
    detail = "; ".join(f"{g.name} cc {g.cc} driver {g.driver}" for g in probe.gpus) or probe.reason
    checks.append(Check("gpus", probe.ok, f"{detail} (via {probe.source})",
                        "install the NVIDIA driver, or run on a GPU host", required=need_gpu))
    try:
        free = shutil.disk_usage(build_dir).free / 2**30
        checks.append(Check("free disk", free >= MIN_BUILD_DISK_GIB, f"{free:.0f} GiB free at {Path(build_dir).resolve()}",
                            f"free at least {MIN_BUILD_DISK_GIB} GiB for image builds", required=need_docker))
    except OSError as exc:
        checks.append(Check("free disk", False, str(exc), required=need_docker))
    cuobj = find_cuobjdump()
    checks.append(Check("cuobjdump", cuobj is not None, cuobj or "not found",
                        "pip install nvidia-cuda-cuobjdump (or install the CUDA toolkit)", required=False))
    for py in local_pythons:
        checks.append(Check(f"local python {py}", Path(py).is_file(), "exists" if Path(py).is_file() else "missing",
                            "fix stacks.<name>.local.python in the matrix"))
    return checks


def needs_for(matrix) -> dict:
    stacks = matrix.spec.stacks.values()
    docker_needed = any(s.runner == "docker" for s in stacks)
    return {
        "need_docker": docker_needed,
        "need_gpu_runtime": docker_needed,
        "need_gpu": True,
        "local_pythons": tuple(s.local.python for s in stacks if s.runner == "local"),
    }


def render(checks: list[Check]) -> None:
    table = Table(title="harness doctor")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        status = "[green]ok[/green]" if c.ok else ("[red]FAIL[/red]" if c.required else "[yellow]warn[/yellow]")
        table.add_row(c.name, status, c.detail, "" if c.ok else c.fix)
    out.print(table)


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check Docker, the GPU runtime, GPUs, disk and cuobjdump")
    p.add_argument("-m", "--matrix", default=None,
                   help="judge against what this matrix needs (default: Docker + GPU)")
    p.set_defaults(func=run)


def run(args) -> int:
    kwargs = {}
    if args.matrix:
        from harness.matrix.load import load_matrix

        kwargs = needs_for(load_matrix(args.matrix))
    checks = run_checks(**kwargs)
    render(checks)
    failed = [c for c in checks if c.required and not c.ok]
    if failed:
        raise EnvironmentProblem(
            f"this host cannot run the matrix: {', '.join(c.name for c in failed)} failed",
            hint=failed[0].fix,
        )
    return 0
