"""`audit_path`: scan a path, disassemble the few NVFP4 cubins that matter, judge targets."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
from harness.audit.verdict import FAIL, WARN, Check, Target, Verdict, judge, worst

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
        totals = self.totals()
        fp4 = self.families()[NVFP4]
        out = {
            "audit.status": self.status,
            "audit.cubins": ",".join(f"{a}={n}" for a, n in _sorted_counts(totals).items()),
            "audit.ptx": ",".join(self.ptx()) or "none",
            "audit.nvfp4_gemm": ",".join(f"{a}={n}" for a, n in _sorted_counts(fp4).items())
            or "none",
            "audit.sass_checked": "yes" if self.sass_checked else "no",
            "audit.unreadable": str(len(self.unreadable)),
        }
        for i, p in enumerate(self.problems):
            out[f"audit.problem.{i}"] = f"{p.status}: {p.message}"[:240]
        for v in self.verdicts:
            out[f"audit.verdict.{v.target.name.lower()}"] = f"{v.status}: {v.message}"[:240]
        return out


class _StoredVerdict(BaseModel):
    """One verdict object of a stored full report (`AuditReport.to_json()`), as the summary reads it."""

    model_config = ConfigDict(frozen=True, extra="allow")

    target: Any = None
    status: Any = None
    message: Any = None

    def line(self) -> str:
        return f"{self.target}: {self.status}: {self.message}"


class _StoredShape(BaseModel):
    """The keys of the three stored shapes (see AuditSummary) that its fields are lifted from;
    read only, the stored mapping itself is kept whole."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    status: Any = None  # beside the flat pairs, or the full report's
    audit_status: Any = Field(None, alias="audit.status")  # the flat pairs' (the image's label)
    totals: Any = None  # the full report's cubins per arch
    verdicts: Any = None  # the full report's verdict objects, or the builder's lines


class AuditSummary(BaseModel):
    """What a stack's audit leaves in a run folder (builds/*.json `audit_summary` and `audit`,
    cells/*.json `audit`): the status, the cubins per arch and one line per target verdict.

    Written in three shapes, all read here: the flat `audit.*` pairs of `AuditReport.summary()`
    (also the image's labels), those pairs with `status`, `cubins` and `verdicts` beside them
    (harness.image.builder.audit_image), and the full `AuditReport.to_json()` (a local stack).
    Every key is kept (`extra="allow"`); the fields are what readers use."""

    model_config = ConfigDict(frozen=True, extra="allow")

    status: str | None = Field(None, description="pass | warn | fail | incomplete | not-audited")
    reason: str | None = Field(None, description="not-audited: why")
    cubins: dict[str, int] = Field(default_factory=dict, description="cubins per arch, all files")
    lines: tuple[str, ...] = Field((), description='"<target>: <status>: <message>" per target verdict, '
                                   "then the integrity problems")

    @model_validator(mode="before")
    @classmethod
    def _lift(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        old = _StoredShape.model_validate(data)
        if old.status is None:
            data["status"] = old.audit_status
        if "cubins" not in data and isinstance(old.totals, dict):
            data["cubins"] = old.totals
        if "lines" not in data:
            # the flat labels first (what the report always showed), else the full report's objects
            lines = [f"{k.removeprefix('audit.verdict.')}: {v}" for k, v in data.items()
                     if k.startswith("audit.verdict.")]
            if not lines and isinstance(old.verdicts, list):
                lines = [_StoredVerdict.model_validate(v).line() if isinstance(v, dict) else str(v)
                         for v in old.verdicts]
            lines += [f"problem: {v}" for k, v in data.items() if k.startswith("audit.problem.")]
            data["lines"] = lines
        return data

    @classmethod
    def of(cls, report: AuditReport) -> AuditSummary:
        """A report as stored: its flat labels, with status, cubins and verdict lines."""
        return cls.model_validate({
            **report.summary(), "status": report.status, "cubins": dict(report.totals()),
            "verdicts": [f"{v.target.name}: {v.status}: {v.message}" for v in report.verdicts]})

    @classmethod
    def not_audited(cls, reason: str) -> AuditSummary:
        return cls.model_validate({"status": "not-audited", "audit.status": "not-audited", "reason": reason})

    @property
    def labels(self) -> dict[str, str]:
        """The flat `audit.*` pairs it holds (what `bug` lists)."""
        return {k: str(v) for k, v in (self.model_extra or {}).items()
                if k.startswith("audit.") and not isinstance(v, dict | list)}


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
