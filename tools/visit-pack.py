"""Split a visit's inputs into folders that each fit one command to a host that takes at most a
few tens of MB per command (an air-gapped H200 VM: 64 MiB with the checkout).

    python tools/visit-pack.py --budget-mb 39 OUT NAME=PATH [NAME=PATH ...]

Each PATH (a file, or a folder taken whole) lands under NAME in the joined tree. The items fill
OUT/c1, OUT/c2, ... in the order given, each folder at most --budget-mb; a file that does not fit
what is left of a folder is cut into pieces (NAME.part-aa, NAME.part-ab, ...) that continue in
the next folders, and NAME.sha256 goes with its first piece. On the host, each command runs
`bash examples/h200-cache/gather.sh DIR` on the folder it carried: the folders are merged into one
tree (/tmp/inputs) and a file is joined once all its pieces are there and their concatenation
has that digest. OUT/PLAN.txt lists what each folder holds.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path

MIN_PIECE = 4 << 20  # a folder with less room than this left is closed rather than given a sliver


def _files(name: str, path: Path) -> list[tuple[str, Path]]:
    if path.is_file():
        return [(name, path)]
    if not path.is_dir():
        sys.exit(f"visit-pack: {path} is neither a file nor a folder")
    return [(f"{name}/{p.relative_to(path)}", p) for p in sorted(path.rglob("*")) if p.is_file()]


def _suffixes():
    for a in "abcdefghijklmnopqrstuvwxyz":
        for b in "abcdefghijklmnopqrstuvwxyz":
            yield a + b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-mb", type=float, required=True, help="at most this many MB (10^6 bytes) a folder")
    ap.add_argument("out", type=Path)
    ap.add_argument("items", nargs="+", metavar="NAME=PATH")
    a = ap.parse_args()
    budget = int(a.budget_mb * 1e6)
    min_piece = min(MIN_PIECE, budget // 8)
    if a.out.exists():
        shutil.rmtree(a.out)
    files: list[tuple[str, Path]] = []
    for item in a.items:
        name, sep, path = item.partition("=")
        if not sep or not name or name.startswith("/") or ".." in Path(name).parts:
            sys.exit(f"visit-pack: {item!r}: give NAME=PATH, NAME relative")
        files += _files(name, Path(path))
    n, used, plan = 1, 0, {1: []}

    def folder() -> Path:
        d = a.out / f"c{n}"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def next_folder() -> None:
        nonlocal n, used
        n, used = n + 1, 0
        plan[n] = []

    for name, src in files:
        size = src.stat().st_size
        if used + size <= budget:
            dst = folder() / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            used += size
            plan[n].append(f"{name} ({size:,} bytes)")
            continue
        if budget - used < min_piece:
            next_folder()
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        (folder() / name).parent.mkdir(parents=True, exist_ok=True)
        (folder() / f"{name}.sha256").write_text(f"{digest}  {Path(name).name}\n")
        with src.open("rb") as f:
            for suffix in _suffixes():
                room = budget - used
                if room < min_piece:
                    next_folder()
                    room = budget
                chunk = f.read(room)
                if not chunk:
                    break
                dst = folder() / f"{name}.part-{suffix}"
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(chunk)
                used += len(chunk)
                plan[n].append(f"{name}.part-{suffix} ({len(chunk):,} bytes)")
    lines = []
    for k, what in plan.items():
        total = sum(p.stat().st_size for p in (a.out / f"c{k}").rglob("*") if p.is_file())
        lines.append(f"c{k}: {total / 1e6:.1f} MB")
        lines += [f"  {w}" for w in what]
    (a.out / "PLAN.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
