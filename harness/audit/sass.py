"""Does a cubin's SASS use the native block-scaled FP4 MMA? Disassembled with nvdisasm.

Checked with nvcc 13.0 (tests/fixtures/cubins/nvfp4_mma.cu): the PTX
`mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3`
assembles for sm_120a, sm_121a, sm_120f and sm_121f, always to
`OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X`; ptxas refuses it for plain sm_120/sm_121 and for
sm_100a/f. So a family build CAN hold native FP4: only the SASS can say whether it does.
On sm_100 the tcgen05 block-scaled MMA shows up as `UTCOMMA` (seen in vLLM 0.25.1's
sm_100f FP4 GEMMs; not compiled here).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.audit import tools

# Per SM major: the opcode of the block-scaled FP4 tensor-core MMA.
NATIVE_FP4_OPCODES: dict[int, re.Pattern[str]] = {
    12: re.compile(r"\bOMMA\.SF\b"),
    10: re.compile(r"\bUTCOMMA\b"),
}
_FUNC_RE = re.compile(r"^\.text\.(?P<name>\S+):\s*$")
_OPCODE_RE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)")


@dataclass(frozen=True)
class SassScan:
    """Per kernel of one cubin: the block-scaled FP4 MMA opcodes it contains."""

    native_fp4: dict[str, str]  # kernel -> first matching opcode ("" when none)


def checkable(major: int) -> bool:
    return major in NATIVE_FP4_OPCODES


def parse_disassembly(text: str, major: int) -> SassScan:
    pattern = NATIVE_FP4_OPCODES[major]
    found: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        m = _FUNC_RE.match(line)
        if m:
            current = m["name"]
            found.setdefault(current, "")
            continue
        if current is None or found[current]:
            continue
        op = _OPCODE_RE.search(line)
        if op and pattern.search(op["op"]):
            found[current] = op["op"]
    return SassScan(found)


def scan_cubin(cubin: bytes, major: int) -> SassScan:
    """Disassemble one (decompressed) cubin and find its native FP4 MMAs per kernel."""
    with tempfile.TemporaryDirectory(prefix="harness-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        return parse_disassembly(tools.run("nvdisasm", path), major)
