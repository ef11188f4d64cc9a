"""Just enough ELF64 to find a host library's fatbin and to read a cubin's kernels.

A host .so carries its device code in the `.nv_fatbin` section (`__nv_relfatbin` in
relocatable objects built with -rdc). A cubin is itself an ELF (e_machine EM_CUDA) whose
kernels are the functions that own a `.nv.info.<name>` section; its `.nv.compat`
attributes mark arch-specific (`a`) code, and `.note.nv.tkinfo` keeps ptxas' command line,
the only place a standalone cubin remembers that it was built as `sm_120f`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from harness.audit.archs import CudaArch

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
# .nv.compat attribute 0x09 is 1 for sm_XYa cubins and 0 otherwise (nvcc 13.0, compared
# byte for byte across sm_120 / sm_120a / sm_120f / sm_121a builds of the same kernel).
_COMPAT_ARCH_SPECIFIC = 0x09
_TKINFO_ARCH_RE = re.compile(rb"-arch[= ]sm_(\d{2,3})([af]?)\b")


@dataclass(frozen=True)
class Section:
    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class Elf:
    machine: int
    flags: int
    sections: tuple[Section, ...]

    def section(self, name: str) -> Section | None:
        for s in self.sections:
            if s.name == name:
                return s
        return None


def is_elf(data: bytes) -> bool:
    return data[:4] == ELF_MAGIC and len(data) >= _EHDR.size and data[4] == 2 and data[5] == 1


def parse(data: bytes) -> Elf | None:
    """Sections of a 64-bit little-endian ELF, or None if `data` is not one we can read."""
    if not is_elf(data):
        return None
    (
        _ident,
        _type,
        machine,
        _ver,
        _entry,
        _phoff,
        shoff,
        flags,
        _ehsize,
        _phentsize,
        _phnum,
        shentsize,
        shnum,
        shstrndx,
    ) = _EHDR.unpack_from(data)
    if shoff == 0 or shentsize < _SHDR.size or shoff + shnum * shentsize > len(data):
        return Elf(machine, flags, ())
    raw = [_SHDR.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    if shstrndx >= shnum:
        return Elf(machine, flags, ())
    str_off = raw[shstrndx][4]
    sections = []
    for name_off, stype, _f, _a, off, size, *_ in raw:
        start = str_off + name_off
        name = data[start : data.find(b"\0", start)].decode("utf-8", "replace")
        # SHT_NOBITS (8) occupies no file bytes.
        sections.append(Section(name, off, 0 if stype == 8 else size))
    return Elf(machine, flags, tuple(sections))


def fatbin_ranges(elf: Elf) -> list[tuple[int, int]]:
    """(start, end) of each section that holds fatbin containers in a host ELF."""
    return [(s.offset, s.offset + s.size) for s in elf.sections if s.name in FATBIN_SECTIONS]


def kernel_names(elf: Elf) -> list[str]:
    """Mangled names of the kernels (entry functions) in a cubin."""
    names = []
    for s in elf.sections:
        if s.name.startswith(".nv.info.") and len(s.name) > 9:
            names.append(s.name[9:])
    return names


def text_sections(elf: Elf) -> dict[str, Section]:
    return {s.name[6:]: s for s in elf.sections if s.name.startswith(".text.")}


def cubin_arch(data: bytes, elf: Elf) -> CudaArch:
    """Best name for a standalone cubin: e_flags' SM number plus the a/f evidence inside."""
    # e_flags keeps the SM number in bits 8..15 on ABI v8 cubins (sm_100+) and in the low
    # byte on older ones.
    number = (elf.flags >> 8) & 0xFF if data[8] >= 8 else elf.flags & 0xFF
    suffix = ""
    compat = elf.section(".nv.compat")
    if compat is not None:
        suffix = "a" if _compat_value(data, compat, _COMPAT_ARCH_SPECIFIC) == 1 else ""
    tk = elf.section(".note.nv.tkinfo")
    if tk is not None:
        m = _TKINFO_ARCH_RE.search(data, tk.offset, tk.offset + tk.size)
        if m and int(m[1]) == number:
            suffix = m[2].decode() or suffix
    return CudaArch.from_number(number, suffix)


def _compat_value(data: bytes, sec: Section, key: int) -> int | None:
    # Attributes are (format u8, key u8, value): format 2 = u16 value, 3 = two u8, 4 = u16
    # length then bytes (the same scheme as .nv.info).
    pos, end = sec.offset, sec.offset + sec.size
    while pos + 4 <= end:
        fmt, attr = data[pos], data[pos + 1]
        if fmt == 4:
            (length,) = struct.unpack_from("<H", data, pos + 2)
            value = None
            pos += 4 + length
        elif fmt in (2, 3):
            value = data[pos + 2]
            pos += 4
        else:
            pos += 2
            continue
        if attr == key:
            return value
    return None
