"""Kernel families, told apart by the (mangled) kernel name: a data table, first match wins.

Order matters: Marlin MoE kernels count as `marlin`; FP4 grouped GEMMs used by MoE count as
`nvfp4_gemm`, because whether they use the block-scaled MMA is the question the audit
answers. The patterns were written against the kernel names in the vLLM 0.25.1 cu130 wheel
(tests/test_audit_families.py holds real names from it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache, lru_cache

_FP4_TYPES = r"(?:e2m1|nvf4|mxf4|nvfp4|mxfp4|fp4)"


@dataclass(frozen=True)
class FamilyRule:
    family: str
    title: str
    include: tuple[re.Pattern[str], ...]  # every one must be found somewhere in the name
    exclude: re.Pattern[str] | None = None

    def matches(self, name: str, lowered: str | None = None) -> bool:
        low = name.lower() if lowered is None else lowered
        return all(_found(p, name, low) for p in self.include) and not (
            self.exclude and _found(self.exclude, name, low)
        )


_LITERAL_ALTS = re.compile(r"^(?:\(\?:)?([\w|]+)\)?$")


@cache
def _literals(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """The words of a case-insensitive pattern that is only `a|b|c`: searched with `in` on
    the lowered name, 5x faster than the regex on 5 kB CUTLASS names."""
    m = _LITERAL_ALTS.match(pattern.pattern)
    if not m or not pattern.flags & re.I:
        return None
    return tuple(w.lower() for w in m[1].split("|"))


def _found(pattern: re.Pattern[str], name: str, lowered: str) -> bool:
    words = _literals(pattern)
    if words is None:
        return bool(pattern.search(name))
    return any(w in lowered for w in words)


FAMILY_RULES: tuple[FamilyRule, ...] = (
    FamilyRule("marlin", "Marlin (weight-only)", (re.compile(r"marlin", re.I),)),
    FamilyRule(
        "nvfp4_gemm",
        "NVFP4/FP4 GEMM",
        # An FP4 operand type together with a GEMM/MMA in the name: two plain searches,
        # linear on 5 kB CUTLASS names (a `(?=.*x)` lookahead backtracks through each).
        (re.compile(_FP4_TYPES, re.I), re.compile(r"gemm|_mm|mma|matmul", re.I)),
        # Pointer-setup helpers of grouped GEMMs and quantizers mention both but run no MMA.
        re.compile(r"get_group_gemm_starts|cvt_|quant", re.I),
    ),
    FamilyRule(
        "fp4_quant",
        "FP4 quantize",
        (re.compile(_FP4_TYPES, re.I), re.compile(r"cvt|quant|cache", re.I)),
    ),
    FamilyRule(
        "moe",
        "MoE",
        (
            re.compile(
                r"moe|expert|topkgating|grouped_topk|GroupProblemShape|group_gemm_starts|"
                r"problem_sizes|InputRowsKernel",
                re.I,
            ),
        ),
    ),
    FamilyRule(
        "scaled_mm",
        "scaled_mm (FP8/INT8 GEMM)",
        (
            re.compile(
                r"scaled_mm|cutlass_3x_gemm|c3x|DefaultGemmWithVisitor|float_e4m3|float_e5m2",
                re.I,
            ),
        ),
    ),
    FamilyRule(
        "attention",
        "attention",
        (
            re.compile(
                r"attention|attn|flash|fmha|(?<![a-z])mla|_mla|paged|reshape_and_cache|concat_and_cache",
                re.I,
            ),
        ),
    ),
)

OTHER = "other"
FAMILIES: tuple[str, ...] = (*(r.family for r in FAMILY_RULES), OTHER)
TITLES: dict[str, str] = {**{r.family: r.title for r in FAMILY_RULES}, OTHER: "other"}


@lru_cache(maxsize=65536)
def family_of(kernel_name: str) -> str:
    lowered = kernel_name.lower()
    for rule in FAMILY_RULES:
        if rule.matches(kernel_name, lowered):
            return rule.family
    return OTHER
