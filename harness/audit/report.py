"""`audit_path`: scan a path, disassemble the few NVFP4 cubins that matter, judge targets."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.audit import sass, tools, zstd
from harness.audit.archs import CudaArch, Load
from harness.audit.scan import NVFP4, FileAudit, ScanStats, arch_sort_key, audit_tree
from harness.audit.verdict import Target, Verdict, judge, worst

DEFAULT_TARGETS: tuple[Target, ...] = (
    Target.from_cc("12.0"),
    Target.from_cc("12.1"),
    Target.from_cc("9.0"),
)


@dataclass(frozen=True)
class AuditReport:
    root: str
    files: tuple[FileAudit, ...]
    verdicts: tuple[Verdict, ...]
    elapsed_s: float
    sass_checked: bool
    stats: ScanStats

    @property
    def status(self) -> str:
        return worst([v.status for v in self.verdicts])

    def totals(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for f in self.files:
            out.update(f.cubins)
        return out

    def ptx(self) -> list[str]:
        return sorted({p for f in self.files for p in f.ptx}, key=arch_sort_key)

    def families(self) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {}
        for f in self.files:
            for fam, per_arch in f.families().items():
                out.setdefault(fam, Counter()).update(per_arch)
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
                }
                for f in self.files
            ],
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
        fp4 = self.families().get(NVFP4, Counter())
        out = {
            "audit.status": self.status,
            "audit.cubins": ",".join(f"{a}={n}" for a, n in _sorted_counts(totals).items()),
            "audit.ptx": ",".join(self.ptx()) or "none",
            "audit.nvfp4_gemm": ",".join(f"{a}={n}" for a, n in _sorted_counts(fp4).items())
            or "none",
            "audit.sass_checked": "yes" if self.sass_checked else "no",
        }
        for v in self.verdicts:
            out[f"audit.verdict.{v.target.name.lower()}"] = f"{v.status}: {v.message}"[:240]
        return out


def _sorted_counts(c: Counter[str] | dict[str, int]) -> dict[str, int]:
    return {k: c[k] for k in sorted(c, key=arch_sort_key)}


def audit_path(
    path: str | Path, targets: Sequence[Target] = DEFAULT_TARGETS, *, sass_check: bool = True
) -> AuditReport:
    """Audit every CUDA binary under `path` (directory, .whl, .so, .cubin, .fatbin, .o)."""
    start = time.monotonic()
    caps = [t.capability for t in targets]
    # SASS is read only where it decides a verdict: NVFP4 cubins a target would load natively.
    use_sass = sass_check and tools.find("nvdisasm") is not None and zstd.available()

    def want(arch: CudaArch) -> bool:
        return use_sass and any(
            arch.load_on(cc) is Load.NATIVE and sass.checkable(cc.major) for cc in caps
        )

    stats = ScanStats()
    files = audit_tree(Path(path), want, stats)
    if sass_check and not use_sass:
        stats.notes.append("SASS not checked: nvdisasm or libzstd missing")
    if not zstd.available():
        stats.notes.append("libzstd not found: kernel names of compressed cubins were not read")
    verdicts = tuple(judge(files, t, use_sass) for t in targets)
    return AuditReport(str(path), tuple(files), verdicts, time.monotonic() - start, use_sass, stats)
