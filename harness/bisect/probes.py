"""Probes: what judges one point's unpacked source tree.

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

from harness import proc
from harness.bisect.history import Point
from harness.bisect.search import BAD, GOOD, SKIP
from harness.build import buildlog, configure


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
        logs.write_text(f"$ {shlex.join(self.argv)}\n{res.stdout}\n{res.stderr}")
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


# The probe build comes from `harness build --probe`; this is the one place that calls it.
# HARNESS_BISECT_BUILD_PROBE replaces the command (a shell-quoted argv; the tree, the arch list
# and an output JSON path are appended), so another builder, or a test's stand-in, can serve.
BUILD_PROBE_ENV = "HARNESS_BISECT_BUILD_PROBE"


def build_probe_argv() -> list[str]:
    custom = os.environ.get(BUILD_PROBE_ENV)
    return shlex.split(custom) if custom else [sys.executable, "-m", "harness", "build", "--probe"]


@dataclass(frozen=True)
class BuildProbe:
    """`--probe build`: build the SM12x kernels of the tree, then audit what was compiled.

    The builder is asked `ARGV --source TREE --arch-list LIST --json OUT`; it writes OUT as
    {"build_log": "...", "audit": {"verdict": "pass|fail", ...}}. A build that fails is a skip;
    the decision compared is the configure's arch decisions read from the build log plus the
    audit verdict."""

    arch_list: str
    families: tuple[str, ...] = configure.DEFAULT_FAMILIES
    timeout: float = 7200
    name: str = "build"
    compares: bool = True

    def spec(self) -> dict:
        return {"probe": self.name, "torch_cuda_arch_list": self.arch_list, "families": list(self.families),
                "builder": build_probe_argv()}

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        out_json = logs.with_suffix(".build.json")
        argv = [*build_probe_argv(), "--source", str(tree), "--arch-list", self.arch_list, "--json", str(out_json)]
        res = proc.run(argv, timeout=self.timeout)
        logs.write_text(f"$ {shlex.join(argv)}\n{res.stdout}\n{res.stderr}")
        if not res.ok or not out_json.is_file():
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
            return _skip(f"the probe build failed (exit {res.returncode}): {tail[0][:200]}", exit=res.returncode)
        got = json.loads(out_json.read_text())
        text = str(got.get("build_log") or "")
        _sup, decisions = configure.decisions_of(text, self.families)
        if missing := [f for f in self.families if decisions.get(f) is None]:
            return _skip(f"the build log has no decision for {', '.join(missing)}")
        decision = _decision(self.families, decisions)
        decision["audit"] = str((got.get("audit") or {}).get("verdict") or "none")
        problems = [str(p) for p in buildlog.check_build_log(text, self.arch_list)]
        return Observation(None, decision, f"audit {decision['audit']}", {"build_log_problems": problems})


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
        import tomli_w

        doc = tomllib.loads(self.matrix.read_text())
        vllm = dict(doc["stacks"][self.stack]["vllm"])
        for key in ("pypi", "git", "commit", "sdist_sha256"):
            vllm.pop(key, None)
        if self.source["kind"] == "releases":
            vllm["pypi"] = point.id
        else:
            vllm.update(git=self.source["repo"], commit=point.id)
        doc["stacks"][self.stack]["vllm"] = vllm
        path = self.matrix.with_name(f".bisect-{point.short}-{self.matrix.name}")
        path.write_text(tomli_w.dumps(doc))
        return path

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        results = logs.parent / f"{logs.stem}.run"
        copy = self.matrix_for(point)
        try:
            res = proc.run([sys.executable, "-m", "harness", "run", "-m", str(copy), "-k", self.cell,
                            "--results", str(results), "--no-report"], timeout=6 * 3600)
        finally:
            copy.unlink(missing_ok=True)
        logs.write_text(res.stdout + "\n" + res.stderr)
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
