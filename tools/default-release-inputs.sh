#!/usr/bin/env bash
# The inputs of examples/default-release/device.sh, for a host with no network (an air-gapped H200
# VM: at most 64 MiB per command, the checkout included), put into a git-ignored folder of the
# checkout (default examples/default-release/inputs/, ~2.2 MB; name it in the run's `carry`):
#   vllm-0.33.0-trimmed.tar.xz   what vLLM 0.33.0's CMake configure and compile read of its PyPI
#                                sdist (CMakeLists.txt, cmake/, csrc/, setup.py, pyproject.toml,
#                                LICENSE, under vllm-0.33.0/): 0.8 MB instead of the sdist's 47 MB
#   qutlass-e74319e3405c.tar.xz  the pinned QuTLASS tree, and cutlass-dcf215af68a2.tar.xz, the
#                                CUTLASS v4.7.0 stand-in for v4.7.1 (harness/data/sources/vllm-0.33.0.toml),
#                                both content-sha256 checked on the way in
#   MANIFEST                     each file's sha256 (`sha256sum -c`), the sdist's sha256 and the
#                                trimmed tree's content digest (harness.image.offline.tree_sha256)
# usage: tools/default-release-inputs.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-examples/default-release/inputs}")
PY=${PY:-python3}
mkdir -p "$out"
PYTHONPATH=$PWD "$PY" - "$out" <<'PYEOF'
import hashlib
import sys
import tarfile
import tempfile
from pathlib import Path

from harness.image import offline, sources

out = Path(sys.argv[1])
SHA = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"  # matrix/spark.toml
KEEP = ("CMakeLists.txt", "cmake", "csrc", "setup.py", "pyproject.toml", "LICENSE")
sdist = sources.sdist(sources.Source("vllm", "pypi", "vllm", "0.33.0", SHA))  # sha256 checked
with tempfile.TemporaryDirectory() as tmp:
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.split("/")[1:2] and m.name.split("/")[1] in KEEP]
        tar.extractall(tmp, members=members, filter="data")
    tree = Path(tmp) / "vllm-0.33.0"
    digest = offline.tree_sha256(tree)
    offline.pack(Path(tmp), out / "vllm-0.33.0-trimmed.tar.xz")  # top folder vllm-0.33.0/, fixed owner and mtime
table = offline.load_table("0.33.0")
fixtures = Path("tests/fixtures/offline")
lines = [f"# vLLM 0.33.0 sdist sha256 {SHA}; trimmed to {', '.join(KEEP)}: content digest {digest}"]
for pin in (*[p for p in table.pins if p.name == "qutlass"], *table.stand_ins):
    archive = offline.fetch(pin, from_dir=fixtures, cache=out)  # content sha256 checked
    what = f"stand-in for {pin.stands_in_for}" if pin.stands_in_for else "pinned"
    lines.append(f"# {archive.name}: {pin.name} @ {pin.commit} ({what}), content sha256 {pin.sha256}")
files = sorted(p for p in out.glob("*.tar.xz"))
lines += [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in files]
(out / "MANIFEST").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
print(f"{sum(p.stat().st_size for p in files) / 1e6:.1f} MB in {out}")
PYEOF
