"""The probe of every stack of the default matrices, on a stand-in CUDA 13 base.

    python tools/defaults_probe.py PLATFORM OUT [MATRIX ...]                  # the packaging probe
    python tools/defaults_probe.py --units [--jobs N] [--mirror URL=PATH ...] PLATFORM OUT [MATRIX ...]

nvidia/cuda cannot be pulled on a machine without a registry: each default matrix is rewritten
(into matrix/generated/, which git ignores) onto a stand-in base; everything else as shipped:
vLLM 0.33.0 and FlashInfer 0.7.2.post1 sdists, the patches, the arch lists. Then `harness build
--probe` runs for each stack, with its logs and probe JSON kept under OUT/<matrix>/<platform
short>/, and a summary in OUT/<platform short>[-units]-summary.json.

The packaging probe (default; the three defaults and generic.toml): the base of tools/cuda13-base.sh
(`harness-test/cuda13:bookworm-<amd64|arm64>`, Debian bookworm + PyPI's CUDA 13.0 compiler), Debian's
Python 3.11 for Ubuntu's 3.12, torch from PyPI for the cu130 index; `--probe-parts packaging`.

The units probe (`--units`; spark.toml and rtx-pro-6000.toml): configure stock and patched, compile
the units the arch verdict depends on, audit them. The base is tools/cuda13-devel-base.sh's
(`harness-test/cuda13-devel:trixie`: Debian trixie, GCC 13, Python 3.13, torch 2.14.0 and the CUDA 13.0
wheels it pins; its labels say how it differs from the registry base and every probe record keeps
them). The stack is built offline (GitHub is out of reach here): the sources vLLM's CMake fetches
come from harness/data/sources/vllm-0.33.0.toml through `harness sources fetch` (`--mirror` flags
passed on), and patches/vllm/vllm-0.33.0-probe-offline.patch is added to each series: it leaves
out the external projects that could not be pinned and builds CUTLASS v4.7.0 standing in for the
v4.7.1 the release names (label harness.vllm.stand-ins). `--jobs` sets max_jobs (the shipped 8
would run four 7 GB nvcc processes at once on a small machine) with nvcc_threads 1: the job count
changes no object. The probe images are removed once read; KEEP=1 keeps them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = ("matrix/spark.toml", "matrix/rtx-pro-6000.toml", "matrix/generic.toml")
UNITS_DEFAULTS = ("matrix/spark.toml", "matrix/rtx-pro-6000.toml")  # generic.toml has no SM12x arch list
SHORT = {"linux/amd64": "amd64", "linux/arm64": "arm64"}
DEVEL_BASE = {"repository": "harness-test/cuda13-devel", "tag": "trixie", "local": True, "python": "present"}
PROBE_PATCH = "vllm/vllm-0.33.0-probe-offline.patch"


def variant(matrix: Path, short: str, *, units: bool = False, jobs: int = 2) -> Path:
    data = tomllib.loads(matrix.read_text())
    kind = "units" if units else "probe"
    data["matrix"]["name"] = f"{data['matrix']['name']}-{kind}-{short}"
    data["matrix"]["patches_dir"] = "../../patches"
    for stack in data.get("stacks", {}).values():
        if "vllm" not in stack or "base_image" not in stack:
            continue
        if units:
            stack["base_image"] = dict(DEVEL_BASE)
            stack["python"] = "3.13"  # Debian trixie's (no 3.12 there); the release accepts >=3.11,<3.15
            stack["offline"] = True
            stack["max_jobs"], stack["nvcc_threads"] = jobs, 1
            stack["vllm"]["patches"] = [*stack["vllm"].get("patches", []), PROBE_PATCH]
            stack["description"] = ("[units probe on the stand-in base harness-test/cuda13-devel:trixie, offline, "
                                    f"with {PROBE_PATCH}] " + stack.get("description", ""))
        else:
            stack["base_image"] = {"repository": "harness-test/cuda13", "tag": f"bookworm-{short}", "local": True,
                                   "python": "install"}
            stack["python"] = "3.11"  # Debian bookworm's; the release accepts >=3.11,<3.15
            stack.setdefault("torch", {})["index_url"] = "https://pypi.org/simple"
    out = ROOT / "matrix" / "generated" / f"defaults-{kind}-{matrix.stem}-{short}.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    how = ("the units probe on the stand-in base of tools/cuda13-devel-base.sh" if units
           else "the stand-in CUDA 13 base")
    out.write_text(f"# {matrix.name} for {how}, linux/{short}: written by tools/defaults_probe.py\n"
                   + tomli_w.dumps(data))
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--units", action="store_true", help="the units probe (configure, compile, audit)")
    ap.add_argument("--jobs", type=int, default=2, help="max_jobs of the units probe (default 2)")
    ap.add_argument("--mirror", action="append", default=[], metavar="URL=PATH",
                    help="passed to `harness sources fetch` (units probe)")
    ap.add_argument("platform", choices=sorted(SHORT))
    ap.add_argument("out", type=Path)
    ap.add_argument("matrices", nargs="*")
    a = ap.parse_args(argv)
    out, short = a.out.resolve(), SHORT[a.platform]
    summary = []
    for rel in a.matrices or (UNITS_DEFAULTS if a.units else DEFAULTS):
        matrix = ROOT / rel
        gen = variant(matrix, short, units=a.units, jobs=a.jobs)
        logs = out / matrix.stem / short
        logs.mkdir(parents=True, exist_ok=True)
        steps = []
        if a.units:
            fetch = [sys.executable, "-m", "harness", "sources", "fetch", "-m", str(gen)]
            steps.append(("harness-sources-fetch.out", fetch + [x for m in a.mirror for x in ("--mirror", m)]))
        parts = "units" if a.units else "packaging"
        steps.append(("harness-build-probe.out", [sys.executable, "-m", "harness", "build", "-m", str(gen), "--probe",
                                                  "--probe-parts", parts, "--platform", a.platform,
                                                  "--log-dir", str(logs)]))
        t0 = time.monotonic()
        rc = 0
        for name, cmd in steps:
            print("+ " + " ".join(cmd), flush=True)
            with (logs / name).open("w") as f:
                f.write("$ " + " ".join(str(c).replace(str(ROOT) + "/", "") for c in cmd) + "\n")
                f.flush()
                rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
            if rc:
                break
        took = round(time.monotonic() - t0, 1)
        print(f"{matrix.stem} {a.platform}: exit {rc} in {took} s", flush=True)
        probes = sorted(logs.glob("probe-*.json"))
        summary.append({"matrix": rel, "platform": a.platform, "parts": parts, "exit": rc, "seconds": took,
                        "load_average_after": list(os.getloadavg()), "probes": [p.name for p in probes]})
        if os.environ.get("KEEP") != "1":
            for p in probes:
                doc = json.loads(p.read_text())
                for ref in (doc.get("image_ref"), (doc.get("packaging") or {}).get("image_ref")):
                    if ref:
                        subprocess.run(["docker", "image", "rm", ref], cwd=ROOT, capture_output=True)
    path = out / f"{short}{'-units' if a.units else ''}-summary.json"
    earlier = json.loads(path.read_text()) if path.is_file() else []
    done = {s["matrix"] for s in summary}
    summary = [s for s in earlier if s["matrix"] not in done] + summary  # a rerun of one matrix keeps the others
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return max((s["exit"] for s in summary), default=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
