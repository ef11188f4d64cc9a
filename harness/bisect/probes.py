"""Probes: what judges one point (its unpacked source tree, or the stack pinned to it).

Two kinds of verdict:
- direct: the probe says good, bad or skip itself (a command's exit status; a cell's status);
- by comparison: the probe reports a decision (which archs each kernel family is built for),
  and the point is bad when its decision differs from the good endpoint's (session.py). This is
  how "what changed?" is asked without saying in advance what the new answer will be.

A probe never raises to the loop: session.py turns an exception into a skip with its reason.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import tomli_w

from harness import proc
from harness.bisect.history import Point
from harness.bisect.search import BAD, GOOD, SKIP
from harness.build import configure, sources
from harness.bundle import sha256_file
from harness.lock import LockedFile, LockedImage, lock_path, read_lock
from harness.redact import redact_text


@dataclass(frozen=True)
class Observation:
    verdict: str | None = None  # direct probes: good / bad / skip; None: compare `decision`
    decision: dict | None = None  # comparing probes: family -> archs (a list) or "not built"
    reason: str = ""  # why skipped, or what was seen
    detail: dict = field(default_factory=dict)


class Probe(Protocol):
    name: str
    compares: bool

    def spec(self) -> dict: ...
    def observe(self, tree: Path, point: Point, logs: Path) -> Observation: ...


def _skip(reason: str, **detail) -> Observation:
    return Observation(SKIP, None, reason, detail)


def exit_verdict(code: int) -> str | None:
    """`git bisect run`'s reading of an exit status: 0 good, 125 skip, 1..127 bad; None for
    anything else (killed by a signal, >127), which git treats as "stop the bisect" and this
    tool as a skip with the reason."""
    if code == 0:
        return GOOD
    if code == 125:
        return SKIP
    if 1 <= code <= 127:
        return BAD
    return None


@dataclass(frozen=True)
class CommandProbe:
    """`harness bisect ... -- COMMAND`: run in the unpacked tree, judged by its exit status."""

    argv: tuple[str, ...]
    timeout: float = 3600
    name: str = "command"
    compares: bool = False

    def spec(self) -> dict:
        return {"probe": self.name, "command": list(self.argv), "timeout_s": self.timeout}

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        env = {**os.environ, "HARNESS_BISECT_POINT": point.id, "HARNESS_BISECT_TREE": str(tree)}
        res = proc.run(self.argv, timeout=self.timeout, cwd=str(tree), env=env)
        logs.write_text(redact_text(f"$ {proc.shown(self.argv)}\n{res.stdout}\n{res.stderr}"))
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
        if res.returncode == 124 and res.stderr.startswith("timed out after"):
            return _skip(f"the command {res.stderr.strip()}", exit=124)
        verdict = exit_verdict(res.returncode)
        if verdict is None:
            return _skip(f"the command died (exit {res.returncode}): {tail[0][:200]}", exit=res.returncode)
        why = "exit 125: the command asked to skip" if verdict == SKIP else f"exit {res.returncode}"
        return Observation(verdict, None, f"{why}: {tail[0][:200]}" if tail[0] else why, {"exit": res.returncode})


def _decision(families, decisions: dict) -> dict:
    return {f: list(decisions[f]) if decisions[f] else configure.NOT_BUILT for f in families}


@dataclass(frozen=True)
class ConfigureProbe:
    """`--probe configure`: vLLM's CMake arch decisions for an arch list, no compile."""

    arch_list: str
    toolchain: configure.Toolchain
    families: tuple[str, ...] = configure.DEFAULT_FAMILIES
    name: str = "configure"
    compares: bool = True

    def spec(self) -> dict:
        t = self.toolchain
        return {"probe": self.name, "torch_cuda_arch_list": self.arch_list, "families": list(self.families),
                "nvcc": t.nvcc, "cmake": t.cmake, "python": t.python, "cutlass_dir": t.cutlass_dir}

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        if not (tree / "CMakeLists.txt").is_file():
            return _skip("no CMakeLists.txt in this source tree")
        out = configure.configure(tree, self.arch_list, self.toolchain, log_path=logs, families=self.families)
        detail = {"configure_exit": out.returncode, "configure_s": out.seconds, "supported": out.supported,
                  "stopped_at": out.stopped_at, "every_decision": out.every_decision}
        if missing := out.missing(self.families):
            where = out.stopped_at or f"exit {out.returncode}"
            return _skip(f"the configure printed no decision for {', '.join(missing)} (stopped at {where})",
                         **detail, log_tail=list(out.log_tail))
        decision = _decision(self.families, out.decisions)
        seen = "; ".join(f"{f} {', '.join(v) if isinstance(v, list) else v}" for f, v in decision.items())
        note = f" (configure then stopped at {out.stopped_at})" if out.stopped_at else ""
        return Observation(None, decision, seen + note, detail)


