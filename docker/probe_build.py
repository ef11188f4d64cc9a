"""The probe of a vLLM source build, inside the image build (stdlib only; `harness build --probe`).

    probe_build.py --units JSON --patched DIR --stock-source "KIND WHAT PIN" --sha256 HEX --out DIR

CMake-configures the stock source and the patched one as setup.py would (Ninja, the same
TORCH_CUDA_ARCH_LIST, CMAKE_ARGS and override variables from the environment), reads each
unit's arch decision from both configure logs, then compiles only the units' translation
units of the patched tree (their object targets found in build.ninja) and copies the objects
to OUT/objects/. OUT/probe.json holds the decisions, the object names and the timings; the
harness audits the objects (arch, SASS) after the build.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

KEY_LINE = re.compile(r"harness cut|harness probe cut|arch-specific|CUDA supported target|-- Building |Not building|"
                      r"CMake Error|FETCHCONTENT_FULLY_DISCONNECTED|Populating|fatal:|CUDA architectures:|"
                      r"Pytorch version|The CXX compiler identification|The CUDA compiler identification|SM12x arch list")
# every arch decision a configure prints: "Building X for archs: LIST" (vLLM's own kernels) and
# "X CUDA architectures: LIST" (its external projects: DeepGEMM, FlashMLA, QuTLASS, ...)
# (and patch 0001's "SM12x arch list NAME: LIST (stock: LIST)", every list it sets)
DECISION = re.compile(r"^-- (?:Building (.+?) for archs:|(.+?) CUDA architectures:|(SM12x arch list \w+):)"
                      r"[ \t]*(\S*(?: \(stock: \S*\))?)[ \t]*$", re.MULTILINE)


def configure(src: Path, build: Path, log: Path) -> tuple[int, float]:
    args = ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
            "-DVLLM_TARGET_DEVICE=cuda", f"-DVLLM_PYTHON_EXECUTABLE={sys.executable}",
            f"-DFETCHCONTENT_BASE_DIR={build}/deps", f"-DNVCC_THREADS={os.environ.get('NVCC_THREADS', '1')}",
            *os.environ.get("CMAKE_ARGS", "").split()]
    t0 = time.monotonic()
    with log.open("w") as f:
        rc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, cwd=src).returncode
    return rc, round(time.monotonic() - t0, 1)


def decision(log_text: str, prefix: str) -> str | None:
    m = re.search(re.escape(prefix) + r"\s*(\S*)", log_text)
    return m.group(1) if m else None


def decisions(log_text: str) -> dict[str, str]:
    """Every arch decision of a configure log, by what it builds (the first line of each name)."""
    found: dict[str, str] = {}
    for m in DECISION.finditer(log_text):
        found.setdefault((m.group(1) or m.group(2) or m.group(3)).strip(), m.group(4))
    return found


def toolchain() -> dict[str, str]:
    """What compiled the units, read where they were compiled (the base image may be a stand-in)."""
    def first(argv: list[str]) -> str:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unavailable: {exc}"
        lines = [x for x in (res.stdout + res.stderr).splitlines() if x.strip()]
        if argv[0] == "nvcc":  # "Cuda compilation tools, release 13.0, V13.0.88"
            return next((x.strip() for x in lines if "release" in x), lines[-1].strip() if lines else "")
        return lines[0].strip() if lines else ""
    cxx = os.environ.get("CXX") or "c++"
    torch = first([sys.executable, "-c", "import torch; print(torch.__version__, 'CUDA', torch.version.cuda)"])
    return {"python": sys.version.split()[0], "torch": torch, "nvcc": first(["nvcc", "--version"]),
            "cxx": f"{cxx}: {first([cxx, '--version'])}", "cmake": first(["cmake", "--version"]),
            "ninja": first(["ninja", "--version"])}


def step_seconds(ninja_log: Path) -> dict[str, float]:
    """Each output's step time in a .ninja_log (start and end ms, then mtime, output, hash)."""
    found: dict[str, float] = {}
    lines = ninja_log.read_text().splitlines()[1:] if ninja_log.is_file() else []
    for line in lines:
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            found[parts[3]] = round((int(parts[1]) - int(parts[0])) / 1000, 1)
    return found


