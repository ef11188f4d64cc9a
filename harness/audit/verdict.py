"""Per target chip: can its kernels load, and do the NVFP4 GEMMs use native FP4 MMA?

A verdict never comes from an arch suffix alone (an `a` or `f` suffix says where a cubin may
load, not what it holds): it combines
where each cubin can load (harness.archs.CudaArch.load_on, the one rule, from NVIDIA's documents) with what the
NVFP4 GEMM SASS really contains (sass.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from harness.archs import CC, Load
from harness.audit.families import TITLES
from harness.audit.sass import checkable
from harness.audit.scan import NVFP4, FileAudit, arch_sort_key

AuditStatus = Literal["pass", "warn", "fail", "skip"]  # a check's, a target's verdict's
PASS: AuditStatus = "pass"
WARN: AuditStatus = "warn"
FAIL: AuditStatus = "fail"
SKIP: AuditStatus = "skip"
_HOW = {"": "same-major SASS", "a": "arch-specific SASS", "f": "family SASS"}
_RANK: dict[AuditStatus, int] = {SKIP: 0, PASS: 1, WARN: 2, FAIL: 3}
# Families whose absence on a chip breaks a serving path; "other" holds helpers.
CHECKED_FAMILIES = ("nvfp4_gemm", "fp4_quant", "moe", "scaled_mm", "marlin", "attention")
# Families that serve only chips with FP4 tensor cores (Hopper runs NVFP4 through Marlin).
FP4_ONLY_FAMILIES = ("nvfp4_gemm", "fp4_quant")


@dataclass(frozen=True)
class Target:
    """A chip to judge the binaries for: a name and its compute capability ("12.1")."""

    name: str
    cc: str

    @classmethod
    def from_cc(cls, cc: str) -> Target:
        return cls(CC.parse(cc).sm, cc)

    @property
    def capability(self) -> CC:
        return CC.parse(self.cc)


@dataclass(frozen=True)
class Check:
    family: str
    status: AuditStatus
    message: str


@dataclass(frozen=True)
class Verdict:
    target: Target
    status: AuditStatus
    message: str
    checks: tuple[Check, ...]


def worst(statuses: Sequence[AuditStatus]) -> AuditStatus:
    return max(statuses, key=_RANK.__getitem__, default=PASS)


def judge(files: Sequence[FileAudit], target: Target, sass_checked: bool) -> Verdict:
    cc = target.capability
    found = [_nvfp4_check(files, target, sass_checked)]
    found += [_family_check(files, target, fam) for fam in CHECKED_FAMILIES if fam != NVFP4]
    checks = [c for c in found if c is not None]
    dead = [f.path for f in files if not any(o.arch.load_on(cc) is not Load.NO for o in f.objects)]
    status = worst([c.status for c in checks])
    lead = next((c for c in checks if c.status == status), None)
    message = lead.message if lead else f"{target.name}: no CUDA kernels found"
    if dead:
        message += f" ({len(dead)} of {len(files)} CUDA files hold no code {target.name} can load)"
    if dead:
        checks.append(
            Check("files", SKIP, f"no loadable code on {cc}: " + ", ".join(_short(p) for p in dead))
        )
    return Verdict(target, status, message, tuple(checks))


def _archs_with(files: Sequence[FileAudit], family: str) -> list[str]:
    found = {o.arch.name for f in files for o in f.objects if o.families[family]}
    return sorted(found, key=arch_sort_key)


def _nvfp4_check(files: Sequence[FileAudit], target: Target, sass_checked: bool) -> Check | None:
    cc = target.capability
    archs = _archs_with(files, NVFP4)
    if not archs:
        return None
    where = ", ".join(archs)
    title = TITLES[NVFP4] + " kernels"
    if not checkable(cc.major):
        return Check(
            NVFP4,
            SKIP,
            f"{target.name}: no native FP4 tensor cores; {title} exist as {where} (not used on this chip)",
        )
    native = [
        o for f in files for o in f.objects if o.fp4_kernels and o.arch.load_on(cc) is Load.NATIVE
    ]
    jit = [
        o
        for f in files
        for o in f.objects
        if o.families[NVFP4] and o.arch.load_on(cc) is Load.JIT
    ]
    if not native and not jit:
        return Check(
            NVFP4,
            FAIL,
            f"{target.name}: no loadable NVFP4 GEMM kernel: {title} exist only as {where}, none of which runs on {cc}; expect a Marlin or emulation fallback",
        )
    if not native:
        ptx = ", ".join(sorted({o.arch.name for o in jit}, key=arch_sort_key))
        return Check(
            NVFP4,
            WARN,
            f"{target.name}: {title} reach {cc} only by PTX JIT from {ptx} (slow first start; SASS unknown until JIT)",
        )
    loadable = sorted({o.arch for o in native})
    exists = f"{title} exist only as {where}" if len(archs) == 1 else f"{title} exist as {where}"
    loads = f"{cc} loads " + ", ".join(f"{a.name} ({_HOW[a.suffix]})" for a in loadable)
    kernels = sum(len(o.fp4_kernels) for o in native)
    if not sass_checked or any(o.native_fp4 is None for o in native):
        return Check(
            NVFP4,
            PASS,
            f"{target.name}: {exists} — {loads}; SASS not checked for the block-scaled FP4 MMA",
        )
    hits = Counter(op for o in native for op in (o.native_fp4 or {}).values() if op)
    n_native = sum(hits.values())
    if n_native == 0:
        return Check(
            NVFP4,
            WARN,
            f"{target.name}: {exists} — {loads}, but none of {kernels} uses a block-scaled FP4 MMA in SASS: FP4 runs in software, slower than FP8",
        )
    op = hits.most_common(1)[0][0]
    return Check(
        NVFP4,
        PASS,
        f"{target.name}: {exists} — {loads}; {n_native} of {kernels} kernels use the native block-scaled FP4 MMA ({op})",
    )


def _family_check(files: Sequence[FileAudit], target: Target, family: str) -> Check | None:
    cc = target.capability
    present = [f for f in files if any(o.families[family] for o in f.objects)]
    if not present:
        return None
    if family in FP4_ONLY_FAMILIES and not checkable(cc.major):
        return Check(
            family,
            SKIP,
            f"{target.name}: no native FP4; {TITLES[family]} kernels not used on this chip",
        )
    native_files: list[FileAudit] = []
    jit_only: list[FileAudit] = []
    none: list[FileAudit] = []
    for f in present:
        loads = {o.arch.load_on(cc) for o in f.objects if o.families[family]}
        (native_files if Load.NATIVE in loads else jit_only if Load.JIT in loads else none).append(
            f
        )
    title = TITLES[family]
    if not native_files and not jit_only:
        return Check(
            family,
            FAIL,
            f"{target.name}: no loadable {title} kernel; they exist only as {', '.join(_archs_with(files, family))}",
        )
    if jit_only:
        detail = "; ".join(
            f"{_short(f.path)} from {', '.join(sorted({o.arch.name for o in f.objects if o.families[family] and o.arch.ptx}))}"
            for f in jit_only
        )
        return Check(
            family, WARN, f"{target.name}: {title} kernels reach {cc} only by PTX JIT in {detail}"
        )
    note = f"; not in {', '.join(_short(f.path) for f in none)}" if none else ""
    return Check(
        family,
        PASS,
        f"{target.name}: {title} kernels load natively from {len(native_files)} file(s){note}",
    )


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1].rsplit("!", 1)[-1]
