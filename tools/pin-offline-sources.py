"""Compute the content sha256 of each source in a vLLM offline-source table and write it back.

    python tools/pin-offline-sources.py harness/data/sources/vllm-0.25.1.toml [URL=MIRROR ...]

Each source is exported at its commit (from a local git mirror given as URL=PATH, else from
its URL), its submodules put in place, trimmed to `keep`, and digested as
harness.build.offline.tree_sha256 does. The `sha256 = "..."` line of each [[sources]] entry is
rewritten; nothing else in the file changes. Run it after changing a commit or a keep list.
"""

import re
import sys
import tempfile
import tomllib
from pathlib import Path

from harness.build.offline import Pin, assemble, tree_sha256


def main() -> None:
    path = Path(sys.argv[1])
    repos = dict(arg.split("=", 1) for arg in sys.argv[2:])
    data = tomllib.loads(path.read_text())
    text = path.read_text()
    blocks = text.split("[[sources]]")
    for i, src in enumerate(data["sources"], start=1):
        pin = Pin(src["name"], src["url"], src["commit"], src["env"], tuple(src["keep"]),
                  tuple((m["path"], m["url"], m["commit"]) for m in src.get("submodules", [])), "")
        with tempfile.TemporaryDirectory() as tmp:
            assemble(pin, repos, Path(tmp) / "t")
            digest = tree_sha256(Path(tmp) / "t")
        blocks[i] = re.sub(r'(?m)^sha256 = "[0-9a-f]*"', f'sha256 = "{digest}"', blocks[i], count=1)
        print(f"{pin.name} {pin.commit[:12]} {digest}")
    path.write_text("[[sources]]".join(blocks))


if __name__ == "__main__":
    main()
