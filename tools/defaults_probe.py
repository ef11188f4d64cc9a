"""The packaging probe of every stack of the three default matrices, on a stand-in CUDA 13 base.

    python tools/defaults_probe.py PLATFORM OUT [MATRIX ...]     # default: the three defaults

nvidia/cuda cannot be pulled on a machine without a registry: each default matrix is rewritten
(into matrix/generated/, which git ignores) with the stand-in base of tools/cuda13-base.sh
(`harness-test/cuda13:bookworm-<amd64|arm64>`, Debian bookworm + PyPI's CUDA 13.0 compiler),
Debian's Python 3.11 for Ubuntu's 3.12, and torch from PyPI for the cu130 index (the torch
index is a stack setting); everything else as shipped: vLLM 0.33.0 and FlashInfer 0.7.2.post1
sdists, the patches, the arch lists. Then `harness build --probe --probe-parts packaging
--platform PLATFORM` runs for each, with its logs and probe JSON kept under
OUT/<matrix>/<platform short>/, and a summary in OUT/<platform short>-summary.json. The probe
images (several GB each, and they can never serve) are removed once read; KEEP=1 keeps them.
"""

from __future__ import annotations

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
SHORT = {"linux/amd64": "amd64", "linux/arm64": "arm64"}


def variant(matrix: Path, short: str) -> Path:
    data = tomllib.loads(matrix.read_text())
    data["matrix"]["name"] = f"{data['matrix']['name']}-probe-{short}"
    data["matrix"]["patches_dir"] = "../../patches"
    for stack in data.get("stacks", {}).values():
        if "vllm" not in stack or "base_image" not in stack:
            continue
        stack["base_image"] = {"repository": "harness-test/cuda13", "tag": f"bookworm-{short}", "local": True,
                               "python": "install"}
        stack["python"] = "3.11"  # Debian bookworm's; the release accepts >=3.11,<3.15
        stack.setdefault("torch", {})["index_url"] = "https://pypi.org/simple"
    out = ROOT / "matrix" / "generated" / f"defaults-probe-{matrix.stem}-{short}.toml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# {matrix.name} on the stand-in CUDA 13 base for linux/{short}: written by "
                   "tools/defaults_probe.py\n" + tomli_w.dumps(data))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in SHORT:
        print(__doc__, file=sys.stderr)
        return 2
    platform, out = argv[0], Path(argv[1]).resolve()
    short = SHORT[platform]
    summary = []
    for rel in argv[2:] or DEFAULTS:
        matrix = ROOT / rel
        gen = variant(matrix, short)
        logs = out / matrix.stem / short
        logs.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "harness", "build", "-m", str(gen), "--probe", "--probe-parts", "packaging",
               "--platform", platform, "--log-dir", str(logs)]
        print("+ " + " ".join(cmd), flush=True)
        with (logs / "harness-build-probe.out").open("w") as f:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT).returncode
        took = round(time.monotonic() - t0, 1)
        print(f"{matrix.stem} {platform}: exit {rc} in {took} s", flush=True)
        probes = sorted(logs.glob("probe-*.json"))
        summary.append({"matrix": rel, "platform": platform, "exit": rc, "seconds": took,
                        "probes": [p.name for p in probes]})
        if os.environ.get("KEEP") != "1":
            for p in probes:
                ref = (json.loads(p.read_text()).get("packaging") or {}).get("image_ref")
                if ref:
                    subprocess.run(["docker", "image", "rm", ref], cwd=ROOT, capture_output=True)
    path = out / f"{short}-summary.json"
    earlier = json.loads(path.read_text()) if path.is_file() else []
    done = {s["matrix"] for s in summary}
    summary = [s for s in earlier if s["matrix"] not in done] + summary  # a rerun of one matrix keeps the others
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return max((s["exit"] for s in summary), default=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
