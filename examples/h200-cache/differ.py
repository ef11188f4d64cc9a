"""Which objects two configures of the same sources compile differently, and how.

    python examples/h200-cache/differ.py A/commands.json[.gz] B/commands.json[.gz]

Each file is `tools/configure-targets.sh` with COMMANDS=1: every object's compile command
(ninja -t compdb). ccache keys an object by its command (and the sources and headers it reads),
so an object whose command differs can never come from the other build's cache: these are the
units a rebuild compiles whatever the cache holds. Prints each such object with the arch flags
on each side, grouped by source folder, and whether anything but the arch flags differs.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import sys
from pathlib import Path

ARCH = re.compile(r"-gencode[= ]\S+|--generate-code=\S+")


def load(path: Path) -> dict[str, str]:
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(data)


def arch_flags(command: str) -> str:
    return " ".join(sorted(f.split("arch=", 1)[-1] for f in ARCH.findall(command)))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    a, b = load(Path(argv[0])), load(Path(argv[1]))
    both = sorted(set(a) & set(b))
    differ = [o for o in both if a[o] != b[o]]
    beyond = [o for o in differ if ARCH.sub("", a[o]) != ARCH.sub("", b[o])]
    print(f"{len(both)} objects in both, {len(set(a) ^ set(b))} in one only; {len(differ)} compiled "
          f"differently, {len(beyond)} of them in more than their arch flags")
    print()
    by_folder: dict[str, list[str]] = collections.defaultdict(list)
    for o in differ:
        by_folder[o.rsplit("/", 1)[0]].append(o)
    print("| objects | folder | arch flags in A | arch flags in B |")
    print("|---|---|---|---|")
    for folder, objs in sorted(by_folder.items(), key=lambda kv: -len(kv[1])):
        flags = collections.Counter((arch_flags(a[o]), arch_flags(b[o])) for o in objs)
        for (fa, fb), n in flags.most_common():
            print(f"| {n} | `{folder}` | `{fa}` | `{fb}` |")
    if beyond:
        print()
        print("more than arch flags differ in:", ", ".join(beyond))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
