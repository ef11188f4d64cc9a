"""`harness doctor`: can this host run the matrix? Each check passes or says how to fix it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from harness import gpus, proc
from harness.console import out
from harness.errors import EnvironmentProblem, HarnessError

# Free disk a matrix needs where it builds, per kind of stack, in GiB: (fail below, warn below).
# Measured on the H200 machine: the cut vLLM 0.25.1 source stack's image is 18.79 GB on its 17.0 GB
# base, 1.8 GB of layers (examples/h200-source/device/image.json), with 0.10 GiB of compile cache
# (examples/h200-cache/cold/cache-show.txt); that build and two served cells ran with 47 GiB free
# (examples/h200-source/device/doctor.txt). The 0.25.1 wheel stack's image added 0.45 GB to the same
# base (examples/h200-docker/device/3-image.json). What is needed: the base (15.8 GiB, the largest
# measured here) + the stack's layers twice (the build writes a layer before committing it) + its
# compile cache + 2 GiB for results and logs: source 15.8 + 3.4 + 0.1 + 2 = 21.3, so 22; wheel
# 15.8 + 0.8 + 2 = 18.6, so 19; a prebuilt image is pulled as a base is, so 19 too. Warn below 60 for
# source stacks (a whole, uncut build compiles ~3x the objects, FA2/FA3 among them: not measured) and
# below 30 for the others.
DISK_GIB = {"source": (22, 60), "wheel": (19, 30), "image": (19, 30)}


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
    from harness.matrix.model import Host
    from harness.serve.gpu_attach import existing, library_path

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
               local_pythons: tuple[str, ...] = (), local_keys: tuple[str, ...] = (),
               build_dir: str = ".", matrix=None,
               probe: gpus.GpuProbe | None = None) -> list[Check]:
    checks: list[Check] = []
    engine_info = None
    probe = probe or gpus.probe()
    try:
        from harness.engine import connect

        engine_info = connect(timeout=10).info()
        checks.append(Check("docker engine", True,
                            f"{engine_info.version} (API {engine_info.api_version}) at {engine_info.host}, "
                            f"{engine_info.os}", required=need_docker))
    except HarnessError as exc:
        checks.append(Check("docker engine", False, exc.message, exc.hint or "", required=need_docker))
    if engine_info is not None:
        # Without a GPU there is nothing to attach: builds and audits still run.
        need_gpu_runtime = need_gpu_runtime and (probe.ok or need_gpu)
        checks += attach_checks(engine_info, matrix.spec.host if matrix is not None else None,
                                need_gpu_runtime, bridge=_has_bridge())
    detail = "; ".join(f"{g.name} cc {g.cc} driver {g.driver}" for g in probe.gpus) or probe.reason
    checks.append(Check("gpus", probe.ok, f"{detail} (via {probe.source})",
                        "install the NVIDIA driver, or run on a GPU host" + (
                            "" if need_gpu else " (images are still built and audited here; "
                            "cells need a GPU)"), required=need_gpu))
    checks += disk_checks(build_dir, matrix, need_docker)
    for tool, (why, fix) in proc.HOST_TOOLS.items():
        where = proc.which(tool)
        checks.append(Check(tool, where is not None, where or f"not found: harness {why}", fix,
                            required=need_docker))
    cuobj = find_cuobjdump()
    checks.append(Check("cuobjdump", cuobj is not None, cuobj or "not found",
                        "pip install nvidia-cuda-cuobjdump (or install the CUDA toolkit)", required=False))
    for i, py in enumerate(local_pythons):
        key = local_keys[i] if i < len(local_keys) else "stacks.<name>.local.python"
        checks.append(Check(f"local python {py}", Path(py).is_file(), "exists" if Path(py).is_file() else "missing",
                            f"fix {key} in the matrix (a Python that has vLLM installed on this host)"))
    if matrix is not None:
        checks += [c for c in (pins_check(matrix), fit_check(matrix, probe)) if c is not None]
    return checks


def stack_kind(stack) -> str | None:
    """What a stack puts on the build disk: 'source', 'wheel', 'image' (pulled), None (local)."""
    if stack.runner != "docker":
        return None
    return "image" if stack.image is not None else "wheel" if stack.wheels is not None else "source"


def disk_checks(build_dir: str, matrix, need_docker: bool) -> list[Check]:
    """Free disk against what the matrix's stacks need (DISK_GIB): failed below that, a warning
    below the comfortable size. No matrix: the shipped default matrices, source stacks."""
    kinds = {"source"} if matrix is None else {k for s in matrix.spec.stacks.values() if (k := stack_kind(s))}
    if not kinds:
        return []
    kind = max(kinds, key=lambda k: DISK_GIB[k])
    need, comfortable = DISK_GIB[kind]
    what = f"{kind} stacks" if matrix is None or len(kinds) == 1 else f"{kind} stacks (the largest here)"
    try:
        free = shutil.disk_usage(build_dir).free / 2**30
    except OSError as exc:
        return [Check("free disk", False, str(exc), required=need_docker)]
    where = f"{free:.0f} GiB free at {Path(build_dir).resolve()}"
    if free < need:
        return [Check("free disk", False, f"{where}; {what} need {need} GiB (docs/measured.md)",
                      f"free at least {need} GiB for image builds", required=need_docker)]
    if free < comfortable:
        return [Check("free disk", False, f"{where}: enough for {what} ({need} GiB, measured), "
                      f"below the {comfortable} GiB advised for them",
                      f"free {comfortable} GiB to be safe, or keep the compile cache elsewhere "
                      "(HARNESS_COMPILE_CACHE_DIR)", required=False)]
    return [Check("free disk", True, f"{where}; {what} need {need} GiB")]


def pins_check(matrix) -> Check | None:
    """Base images and sdists pinned, in the matrix or its lock; a stale lock fails here, not
    an hour into a run."""
    from harness import lock

    wanted = lock.wants(matrix)
    if not wanted:
        return None
    path = lock.lock_path(matrix)
    shown = lock._shown(matrix.path)
    fix = f"`harness lock -m {shown}`"
    try:
        held = lock.read_lock(path)
    except HarnessError as exc:
        return Check("pins", False, exc.message, fix)
    if held is not None:
        if problems := lock.mismatches(matrix, held):
            return Check("pins", False, f"{path.name} no longer matches: " + "; ".join(problems), fix)
        return Check("pins", True, f"{len(wanted)} pins from {path.name} (written {held.lock.written})")
    missing = [w for w in wanted if not w.given]
    if not missing:
        return Check("pins", True, f"all {len(wanted)} pins written in the matrix")
    return Check("pins", False, f"{len(missing)} of {len(wanted)} pins not resolved yet, no {path.name}: "
                 + ", ".join(sorted({w.what for w in missing})),
                 fix + " (`harness run` does it first; it needs the image registry and pypi.org)",
                 required=False)


def fit_check(matrix, probe: gpus.GpuProbe) -> Check:
    """Is this matrix for the GPU this host has? (`make matrix` picks the one that is.)"""
    hw = matrix.spec.hardware[matrix.spec.matrix.hardware]
    pick = pick_matrix(probe.gpus, available_matrices())
    if not probe.ok:
        return Check("matrix fits this host", False,
                     f"no GPU: {matrix.path.name}'s images are built and audited, its cells cannot run here",
                     "run on a host with the GPU the matrix names", required=False)
    g = probe.gpus[0]
    said = f"{matrix.path.name} is for {matrix.spec.matrix.hardware} (cc {hw.cc}); GPU 0 is {g.name} cc {g.cc}"
    if g.cc != hw.cc:
        return Check("matrix fits this host", False, said,
                     f"`make matrix` picks {pick.path} here ({pick.why}); or MATRIX=...", required=False)
    # the same compute capability is not the same card: an H100 runs an H200 matrix, and every
    # roofline figure would then be computed with the H200's bandwidth
    if (bw := gpus.other_bandwidth(g.name, hw.bandwidth_gbs)) is not None:
        return Check("matrix fits this host", False,
                     f"{said}, whose memory reads {bw:g} GB/s, not the {hw.bandwidth_gbs:g} GB/s of "
                     f"hardware.{matrix.spec.matrix.hardware}: its cells run, and their roofline figures "
                     "are for the card the matrix names",
                     f"set hardware.{matrix.spec.matrix.hardware}.bandwidth_gbs = {bw:g} in a copy of "
                     f"{matrix.path.name} for this card (and say so in its description)", required=False)
    return Check("matrix fits this host", True, said, "")


# --- which matrix fits the hardware found -----------------------------------------------------

MATRIX_DIR = "matrix"
GENERIC_TEMPLATE = f"{MATRIX_DIR}/generic.toml"
GENERATED_DIR = f"{MATRIX_DIR}/generated"
HOPPER = ("h200-docker.toml", "h200-local.toml")  # a docker one first, when there is one



@dataclass(frozen=True)
class Pick:
    path: str  # relative to the repository root
    why: str
    generic_cc: str | None = None  # the generic matrix must be written for this cc


def available_matrices(root: Path | None = None) -> frozenset[str]:
    base = (root or Path.cwd()) / MATRIX_DIR
    return frozenset(p.name for p in base.glob("*.toml")) if base.is_dir() else frozenset()


def pick_matrix(found, available) -> Pick:
    """The shipped matrix for the first GPU found: a pure function of the probe and the files."""
    if not found:
        return Pick(f"{MATRIX_DIR}/spark.toml", "no NVIDIA GPU here: the default matrix; its images "
                    "are built and audited, its cells need a GPU")
    g = found[0]
    seen = f"{g.name}, cc {g.cc}" + (f" (GPU 0 of {len(found)})" if len(found) > 1 else "")
    name = g.name.upper()
    if "GB10" in name or g.cc == "12.1":
        return Pick(f"{MATRIX_DIR}/spark.toml", f"{seen}: DGX Spark class (SM 12.1)")
    if g.cc == "12.0":
        return Pick(f"{MATRIX_DIR}/rtx-pro-6000.toml", f"{seen}: SM 12.0, the RTX Pro 6000 matrix")
    if "H100" in name or "H200" in name or g.cc == "9.0":
        for f in HOPPER:
            if f in available:
                kind = "a docker" if "docker" in f else "a local-install"
                return Pick(f"{MATRIX_DIR}/{f}", f"{seen}: Hopper, {kind} Hopper matrix")
    tag = g.cc.replace(".", "")
    return Pick(f"{GENERATED_DIR}/generic-sm{tag}.toml",
                f"{seen}: no matrix for this GPU, so the current vLLM release built for cc {g.cc} "
                f"(written from {GENERIC_TEMPLATE})", generic_cc=g.cc)


def arch_for(cc: str) -> str:
    """TORCH_CUDA_ARCH_LIST for one GPU: arch-specific ('a') kernels where they exist."""
    from harness.archs import CC, FIRST_MAJOR

    return f"{cc}a" if CC.parse(cc).major >= FIRST_MAJOR["a"] else cc


def write_generic(gpu, dest: Path, template: Path) -> Path:
    """The generic matrix with the found GPU's hardware profile and arch list."""
    import tomllib

    import tomli_w

    from harness.safety.paths import read_text

    data = tomllib.loads(read_text(template, limit=1 << 20, what="matrix template"))
    key = f"sm{gpu.cc.replace('.', '')}"
    bw = gpus.known_bandwidth(gpu.name)
    desc = f"{gpu.name} (found by harness doctor)"
    if bw is None:
        bw = 1000
        desc += (": bandwidth unknown to the harness, 1000 GB/s is a placeholder; set "
                 f"hardware.{key}.bandwidth_gbs before reading roofline figures")
    data["hardware"] = {key: {"cc": gpu.cc, "bandwidth_gbs": bw,
                              "memory_gib": max(1, round(gpu.memory_gib)), "description": desc}}
    data["matrix"].update(hardware=key, name=f"generic-{key}", patches_dir="../../patches")
    for stack in data["stacks"].values():
        stack["torch_cuda_arch_list"] = stack["flashinfer_cuda_arch_list"] = arch_for(gpu.cc)
    dest.parent.mkdir(parents=True, exist_ok=True)
    head = (f"# Written by `harness doctor --pick-matrix` from {GENERIC_TEMPLATE} for {gpu.name} "
            f"(cc {gpu.cc}).\n# Edit {GENERIC_TEMPLATE} instead; this file is written again.\n\n")
    from harness.safety.writes import write_text

    write_text(dest, head + tomli_w.dumps(data), flag="matrix")  # never through a link
    return dest