def object_target(build_ninja: str, source: str) -> str | None:
    m = re.search(r"^build (\S+?/" + re.escape(source) + r"\.o):", build_ninja, re.MULTILINE)
    return m.group(1) if m else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", required=True, help="JSON list of {family, source, decision}")
    ap.add_argument("--patched", type=Path, required=True)
    ap.add_argument("--stock-source", required=True)
    ap.add_argument("--sha256", default="")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    units = json.loads(a.units)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "objects").mkdir(exist_ok=True)
    result = {"units": [], "configure_s": {}, "configure_rc": {}, "toolchain": toolchain(), "decisions": {}}
    print("probe: toolchain: " + "; ".join(f"{k} {v}" for k, v in result["toolchain"].items()), flush=True)
    stock = a.out / "stock-src"
    kind, what, pin = a.stock_source.split()
    fetch = [sys.executable, "/opt/build/fetch_source.py", kind, what, pin, "--dest", str(stock)]
    subprocess.run(fetch + (["--sha256", a.sha256] if a.sha256 else []), check=True)
    logs = {}
    for name, src in (("stock", stock), ("patched", a.patched)):
        rc, secs = configure(src, a.out / f"{name}-build", a.out / f"{name}-configure.log")
        result["configure_s"][name], result["configure_rc"][name] = secs, rc
        logs[name] = (a.out / f"{name}-configure.log").read_text(errors="replace")
        result["decisions"][name] = decisions(logs[name])
        for line in logs[name].splitlines():  # the decisions (and errors) into the build log
            if KEY_LINE.search(line):
                print(f"[{name}] {line}")
        print(f"probe: {name} configure exit {rc} in {secs} s", flush=True)
    shutil.rmtree(stock, ignore_errors=True)
    if result["configure_rc"]["patched"] != 0:
        print(logs["patched"][-3000:])
        (a.out / "probe.json").write_text(json.dumps(result, indent=1))
        return 1
    ninja_text = (a.out / "patched-build" / "build.ninja").read_text()
    targets = []
    for u in units:
        target = object_target(ninja_text, u["source"])
        row = {**u, "stock": decision(logs["stock"], u["decision"]), "patched": decision(logs["patched"], u["decision"]),
               "target": target, "object": None}
        result["units"].append(row)
        print(f"probe: {u['family']}: stock {row['stock']} | patched {row['patched']} | "
              f"{'compiled: ' + target if target else 'not in this build'}", flush=True)
        if target:
            targets.append(target)
    t0 = time.monotonic()
    rc = subprocess.run(["ninja", "-C", str(a.out / "patched-build"), f"-j{os.environ.get('MAX_JOBS', '2')}",
                         *targets]).returncode if targets else 0
    result["compile_s"], result["compile_rc"] = round(time.monotonic() - t0, 1), rc
    steps = step_seconds(a.out / "patched-build" / ".ninja_log")
    for row in result["units"]:
        row["step_s"] = steps.get(row["target"]) if row["target"] else None  # its own time, from .ninja_log
        obj = a.out / "patched-build" / row["target"] if row["target"] else None
        if obj and obj.is_file():
            row["object"] = Path(row["source"]).name + ".o"
            shutil.copyfile(obj, a.out / "objects" / row["object"])
    shutil.rmtree(a.out / "stock-build", ignore_errors=True)
    shutil.rmtree(a.out / "patched-build", ignore_errors=True)
    (a.out / "probe.json").write_text(json.dumps(result, indent=1))
    print(f"probe: compiled {len(targets)} unit(s) in {result['compile_s']} s, exit {rc}", flush=True)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
