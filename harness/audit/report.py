"""`audit_path`: scan a path, disassemble the few NVFP4 cubins that matter, judge targets."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field

from harness.audit import tools, zstd
from harness.audit.scan import (
    NVFP4,
    FileAudit,
    SassPolicy,
    ScanStats,
    UnreadableFile,
    arch_sort_key,
    audit_tree,
)
from harness.audit.verdict import FAIL, WARN, AuditStatus, Check, Target, Verdict, judge, worst
from harness.record import Open

# The chips the project's matrices name. Not a default any more: a verdict is given only for
# the targets a user asks for (`--cc`, or the matrix hardware), so a Blackwell-only build
# is not failed for lacking Hopper code nobody asked for.
# Where images keep their Python packages: our own Dockerfile's venv first, then the usual prefixes.
IMAGE_PATHS = ("/opt/venv/lib", "/usr/local/lib", "/usr/lib/python3/dist-packages")
DEFAULT_TARGETS: tuple[Target, ...] = (
    Target.from_cc("12.0"),
    Target.from_cc("12.1"),
    Target.from_cc("9.0"),
)
INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class AuditReport:
    root: str
    files: tuple[FileAudit, ...]
    verdicts: tuple[Verdict, ...]
    elapsed_s: float
    sass_checked: bool
    stats: ScanStats
    unreadable: tuple[UnreadableFile, ...] = ()
    problems: tuple[Check, ...] = ()  # failures of the binaries as a whole (no CUDA code ...)

    @property
    def complete(self) -> bool:
        """False when a file could not be read to the end: no verdict covers it."""
        return not self.unreadable

    @property
    def status(self) -> str:
        if not self.complete:
            return INCOMPLETE
        return worst([v.status for v in self.verdicts] + [p.status for p in self.problems])

    def failures(self) -> list[str]:
        """One line per failing verdict or problem, saying why."""
        lines = [f"{p.status}: {p.message}" for p in self.problems if p.status == FAIL]
        lines += [f"{v.status}: {v.target.name} ({v.target.cc}): {v.message}" for v in self.verdicts if v.status == FAIL]
        lines += [f"unreadable: {u.path}: {u.reason}" for u in self.unreadable]
        return lines

    def relocatable_totals(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for f in self.files:
            out.update(f.relocatable_cubins)
        return out

    def totals(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for f in self.files:
            out.update(f.cubins)
        return out

    def ptx(self) -> list[str]:
        return sorted({p for f in self.files for p in f.ptx}, key=arch_sort_key)

    def families(self) -> defaultdict[str, Counter[str]]:
        """family -> {arch name: kernel count}, over every file (a family none has: empty)."""
        out: defaultdict[str, Counter[str]] = defaultdict(Counter)
        for f in self.files:
            for fam, per_arch in f.families().items():
                out[fam].update(per_arch)
        return out

    def nvfp4_sass(self) -> list[dict[str, Any]]:
        rows = []
        for f in self.files:
            for o in f.objects:
                if o.native_fp4 is not None:
                    rows.append(
                        {
                            "path": f.path,
                            "arch": o.arch.name,
                            "kernels": len(o.fp4_kernels),
                            "native_fp4_mma": sum(1 for v in o.native_fp4.values() if v),
                            "opcodes": sorted({v for v in o.native_fp4.values() if v}),
                        }
                    )
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "status": self.status,
            "files": [
                {
                    "path": f.path,
                    "cubins": _sorted_counts(f.cubins),
                    "ptx": f.ptx,
                    "families": {fam: _sorted_counts(c) for fam, c in sorted(f.families().items())},
                    "undecoded": f.undecoded,
                    "relocatable": {
                        "cubins": _sorted_counts(f.relocatable_cubins),
                        "ptx": f.relocatable_ptx,
                    },
                }
                for f in self.files
            ],
            "complete": self.complete,
            "unreadable": [{"path": u.path, "reason": u.reason} for u in self.unreadable],
            "problems": [{"status": p.status, "message": p.message} for p in self.problems],
            "totals": _sorted_counts(self.totals()),
            "ptx": self.ptx(),
            "families": {fam: _sorted_counts(c) for fam, c in sorted(self.families().items())},
            "nvfp4_sass": self.nvfp4_sass(),
            "verdicts": [
                {
                    "target": v.target.name,
                    "cc": v.target.cc,
                    "status": v.status,
                    "message": v.message,
                    "checks": [
                        {"family": c.family, "status": c.status, "message": c.message}
                        for c in v.checks
                    ],
                }
                for v in self.verdicts
            ],
            "sass_checked": self.sass_checked,
            "files_scanned": self.stats.files_seen,
            "bytes_read": self.stats.bytes_read,
            "elapsed_s": round(self.elapsed_s, 3),
        }

    def summary(self) -> dict[str, str]:
        """Flat string pairs, short enough for Docker image labels and bug reports."""
        return AuditSummary.of(self).labels


class AuditState(StrEnum):
    """What a stack's audit says: the worst of its target verdicts and problems, or why it says
    nothing. Every value is documented in docs/results-format.md."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # no target verdict had anything to judge
    INCOMPLETE = "incomplete"  # a file could not be read to the end: no verdict covers it
    NOT_AUDITED = "not-audited"  # nothing was read (`reason` says why)


