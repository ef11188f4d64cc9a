"""Reader for NVIDIA fat binary containers (the `.nv_fatbin` section, or a .fatbin file).

Layout, checked byte by byte against nvcc 13.0 output and `cuobjdump -elf` (whose
`arch = sm_120f` line is printed from these headers): a 16-byte container header
(magic 0xBA55ED50, version 1, header size 16, u64 size of what follows), then entries,
each a header of `header_size` bytes followed by its payload.

Entry header (little endian):
  +0  u16 kind          1 = PTX, 2 = ELF cubin
  +4  u32 header_size   64, 80 (PTX 12.x), 112 (ELF 10.x+)
  +8  u64 payload_size  bytes to the next entry (padded)
  +16 u32 compressed_size  0 when the payload is stored plain
  +24 u16 minor, u16 major  "code version" ([1,8] ELF, [9,0] PTX ISA)
  +28 u32 arch          120 for sm_120*
  +40 u64 flags         see FLAG_* below
  +56 u64 uncompressed_size

The a/f suffix lives only in the flags (bits 20 and 21): a cubin's own ELF header is the
same for sm_120, sm_120f and sm_120a, which is why `cuobjdump --list-elf` says sm_120 for
both plain and family builds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from harness.archs import CudaArch
from harness.audit.source import Unreadable

MAGIC = b"\x50\xed\x55\xba\x01\x00\x10\x00"  # 0xBA55ED50, version 1, header size 16
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")

KIND_PTX = 1
KIND_ELF = 2

FLAG_64BIT = 0x1
FLAG_DEBUG = 0x2
FLAG_LINUX = 0x10
FLAG_COMPRESS_LZ = 0x2000  # CUDA 11.x-12.x private LZ scheme: not decoded here
FLAG_COMPRESS_ZSTD = 0x8000  # CUDA 12.8+: a standard zstd frame
FLAG_ARCH_SPECIFIC = 0x100000  # sm_XYa / compute_XYa
FLAG_FAMILY = 0x200000  # sm_XYf / compute_XYf


@dataclass(frozen=True)
class Entry:
    """One cubin or PTX inside a container; its payload stays in the file until asked for."""

    container: int  # file offset of the container that holds it
    arch: CudaArch
    flags: int
    offset: int  # file offset of the payload
    stored_size: int  # payload bytes as stored (compressed size when compressed)
    uncompressed_size: int
    header: int = -1  # file offset of the entry's header

    @property
    def is_elf(self) -> bool:
        return not self.arch.ptx

    @property
    def compression(self) -> str:
        if self.flags & FLAG_COMPRESS_ZSTD:
            return "zstd"
        if self.flags & FLAG_COMPRESS_LZ:
            return "lz"
        return "none"


def arch_from_header(kind: int, number: int, flags: int) -> CudaArch:
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    return CudaArch.from_number(number, suffix, ptx=kind == KIND_PTX)


def iter_entries(reader, start: int = 0, end: int | None = None) -> Iterator[Entry]:
    """Every ELF and PTX entry of every container found in [start, end) of `reader`.

    Containers are found by their magic, so padding between them (the linker aligns each
    one) is skipped. A container or entry whose sizes run past its section, or past the
    file, raises Unreadable: a truncated fatbin is an incomplete audit, not fewer kernels.
    """
    end = reader.size if end is None else min(end, reader.size)
    pos = reader.find(MAGIC, start, end)
    while pos >= 0:
        stop = container_end(reader, pos, end)
        yield from container_entries(reader, pos, stop)
        pos = reader.find(MAGIC, stop, end)


def container_end(reader, pos: int, end: int) -> int:
    """Where the container at `pos` ends; raises Unreadable when past `end`."""
    if pos + _CONTAINER.size > end:
        raise Unreadable(f"truncated fatbin container header at {pos}")
    _, _, _, size = _CONTAINER.unpack(reader.read_at(pos, _CONTAINER.size))
    stop = pos + _CONTAINER.size + size
    if stop > end:
        raise Unreadable(
            f"truncated: fatbin container at {pos} declares {size} bytes, "
            f"{end - pos - _CONTAINER.size} are there"
        )
    return stop


def container_entries(reader, pos: int, stop: int) -> Iterator[Entry]:
    """The entries of the container at `pos`, which ends at `stop` (see container_end)."""
    cur = pos + _CONTAINER.size
    while cur < stop:
        if cur + _ENTRY.size > stop:
            raise Unreadable(f"fatbin entry header at {cur} runs past its container")
        (kind, _v, hsize, psize, csize, _o, _mi, _ma, number, _no, _nl, flags, _r, usize) = (
            _ENTRY.unpack(reader.read_at(cur, _ENTRY.size))
        )
        if hsize < _ENTRY.size or cur + hsize + psize > stop:
            raise Unreadable(
                f"fatbin entry at {cur} declares a {hsize}-byte header and {psize}-byte "
                f"payload, past its container's end at {stop}"
            )
        if csize > psize:
            raise Unreadable(f"fatbin entry at {cur}: compressed size {csize} > payload {psize}")
        if kind in (KIND_PTX, KIND_ELF):
            if not 10 <= number <= 999:
                raise Unreadable(f"fatbin entry at {cur} names arch {number}, not a CUDA arch")
            yield Entry(
                pos, arch_from_header(kind, number, flags), flags, cur + hsize, csize or psize, usize, cur
            )
        cur += hsize + psize
        reader.release(cur)
