"""CUDA arch targets and the one rule of where code built for each can run.

"Does code built for X run on a chip of compute capability Y" is asked by matrix loading, `harness
plan` and the scheduler (a stack's TORCH_CUDA_ARCH_LIST against a host's chip), the build-log
check (what vLLM's CMake built against what was asked) and the audit (each cubin and PTX entry of
a fatbin against the target chip). They all ask `CudaArch.load_on` or `ArchList.load_on`, here.

The rule, from NVIDIA's CUDA Programming Guide (CUDA 13.x, docs.nvidia.com/cuda/cuda-programming-
guide): section 1.3.4.1 "Binary Compatibility", 1.3.4.2 "PTX Compatibility", 5.1.2.1
"Architecture-Specific Features", 5.1.2.2 "Family-Specific Features" with 5.1.2.3 "Feature Set
Compiler Targets" and its Table 28 "Family-Specific Compatibility":

- plain SASS ``sm_XY`` loads on X.Z for every Z >= Y, the same major only ("within a major version
  of compute capability, GPUs with minor compute capability greater than or equal to the targeted
  version of cubin can load and execute that cubin"; "not binary compatible between major compute
  capability versions");
- plain PTX ``compute_XY`` is JIT-compiled by the driver for every cc >= X.Y, across majors ("can
  be JIT compiled at application runtime for any compute capability equal or higher");
- arch-specific ``sm_XYa`` and ``compute_XYa`` run on X.Y and nothing else, PTX included ("code
  compiled with an architecture-specific compiler target can only be run on the exact compute
  capability it was compiled for"): ``9.0a+PTX`` gives a GB10 nothing;
- family-specific ``sm_XYf`` and ``compute_XYf`` run on the members of X.Y's family that Table 28
  lists (FAMILY below; "code compiled for a family-specific target can only be run on GPUs which
  are members of that family"). Every family listed there is the same major at minor >= Y, but the
  guide says "with a few exceptions", so the table is the rule, not the arithmetic: ``12.1f`` runs
  on 12.1 only, never on a 12.0 chip; a chip the table does not name gets no family code.

Two notations, one value: TORCH_CUDA_ARCH_LIST writes ``12.1a`` or ``8.0+PTX`` (torch and vLLM's
CMake turn ``X.Y+PTX`` into ``sm_XY`` SASS plus ``compute_XY`` PTX), fatbins and nvcc write
``sm_121a`` / ``compute_80``. `ArchList.parse` reads the first, `CudaArch.parse` the second; both
give `CudaArch` entries. What nvcc accepts in a matrix (the capabilities it knows, the first
major of each suffix) is `ArchList.problems`.

These are documented rules; the GB10 (12.1) cases are what a run on that chip confirms. One
measured fact beside them: an sm_120f cubin's ELF header is byte-identical to a plain sm_120 one
(e_flags 0x6007802), so the suffix is read from the fatbin entry, not from the ELF header.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_CC_RE = re.compile(r"^(?P<major>\d{1,2})\.(?P<minor>\d)$")
_NAME_RE = re.compile(r"^(?P<kind>sm|compute)_(?P<num>\d{2,3})(?P<suffix>[af]?)$")
_ENTRY_RE = re.compile(r"^(?P<major>\d{1,2})\.(?P<minor>\d)(?P<suffix>[af]?)(?P<ptx>\+PTX)?$")
_SPLIT = re.compile(r"[;\s]+")


class Load(Enum):
    """How code for one arch reaches a chip."""

    NATIVE = "native"  # SASS the driver loads as is
    JIT = "jit"  # PTX the driver compiles at first use (slow start, maybe slower code)
    NO = "no"


@dataclass(frozen=True, order=True)
class CC:
    """A compute capability such as 12.1."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> CC:
        m = _CC_RE.match(text.strip())
        if not m:
            raise ValueError(f"not a compute capability: {text!r} (expected MAJOR.MINOR such as 12.1)")
        return cls(int(m["major"]), int(m["minor"]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def sm(self) -> str:
        return f"SM_{self.major}{self.minor}"


# Table 28 "Family-Specific Compatibility" of the CUDA Programming Guide (CUDA 13.x): the chips
# code built for an `f` target runs on. 10.7 is listed there; nvcc 13.0 does not know it yet.
FAMILY: dict[CC, frozenset[CC]] = {
    CC(10, 0): frozenset({CC(10, 0), CC(10, 3), CC(10, 7)}),
    CC(10, 3): frozenset({CC(10, 3), CC(10, 7)}),
    CC(10, 7): frozenset({CC(10, 7)}),
    CC(11, 0): frozenset({CC(11, 0)}),
    CC(12, 0): frozenset({CC(12, 0), CC(12, 1)}),
    CC(12, 1): frozenset({CC(12, 1)}),
}


@dataclass(frozen=True, order=True)
class CudaArch:
    """One code target: SASS (``sm_*``) or PTX (``compute_*``), plain, ``a`` or ``f``."""

    major: int
    minor: int
    suffix: str = ""  # "", "a" (arch-specific) or "f" (family)
    ptx: bool = False

    def __post_init__(self) -> None:
        if self.suffix not in ("", "a", "f"):
            raise ValueError(f"arch suffix {self.suffix!r}: expected '', 'a' or 'f'")

    @classmethod
    def from_number(cls, number: int, suffix: str = "", ptx: bool = False) -> CudaArch:
        return cls(number // 10, number % 10, suffix, ptx)

    @classmethod
    def parse(cls, text: str) -> CudaArch:
        """``sm_120f`` or ``compute_90a`` (fatbin and nvcc names)."""
        m = _NAME_RE.match(text.strip())
        if not m:
            raise ValueError(f"not a CUDA arch name: {text!r} (expected e.g. sm_120f or compute_90)")
        return cls.from_number(int(m["num"]), m["suffix"], m["kind"] == "compute")

    @property
    def cc(self) -> CC:
        return CC(self.major, self.minor)

    @property
    def name(self) -> str:
        return f"{'compute' if self.ptx else 'sm'}_{self.major}{self.minor}{self.suffix}"

    def __str__(self) -> str:
        return self.name

    def load_on(self, cc: CC) -> Load:
        """How code for this arch reaches a chip of compute capability `cc`: the one rule."""
        if self.suffix == "a":
            ok = cc == self.cc
        elif self.suffix == "f":
            ok = cc in FAMILY.get(self.cc, frozenset())
        elif self.ptx:
            ok = cc >= self.cc
        else:
            ok = cc.major == self.major and cc.minor >= self.minor
        if not ok:
            return Load.NO
        return Load.JIT if self.ptx else Load.NATIVE


# What nvcc 13.0 prints for `--list-gpu-arch`, plus the older capabilities torch still names.
KNOWN_CC: frozenset[CC] = frozenset(
    CC.parse(c) for c in "5.0 5.2 5.3 6.0 6.1 6.2 7.0 7.2 7.5 8.0 8.6 8.7 8.8 8.9 9.0 10.0 10.3 11.0 12.0 12.1".split())
# The first major each suffix exists for: 'a' from 9.0, 'f' from 10.0 (CUDA 12.9).
FIRST_MAJOR = {"a": 9, "f": 10}


@dataclass(frozen=True)
class ArchEntry:
    """One TORCH_CUDA_ARCH_LIST entry: ``12.1a`` (SASS) or ``8.0+PTX`` (SASS and PTX)."""

    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @classmethod
    def parse(cls, text: str) -> ArchEntry:
        m = _ENTRY_RE.fullmatch(text)
        if not m:
            raise ValueError(f"'{text}' is not an arch (expected forms: 12.0, 12.1a, 12.0f, 8.0+PTX)")
        return cls(int(m["major"]), int(m["minor"]), m["suffix"], m["ptx"] is not None)

    @property
    def cc(self) -> CC:
        return CC(self.major, self.minor)

    @property
    def targets(self) -> tuple[CudaArch, ...]:
        """The code it builds: its SASS, and its PTX with `+PTX`."""
        sass = CudaArch(self.major, self.minor, self.suffix)
        return (sass, CudaArch(self.major, self.minor, self.suffix, ptx=True)) if self.ptx else (sass,)

    def load_on(self, cc: CC) -> Load:
        return best(t.load_on(cc) for t in self.targets)

    def problem(self) -> str | None:
        """None when nvcc would take this entry, else why not and what would."""
        if self.cc not in KNOWN_CC:
            known = ", ".join(str(c) for c in sorted(KNOWN_CC))
            return f"'{self}': compute capability {self.cc} is unknown (known: {known})"
        if self.suffix and self.major < FIRST_MAJOR[self.suffix]:
            kind = "arch-specific 'a'" if self.suffix == "a" else "family 'f'"
            return f"'{self}': {kind} targets exist from {FIRST_MAJOR[self.suffix]}.0 on (use '{self.cc}')"
        return None

    def __str__(self) -> str:
        return f"{self.cc}{self.suffix}{'+PTX' if self.ptx else ''}"


def split(text: str) -> list[str]:
    """`12.0a;12.1a` or `12.0f 12.1a` -> its words, as written (both separators are used upstream)."""
    return [w for w in _SPLIT.split(text.strip()) if w]


def best(loads) -> Load:
    """The best way in: native SASS over PTX JIT over nothing."""
    got = set(loads)
    return Load.NATIVE if Load.NATIVE in got else Load.JIT if Load.JIT in got else Load.NO


@dataclass(frozen=True)
class ArchList:
    """A TORCH_CUDA_ARCH_LIST (or FLASHINFER_CUDA_ARCH_LIST, or an arch list a CMake log prints)
    parsed once: `12.0a;12.1a`, `12.0f 12.1a` (both separators are used upstream), `8.0+PTX`.
    `str()` gives the text as written, which is what reaches a build argument or a label."""

    entries: tuple[ArchEntry, ...]
    text: str

    @classmethod
    def parse(cls, text: str) -> ArchList:
        """Every entry must parse (ValueError naming each that does not); an empty list is an error."""
        words = split(text)
        if not words:
            raise ValueError("empty arch list (example: '12.1a' or '12.0a;12.1a')")
        entries, bad = [], []
        for w in words:
            try:
                entries.append(ArchEntry.parse(w))
            except ValueError as e:
                bad.append(str(e))
        if bad:
            raise ValueError("; ".join(bad))
        return cls(tuple(entries), text.strip())

    @classmethod
    def read(cls, text: str) -> ArchList:
        """What a log printed: the entries that parse, the rest left out (CMake may print forms a
        matrix never holds); possibly empty."""
        words = split(text)
        return cls(tuple(ArchEntry.parse(w) for w in words if _ENTRY_RE.fullmatch(w)), text.strip())

    @property
    def targets(self) -> tuple[CudaArch, ...]:
        return tuple(t for e in self.entries for t in e.targets)

    @property
    def ccs(self) -> frozenset[CC]:
        """The compute capabilities it builds for: `9.0a;12.1a` -> {9.0, 12.1}."""
        return frozenset(e.cc for e in self.entries)

    def load_on(self, cc: CC) -> Load:
        return best(e.load_on(cc) for e in self.entries)

    def runs_on(self, cc: CC | str) -> bool:
        """Whether anything this list builds can run on a chip of compute capability `cc`."""
        return self.load_on(CC.parse(cc) if isinstance(cc, str) else cc) is not Load.NO

    def problems(self) -> list[str]:
        """What nvcc would refuse, each naming the entry and what would do."""
        return [p for e in self.entries if (p := e.problem())]

    def __str__(self) -> str:
        return self.text

    def __iter__(self):
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)
