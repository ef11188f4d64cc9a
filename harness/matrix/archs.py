"""Which CUDA arch strings nvcc (and so TORCH_CUDA_ARCH_LIST / FLASHINFER_CUDA_ARCH_LIST) accepts.

The `a` (arch-specific) suffix exists from compute capability 9.0, the `f` (family) suffix from
10.0 (CUDA 12.9+). `+PTX` asks for PTX next to the SASS. The list of capabilities is the one
nvcc 13.0 prints for `--list-gpu-arch` plus the older ones torch still names.
"""

from __future__ import annotations

import re

KNOWN_CC: frozenset[str] = frozenset(
    "5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 7.5 8.0 8.6 8.7 8.8 8.9 9.0 10.0 10.3 11.0 12.0 12.1".split()
)

_ENTRY = re.compile(r"^(?P<cc>\d+\.\d+)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$")
_SPLIT = re.compile(r"[;\s]+")


def split_arch_list(value: str) -> list[str]:
    """`12.0a;12.1a` or `12.0f 12.1a` -> entries (both separators are used upstream)."""
    return [e for e in _SPLIT.split(value.strip()) if e]


def arch_entry_problem(entry: str) -> str | None:
    """None when nvcc would take `entry`, else why not and what would."""
    m = _ENTRY.fullmatch(entry)
    if not m:
        return f"'{entry}' is not an arch (expected forms: 12.0, 12.1a, 12.0f, 8.0+PTX)"
    cc, suffix = m["cc"], m["suffix"]
    if cc not in KNOWN_CC:
        return f"'{entry}': compute capability {cc} is unknown (known: {', '.join(sorted(KNOWN_CC, key=_cc_key))})"
    major = int(cc.split(".")[0])
    if suffix == "a" and major < 9:
        return f"'{entry}': arch-specific 'a' targets exist from 9.0 on (use '{cc}')"
    if suffix == "f" and major < 10:
        return f"'{entry}': family 'f' targets exist from 10.0 on (use '{cc}')"
    return None


def arch_list_problems(value: str) -> list[str]:
    entries = split_arch_list(value)
    if not entries:
        return ["empty arch list (example: '12.1a' or '12.0a;12.1a')"]
    return [p for e in entries if (p := arch_entry_problem(e))]


def ccs_of(value: str) -> set[str]:
    """The compute capabilities an arch list builds for: `9.0a;12.1a` -> {"9.0", "12.1"}."""
    return {m["cc"] for e in split_arch_list(value.replace(",", ";")) if (m := _ENTRY.fullmatch(e))}


def _cc_key(cc: str) -> tuple[int, int]:
    major, minor = cc.split(".")
    return int(major), int(minor)
