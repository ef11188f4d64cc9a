"""Patch preflight: apply each series in order to a scratch copy of the pinned source.

`git apply --check` then a real apply, patch by patch, so patch N+1 is checked on top of N. A
stale patch is rejected by name, with the file and hunk git could not place, before an image
build spends an hour getting to the same place.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import git, proc
from harness.errors import ConfigError
from harness.image import sources
from harness.image.render import _part
from harness.image.stackbuild import StackBuild
from harness.image.wheels import read_lock
from harness.safety import paths
from harness.safety.roots import Root
from harness.safety.wheels import unpack_wheel

# git apply's messages for a hunk/file that does not fit, e.g.
#   error: patch failed: CMakeLists.txt:228
#   error: CMakeLists.txt: patch does not apply
#   error: csrc/foo.cu: No such file or directory
HUNK_FAILED = re.compile(r"^error: patch failed: (?P<file>.+):(?P<line>\d+)$", re.MULTILINE)
FILE_FAILED = re.compile(r"^error: (?P<file>[^:\n]+): (?P<why>patch does not apply|No such file or directory|"
                         r"already exists in working directory)$", re.MULTILINE)
CHECKING = re.compile(r"^Checking patch (?P<file>.+)\.\.\.$", re.MULTILINE)
# Inside an enclosing git repo, paths outside the cwd are skipped without an error: a patch
# that touches nothing must not pass, so preflight works in its own repo and still checks this.
DIFF_PATHS = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$", re.MULTILINE)
PLAIN_PATHS = re.compile(r"^(?:---|\+\+\+) [ab]/(\S+)", re.MULTILINE)
SKIPPED = re.compile(r"^Skipped patch '(?P<file>.+)'\.$", re.MULTILINE)

PATCH_MAX_BYTES = 64 << 20  # a patch series of a few PRs is kilobytes; a FIFO or /dev/zero never ends


@dataclass(frozen=True)
class PatchResult:
    name: str
    ok: bool
    files: tuple[str, ...] = ()
    failed_file: str | None = None
    failed_hunk_line: int | None = None
    detail: str = ""

    def describe(self) -> str:
        if self.ok:
            return f"{self.name}: applies ({len(self.files)} file(s))"
        where = self.failed_file or "?"
        if self.failed_hunk_line is not None:
            where += f" (hunk at line {self.failed_hunk_line})"
        return f"{self.name}: does NOT apply: {where}: {self.detail}"


@dataclass(frozen=True)
class SeriesResult:
    project: str
    source: str
    patches: tuple[PatchResult, ...]

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.patches)

    def problems(self) -> list[str]:
        return [f"{self.project}: {p.describe()}" for p in self.patches if not p.ok]


def parse_failure(stderr: str) -> tuple[str | None, int | None, str]:
    """(file, hunk line, why) from `git apply` stderr."""
    hunk = HUNK_FAILED.search(stderr)
    whole = FILE_FAILED.search(stderr)
    file = hunk.group("file") if hunk else (whole.group("file") if whole else None)
    line = int(hunk.group("line")) if hunk else None
    why = whole.group("why") if whole else (stderr.strip().splitlines() or ["git apply failed"])[-1]
    more = [f"{m['file']}:{m['line']}" for m in HUNK_FAILED.finditer(stderr)][1:]
    if more:
        why += f" (also failed: {', '.join(more)})"
    return file, line, why


def _copy_touched(tree: Path, work: Path, patches: list[Path]) -> None:
    """Copy only the files the series touches: a vLLM tree is ~10k files, a series a handful."""
    work.mkdir(parents=True)
    for patch in patches:
        text = paths.read_text(patch, limit=PATCH_MAX_BYTES, what="patch")
        # `diff --git` headers, and the ---/+++ lines of a plain unified diff (no git header)
        rels = [r for m in DIFF_PATHS.finditer(text) for r in (m["a"], m["b"])]
        rels += PLAIN_PATHS.findall(text)
        # a path named by a patch is data: copied only from inside the tree to inside the scratch
        # copy, through no link (`../../etc/passwd` or a linked folder is skipped; git apply then
        # names the file it cannot find)
        source, scratch = Root(tree, what="source tree"), Root(work, what="patch scratch copy")
        for rel in rels:
            with contextlib.suppress(ConfigError, FileNotFoundError):
                if not scratch.exists(rel):
                    scratch.copy_in(source, rel)


def apply_series(tree: Path, patches: list[tuple[str, Path]], *, project: str = "", source: str = "",
                 in_place: bool = False) -> SeriesResult:
    """Check then apply `patches` ((name, path), in order) on a scratch copy of `tree`.

    Stops at the first patch that does not apply: later ones would be checked on the wrong base.
    """
    results: list[PatchResult] = []
    if patches:
        proc.require_tool("git", "checks each patch with `git apply` (the patch preflight)")
    scratch_parent = None if in_place else Path(tempfile.mkdtemp(prefix="harness-preflight-"))
    try:
        work = tree if scratch_parent is None else scratch_parent / "src"
        if not in_place and patches:
            _copy_touched(tree, work, [path for _n, path in patches])
            git.run(["init", "-q", "--", str(work)], timeout=60)
        for name, path in patches:
            # --unsafe-paths is not needed: patches are relative; -v lists the files it touches.
            # `cwd` is outside any enclosing repo (scratch), so git applies to this tree only.
            check = git.run(["apply", "--check", "-v", "--", str(path)], cwd=str(work), timeout=120)
            files = tuple(CHECKING.findall(check.stderr))
            if check.ok and (skipped := SKIPPED.findall(check.stderr)):
                results.append(PatchResult(name, False, files, skipped[0], None,
                                           "skipped: the path is outside the source tree"))
                break
            if not check.ok:
                f, line, why = parse_failure(check.stderr)
                results.append(PatchResult(name, False, files, f, line, why))
                break
            done = git.run(["apply", "--", str(path)], cwd=str(work), timeout=120)
            if not done.ok:
                f, line, why = parse_failure(done.stderr)
                results.append(PatchResult(name, False, files, f, line, why))
                break
            results.append(PatchResult(name, True, files))
    finally:
        if scratch_parent is not None:
            shutil.rmtree(scratch_parent, ignore_errors=True)
    return SeriesResult(project, source, tuple(results))


def preflight_stack(build: StackBuild) -> list[SeriesResult]:
    """Both series of a docker stack against their real pinned sources (fetched once, cached)."""

    stack, matrix = build.stack, build.matrix
    if stack.wheels is not None:
        return [preflight_wheels(build)]
    out = []
    vllm = _part("vllm", stack.vllm)
    series = [("vllm", sources.vllm_source(stack), [(Path(p.path).name, matrix.patch_path(p)) for p in vllm.patches])]
    if stack.flashinfer:
        series.append(("flashinfer", sources.flashinfer_source(stack),
                       [(Path(pr.patch).name, matrix.patch_path(pr.patch)) for pr in stack.flashinfer.prs]))
    for project, src, patches in series:
        if not patches:
            out.append(SeriesResult(project, f"{src.name} {src.pin}", ()))
            continue
        out.append(apply_series(sources.tree(src), patches, project=project, source=f"{src.name} {src.pin}"))
    return out


def preflight_wheels(build: StackBuild) -> SeriesResult:
    """A wheel stack's Python-file patches against the pinned wheel's own files (from the wheelhouse).

    A PyPI wheel stack (no wheelhouse) is not fetched here: its patches are checked at build time.
    """
    wheels = build.stack.wheels
    assert wheels is not None, "preflight_stack hands wheel stacks only"
    patches = [(Path(p).name, build.matrix.patch_path(p)) for p in wheels.patches]
    source = f"vllm wheel {wheels.vllm.version}"
    found = read_lock(build)
    if not patches or found is None:
        return SeriesResult("vllm", source + ("" if found else " (PyPI: checked at build)"), ())
    where, lock = found
    wheel = next(e for e in lock.wheels if e.name == "vllm")
    tree = Path(tempfile.mkdtemp(prefix="harness-wheel-"))
    try:
        wanted = {m for _n, p in patches for m in _patch_targets(p)}
        # the wheel is data: its members read bounded, written through a root (harness.safety.wheels)
        unpack_wheel(where / wheel.file, Root(tree, what="wheel scratch"), only=wanted)
        return apply_series(tree, patches, project="vllm", source=f"{source} sha256:{wheel.sha256}",
                            in_place=True)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def _patch_targets(path: Path) -> list[str]:
    import re

    text = paths.read_text(path, limit=PATCH_MAX_BYTES, what="patch")
    return [m.removeprefix("b/") for m in re.findall(r"^\+\+\+ (\S+)", text, flags=re.MULTILINE)]
