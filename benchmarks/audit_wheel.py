"""Audit a real vLLM wheel: time it, print the summary, cross-check every file with cuobjdump.

    python benchmarks/audit_wheel.py                      # pip download vllm==0.25.1 into /tmp
    python benchmarks/audit_wheel.py PATH.whl|DIR [--version 0.25.1] [--no-sass]

The audit runs on the wheel itself (zipfile, nothing extracted); the cross-check then
extracts the CUDA libraries and compares every fatbin entry name with `cuobjdump -ptx`,
and confirms that files we report as CUDA-free have no fatbin entries either.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from harness.audit import crosscheck
from harness.audit.report import audit_path

_CANDIDATE_RE = re.compile(r"\.so(?:\.\d+)*$")


def download(version: str, dest: Path) -> Path:
    found = sorted(dest.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        f"vllm=={version}",
        "-d",
        str(dest),
    ]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return sorted(dest.glob(f"vllm-{version}-*.whl"))[0]


def cross_check(wheel_or_dir: Path, report) -> tuple[int, int, list[str]]:
    """(files agreeing, entries compared, problems) over every .so in the wheel/dir."""
    with tempfile.TemporaryDirectory(prefix="audit-xcheck-") as tmp:
        root = Path(tmp)
        if wheel_or_dir.is_dir():
            root = wheel_or_dir
        else:
            with zipfile.ZipFile(wheel_or_dir) as zf:
                for name in zf.namelist():
                    if _CANDIDATE_RE.search(name):
                        target = (root / name).resolve()
                        if not target.is_relative_to(root.resolve()):  # never outside the temp dir
                            raise SystemExit(f"{wheel_or_dir}: refusing member {name!r}")
                        zf.extract(name, root)
        ours = {f.path.rsplit("!", 1)[-1]: f for f in report.files}
        agree, entries, problems = 0, 0, []
        for path in sorted(
            p for p in root.rglob("*") if p.is_file() and _CANDIDATE_RE.search(p.name)
        ):
            rel = path.relative_to(root).as_posix()
            theirs = crosscheck.cuobjdump_entries(path)
            mine = [o.arch.name for o in ours[rel].objects] if rel in ours else []
            entries += len(theirs)
            if mine == theirs:
                agree += 1
            else:
                problems.append(f"{rel}: ours {mine[:6]}… vs cuobjdump {theirs[:6]}…")
        return agree, entries, problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "path", nargs="?", help="a vLLM wheel or an unpacked directory (default: download)"
    )
    ap.add_argument("--version", default="0.25.1")
    ap.add_argument("--download-dir", default="/tmp/vllm-wheel")
    ap.add_argument("--no-sass", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write the full report here")
    args = ap.parse_args()

    target = Path(args.path) if args.path else download(args.version, Path(args.download_dir))
    t0 = time.monotonic()
    report = audit_path(target, sass_check=not args.no_sass)  # no --cc: inventory + integrity
    elapsed = time.monotonic() - t0
    print(
        f"audited {target} in {elapsed:.1f} s ({report.stats.bytes_read / 2**20:.0f} MiB of "
        f"{report.stats.files_seen} candidate files, {report.stats.sass_cubins} cubins disassembled)"
    )
    for f in report.files:
        print(f"  {f.path.rsplit('!', 1)[-1]}: {dict(sorted(f.cubins.items()))} ptx={f.ptx}")
    print(json.dumps(report.summary(), indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=1))

    t1 = time.monotonic()
    agree, entries, problems = cross_check(target, report)
    print(
        f"cuobjdump cross-check: {agree} .so files agree entry by entry ({entries} entries), "
        f"{len(problems)} disagree, {time.monotonic() - t1:.1f} s"
    )
    for p in problems:
        print("  MISMATCH", p)
    return 1 if problems or elapsed > 30 else 0


if __name__ == "__main__":
    sys.exit(main())
