"""Probes: what judges one point (its unpacked source tree, or the stack pinned to it).

Two kinds of verdict:
- direct: the probe says good, bad or skip itself (a command's exit status; a cell's status);
- by comparison: the probe reports a decision (which archs each kernel family is built for),
  and the point is bad when its decision differs from the good endpoint's (session.py). This is
  how "what changed?" is asked without saying in advance what the new answer will be.

A probe never raises to the loop: session.py turns an exception into a skip with its reason.
"""

from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import tomli_w
from pydantic import TypeAdapter, ValidationError

from harness import proc
from harness.bisect.history import HistorySpec, Point
from harness.bisect.search import BAD, GOOD, SKIP, Verdict
from harness.bundle import sha256_file
from harness.image import configure, sources
from harness.image.probe import ProbeOutcome
from harness.lock import StackPins, lock_path, read_lock
from harness.record import Open
from harness.redact import redact_text
from harness.results.model import CellResult, Status
from harness.safety import writes
from harness.safety.paths import MiB
from harness.safety.readers import load_toml
from harness.safety.roots import Root

# What a comparing probe decided: per kernel family, its archs (a list) or "not built"
# (configure), or one line of what the probe build made of it (build).
Decision = dict[str, list[str] | str]


@dataclass(frozen=True)
class Observation:
    verdict: Verdict | None = None  # direct probes: good / bad / skip; None: compare `decision`
    decision: Decision | None = None  # comparing probes
    reason: str = ""  # why skipped, or what was seen
    detail: dict[str, object] = field(default_factory=dict)  # the probe's own facts, kept with the step


class ProbeSpec(Open):
    """What judges each point, as bisect.json and result.json keep it (`probe`): the kind, and
    the keys of that kind. Written with the keys that were given (store.dump)."""

    probe: str  # command | configure | build | cell
    command: list[str] | None = None  # command: the argv run in the point's tree
    timeout_s: int | float = 3600  # command
    torch_cuda_arch_list: str | None = None  # configure, build
    families: list[str] | None = None  # configure: the kernel families compared
    python: str | None = None  # configure: a Python with a CUDA build of torch and cmake
    cutlass_dir: str | None = None  # configure
    matrix: str | None = None  # build, cell
    stack: str | None = None  # build, cell
    cell: str | None = None  # cell
    builder: list[str] | None = None  # build: the probe build's command


