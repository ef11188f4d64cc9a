"""Compute the content sha256 of each source in a vLLM offline-source table and write it back.

    python tools/pin-offline-sources.py harness/data/sources/vllm-0.25.1.toml [URL=MIRROR ...] [--only NAME ...]

Each source is exported at its commit (from a local git mirror given as URL=PATH, else from
its URL), its submodules put in place, trimmed to `keep`, and digested as
harness.image.offline.tree_sha256 does. The `sha256 = "..."` line of each [[sources]] and
[[stand_ins]] entry is rewritten; nothing else in the file changes. Run it after changing a commit or a keep list;
`--only` pins the named sources and leaves the others as they are (their trees need not be
reachable).
"""

import argparse
import re
import tempfile
import tomllib
from pathlib import Path

from harness.image.offline import Pin, assemble, tree_sha256


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("table", type=Path)
    ap.add_argument("mirrors", nargs="*", metavar="URL=PATH", help="read this git URL from a local git folder")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="pin only this source (repeatable)")
    args = ap.parse_args()
    repos = dict(arg.split("=", 1) for arg in args.mirrors)
    data = tomllib.loads(args.table.read_text())
    entries = data["sources"] + data.get("stand_ins", [])
    unknown = set(args.only) - {src["name"] for src in entries}
    if unknown:
        ap.error(f"--only {', '.join(sorted(unknown))}: no such [[sources]] or [[stand_ins]] entry in {args.table}")
    # blocks[i] is the text of the i-th entry, [[sources]] first, then [[stand_ins]] (the order
    # tomllib lists them in); blocks[0] is what comes before the first entry
    parts = re.split(r"(?m)^(\[\[(?:sources|stand_ins)\]\])$", args.table.read_text())
    heads, blocks = parts[1::2], [parts[0]] + parts[2::2]
    order = [i for kind in ("[[sources]]", "[[stand_ins]]") for i, h in enumerate(heads, start=1) if h == kind]
    for i, src in zip(order, entries, strict=True):
        if args.only and src["name"] not in args.only:
            continue
        pin = Pin(src["name"], src["url"], src["commit"], src["env"], tuple(src["keep"]),
                  tuple((m["path"], m["url"], m["commit"]) for m in src.get("submodules", [])), "")
        with tempfile.TemporaryDirectory() as tmp:
            assemble(pin, repos, Path(tmp) / "t")
            digest = tree_sha256(Path(tmp) / "t")
        blocks[i] = re.sub(r'(?m)^sha256 = "[0-9a-f]*"', f'sha256 = "{digest}"', blocks[i], count=1)
        print(f"{pin.name} {pin.commit[:12]} {digest}")
    args.table.write_text(blocks[0] + "".join(h + b for h, b in zip(heads, blocks[1:], strict=True)))


if __name__ == "__main__":
    main()
