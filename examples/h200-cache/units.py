"""What a rebuild had to compile, and what those units cost in the cold build.

    python examples/h200-cache/units.py COLD_NINJA_LOG VARIANT_RECORD
    python examples/h200-cache/units.py COLD_NINJA_LOG --configure A/commands.json[.gz] B/commands.json[.gz]

COLD_NINJA_LOG: ninja's log of the cold build's compile (/opt/build/vllm-ninja-log.txt in the
image, `device.sh` keeps it as <variant>/ninja-log.txt); VARIANT_RECORD: the rebuild's record
(build-<stack>.json), whose `compile_cache.missed` names the units it compiled (the rest came from
the cache). With --configure, the units are instead the objects two configures compile
differently (differ.py): what a rebuild of B after A must compile, whatever the cache holds.
Prints each compiled unit with its seconds in the cold build, and the share of the
cold build's compile step-seconds they are: the part of a compile no cache can save, because
those objects differ (another arch flag, another source). Step-seconds are each object's own
time, summed; with 16 compiles at once the wall time is shorter, the share is about the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def ninja_steps(text: str) -> dict[str, float]:
    """Output -> seconds of its last step, from a `.ninja_log` (v5 and later: start, end, mtime,
    output, command hash; times in ms)."""
    steps: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 4 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        steps[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000
    return steps


def object_of(source: str, objects: list[str]) -> str | None:
    """The ninja output that compiles `source` (a path relative to the source tree, or absolute)."""
    rel = source.lstrip("/")
    exact = [o for o in objects if o.endswith(f"/{rel}.o")]
    if exact:
        return exact[0]
    tail = "/".join(rel.split("/")[-2:])  # a source outside the tree: CMake mangles its folders
    near = [o for o in objects if o.endswith(f"/{tail}.o")]
    return near[0] if len(near) == 1 else None


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cold = ninja_steps(Path(argv[0]).read_text())
    objects = [o for o in cold if o.endswith(".o")]
    if argv[1] == "--configure" and len(argv) == 4:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from differ import load  # this folder's

        a, b = load(Path(argv[2])), load(Path(argv[3]))
        # an object CMakeFiles/<target>.dir/<source>.o compiles <source>, relative to the tree
        missed = sorted(o.split(".dir/", 1)[1].removesuffix(".o") for o in set(a) & set(b) if a[o] != b[o])
    else:
        record = json.loads(Path(argv[1]).read_text())
        missed = (record.get("compile_cache") or {}).get("missed") or []
    rows, unmatched = [], []
    for src in missed:
        obj = object_of(src, objects)
        if obj is None:
            unmatched.append(src)
        else:
            rows.append((cold[obj], src))
    rows.sort(reverse=True)
    total = sum(cold[o] for o in objects)
    part = sum(s for s, _ in rows)
    print(f"| unit compiled again ({len(missed)}) | seconds in the cold build |")
    print("|---|---|")
    for s, src in rows:
        print(f"| `{src}` | {s:.1f} |")
    for src in unmatched:
        print(f"| `{src}` | (no such object in the cold build) |")
    print()
    print(f"cold build: {len(objects)} objects, {total:.0f} step-seconds; the {len(rows)} compiled again: "
          f"{part:.0f} step-seconds = {100 * part / total:.0f} % of the cold compile" if total else "no objects")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