def needs_for(matrix) -> dict:
    stacks = matrix.spec.stacks.values()
    docker_needed = any(s.runner == "docker" for s in stacks)
    return {
        "need_docker": docker_needed,
        "need_gpu_runtime": docker_needed,
        # A host without a GPU still builds and audits every image; only serving needs one.
        "need_gpu": not docker_needed,
        "matrix": matrix,
        "local_pythons": tuple(s.local.python for s in stacks if s.runner == "local"),
        "local_keys": tuple(f"stacks.{n}.local.python" for n, s in matrix.spec.stacks.items()
                            if s.runner == "local"),
    }


def render(checks: list[Check]) -> None:
    from rich.text import Text

    from harness.tables import Col, show

    rows = []
    for c in checks:
        status = Text("ok", style="green") if c.ok else (Text("FAIL", style="red") if c.required
                                                          else Text("warn", style="yellow"))
        # a table's strings are text, not markup: "[host].gpu_attach" prints as written
        rows.append([c.name, status, c.detail, "" if c.ok else c.fix])
    show(out, "harness doctor", [Col("check", whole=True), Col("status"), Col("detail"), Col("fix")], rows)


# No matrix: what every shipped matrix needs of a host. Docker builds and audits the images; a GPU
# and its runtime are needed to serve, so they are required only where a GPU is present (as for a
# matrix: run_checks drops the runtime requirement on a host without one). The same verdicts as
# `make doctor` on the same host, minus that matrix's own pins and fit.
HOST_ONLY = {"need_docker": True, "need_gpu": False, "need_gpu_runtime": True}