def pinned_matrix(matrix: Path, stack: str, source: dict, point: Point) -> Path:
    """A copy of `matrix`, next to it (its relative paths hold), whose stack's vLLM source is
    the point: a release (`pypi`, with the sha256 of the sdist the bisect downloaded and checked)
    or a commit (`git` + `commit`); the stack's patches stay. The other pins of the stack come
    from the matrix's lock, written into the copy, so the copy builds without locking again."""
    doc = tomllib.loads(matrix.read_text())
    entry = doc["stacks"][stack]
    vllm = dict(entry["vllm"])
    for key in ("pypi", "git", "commit", "sdist_sha256"):
        vllm.pop(key, None)
    if source["kind"] == "releases":
        vllm["pypi"] = point.id
        if (cached := sources.SDIST_CACHE / sources.sdist_filename("vllm", point.id)).is_file():
            vllm["sdist_sha256"] = sha256_file(cached)
    else:
        vllm.update(git=source["repo"], commit=point.id)
    entry["vllm"] = vllm
    lock = read_lock(lock_path(matrix))
    for key, pin in ((lock.stacks.get(stack) or {}).items() if lock else ()):
        if key == "base_image" and isinstance(pin, LockedImage) and isinstance(entry.get(key), dict):
            entry[key].setdefault("digest", pin.digest)
        elif key == "flashinfer" and isinstance(pin, LockedFile) and isinstance(entry.get(key), dict):
            entry[key].setdefault("sdist_sha256", pin.sha256)
    path = matrix.with_name(f".bisect-{point.short}-{matrix.name}")
    path.write_text(tomli_w.dumps(doc))
    return path


def _last_line(res: proc.Result) -> str:
    return ((res.stderr or res.stdout).strip().splitlines()[-1:] or [""])[0][:200]


# `harness build --probe` is the probe build; this is the one place that calls it. The command
# can be replaced (HARNESS_BISECT_BUILD_PROBE, a shell-quoted argv) by another builder or a
# test's stand-in: it is given `-m MATRIX -k STACK/ --probe --log-dir DIR` and must write
# DIR/probe-STACK.json as `harness build --probe` does.
BUILD_PROBE_ENV = "HARNESS_BISECT_BUILD_PROBE"


def build_probe_argv() -> list[str]:
    custom = os.environ.get(BUILD_PROBE_ENV)
    return shlex.split(custom) if custom else [sys.executable, "-m", "harness", "build"]


def probe_decision(doc: dict) -> dict:
    """What a probe build decided, per kernel family: the configure's arch decision (stock and
    patched), the cubins of the compiled object and the audit's verdict on each target."""
    out = {}
    for row in doc.get("rows") or []:
        audits = sorted(str(v).split(": ")[0] + ": " + str(v).split(": ")[1]
                        for v in row.get("verdicts") or [] if str(v).count(": ") >= 2)
        out[str(row.get("family"))] = (f"stock {row.get('stock') or '-'}; patched {row.get('patched') or '-'}; "
                                       f"cubins {row.get('archs')}; audit {', '.join(audits) or '-'}")
    out["probe"] = str(doc.get("status"))
    return out


