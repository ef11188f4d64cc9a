"""Find the CUDA code in a path (directory, wheel, .so, .cubin, .fatbin, .o) and describe it.

Host libraries are memory-mapped and only their fatbin sections are touched, so a 600 MB
site-packages costs about what its fatbins weigh. Wheels are read member by member with
zipfile. Nothing is extracted to disk.
"""

from __future__ import annotations

import mmap
import os
import re
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.audit import elf, fatbin, sass, zstd
from harness.audit.archs import CudaArch
from harness.audit.families import family_of
from harness.errors import ConfigError

# Files worth opening: shared objects (also versioned, libfoo.so.13), objects, archives,
# and standalone device code. Everything else in a site-packages is Python or data.
_CANDIDATE_RE = re.compile(r"\.(?:so(?:\.\d+)*|o|a|cubin|fatbin)$")
_PTX_ENTRY_RE = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)")
NVFP4 = "nvfp4_gemm"

SassPolicy = Callable[[CudaArch], bool]


@dataclass(frozen=True)
class CodeObject:
    """One cubin (SASS) or PTX module, with its kernels grouped by family."""

    arch: CudaArch
    families: dict[str, int]  # family -> kernels; empty when `decoded` is False
    decoded: bool
    fp4_kernels: tuple[str, ...] = ()
    native_fp4: dict[str, str] | None = None  # fp4 kernel -> opcode, when SASS was read


@dataclass(frozen=True)
class FileAudit:
    path: str
    objects: tuple[CodeObject, ...]

    @property
    def cubins(self) -> Counter[str]:
        return Counter(o.arch.name for o in self.objects if not o.arch.ptx)

    @property
    def ptx(self) -> list[str]:
        return sorted({o.arch.name for o in self.objects if o.arch.ptx}, key=_arch_key)

    def families(self) -> dict[str, Counter[str]]:
        """family -> {arch name: kernel count}."""
        out: dict[str, Counter[str]] = {}
        for o in self.objects:
            for fam, n in o.families.items():
                out.setdefault(fam, Counter())[o.arch.name] += n
        return out

    @property
    def undecoded(self) -> int:
        return sum(1 for o in self.objects if not o.decoded)


@dataclass
class ScanStats:
    files_seen: int = 0
    bytes_read: int = 0
    sass_cubins: int = 0
    notes: list[str] = field(default_factory=list)


def _arch_key(name: str) -> tuple[int, int, str, str]:
    a = CudaArch.parse(name)
    return (a.major, a.minor, a.suffix, name)


def arch_sort_key(name: str) -> tuple[int, int, str, str]:
    return _arch_key(name)


def audit_tree(path: Path, want_sass: SassPolicy, stats: ScanStats) -> list[FileAudit]:
    """Every file under `path` that holds CUDA code, in a stable order."""
    if not path.exists():
        raise ConfigError(
            f"{path}: no such file or directory",
            hint="pass a directory (e.g. a site-packages exported from an image), a .whl, or a .so/.cubin/.fatbin/.o file",
        )
    results = []
    for display, opener in _iter_files(path):
        stats.files_seen += 1
        with opener() as data:
            stats.bytes_read += len(data)
            audit = audit_bytes(display, data, want_sass, stats)
        if audit is not None:
            results.append(audit)
    return results


def audit_bytes(
    display: str, data: bytes | mmap.mmap, want_sass: SassPolicy, stats: ScanStats
) -> FileAudit | None:
    """The CUDA code objects in one file's bytes, or None when it has none."""
    parsed = elf.parse(data)
    objects: list[CodeObject] = []
    if parsed is not None and parsed.machine == elf.EM_CUDA:
        cubin = bytes(data)
        objects.append(
            _describe_cubin(elf.cubin_arch(cubin, parsed), cubin, parsed, want_sass, stats)
        )
    else:
        ranges = elf.fatbin_ranges(parsed) if parsed is not None else [(0, len(data))]
        for start, end in ranges:
            for entry in fatbin.iter_entries(data, start, end):
                objects.append(_describe_entry(entry, want_sass, stats))
    return FileAudit(display, tuple(objects)) if objects else None


def _payload(entry: fatbin.Entry) -> bytes | None:
    if entry.compression == "zstd":
        return zstd.decompress(entry.payload, entry.uncompressed_size)
    if entry.compression == "none":
        return entry.payload
    return None  # the pre-12.8 LZ scheme: counted, not decoded


def _describe_entry(entry: fatbin.Entry, want_sass: SassPolicy, stats: ScanStats) -> CodeObject:
    body = _payload(entry)
    if body is None:
        return CodeObject(entry.arch, {}, decoded=False)
    if entry.arch.ptx:
        names = [m.decode() for m in _PTX_ENTRY_RE.findall(body)]
        return CodeObject(entry.arch, dict(Counter(map(family_of, names))), decoded=True)
    parsed = elf.parse(body)
    if parsed is None:
        return CodeObject(entry.arch, {}, decoded=False)
    return _describe_cubin(entry.arch, body, parsed, want_sass, stats)


def _describe_cubin(
    arch: CudaArch, cubin: bytes, parsed: elf.Elf, want_sass: SassPolicy, stats: ScanStats
) -> CodeObject:
    names = elf.kernel_names(parsed)
    fams = [family_of(n) for n in names]
    fp4 = tuple(n for n, f in zip(names, fams, strict=True) if f == NVFP4)
    native = None
    if fp4 and sass.checkable(arch.major) and want_sass(arch):
        stats.sass_cubins += 1
        scanned = sass.scan_cubin(cubin, arch.major).native_fp4
        native = {k: scanned.get(k, "") for k in fp4}
    return CodeObject(arch, dict(Counter(fams)), True, fp4, native)


def _iter_files(path: Path) -> Iterator[tuple[str, Callable[[], object]]]:
    if path.is_file():
        if zipfile.is_zipfile(path) and path.suffix in (".whl", ".zip"):
            yield from _iter_zip(path, path.name)
        else:
            yield path.name, lambda p=path: _mapped(p)
        return
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = Path(root) / name
            if full.is_symlink():
                continue  # the target is audited under its own name
            rel = full.relative_to(path).as_posix()
            if name.endswith(".whl"):
                yield from _iter_zip(full, rel)
            elif _CANDIDATE_RE.search(name):
                st = full.stat()
                if (st.st_dev, st.st_ino) in seen or st.st_size == 0:
                    continue
                seen.add((st.st_dev, st.st_ino))
                yield rel, lambda p=full: _mapped(p)


def _iter_zip(path: Path, display: str) -> Iterator[tuple[str, Callable[[], object]]]:
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise ConfigError(
            f"{path}: not a readable wheel/zip ({exc})", hint="re-download it"
        ) from exc
    with zf:
        for info in zf.infolist():
            if info.is_dir() or not _CANDIDATE_RE.search(info.filename) or info.file_size == 0:
                continue
            yield f"{display}!{info.filename}", lambda i=info: _zip_member(zf, i)


@contextmanager
def _mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            yield b""
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            yield mm


@contextmanager
def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Iterator[bytes]:
    # A member is read only if its first bytes look like ELF or a fatbin: most .so in a
    # wheel are plain host code, but they must be inflated in full to know, so we peek.
    with zf.open(info) as fh:
        head = fh.read(8)
        if head[:4] != elf.ELF_MAGIC and head != fatbin.MAGIC and not info.filename.endswith(".a"):
            yield b""
            return
        yield head + fh.read()
