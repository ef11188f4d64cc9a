"""Compare our reader with NVIDIA's cuobjdump, entry by entry.

`cuobjdump -ptx FILE` prints a header for every fatbin entry, ELF ones included
("Fatbin elf code:" / "Fatbin ptx code:" then "arch = sm_120f") without dumping the cubins,
so it checks a 190 MB library in about a second, where `cuobjdump -elf` takes minutes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.audit import tools
from harness.audit.scan import FileAudit

_HEADER_RE = re.compile(
    r"^Fatbin (?P<kind>elf|ptx) code:\s*\n=+\s*\narch = (?P<arch>sm_\w+)$", re.M
)


@dataclass(frozen=True)
class CrossCheck:
    path: str
    ours: tuple[str, ...]
    cuobjdump: tuple[str, ...]

    @property
    def agrees(self) -> bool:
        return self.ours == self.cuobjdump


def parse_cuobjdump(text: str) -> list[str]:
    """Entry names in file order, PTX renamed compute_* as we name it."""
    out = []
    for m in _HEADER_RE.finditer(text):
        arch = m["arch"]
        out.append(arch if m["kind"] == "elf" else "compute_" + arch[3:])
    return out


def cuobjdump_entries(path: Path) -> list[str]:
    return parse_cuobjdump(
        tools.run("cuobjdump", "-ptx", path, ok_if="does not contain device code")
    )


def check_file(audit: FileAudit, path: Path) -> CrossCheck:
    return CrossCheck(
        audit.path, tuple(o.arch.name for o in audit.objects), tuple(cuobjdump_entries(path))
    )


def check_all(audits: Sequence[FileAudit], root: Path) -> list[CrossCheck]:
    """Cross-check every audited file that exists on disk under `root` (fatbin hosts only)."""
    results = []
    for a in audits:
        path = root / a.path if root.is_dir() else root
        if path.suffix == ".cubin" or not path.is_file():
            continue  # a bare cubin has no fatbin header for cuobjdump to print
        results.append(check_file(a, path))
    return results