@dataclass(frozen=True)
class BuildProbe:
    """`--probe build`: `harness build --probe` of the stack pinned to the point (configure,
    compile only the units the verdict depends on, audit them). Its decision (probe_decision)
    is compared with the good endpoint's; a probe build that errors is a skip."""

    matrix: Path
    stack: str
    source: dict  # the history's spec
    timeout: float = 7200
    name: str = "build"
    compares: bool = True

    def spec(self) -> dict:
        return {"probe": self.name, "matrix": str(self.matrix), "stack": self.stack, "builder": build_probe_argv()}

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        out_dir = logs.parent / f"{logs.stem}.build"
        copy = pinned_matrix(self.matrix, self.stack, self.source, point)
        argv = [*build_probe_argv(), "-m", str(copy), "-k", f"{self.stack}/", "--probe", "--log-dir", str(out_dir)]
        try:
            res = proc.run(argv, timeout=self.timeout)
        finally:
            copy.unlink(missing_ok=True)
        logs.write_text(redact_text(f"$ {proc.shown(argv)}\n{res.stdout}\n{res.stderr}"))
        found = out_dir / f"probe-{self.stack}.json"
        if not found.is_file():
            return _skip(f"the probe build did not finish (exit {res.returncode}): {_last_line(res)}",
                         exit=res.returncode)
        doc = json.loads(found.read_text())
        if doc.get("status") == "error" or not doc.get("rows"):
            return _skip(f"the probe build failed: {str(doc.get('reason') or _last_line(res))[:200]}",
                         exit=res.returncode, log=doc.get("log_path"))
        decision = probe_decision(doc)
        return Observation(None, decision, f"probe {doc.get('status')}" + (f": {doc['reason']}" if doc.get("reason") else ""),
                           {"exit": res.returncode, "timings": doc.get("timings"), "log": doc.get("log_path")})


# How `harness run` ends a cell, read as a bisect verdict: the cell's verdict is what bisects;
# a cell that never got to be judged (no image, a tool error, not run) says nothing about it.
CELL_VERDICT = {"pass": GOOD, "fail": BAD, "crashed": BAD, "hung": BAD, "timeout": BAD,
                "build-failed": SKIP, "error": SKIP, "skipped": SKIP}


@dataclass(frozen=True)
class CellProbe:
    """`--probe cell ID`: the cell run by `harness run` with the stack's vLLM pinned to the point.

    The matrix is copied next to itself (so its relative paths hold) with the vLLM source of the
    cell's stack replaced by the point (a release: `pypi`; a commit: `git` + `commit`); the
    stack's patches stay, and `harness run` builds (or reuses) the image and judges the cell."""

    matrix: Path
    cell: str
    stack: str
    source: dict  # the history's spec
    name: str = "cell"
    compares: bool = False

    def spec(self) -> dict:
        return {"probe": self.name, "matrix": str(self.matrix), "cell": self.cell, "stack": self.stack}

    def matrix_for(self, point: Point) -> Path:
        return pinned_matrix(self.matrix, self.stack, point=point, source=self.source)

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        results = logs.parent / f"{logs.stem}.run"
        copy = self.matrix_for(point)
        try:
            res = proc.run([sys.executable, "-m", "harness", "run", "-m", str(copy), "-k", self.cell,
                            "--results", str(results), "--no-report"], timeout=6 * 3600)
        finally:
            copy.unlink(missing_ok=True)
        logs.write_text(redact_text(res.stdout + "\n" + res.stderr))
        cells = sorted(results.glob("*/cells/*.json"))
        cells = [c for c in cells if not c.name.endswith(".partial.json")]
        if not cells:
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
            return _skip(f"harness run judged no cell (exit {res.returncode}): {tail[0][:200]}")
        cell = json.loads(cells[0].read_text())
        status = str(cell.get("status"))
        verdict = CELL_VERDICT.get(status, SKIP)
        why = cell.get("reason") or "; ".join(map(str, cell.get("reasons") or []))
        return Observation(verdict, None, f"cell {status}: {str(why)[:200]}",
                           {"status": status, "run_dir": str(cells[0].parent.parent)})