class TargetVerdict(Open):
    """One target chip's verdict (harness.audit.verdict.Verdict), as a run stores it."""

    target: str = Field(description='the chip, as the audit names it: "SM_121"')
    cc: str | None = Field(None, description='its compute capability, "12.1"; None: read from a '
                           "record that kept only the name (results format 3 and older)")
    status: AuditStatus
    message: str

    @property
    def line(self) -> str:
        return f"{self.target.lower()}: {self.status}: {self.message}"


class AuditProblem(Open):
    """A failure of the binaries as a whole (harness.audit.verdict.Check): no CUDA code where a
    package must hold some, nothing loadable at all."""

    status: AuditStatus
    message: str


# a label value is cut to this many characters: Docker keeps labels short, and so do bug reports
LABEL_MAX = 240


class AuditSummary(Open):
    """What a run keeps of a stack's arch audit: builds/<stack>.json `audit` (results format 4),
    once per build; a cell's audit is its build's. Made from an `AuditReport` (`of`), or
    `not_audited`. Unknown keys are kept: a newer writer's facts survive an older reader.

    A field that is None was not recorded: the record was read from an older shape (results
    format 3 and older, lifted by harness.results.build) that did not keep it."""

    status: AuditState
    reason: str | None = Field(None, description="not-audited: why")
    cubins: dict[str, int] = Field(default_factory=dict, description="cubins per arch, all files")
    ptx: tuple[str, ...] | None = Field(None, description="the PTX archs embedded, all files")
    nvfp4_gemm: dict[str, int] | None = Field(None, description="NVFP4 GEMM kernels per arch")
    sass_checked: bool | None = Field(None, description="whether the NVFP4 SASS was disassembled")
    unreadable: int | None = Field(None, description="files that could not be read to the end")
    verdicts: tuple[TargetVerdict, ...] = Field((), description="one per target chip asked for")
    problems: tuple[AuditProblem, ...] = Field((), description="failures of the binaries as a whole")

    @classmethod
    def of(cls, report: AuditReport) -> AuditSummary:
        return cls(
            status=AuditState(report.status), cubins=_sorted_counts(report.totals()), ptx=tuple(report.ptx()),
            nvfp4_gemm=_sorted_counts(report.families()[NVFP4]), sass_checked=report.sass_checked,
            unreadable=len(report.unreadable),
            verdicts=tuple(TargetVerdict(target=v.target.name, cc=v.target.cc, status=v.status, message=v.message)
                           for v in report.verdicts),
            problems=tuple(AuditProblem(status=p.status, message=p.message) for p in report.problems))

    @classmethod
    def not_audited(cls, reason: str) -> AuditSummary:
        return cls(status=AuditState.NOT_AUDITED, reason=reason)

    @property
    def lines(self) -> tuple[str, ...]:
        """One line per target verdict, `<target>: <status>: <message>`, then the problems."""
        return (*(v.line for v in self.verdicts),
                *(f"problem: {p.status}: {p.message}" for p in self.problems))

    @property
    def labels(self) -> dict[str, str]:
        """The audit as flat `audit.*` string pairs, each value at most LABEL_MAX characters (what
        `harness bug` lists): only the facts the record holds."""
        out = {"audit.status": self.status.value}
        if self.status is AuditState.NOT_AUDITED:
            return out
        out["audit.cubins"] = _pairs(self.cubins)
        if self.ptx is not None:
            out["audit.ptx"] = ",".join(self.ptx) or "none"
        if self.nvfp4_gemm is not None:
            out["audit.nvfp4_gemm"] = _pairs(self.nvfp4_gemm) or "none"
        if self.sass_checked is not None:
            out["audit.sass_checked"] = "yes" if self.sass_checked else "no"
        if self.unreadable is not None:
            out["audit.unreadable"] = str(self.unreadable)
        for i, p in enumerate(self.problems):
            out[f"audit.problem.{i}"] = f"{p.status}: {p.message}"[:LABEL_MAX]
        for v in self.verdicts:
            out[f"audit.verdict.{v.target.lower()}"] = f"{v.status}: {v.message}"[:LABEL_MAX]
        return out


