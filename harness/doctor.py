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


def _has_bridge() -> bool | None:
    try:
        from harness.engine import connect

        return bool(connect(timeout=10).client.networks.list(names=["bridge"]))
    except Exception:  # noqa: BLE001 - doctor reports, never raises here
        return None


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def attach_checks(info, host, need: bool, bridge: bool | None = None) -> list[Check]:
    """One row per GPU attach mode: does it work with this engine on this host, and why not.

    Only the mode the matrix's [host].gpu_attach chooses is required (default 'runtime'); the
    others are information. `host` is the matrix's Host (or None: the defaults). The 'devices'
    paths are checked on this machine: run doctor on the Docker host itself.
    """
    from harness.gpu_attach import existing, library_path
    from harness.matrix.model import Host

    host = host or Host()
    chosen = host.gpu_attach
    rows: list[Check] = []
    has_rt = "nvidia" in info.runtimes
    rows.append(Check(
        "gpu attach: runtime", has_rt,
        ("nvidia runtime registered" if has_rt else
         f"no 'nvidia' runtime in the engine (runtimes: {', '.join(info.runtimes) or 'none'}): "
         "--gpus / device_requests fail with 'could not select device driver'"),
        "install the NVIDIA Container Toolkit and run `nvidia-ctk runtime configure --runtime=docker`, "
        "restart dockerd; or choose another [host].gpu_attach",
        required=need and chosen == "runtime"))
    specs = [str(p) for d in info.cdi_spec_dirs if Path(d).is_dir()
             for p in Path(d).iterdir() if p.name.startswith("nvidia")]
    cdi_ok = _major(info.version) >= 25 and bool(specs)
    why = []
    if _major(info.version) < 25:
        why.append(f"Docker {info.version} < 25 has no CDI device support")
    if not specs:
        why.append(f"no nvidia CDI spec in {', '.join(info.cdi_spec_dirs) or 'the engine (CDISpecDirs empty)'}")
    rows.append(Check("gpu attach: cdi", cdi_ok, f"specs: {', '.join(specs)}" if cdi_ok else "; ".join(why),
                      "Docker >= 25 and `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`",
                      required=need and chosen == "cdi"))
    have, missing = existing(host.devices)
    dirs_have, dirs_missing = existing(host.driver_dirs)
    libcuda = [str(p) for d in library_path(host) for p in sorted(Path(d).glob("libcuda.so*"))[:1]]
    dev_ok = bool(host.devices) and not missing and not dirs_missing and (bool(libcuda) or not host.driver_dirs)
    why = []
    if missing:
        why.append(f"missing device nodes: {', '.join(missing)}")
    if dirs_missing:
        why.append(f"missing driver dirs: {', '.join(dirs_missing)}")
    if host.driver_dirs and not libcuda:
        why.append(f"no libcuda.so in {', '.join(library_path(host))}")
    if not host.driver_dirs:
        why.append("no [host].driver_dirs: the image must bring a matching libcuda itself")
    detail = (f"nodes {', '.join(have)}; driver {', '.join(dirs_have)} (libcuda {', '.join(libcuda)})" if dev_ok
              else "; ".join(why) or "no device nodes listed")
    found = sorted(str(p) for p in Path("/dev").glob("nvidia*") if p.name != "nvidia-caps")
    rows.append(Check("gpu attach: devices", dev_ok, detail,
                      f"set [host].devices to the nodes this host has ({', '.join(found) or 'none under /dev'}) and "
                      "driver_dirs to the folder holding libcuda.so (e.g. /usr/local/nvidia or /usr/lib/x86_64-linux-gnu)",
                      required=need and chosen == "devices"))
    net = host.network
    if bridge is not None:
        rows.append(Check(f"network: {net}", net == "host" or bridge,
                          "engine has a bridge network" if bridge else "engine has no bridge network (dockerd --bridge=none)",
                          "set [host].network = \"host\" (or serve.network)", required=need))
    if host.security_opt:
        rows.append(Check("security options", True, ", ".join(host.security_opt), required=False))
    return rows


def run_checks(*, need_docker: bool = True, need_gpu: bool = True, need_gpu_runtime: bool = True,
               local_pythons: tuple[str, ...] = (), build_dir: str = ".", host=None) -> list[Check]:
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
        checks += attach_checks(engine_info, host, need_gpu_runtime, bridge=_has_bridge())
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
        "host": matrix.spec.host,
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
