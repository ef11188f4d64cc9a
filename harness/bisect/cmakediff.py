"""What changed in the CMake between the last good and the first bad point.

Between two releases lie hundreds of commits and no git history in an sdist: the diff of the two
trees' CMakeLists.txt and cmake/**/*.cmake, kept to the hunks that touch the kernel families'
arch lists, is what a reader needs to find the upstream commit (and the place to look in a git
mirror: `git log -L` on those lines). For a git history the commits are listed instead
(GitHistory.changed).
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ConfigDict, Field

from harness.bisect.history import GitHistory, History, Unavailable
from harness.record import Open
from harness.safety.roots import Root

if TYPE_CHECKING:
    from harness.bisect.store import BisectResult, BisectStore

# The words of the arch decisions compared by the configure and build probes.
# (an arch inside a quoted list, "10.0a;12.0f": a CUDA version compared unquoted, 12.8, is not one)
KEYWORDS = re.compile(r'FP4|SCALED_MM|scaled_mm|MOE_DATA|moe_data|CUDA_SUPPORTED_ARCHS|"[^"]*\b1[0-2]\.[0-9][af]?\b[^"]*"')


class CMakeDiff(Open):
    """result.json's `cmake_diff`: the arch hunks across the answer (all of them in `file`), or
    the `error` that kept the two trees from being compared."""

    model_config = ConfigDict(populate_by_name=True)
    file: str | None = None
    from_: str | None = Field(None, alias="from")  # the last good point's id
    to: str | None = None  # the first bad point's id
    hunks: int | None = None
    text: str = ""
    error: str | None = None


class CMakeCommit(Open):
    """result.json's `cmake_commits`: a commit that touched the CMake files (git histories)."""

    id: str
    date: str
    title: str


def cmake_files(tree: Path) -> dict[str, str]:
    """The CMake files of an unpacked tree (a link in it is neither followed nor read)."""
    root = Root(tree, what="source tree")
    top = ["CMakeLists.txt"] if "CMakeLists.txt" in root.files() else []
    return {n: root.load_text(n, limit=16 << 20) for n in [*top, *root.walk("cmake", suffix=".cmake")]}


def _hunks(diff: list[str]) -> list[list[str]]:
    hunks: list[list[str]] = []
    for line in diff:
        if line.startswith("@@"):
            hunks.append([line])
        elif hunks:
            hunks[-1].append(line)
    return hunks


def arch_hunks(old: Path, new: Path, label_old: str, label_new: str, context: int = 3) -> str:
    """The unified diff of the CMake files, only the hunks whose changed lines mention an arch
    decision's words; empty when none does."""
    # a file on one side only is compared with an empty one
    a, b = defaultdict(str, cmake_files(old)), defaultdict(str, cmake_files(new))
    out: list[str] = []
    for name in sorted(set(a) | set(b)):
        diff = list(difflib.unified_diff(a[name].splitlines(), b[name].splitlines(),
                                         f"{label_old}/{name}", f"{label_new}/{name}", n=context, lineterm=""))
        keep = [h for h in _hunks(diff[2:])
                if any(KEYWORDS.search(ln) for ln in h[1:] if ln[:1] in "+-")]
        if keep:
            out += diff[:2] + [ln for h in keep for ln in h]
    return "\n".join(out) + ("\n" if out else "")


def explain(store: BisectStore, history: History, result: BisectResult) -> BisectResult:
    """Add to `result` what changed in the CMake across the answer (last good -> first bad):
    the arch hunks (written to cmake.diff in the bisect's folder) and, for git, the commits
    that touched the CMake files. Only for the probes that read CMake decisions."""
    if result.probe.probe not in ("configure", "build") or not result.done:
        return result
    by_id = {p.id: p for p in store.points}
    good, bad = by_id[result.last_good.id], by_id[result.bad_side.id]
    work = Path(tempfile.mkdtemp(prefix="harness-bisect-diff-"))
    try:
        history.unpack(good, work / "good")
        history.unpack(bad, work / "bad")
        text = arch_hunks(work / "good", work / "bad", good.short, bad.short)
    except Unavailable as exc:
        return result.model_copy(update={"cmake_diff": CMakeDiff(error=str(exc))})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    store.save_text("cmake.diff", text)
    diff = CMakeDiff(file="cmake.diff", from_=good.id, to=bad.id, hunks=text.count("\n@@"), text=text)
    if not isinstance(history, GitHistory):
        return result.model_copy(update={"cmake_diff": diff})
    commits = [CMakeCommit(id=c.id, date=c.date, title=c.title)
               for c in history.changed(good.id, bad.id, ["CMakeLists.txt", "cmake"])]
    return result.model_copy(update={"cmake_diff": diff, "cmake_commits": commits})
