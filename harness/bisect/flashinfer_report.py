"""`harness bug --flashinfer-plan RECORD`: an upstream report about what FlashInfer's AOT step
compiles for an arch list against what FlashInfer loads on a chip at run time.

The facts come from the record tools/flashinfer_aot_plan.py writes (FlashInfer's own module list,
each module's nvcc arch flags from the build.ninja FlashInfer writes, and the module each serving
getter resolves to on a chip of a given compute capability); what only a person can say comes from
the notes file (upstream_report.Notes). A pure function of those files: a committed report
regenerates byte for byte from its evidence.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from pydantic import Field, ValidationError

from harness.bisect.upstream_report import Notes, _evidence_files, _fix, _head, _known
from harness.errors import ConfigError
from harness.redact import redact_text
from harness.results.model import Open
from harness.safety.readers import load_json


class Module(Open):
    name: str
    family: str
    cuda_sources: int
    sources: int
    gencode: list[str]


class FamilyCount(Open):
    modules: int
    cuda_sources: int
    gencode: list[str]


class Plan(Open):
    arch_list: str
    target_archs: list[str]
    capabilities: list[str]
    modules: list[Module]
    families: dict[str, FamilyCount]
    runtime_not_in_aot: list[str] = Field(default_factory=list)


class Probe(Open):
    family: str
    where: str
    call: str
    module: str | None = None
    gencode: list[str] = Field(default_factory=list)
    error: str | None = None


class Runtime(Open):
    cc: str
    runtime_arch_list: str
    context: list[str]
    torch_cuda: str | None = None
    probes: list[Probe] = Field(default_factory=list)
    not_run: str | None = None


class Sdist(Open):
    file: str
    sha256: str


class Toolchain(Open):
    nvcc: str
    torch: str
    torch_cuda: str | None = None
    python: str


class PlanRecord(Open):
    """The record of tools/flashinfer_aot_plan.py (a tool outside the package: typed here, where
    the harness reads it)."""

    kind: str = Field(pattern=r"^flashinfer-aot-plan$")
    flashinfer: str
    git_commit: str
    label: str = ""
    sdist: Sdist | None = None
    toolchain: Toolchain
    plans: list[Plan]
    runtime: list[Runtime]


def load_record(path: Path) -> PlanRecord:
    try:
        return PlanRecord.model_validate(load_json(path, what="FlashInfer AOT plan record"))
    except ValidationError as exc:
        e = exc.errors()[0]
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        raise ConfigError(f"{path}: not a FlashInfer AOT plan record ({key}: {e['msg']})",
                          hint="give the --out file of tools/flashinfer_aot_plan.py") from None


def _cc_of(arch: str) -> str:
    return arch.rstrip("abcdefghijklmnopqrstuvwxyz")


def _flags(gencode: list[str]) -> str:
    return ", ".join(f"`{g}`" for g in gencode) or "-"


def plan_command(rec: PlanRecord, out: Path) -> str:
    argv = ["python", "tools/flashinfer_aot_plan.py", "--source", "<FlashInfer source tree>"]
    for p in rec.plans:
        argv += ["--arch-list", p.arch_list]
    for r in rec.runtime:
        argv += ["--runtime-cc", r.cc]
    if rec.sdist:
        argv += ["--sdist", rec.sdist.file]
    argv += ["--out", str(out)]
    return " ".join(a if a.startswith("<") else shlex.quote(a) for a in argv)


def flashinfer_plan_report(path: Path, notes: Notes) -> str:
    rec = load_record(path)
    lines = _head(notes)
    tc = rec.toolchain
    lines += ["## Environment", "",
              "FlashInfer's own code, run from its source tree without a GPU: the AOT module list "
              "(`flashinfer.aot.gen_all_modules`, default configuration), each module's nvcc arch flags (the "
              "build.ninja FlashInfer writes for it), and the module each serving getter resolves to on a chip "
              "(called with `FLASHINFER_DISABLE_JIT=1` and no AOT module installed: the `MissingJITCacheError` "
              "it raises carries the JitSpec it would load or compile).", "",
              "| | |", "|---|---|",
              f"| FlashInfer | {rec.flashinfer} (commit {rec.git_commit[:12]}) |",
              f"| source | {f'`{rec.sdist.file}`, sha256 {rec.sdist.sha256[:16]}…' if rec.sdist else '-'} |",
              f"| nvcc | {tc.nvcc} |", f"| torch | {tc.torch} (CUDA {tc.torch_cuda or 'none'}) |",
              f"| Python | {tc.python} |"]
    if rec.label:
        lines.append(f"| where | {rec.label} |")
    lines += ["", "## What was asked", "", notes.asked.strip(), "", "## What was built", ""]
    lines += ["| FLASHINFER_CUDA_ARCH_LIST | targets | modules | CUDA sources | nvcc arch flags (all modules) |",
              "|---|---|---|---|---|"]
    for p in rec.plans:
        flags = sorted({g for m in p.modules for g in m.gencode})
        lines.append(f"| `{p.arch_list}` | {', '.join(p.target_archs)} | {len(p.modules)} | "
                     f"{sum(m.cuda_sources for m in p.modules)} | {_flags(flags)} |")
    lines += [""]
    for p in rec.plans:
        lines += [f"Per kernel family, `{p.arch_list}`:", "",
                  "| family | modules | CUDA sources | nvcc arch flags |", "|---|---|---|---|"]
        lines += [f"| {name} | {f.modules} | {f.cuda_sources} | {_flags(f.gencode)} |" for name, f in p.families.items()]
        lines.append("")
    lines += ["## What is loaded at run time", "",
              "| chip | FlashInfer's run-time arch list | call | module | its arch flags if JIT-compiled there | "
              "compiled by the AOT step for that chip's list |", "|---|---|---|---|---|---|"]
    for r in rec.runtime:
        if r.not_run:
            lines.append(f"| {r.cc} | `{r.runtime_arch_list}` | not run: {r.not_run} | | | |")
        for pr in r.probes:
            plans = [p for p in rec.plans if any(_cc_of(a) == r.cc for a in p.arch_list.split())]
            aot = ", ".join(f"`{p.arch_list}`: {'yes' if any(m.name == pr.module for m in p.modules) else '**no**'}"
                            for p in plans) or "-"
            lines.append(f"| {r.cc} | `{r.runtime_arch_list}` | `{pr.call}` | {pr.module or pr.error} | "
                         f"{_flags(pr.gencode)} | {aot} |")
    lines.append("")
    missed = []
    for p in rec.plans:
        for r in rec.runtime:
            if not any(_cc_of(a) == r.cc for a in p.arch_list.split()):
                continue
            names = {m.name for m in p.modules}
            for pr in r.probes:
                if pr.module and pr.module not in names:
                    same = [m for m in p.modules if m.family == pr.family]
                    built = "; ".join(f"`{m.name}` ({_flags(m.gencode)})" for m in same) or "none"
                    missed.append(f"- `{p.arch_list}` on a {r.cc} chip: the run time loads `{pr.module}` "
                                  f"({_flags(pr.gencode)}), which the AOT step does not compile: JIT-compiled on first "
                                  f"use, in every new container. The AOT step's module of that family: {built}, "
                                  "which nothing above loads.")
    if missed:
        lines += ["What the AOT step compiles and what is loaded disagree:", "", *missed, ""]
    if notes.cost:
        lines += [notes.cost.strip(), ""]
    lines += ["## Evidence", "", "Files:", "", *_evidence_files([path, *(Path(p) for p in notes.evidence)]), ""]
    lines += ["## Reproduce", ""]
    if notes.reproduce_setup:
        lines += [notes.reproduce_setup.strip(), ""]
    lines += ["```sh", plan_command(rec, path), "```", ""]
    lines += _known(notes) + _fix(notes)
    return redact_text("\n".join(lines).rstrip() + "\n")
