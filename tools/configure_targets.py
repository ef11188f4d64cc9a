"""vLLM's CMake configure of one sdist, and what its build graph would compile (stdlib only).

Runs inside the toolchain image (tools/toolchain-base.sh), started by tools/configure-targets.sh:

    configure_targets.py --sdist F --arch-list L --out DIR [--patch P ...] [--sources JSON]

Unpacks the sdist, applies the patches with `git apply`, configures it as setup.py would
(Ninja, Release, FETCHCONTENT_FULLY_DISCONNECTED, the override variables of the mounted
sources), and writes to DIR: configure.log (the whole CMake output), fa3-targets.txt (the FA3
objects of `ninja -t targets all`) and record.json (kind "configure"): the arch decisions the
log printed, per CMake target the CUDA and C++ objects in build.ninja, the nvcc flags of one
FA3 object, whether the (patched) setup.py asks `cmake --build` for _vllm_fa3_C, and where the
configure stopped when it did. Nothing is compiled.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# the arch decisions a configure prints: vLLM's "Building X for archs: L", vllm-flash-attn's
# "FA2_ARCHS: L", an external project's "X CUDA architectures: L", and patch 0001's
# "SM12x arch list NAME: L (stock: L)" (every list that patch sets, Marlin's template lists included)
DECISION = re.compile(r"^-- (?:Building (?P<what>.+?) for archs: *(?P<archs>.*?)|(?P<var>FA[23]_ARCHS"
                      r"|SM12x arch list \w+|[\w .-]+? CUDA architectures): *(?P<val>.*?))\s*$", re.M)
SUPPORTED = re.compile(r"^-- CUDA supported target architectures: *(.*?)\s*$", re.M)
CMAKE_ERROR = re.compile(r"^CMake Error at (\S+?)(?: \((\w+)\))?:\s*$", re.M)
OBJECT = re.compile(r"^build (?P<out>\S*?CMakeFiles/(?P<target>[^/]+)\.dir/\S+?\.(?P<lang>cu|cpp|c)\.o):", re.M)
ARCH_FLAG = re.compile(r"(?:--generate-code=\S+|-gencode[= ]\S+|(?<!\S)-arch[= ]\S+|--gpu-architecture[= ]\S+)")


def run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)


def first_line(argv: list[str], pick: int = 0) -> str:
    res = run(argv)
    lines = [x for x in (res.stdout + res.stderr).splitlines() if x.strip()]
    return lines[pick].strip() if lines else ""


def nvcc_default_arch() -> str:
    """What nvcc compiles for when a command names no arch (`nvcc --dryrun` of an empty kernel)."""
    kernel = Path("/tmp/configure-targets-k.cu")
    kernel.write_text("__global__ void k() {}\n")
    res = run(["nvcc", "-c", "--dryrun", str(kernel), "-o", "/tmp/configure-targets-k.o"])
    return ", ".join(sorted(set(re.findall(r"-arch[= ](\w+)", res.stdout + res.stderr))))


def fa3_asked(setup_py: str, arch_list: str) -> tuple[bool, str]:
    """Whether setup.py puts _vllm_fa3_C in `cmake --build --target ...` on CUDA >= 12.3:
    stock setup.py always does; the patched one asks its own `_fa3_arch_requested`."""
    tree = ast.parse(setup_py)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "_fa3_arch_requested":
            scope: dict = {"re": re}
            exec(compile(ast.Module(body=[node], type_ignores=[]), "setup.py", "exec"), scope)  # noqa: S102
            asked = bool(scope["_fa3_arch_requested"](arch_list))
            return asked, f"setup.py's _fa3_arch_requested({arch_list!r}) is {asked}"
    if "_vllm_fa3_C" not in setup_py:
        return False, "setup.py names no _vllm_fa3_C"
    return True, "stock setup.py asks for it whenever nvcc >= 12.3"


def compile_targets(build: Path, targets: list[str], jobs: int, budget_s: float | None = None) -> dict:
    """Compile `targets` alone and time them: the wall time with `jobs` parallel steps, the sum of
    every step's own time from .ninja_log (step-seconds, what the steps cost whatever -j), and the
    CPU time the compilers used (user + system of every process ninja waited for: what the steps
    cost whatever else the machine runs), with each step's own time. With `budget_s`, ninja and its
    compilers are stopped at that wall time: the steps that finished are kept, the others listed."""
    t0 = time.monotonic()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = build / ".ninja_log"
    before = set(_ninja_log(log))
    proc = subprocess.Popen(["ninja", "-C", str(build), f"-j{jobs}", *targets], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    stopped = False
    running: dict[str, float] = {}
    try:
        output, _ = proc.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        stopped = True
        running = _running(proc.pid, targets)  # how long each unfinished step had run: a floor of its cost
        os.killpg(proc.pid, signal.SIGTERM)  # its own session: ninja and every compiler it started
        output, _ = proc.communicate()
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = round(time.monotonic() - t0, 1)
    each = {out: secs for out, secs in _ninja_log(log).items() if out not in before}
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"targets": targets, "jobs": jobs, "cpus": os.cpu_count(), "returncode": proc.returncode,
            "wall_s": wall, "budget_s": budget_s, "stopped_by_budget": stopped,
            "unfinished": [t for t in targets if t not in each] if stopped else [],
            "unfinished_ran_s": {t: v for t, v in running.items() if t not in each},
            "steps": len(each), "step_minutes": round(sum(each.values()) / 60, 1),
            "cpu_minutes": round(cpu / 60, 1), "step_seconds": each,
            "tail": (output or "").splitlines()[-5:]}


def _running(session: int, targets: list[str]) -> dict[str, float]:
    """For each target a process of `session` is compiling (its output path on the command line),
    how many seconds the oldest such process has run (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    now = float(Path("/proc/uptime").read_text().split()[0])
    found: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) != session:  # fields after the name: state, ppid, pgrp, session, ...
            continue
        ran = round(now - int(fields[19]) / ticks, 1)  # starttime, in clock ticks since boot
        for t in targets:
            if t in cmdline:
                found[t] = max(found.get(t, 0.0), ran)
    return found