def _pairs(counts: dict[str, int]) -> str:
    return ",".join(f"{a}={n}" for a, n in counts.items())


def _sorted_counts(c: Counter[str] | dict[str, int]) -> dict[str, int]:
    return {k: c[k] for k in sorted(c, key=arch_sort_key)}


def audit_path(
    path: str | Path,
    targets: Sequence[Target] = (),
    *,
    sass_check: bool = True,
    jobs: int | None = None,
    all_ptx: bool = False,
) -> AuditReport:
    """Audit every CUDA binary under `path` (directory, .whl, .so, .cubin, .fatbin, .o).

    `targets`: the chips to judge for; none gives the inventory and the integrity checks
    only. `jobs`: worker processes (default os.cpu_count()). PTX kernel names are read
    where a target would JIT that PTX, or everywhere with `all_ptx`.
    """
    start = time.monotonic()
    # SASS is read only where it decides a verdict: NVFP4 cubins a target would load natively.
    use_sass = bool(targets) and sass_check and tools.find("nvdisasm") is not None and zstd.available()
    policy = SassPolicy(tuple(t.capability for t in targets), use_sass, all_ptx)
    stats = ScanStats()
    scanned = audit_tree(Path(path), policy, stats, jobs)
    if targets and sass_check and not use_sass:
        stats.notes.append("SASS not checked: nvdisasm or libzstd missing")
    if not zstd.available():
        stats.notes.append("libzstd not found: kernel names of compressed cubins were not read")
    loadable = [f for f in scanned.files if f.objects]
    verdicts = tuple(judge(loadable, t, use_sass) for t in targets)
    problems = [
        Check("files", FAIL, f"{p}: no CUDA code, yet {why}") for p, why in scanned.empty_required
    ]
    if not loadable and not scanned.unreadable and stats.files_seen:
        reloc = " (only relocatable -rdc device code, which nothing loads as is)" if scanned.files else ""
        problems.append(
            Check("files", FAIL, f"no loadable CUDA code in {stats.files_seen} candidate files{reloc}")
        )
    elif not stats.files_seen:
        # No binary at all (a pure-Python package): nothing was proven either way.
        problems.append(Check("files", WARN, f"no binaries to audit under {path} (.so/.o/.a/.cubin/.fatbin)"))
    return AuditReport(
        str(path),
        scanned.files,
        verdicts,
        time.monotonic() - start,
        use_sass,
        stats,
        scanned.unreadable,
        tuple(problems),
    )
