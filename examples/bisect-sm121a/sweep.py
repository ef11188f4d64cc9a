"""Configure every cached vLLM release in a range and print its arch decisions as a Markdown table.

A bisect assumes the decision changes once between its two ends; this sweep checks that for
the example (every release, not only those the bisects judged). Same configure as
`harness bisect --probe configure`; sdists from ~/.cache/vllm-bw-harness/sdist/.

    python examples/bisect-sm121a/sweep.py PYTHON_WITH_CUDA_TORCH 0.10.0 0.33.0 [ARCH_LIST]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from packaging.version import Version

from harness.bisect.history import Point, ReleaseHistory, Unavailable
from harness.image import configure


def main(python: str, good: str, bad: str, arch: str = "12.1a") -> None:
    history = ReleaseHistory("vllm", good, bad)
    tool = configure.find(python)
    print(f"| release | {' | '.join(configure.DEFAULT_FAMILIES)} | supported | configure |")
    print("|---" * (len(configure.DEFAULT_FAMILIES) + 3) + "|")
    for point in sorted(history.points(), key=lambda p: Version(p.id)):
        print(row(history, tool, point, arch), flush=True)


def row(history: ReleaseHistory, tool: configure.Toolchain, point: Point, arch: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            history.unpack(point, Path(tmp) / "src")
        except Unavailable as exc:
            return f"| {point.id} |" + " |" * len(configure.DEFAULT_FAMILIES) + f" | skipped: {exc} |"
        out = configure.configure(Path(tmp) / "src", arch, tool)
    cells = [", ".join(v) if v else (configure.NOT_BUILT if v is not None else "?") for v in out.decisions.values()]
    how = f"{out.seconds:.0f} s" + (f", stopped at {out.stopped_at}" if out.stopped_at else "")
    return f"| {point.id} | {' | '.join(cells)} | {', '.join(out.supported or ())} | {how} |"


if __name__ == "__main__":
    main(*sys.argv[1:])