def _ninja_log(log: Path) -> dict[str, float]:
    """Each output's step time (s) in a .ninja_log (v5/v6: start, end, mtime, output, hash)."""
    each: dict[str, float] = {}
    for line in (log.read_text().splitlines()[1:] if log.is_file() else []):
        start, end, _mtime, out, *_ = line.split("\t")
        each[out] = round((int(end) - int(start)) / 1000, 1)
    return each


def objects(ninja_text: str) -> list[tuple[str, str, str]]:
    """Every object of a build graph: (output, CMake target, language), sorted by output."""
    return sorted((m["out"], m["target"], m["lang"]) for m in OBJECT.finditer(ninja_text))


def sample(objs: list[tuple[str, str, str]], every: int, offset: int = 0) -> list[tuple[str, str, str]]:
    """Every `every`-th object of the sorted graph, from `offset` (each CMake target's objects sit
    together in that order, so each target is sampled at the same rate)."""
    return [o for i, o in enumerate(objs) if i % every == offset % every]


def estimate(objs: list[tuple[str, str, str]], timed: dict[str, float], jobs: int,
             unfinished: dict[str, float] | None = None) -> dict:
    """A whole build's cost from a sample's own step times: per CMake target, the mean of its timed
    objects times its object count (step-seconds); the wall time on `jobs` cores is at least that
    sum over `jobs` (perfect packing) and at least the longest step seen. A step stopped by the
    budget counts with the time it had run (a floor of its cost), so the sum is a floor too when
    any was stopped. An estimate, named so: a target with no timed object is listed, not guessed."""
    seen = {**(unfinished or {}), **timed}
    per: dict[str, dict] = {}
    for out, target, _lang in objs:
        t = per.setdefault(target, {"objects": 0, "timed": 0, "stopped": 0, "timed_step_s": 0.0})
        t["objects"] += 1
        if out in seen:
            t["timed"] += 1
            t["stopped"] += out not in timed
            t["timed_step_s"] = round(t["timed_step_s"] + seen[out], 1)
    total, untimed = 0.0, []
    for name, t in per.items():
        if t["timed"]:
            t["estimated_step_s"] = round(t["timed_step_s"] / t["timed"] * t["objects"], 1)
            total += t["estimated_step_s"]
        else:
            untimed.append(name)
    longest = max(seen.values(), default=0.0)
    stopped = sum(t["stopped"] for t in per.values())
    return {"kind": "estimate from sampled step times" + (" (a floor: some steps were stopped)" if stopped else ""),
            "objects": len(objs), "timed_objects": len(seen), "stopped_steps_counted_as_run_so_far": stopped,
            "estimated_step_minutes": round(total / 60, 1), "jobs": jobs,
            "estimated_wall_minutes_at_least": round(max(total / jobs, longest) / 60, 1),
            "longest_step_s": longest, "targets_without_a_timed_object": sorted(untimed),
            "per_target": dict(sorted(per.items()))}


