"""Just enough ELF64 to find a host library's fatbins and to name a cubin's arch and kernels.

A host .so carries its loadable device code in the `.nv_fatbin` section and relocatable
device code (-rdc, linked later, never loaded as is) in `__nv_relfatbin`. A cubin is itself
an ELF (e_machine EM_CUDA) whose kernels are the functions that own a `.nv.info.<name>`
section.

Every offset and count is checked against the file before use: a truncated or forged file
raises `Unreadable` with the reason, never an IndexError or a huge allocation.

Where a standalone cubin keeps its arch (checked against `cuobjdump --list-elf` / `-sass` on
all 15,970 cubins of flashinfer-cubin 0.6.13 and on nvcc 13.0 builds):
- the SM number: e_flags bits 8..15 on ABI v8 cubins (EI_ABIVERSION 8, sm_100 and later
  toolchains), the low byte on older ones (LLVM BinaryFormat/ELF.h EF_CUDA_SM*);
- `a`: e_flags bit 0x8 on ABI v8 (EF_CUDA_ACCELERATORS; set by FlashInfer's trtllm-gen
  cubins, e_flags 0x..0c, which carry no other mark), 0x800 on older ABIs; nvcc 13.0 leaves
  that bit clear and sets `.nv.compat` attribute 0x09 to 1 instead;
- `f`: only ptxas' recorded command line in `.note.nv.tkinfo` (`-arch sm_120f`); e_flags
  are byte-identical for sm_120 and sm_120f, which is why cuobjdump names both sm_120.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from harness.archs import CudaArch
from harness.audit.source import Unreadable

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190
LOADABLE_FATBIN = ".nv_fatbin"
RELOCATABLE_FATBIN = "__nv_relfatbin"
FATBIN_SECTIONS = (LOADABLE_FATBIN, RELOCATABLE_FATBIN)
SHT_NOBITS = 8
MAX_SECTIONS = 1 << 20
MAX_NAMES = 64 << 20  # section-name table; a 5,000-kernel CUTLASS cubin needs a few MB

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_COMPAT_ARCH_SPECIFIC = 0x09
_TKINFO_ARCH_RE = re.compile(rb"-arch[= ]sm_(\d{2,3})([af]?)\b")
_KERNEL_RE = re.compile(rb"\x00\.nv\.info\.([^\x00]+)(?=\x00)")
# nvcc/ptxas put `.shstrtab` first, right after the ELF header: "\0.shstrtab\0...".
_SHSTRTAB_FIRST = b"\x00.shstrtab\x00"
# Names that start with "." each ended by a NUL, or lone NULs (padding), as far as they go.
_NAME_RUN_RE = re.compile(rb"(?:\.[^\x00]*\x00|\x00)*")


@dataclass(frozen=True)
class Header:
    abi_version: int
    type: int
    machine: int
    flags: int
    ehsize: int
    shoff: int
    shentsize: int
    shnum: int
    shstrndx: int


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int  # bytes in the file (0 for SHT_NOBITS)

    @property
    def end(self) -> int:
        return self.offset + self.size


def is_elf(head: bytes | bytearray) -> bool:
    return head[:4] == ELF_MAGIC


def header(head: bytes | bytearray) -> Header:
    """The ELF header from a file's first 64 bytes; raises Unreadable."""
    if len(head) < _EHDR.size:
        raise Unreadable(f"truncated ELF header ({len(head)} of {_EHDR.size} bytes)")
    if head[4] != 2 or head[5] != 1:
        raise Unreadable("32-bit or big-endian ELF: not a CUDA host library or cubin we read")
    (_i, etype, machine, _v, _e, _ph, shoff, flags, ehsize, _pe, _pn, shentsize, shnum, shstrndx) = (
        _EHDR.unpack_from(head)
    )
    return Header(head[8], etype, machine, flags, ehsize, shoff, shentsize, shnum, shstrndx)


def _cstr(table: bytes, offset: int) -> bytes:
    """The NUL-terminated string at `offset` of a string table (to its end when unterminated)."""
    end = table.find(b"\0", offset)
    return table[offset : end if end >= 0 else len(table)]