def register(sub) -> None:
    p = sub.add_parser("doctor", help="check Docker, the GPU runtime, GPUs, disk and cuobjdump")
    p.add_argument("-m", "--matrix", default=None,
                   help="also judge what this matrix needs: its pins, its GPU (default: the host only)")
    p.add_argument("--pick-matrix", action="store_true",
                   help="print the matrix for the GPU found here (stdout: the path; stderr: why)")
    p.set_defaults(func=run)


def pick(probe: gpus.GpuProbe | None = None, root: Path | None = None) -> Pick:
    probe = probe or gpus.probe()
    root = root or Path.cwd()
    chosen = pick_matrix(probe.gpus, available_matrices(root))
    if chosen.generic_cc is not None:
        write_generic(probe.gpus[0], root / chosen.path, root / GENERIC_TEMPLATE)
    return chosen


def run(args) -> int:
    if args.pick_matrix:
        from harness.console import err, out

        chosen = pick()
        out.print(chosen.path, markup=False, soft_wrap=True)
        err.print(f"matrix: {chosen.path}: {chosen.why}", markup=False)
        return 0
    if args.matrix:
        from harness.matrix.load import load_matrix

        kwargs = needs_for(load_matrix(args.matrix))
    else:
        kwargs = HOST_ONLY
    checks = run_checks(**kwargs)
    render(checks)
    if not args.matrix:
        from harness.console import err

        err.print("host checks only: `harness doctor -m MATRIX` (or `make doctor`, which picks the "
                  "matrix for this GPU) also checks the matrix's pins and whether it fits this GPU",
                  markup=False)
    failed = [c for c in checks if c.required and not c.ok]
    if failed:
        raise EnvironmentProblem(
            f"this host cannot run the matrix: {', '.join(c.name for c in failed)} failed",
            hint=failed[0].fix,
        )
    return 0
