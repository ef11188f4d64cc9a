"""GPU architecture names (sm_120f, compute_121a) and where code built for each can run.

Loading rules, from NVIDIA's documents (CUDA Programming Guide, "Compute Capability and
Streaming Multiprocessor Versions" and "Binary compatibility"/"PTX compatibility" in the nvcc
guide; the CUDA 12.9 blog "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce Family-Specific
Architecture Features", developer.nvidia.com/blog/nvidia-blackwell-and-nvidia-cuda-12-9-
introduce-family-specific-architecture-features/):

- plain SASS ``sm_XY`` runs on compute capability X.Z for every Z >= Y (same major only);
- family SASS ``sm_XYf`` runs on the members of family X with minor >= Y
  (sm_100f on 10.0 and 10.3; sm_120f on 12.0 and 12.1);
- arch-specific SASS ``sm_XYa`` runs on X.Y only ("no forward or backward compatibility");
- PTX ``compute_XY`` is JIT-compiled by the driver for any cc >= X.Y; ``compute_XYf`` only
  within family X at minor >= Y; ``compute_XYa`` only on X.Y.

These are documented rules, not measurements: the GB10 (12.1) case is exactly what a real
run on that chip should confirm. One supporting fact measured here: an sm_120f cubin's own ELF
header is byte-identical to a plain sm_120 one (e_flags 0x6007802; only the fatbin entry flags
and ptxas' recorded command line say "f"), and plain sm_120 SASS is documented to run on 12.1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

_ARCH_RE = re.compile(r"^(?P<kind>sm|compute)_(?P<num>\d{2,3})(?P<suffix>[af]?)$")
_CC_RE = re.compile(r"^(?P<major>\d{1,2})\.(?P<minor>\d)$")


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
            raise ValueError(
                f"not a compute capability: {text!r} (expected MAJOR.MINOR such as 12.1)"
            )
        return cls(int(m["major"]), int(m["minor"]))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def sm(self) -> str:
        return f"SM_{self.major}{self.minor}"


@dataclass(frozen=True, order=True)
class CudaArch:
    """One code target inside a fatbin: SASS (``sm_*``) or PTX (``compute_*``)."""

    major: int
    minor: int
    suffix: str = ""  # "", "a" (arch-specific) or "f" (family)
    ptx: bool = False

    @classmethod
    def from_number(cls, number: int, suffix: str = "", ptx: bool = False) -> CudaArch:
        return cls(number // 10, number % 10, suffix, ptx)

    @classmethod
    def parse(cls, text: str) -> CudaArch:
        m = _ARCH_RE.match(text.strip())
        if not m:
            raise ValueError(
                f"not a CUDA arch name: {text!r} (expected e.g. sm_120f or compute_90)"
            )
        return cls.from_number(int(m["num"]), m["suffix"], m["kind"] == "compute")

    @property
    def name(self) -> str:
        return f"{'compute' if self.ptx else 'sm'}_{self.major}{self.minor}{self.suffix}"

    def __str__(self) -> str:
        return self.name

    def load_on(self, cc: CC) -> Load:
        """Whether code for this arch can run on a chip of compute capability `cc`."""
        same = cc.major == self.major and cc.minor == self.minor
        if self.suffix == "a":
            ok = same
        elif self.suffix == "f" or not self.ptx:
            ok = cc.major == self.major and cc.minor >= self.minor
        else:
            ok = cc >= CC(self.major, self.minor)
        if not ok:
            return Load.NO
        return Load.JIT if self.ptx else Load.NATIVE