def _object_facts(path: Path) -> dict:
    """Size and sha256 of a compiled object, and what cuobjdump says of its cubins where it is
    installed: the arch of each ELF and, in the SASS, how many block-scaled FP4 MMAs (OMMA.SF)."""
    facts: dict = {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    if shutil.which("cuobjdump"):
        elf = run(["cuobjdump", "--list-elf", str(path)])
        facts["cubins"] = re.findall(r"\b(sm_\w+)\.cubin", elf.stdout)
        sass = run(["cuobjdump", "-sass", str(path)])
        facts["omma_sf"] = len(re.findall(r"\bOMMA\.SF\b", sass.stdout))
        facts["cuobjdump_rc"] = sass.returncode
    return facts


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist", type=Path, required=True)
    ap.add_argument("--arch-list", required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--patch", type=Path, action="append", default=[])
    ap.add_argument("--sources", default="{}", help="JSON: name -> {env, dir, pin}")
    ap.add_argument("--build-target", action="append", default=[],
                    help="after the configure, compile these ninja targets and time them (repeatable)")
    ap.add_argument("--build-source", action="append", default=[],
                    help="after the configure, compile the object of this source (path in the vLLM tree; repeatable)")
    ap.add_argument("--sample-every", type=int, default=0,
                    help="after the configure, compile every N-th object of the whole build graph and estimate the "
                         "whole build from their step times (record.json \"sample\")")
    ap.add_argument("--sample-offset", type=int, default=0, help="which object of each N the sample starts at")
    ap.add_argument("--budget", type=float, default=None, help="stop the compile after this many seconds")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="ninja -j for --build-target")
    ap.add_argument("--work", type=Path, default=Path("/tmp/configure-targets"),
                    help="where the sdist is unpacked and built (one per configure running at once)")
    ap.add_argument("--commands", action="store_true",
                    help="also write commands.json: each object's compile command (ninja -t compdb), "
                         "to compare what two configures compile differently")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    work = a.work
    with tarfile.open(a.sdist) as tf:  # an sdist (.tar.gz) or a trimmed tree of one (.tar.xz)
        top = tf.getnames()[0].split("/")[0]
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "xf", str(a.sdist), "-C", str(work)], check=True)
    src = work / top
    patches = []
    for p in a.patch:
        res = run(["git", "apply", "--verbose", str(p)], cwd=src)
        patches.append({"file": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                        "applied": res.returncode == 0})
        if res.returncode != 0:
            print(res.stderr, file=sys.stderr)
            return 2
    sources = json.loads(a.sources)
    env = {**os.environ, "TORCH_CUDA_ARCH_LIST": a.arch_list}
    for s in sources.values():
        env[s["env"]] = s["dir"]
    build = work / "build"
    argv = ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
            "-DVLLM_TARGET_DEVICE=cuda", f"-DVLLM_PYTHON_EXECUTABLE={sys.executable}",
            "-DFETCHCONTENT_FULLY_DISCONNECTED=ON", "-Wno-dev"]
    if "cutlass" in sources:  # QuTLASS looks for CUTLASS headers of its own unless told
        argv.append(f"-DCUTLASS_INCLUDE_DIR={sources['cutlass']['dir']}/include")
    t0 = time.monotonic()
    res = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = round(time.monotonic() - t0, 1)
    log = res.stdout + res.stderr
    (a.out / "configure.log").write_text(log)

    decisions: dict[str, str] = {}
    for m in DECISION.finditer(log):
        key, value = (m["what"], m["archs"]) if m["what"] else (m["var"], m["val"])
        decisions[key] = f"{decisions[key]} | {value}" if key in decisions else value
    sup = SUPPORTED.findall(log)
    stopped = None
    if res.returncode != 0:
        err = CMAKE_ERROR.search(log)
        gcc = re.search(r"GCC >= ([\d.]+) is required", log)
        stopped = (f"{err[1]} ({err[2]})" if err and err[2] else err[1] if err else f"exit {res.returncode}")
        stopped += f": GCC >= {gcc[1]} required" if gcc else ""

    targets: dict[str, dict[str, int]] = {}
    fa3_objects: list[str] = []
    fa3_flags: list[str] = []
    ninja_file = build / "build.ninja"
    if res.returncode == 0 and ninja_file.is_file():
        for m in OBJECT.finditer(ninja_file.read_text()):
            t = targets.setdefault(m["target"], {"cuda_objects": 0, "cxx_objects": 0})
            t["cuda_objects" if m["lang"] == "cu" else "cxx_objects"] += 1
            if m["target"] == "_vllm_fa3_C":
                fa3_objects.append(m["out"])
        listed = run(["ninja", "-t", "targets", "all"], cwd=build).stdout.splitlines()
        (a.out / "fa3-targets.txt").write_text(
            "".join(line + "\n" for line in listed if "/_vllm_fa3_C.dir/" in line or line.startswith("_vllm_fa3_C")))
        if a.commands:
            compdb = json.loads(run(["ninja", "-t", "compdb"], cwd=build).stdout or "[]")
            (a.out / "commands.json").write_text(json.dumps(
                {e["output"]: e["command"] for e in compdb if str(e.get("output", "")).endswith(".o")},
                indent=0, sort_keys=True) + "\n")
        cu = next((o for o in fa3_objects if o.endswith(".cu.o")), None)
        if cu:
            cmd = run(["ninja", "-t", "commands", cu], cwd=build).stdout.splitlines()
            fa3_flags = ARCH_FLAG.findall(cmd[-1]) if cmd else []
    setup_py = (src / "setup.py").read_text()
    asked, why = fa3_asked(setup_py, a.arch_list)
    cuda_total = sum(t["cuda_objects"] for t in targets.values())
    fa3_cuda = targets.get("_vllm_fa3_C", {}).get("cuda_objects", 0)
    record = {
        "kind": "configure",
        "vllm": top.removeprefix("vllm-"),
        "sdist": {"file": a.sdist.name, "sha256": hashlib.sha256(a.sdist.read_bytes()).hexdigest()},
        "arch_list": a.arch_list,
        "patches": patches,
        "sources": {k: {"env": v["env"], "pin": v.get("pin", "")} for k, v in sorted(sources.items())},
        "toolchain": {
            "image": os.environ.get("HARNESS_TOOLCHAIN_IMAGE", ""),
            # a stand-in base says how it differs from the registry's (its harness.base.* labels)
            "base_labels": json.loads(os.environ.get("HARNESS_BASE_LABELS") or "{}"),
            "nvcc": first_line(["nvcc", "--version"], -2),
            "cmake": first_line(["cmake", "--version"]),
            "gcc": first_line(["gcc", "--version"]),
            "nvcc_default_arch": nvcc_default_arch(),
            "torch": run([sys.executable, "-c", "import torch; print(torch.__version__)"]).stdout.strip(),
            "python": sys.version.split()[0],
        },
        "command": " ".join(argv[:1] + ["-S", "vllm-" + top.removeprefix("vllm-"), "-B", "build"] + argv[5:]),
        "returncode": res.returncode,
        "seconds": seconds,
        "stopped_at": stopped,
        "supported_archs": sup[-1] if sup else None,
        "decisions": decisions,
        "targets": dict(sorted(targets.items())),
        "cuda_objects_total": cuda_total,
        "fa3": {"cuda_objects": fa3_cuda, "cxx_objects": targets.get("_vllm_fa3_C", {}).get("cxx_objects", 0),
                "arch_flags_of_one_object": fa3_flags, "asked_by_setup_py": asked, "why": why},
        "cuda_objects_setup_py_builds": cuda_total - (0 if asked else fa3_cuda) if targets else None,
    }
    graph = objects(ninja_file.read_text()) if res.returncode == 0 and ninja_file.is_file() else []
    wanted = list(a.build_target)
    for source in a.build_source:  # the object of a source, as build.ninja names it
        found = [out for out, _t, _l in graph if out.endswith("/" + source + ".o")]
        record.setdefault("build_sources", {})[source] = found[0] if found else None
        wanted += found[:1]
    if wanted:
        record["build"] = compile_targets(build, wanted, a.jobs, a.budget)
        record["build"]["objects"] = {t: _object_facts(build / t) for t in wanted if (build / t).is_file()}
    if a.sample_every and graph:
        picked = sample(graph, a.sample_every, a.sample_offset)
        done = compile_targets(build, [o for o, _t, _l in picked], a.jobs, a.budget)
        done.pop("targets")
        record["sample"] = {"every": a.sample_every, "offset": a.sample_offset, "picked": len(picked), **done,
                            "estimate": estimate(graph, done["step_seconds"], a.jobs, done["unfinished_ran_s"])}
    (a.out / "record.json").write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    print(json.dumps({k: record[k] for k in ("vllm", "returncode", "stopped_at", "cuda_objects_total", "fa3")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