def _table(reader, hdr: Header) -> tuple[list[tuple], bytes]:
    """The raw section headers and the section-name table; raises Unreadable."""
    if hdr.shentsize < _SHDR.size:
        raise Unreadable(f"section headers of {hdr.shentsize} bytes (at least {_SHDR.size})")
    count, strndx = hdr.shnum, hdr.shstrndx
    if count == 0 or strndx == 0xFFFF:  # extended numbering: the real figures sit in section 0
        first = _SHDR.unpack(reader.read_at(hdr.shoff, _SHDR.size))
        count = count or first[5]
        strndx = first[7] if strndx == 0xFFFF else strndx
    if count > MAX_SECTIONS:
        raise Unreadable(f"{count} sections declared (cap {MAX_SECTIONS})")
    table = reader.read_at(hdr.shoff, count * hdr.shentsize)
    if hdr.shentsize == _SHDR.size:
        raw = list(_SHDR.iter_unpack(table))  # one C-level pass: CUTLASS cubins have thousands
    else:
        raw = [_SHDR.unpack_from(table, i * hdr.shentsize) for i in range(count)]
    if strndx >= count:
        raise Unreadable(f"section-name table index {strndx} past {count} sections")
    _n, stype, _f, _a, str_off, str_size, *_ = raw[strndx]
    if str_size > MAX_NAMES:
        raise Unreadable(f"section-name table of {str_size} bytes (cap {MAX_NAMES})")
    names = reader.read_at(str_off, str_size) if stype != SHT_NOBITS else b""
    name_off = max(r[0] for r in raw)
    if name_off and name_off >= len(names):
        raise Unreadable(f"section name offset {name_off} past the name table ({len(names)} bytes)")
    return raw, names


# Section types whose bytes must be in the file: PROGBITS, SYMTAB, STRTAB, RELA, NOTE, REL
# and CUDA's .nv.info (0x70000000). Others may occupy none: SHT_NOBITS, and in relocatable
# cubins `.nv_debug.shared` (0x7000000a, bitsandbytes 0.50.2) claims bytes past the end.
_FILE_BACKED = frozenset({1, 2, 3, 4, 7, 9, 0x70000000})


def sections(reader, hdr: Header) -> list[Section]:
    """Every section, names resolved; raises Unreadable when the table, its names, or a
    section whose bytes must be in the file lie past the file's end (a cubin may keep its
    section table at the start, so a cut file can still have a whole table)."""
    if hdr.shoff == 0:
        return []  # no section table (sstrip'd): nothing to find
    raw, names = _table(reader, hdr)
    out = []
    for name_off, stype, _f, _a, off, size, *_ in raw:
        name = _cstr(names, name_off).decode("utf-8", "replace")
        if stype in _FILE_BACKED and size and off + size > reader.size:
            raise Unreadable(
                f"truncated: section {name or '?'} ends at {off + size}, the file has {reader.size} bytes"
            )
        out.append(Section(name, stype, off, 0 if stype == SHT_NOBITS else size))
    return out


def kernel_names(reader, hdr: Header) -> list[str]:
    """Kernels of a cubin: the names of its `.nv.info.<kernel>` sections (only those names
    are decoded: a CUTLASS cubin has thousands of sections)."""
    if hdr.shoff == 0:
        return []
    raw, names = _table(reader, hdr)
    out = []
    starts = names.startswith
    for name_off, *_ in raw:
        if starts(b".nv.info.", name_off):
            name = _cstr(names, name_off + 9)
            if name:
                out.append(name.decode("utf-8", "replace"))
    return out


SHT_SYMTAB = 2
STT_FUNC = 2
_SYM = struct.Struct("<IBBHQQ")


