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
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.audit import elf, tools
from harness.audit.source import BytesReader
from harness.safety import writes

# Per SM major: the opcode of the block-scaled FP4 tensor-core MMA.
NATIVE_FP4_OPCODES: dict[int, re.Pattern[str]] = {
    12: re.compile(r"\bOMMA\.SF\b"),
    10: re.compile(r"\bUTCOMMA\b"),
}
# One argv string may hold 128 KiB on Linux (MAX_ARG_STRLEN); past this, disassemble all.
_MAX_FUN_ARG = 64 << 10
_FUNC_RE = re.compile(r"^\.text\.(?P<name>\S+):\s*$")
_OPCODE_RE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?(?P<op>[A-Z][A-Z0-9_.]*)")


@dataclass(frozen=True)
class SassScan:
    """Per kernel of one cubin: the block-scaled FP4 MMA opcodes it contains."""

    native_fp4: dict[str, str]  # kernel -> first matching opcode ("" when none)


def checkable(major: int) -> bool:
    return major in NATIVE_FP4_OPCODES


def parse_disassembly(text: str | Iterable[str], major: int, wanted: Collection[str] = ()) -> SassScan:
    """Per kernel, the first native FP4 MMA opcode in its SASS. With `wanted`, reading stops
    as soon as each of those kernels has one (the rest of the text cannot change that)."""
    pattern = NATIVE_FP4_OPCODES[major]
    found: dict[str, str] = {}
    current: str | None = None
    missing = set(wanted)
    for line in text.splitlines() if isinstance(text, str) else text:
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
            missing.discard(current)
            if wanted and not missing:
                break
    return SassScan(found)


def scan_cubin(cubin: bytes | bytearray | list[bytes | bytearray], major: int, kernels: Collection[str] = ()) -> SassScan:
    """Disassemble one (decompressed) cubin and find its native FP4 MMAs per kernel.

    With `kernels`, nvdisasm is asked for those functions only (`-fun`, by their symbol
    indices) and its output is read line by line, stopping once each has its answer: on
    vLLM 0.33.0's 62 MB NVFP4 cubins that is a fraction of the full disassembly, which is
    never held in memory. Pass the cubin in a one-item list to hand it over: it is written
    to a file and dropped before nvdisasm runs.
    """
    data = cubin.pop() if isinstance(cubin, list) else cubin
    args: list[str] = []
    if kernels:
        index = elf.function_symbols(BytesReader(data), elf.header(bytes(data[:64])))
        if all(k in index for k in kernels):
            wanted = ",".join(str(index[k]) for k in sorted(kernels, key=index.__getitem__))
            if len(wanted) <= _MAX_FUN_ARG:
                args = ["-fun", wanted]
    with tempfile.TemporaryDirectory(prefix="harness-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        writes.write_bytes(path, bytes(data), flag="cubin")
        del data
        return tools.read_lines(
            "nvdisasm", *args, path, consume=lambda lines: parse_disassembly(lines, major, kernels)
        )