class Probe(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def compares(self) -> bool: ...  # True: judged by comparing decisions with the good endpoint's

    def spec(self) -> ProbeSpec: ...
    def observe(self, tree: Path, point: Point, logs: Path) -> Observation: ...


def _skip(reason: str, **detail) -> Observation:
    return Observation(SKIP, None, reason, detail)


def exit_verdict(code: int) -> Verdict | None:
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

    def spec(self) -> ProbeSpec:
        return ProbeSpec(probe=self.name, command=list(self.argv), timeout_s=self.timeout)

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        env = {**os.environ, "HARNESS_BISECT_POINT": point.id, "HARNESS_BISECT_TREE": str(tree)}
        res = proc.run(self.argv, timeout=self.timeout, cwd=str(tree), env=env)
        writes.write_text(logs, redact_text(f"$ {proc.shown(self.argv)}\n{res.stdout}\n{res.stderr}"), flag="probe log")
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
        if res.returncode == 124 and res.stderr.startswith("timed out after"):
            return _skip(f"the command {res.stderr.strip()}", exit=124)
        verdict = exit_verdict(res.returncode)
        if verdict is None:
            return _skip(f"the command died (exit {res.returncode}): {tail[0][:200]}", exit=res.returncode)
        why = "exit 125: the command asked to skip" if verdict == SKIP else f"exit {res.returncode}"
        return Observation(verdict, None, f"{why}: {tail[0][:200]}" if tail[0] else why, {"exit": res.returncode})


def _decision(families, decisions: dict) -> Decision:
    return {f: list(decisions[f]) if decisions[f] else configure.NOT_BUILT for f in families}


@dataclass(frozen=True)
class ConfigureProbe:
    """`--probe configure`: vLLM's CMake arch decisions for an arch list, no compile."""

    arch_list: str
    toolchain: configure.Toolchain
    families: tuple[str, ...] = configure.DEFAULT_FAMILIES
    name: str = "configure"
    compares: bool = True

    def spec(self) -> ProbeSpec:
        t = self.toolchain
        return ProbeSpec(probe=self.name, torch_cuda_arch_list=self.arch_list, families=list(self.families),
                         nvcc=t.nvcc, cmake=t.cmake, python=t.python, cutlass_dir=t.cutlass_dir)

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        if not (tree / "CMakeLists.txt").is_file():
            return _skip("no CMakeLists.txt in this source tree")
        out = configure.configure(tree, self.arch_list, self.toolchain, log_path=logs, families=self.families)
        detail: dict[str, object] = {"configure_exit": out.returncode, "configure_s": out.seconds, "supported": out.supported,
                  "stopped_at": out.stopped_at, "every_decision": out.every_decision}
        if missing := out.missing():
            where = out.stopped_at or f"exit {out.returncode}"
            return _skip(f"the configure printed no decision for {', '.join(missing)} (stopped at {where})",
                         **detail, log_tail=list(out.log_tail))
        decision = _decision(self.families, out.decisions)
        seen = "; ".join(f"{f} {', '.join(v) if isinstance(v, list) else v}" for f, v in decision.items())
        note = f" (configure then stopped at {out.stopped_at})" if out.stopped_at else ""
        return Observation(None, decision, seen + note, detail)


def pinned_matrix(matrix: Path, stack: str, source: HistorySpec, point: Point) -> Path:
    """A copy of `matrix`, next to it (its relative paths hold), whose stack's vLLM source is
    the point: a release (`pypi`, with the sha256 of the sdist the bisect downloaded and checked)
    or a commit (`git` + `commit`); the stack's patches stay. The other pins of the stack come
    from the matrix's lock, written into the copy, so the copy builds without locking again."""
    doc = load_toml(matrix, what="matrix")
    entry = doc["stacks"][stack]
    vllm = dict(entry["vllm"])
    for key in ("pypi", "git", "commit", "sdist_sha256"):
        vllm.pop(key, None)
    if source.kind == "releases":
        vllm["pypi"] = point.id
        if (cached := sources.SDIST_CACHE / sources.sdist_filename("vllm", point.id)).is_file():
            vllm["sdist_sha256"] = sha256_file(cached)
    else:
        vllm.update(git=source.repo, commit=point.id)
    entry["vllm"] = vllm
    lock = read_lock(lock_path(matrix))
    # the lock's pins of the stack (none for a stack never locked), written into the matrix's
    # own TOML table for that pin, when it has one
    pins = lock.pins(stack) if lock else StackPins()
    for key, table in entry.items():
        if not isinstance(table, dict):
            continue
        if key == "base_image" and pins.base_image is not None:
            table.setdefault("digest", pins.base_image.digest)
        elif key == "flashinfer" and pins.flashinfer is not None:
            table.setdefault("sdist_sha256", pins.flashinfer.sha256)
    path = matrix.with_name(f".bisect-{point.short}-{matrix.name}")
    writes.write_text(path, tomli_w.dumps(doc), flag="pinned matrix copy")
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


# probe-STACK.json is the ProbeOutcome that `harness build --probe` writes: read as that type
PROBE_ANSWER = TypeAdapter(ProbeOutcome)


def probe_decision(answer: ProbeOutcome) -> Decision:
    """What a probe build decided, per kernel family: the configure's arch decision (stock and
    patched), the cubins of the compiled object and the audit's verdict on each target."""
    out: Decision = {}
    for row in answer.rows:
        audits = sorted(v.split(": ")[0] + ": " + v.split(": ")[1] for v in row.verdicts if v.count(": ") >= 2)
        out[row.family] = (f"stock {row.stock or '-'}; patched {row.patched or '-'}; "
                           f"cubins {row.archs}; audit {', '.join(audits) or '-'}")
    out["probe"] = answer.status
    return out


@dataclass(frozen=True)
class BuildProbe:
    """`--probe build`: `harness build --probe` of the stack pinned to the point (configure,
    compile only the units the verdict depends on, audit them). Its decision (probe_decision)
    is compared with the good endpoint's; a probe build that errors is a skip."""

    matrix: Path
    stack: str
    source: HistorySpec
    timeout: float = 7200
    name: str = "build"
    compares: bool = True

    def spec(self) -> ProbeSpec:
        return ProbeSpec(probe=self.name, matrix=str(self.matrix), stack=self.stack, builder=build_probe_argv())

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        # made here under the bisect folder, refusing a link planted in its place: the child
        # process is handed this path as its --log-dir and would write through it
        out_dir = Root(logs.parent, what="bisect logs").mkdir(f"{logs.stem}.build")
        copy = pinned_matrix(self.matrix, self.stack, self.source, point)
        argv = [*build_probe_argv(), "-m", str(copy), "-k", f"{self.stack}/", "--probe", "--log-dir", str(out_dir)]
        try:
            res = proc.run(argv, timeout=self.timeout)
        finally:
            copy.unlink(missing_ok=True)
        writes.write_text(logs, redact_text(f"$ {proc.shown(argv)}\n{res.stdout}\n{res.stderr}"), flag="probe log")
        found = f"probe-{self.stack}.json"
        root = Root(out_dir, what="probe --log-dir")
        if not root.exists(found):
            return _skip(f"the probe build did not finish (exit {res.returncode}): {_last_line(res)}",
                         exit=res.returncode)
        try:
            answer = PROBE_ANSWER.validate_python(root.load_json(found, limit=16 * MiB))
        except ValidationError:
            return _skip(f"{out_dir / found}: not a probe build's answer", exit=res.returncode)
        if answer.status == "error" or not answer.rows:
            return _skip(f"the probe build failed: {(answer.reason or _last_line(res))[:200]}",
                         exit=res.returncode, log=answer.log_path)
        decision = probe_decision(answer)
        return Observation(None, decision, f"probe {answer.status}" + (f": {answer.reason}" if answer.reason else ""),
                           {"exit": res.returncode, "timings": answer.timings, "log": answer.log_path})


# How `harness run` ends a cell, read as a bisect verdict: the cell's verdict is what bisects;
# a cell that never got to be judged (no image, a tool error, not run) says nothing about it.
CELL_VERDICT: dict[Status, Verdict] = {
    Status.PASS: GOOD, Status.FAIL: BAD, Status.CRASHED: BAD, Status.HUNG: BAD, Status.TIMEOUT: BAD,
    Status.BUILD_FAILED: SKIP, Status.ERROR: SKIP, Status.SKIPPED: SKIP}


@dataclass(frozen=True)
class CellProbe:
    """`--probe cell ID`: the cell run by `harness run` with the stack's vLLM pinned to the point.

    The matrix is copied next to itself (so its relative paths hold) with the vLLM source of the
    cell's stack replaced by the point (a release: `pypi`; a commit: `git` + `commit`); the
    stack's patches stay, and `harness run` builds (or reuses) the image and judges the cell."""

    matrix: Path
    cell: str
    stack: str
    source: HistorySpec
    name: str = "cell"
    compares: bool = False

    def spec(self) -> ProbeSpec:
        return ProbeSpec(probe=self.name, matrix=str(self.matrix), cell=self.cell, stack=self.stack)

    def matrix_for(self, point: Point) -> Path:
        return pinned_matrix(self.matrix, self.stack, point=point, source=self.source)

    def observe(self, tree: Path, point: Point, logs: Path) -> Observation:
        results = Root(logs.parent, what="bisect logs").mkdir(f"{logs.stem}.run")  # never a planted link
        copy = self.matrix_for(point)
        try:
            res = proc.run([sys.executable, "-m", "harness", "run", "-m", str(copy), "-k", self.cell,
                            "--results", str(results), "--no-report"], timeout=6 * 3600)
        finally:
            copy.unlink(missing_ok=True)
        writes.write_text(logs, redact_text(res.stdout + "\n" + res.stderr), flag="probe log")
        root = Root(results, what="probe results")
        cells = [f"{run}/cells/{name}" for run in root.folders() for name in root.files(f"{run}/cells", suffix=".json")
                 if not name.endswith(".partial.json")]
        if not cells:
            tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or [""]
            return _skip(f"harness run judged no cell (exit {res.returncode}): {tail[0][:200]}")
        try:
            cell = CellResult.from_json(root.load_json(cells[0], limit=16 * MiB))
        except ValueError:
            return _skip(f"{results / cells[0]}: not a cell record")
        status = cell.status.value
        why = "; ".join(cell.reasons)
        return Observation(CELL_VERDICT[cell.status], None, f"cell {status}: {why[:200]}",
                           {"status": status, "run_dir": str(results / cells[0].split("/")[0])})