def function_symbols(reader, hdr: Header) -> dict[str, int]:
    """Index in `.symtab` of each function symbol of a cubin, by name: what `nvdisasm -fun`
    takes to disassemble only those kernels. Empty when there is no symbol table; raises
    Unreadable when it or its names lie outside the file."""
    if hdr.shoff == 0:
        return {}
    raw, _names = _table(reader, hdr)
    symtab = next((r for r in raw if r[1] == SHT_SYMTAB), None)
    if symtab is None:
        return {}
    _n, _t, _f, _a, off, size, link, _i, _al, entsize = symtab
    if entsize != _SYM.size or size % _SYM.size or link >= len(raw):
        raise Unreadable(f"symbol table of {size} bytes in {entsize}-byte entries, names in section {link}")
    strtab = raw[link]
    syms = reader.read_at(off, size)
    strings = reader.read_at(strtab[4], strtab[5])
    out: dict[str, int] = {}
    for index, (name_off, info, _o, _shndx, _v, _s) in enumerate(_SYM.iter_unpack(syms)):
        if info & 0xF == STT_FUNC and 0 < name_off < len(strings):
            out.setdefault(_cstr(strings, name_off).decode("utf-8", "replace"), index)
    return out


def kernel_names_from_table(names: bytes | bytearray) -> list[str]:
    """Kernel (entry function) names in a section-name table, each once (a table may hold a
    name twice when two sections share it)."""
    return list(dict.fromkeys(m.decode("utf-8", "replace") for m in _KERNEL_RE.findall(names)))


def leading_name_table(prefix: bytes | bytearray, ehsize: int = 64) -> bytes | bytearray | None:
    """The section-name table of a cubin whose first section it is (nvcc/ptxas lay it out
    so: `.shstrtab` right after the ELF header), read from the file's first bytes alone;
    None when that layout is not there or the table runs past `prefix`.

    The table is NUL-separated names that all start with "." (zero padding may sit among
    them, vLLM 0.33.0's cubins have some); it ends at the first string that does not start
    with "." — the symbol names of `.strtab`, or the binary `.symtab`, that follow. Checked
    against a full section-table parse on every cubin of vLLM 0.33.0, sgl-kernel 0.3.21,
    bitsandbytes 0.50.2 and the nvcc fixtures (benchmarks/README.md, "audit").
    """
    if prefix[ehsize : ehsize + len(_SHSTRTAB_FIRST)] != _SHSTRTAB_FIRST:
        return None
    # One C-level pass over the names (a CUTLASS cubin has thousands), not a find per name.
    run = _NAME_RUN_RE.match(prefix, ehsize + 1)
    assert run is not None  # the pattern matches the empty string, so it always matches
    pos = run.end()
    if pos >= len(prefix) or prefix[pos] == 0x2E or prefix.find(b"\x00", pos) < 0:
        return None  # runs past the prefix: decode more
    return prefix[ehsize:pos]


def cubin_kernels(data: bytes, secs: list[Section]) -> list[str]:
    return [s.name[9:] for s in secs if s.name.startswith(".nv.info.") and len(s.name) > 9]


def cubin_arch(data: bytes, hdr: Header, secs: list[Section]) -> CudaArch:
    """The arch of a standalone cubin from its own header and notes (see the module doc)."""
    v8 = hdr.abi_version >= 8
    number = (hdr.flags >> 8) & 0xFF if v8 else hdr.flags & 0xFF
    accel = bool(hdr.flags & (0x8 if v8 else 0x800))
    compat = tk = None  # the two notes read, when present (the last of a name, as a table by name keeps)
    for s in secs:
        if s.name == ".nv.compat":
            compat = s
        elif s.name == ".note.nv.tkinfo":
            tk = s
    if compat is not None and _compat_value(data, compat, _COMPAT_ARCH_SPECIFIC) == 1:
        accel = True
    suffix = "a" if accel else ""
    if tk is not None:
        m = _TKINFO_ARCH_RE.search(data, tk.offset, tk.end)
        if m and int(m[1]) == number:
            suffix = m[2].decode() or suffix
    return CudaArch.from_number(number, suffix)


def _compat_value(data: bytes, sec: Section, key: int) -> int | None:
    # Attributes are (format u8, key u8, value): format 2 = u16 value, 3 = two u8, 4 = u16
    # length then bytes (the same scheme as .nv.info).
    pos, end = sec.offset, min(sec.end, len(data))
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
