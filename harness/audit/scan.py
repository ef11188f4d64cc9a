"""Find the CUDA code in a path (directory, wheel, .so, .cubin, .fatbin, .o) and describe it.

The work is split in two: `plan` lists what to read (files, and wheel members as zip
entries, never extracted), `scan_one` reads one of them as untrusted data and returns what
it holds, or why it cannot be read. `audit_tree` runs the plan on a process pool bounded by
os.cpu_count(), largest files first.

A host library on disk is read at its fatbin sections only; a wheel member is inflated as a
stream and its containers are read as they pass (the section table, at the end, then says
which of them sit in `.nv_fatbin` and which in `__nv_relfatbin`).
"""

from __future__ import annotations

import os
import re
import struct
import unicodedata
import zipfile
import zlib
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from harness.archs import CC, CudaArch, Load
from harness.audit import elf, fatbin, sass, zstd
from harness.audit.families import family_of
from harness.audit.required import must_hold_kernels
from harness.audit.source import (
    MAX_WHEEL_TOTAL,
    BytesReader,
    Member,
    Reader,
    StreamReader,
    Unreadable,
    View,
    member_of,
    open_member,
    tune_malloc,
)
from harness.errors import ConfigError
from harness.safety.paths import special

# a real wheel holds a few thousand files (vLLM 0.31.0: ~3,000; torch: ~15,000)
MAX_WHEEL_MEMBERS = 65_536
_INFLATE_ERRORS: tuple[type[Exception], ...] = (EOFError, zlib.error)
try:
    from isal.isal_zlib import error as _isal_error

    if isinstance(_isal_error, type) and issubclass(_isal_error, Exception):  # its stub says instance
        _INFLATE_ERRORS += (_isal_error,)
except ImportError:  # pragma: no cover - isal is a dependency
    pass

# Files worth opening: shared objects (also versioned, libfoo.so.13), objects, archives,
# and standalone device code. Everything else in a site-packages is Python or data.
_CANDIDATE_RE = re.compile(r"\.(?:so(?:\.\d+)*|o|a|cubin|fatbin)$")
_PTX_ENTRY_RE = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)")
_LD_SCRIPT = (b"/* GNU ld script", b"INPUT(", b"GROUP(", b"OUTPUT_FORMAT")
AR_MAGIC = b"!<arch>\n"
MAX_CUBIN = 256 << 20  # a bare cubin is read whole; flashinfer's largest is 0.6 MB
NAME_PREFIX = 256 << 10  # first bytes decoded to find a compressed cubin's kernel names
NVFP4 = "nvfp4_gemm"
_BATCH_BYTES = 16 << 20  # small files go in batches this big: a fine-grained tail for the pool
_BATCH_FILES = 256


@dataclass(frozen=True)
class CodeObject:
    """One cubin (SASS) or PTX module, with its kernels grouped by family."""

    arch: CudaArch
    families: Counter[str]  # family -> kernels (0 for one it has none of); empty when `decoded` is False
    decoded: bool
    fp4_kernels: tuple[str, ...] = ()
    native_fp4: dict[str, str] | None = None  # fp4 kernel -> opcode, when SASS was read


@dataclass(frozen=True)
class FileAudit:
    """What one file holds: `objects` the runtime can load (`.nv_fatbin`, a bare cubin or
    fatbin), `relocatable` the -rdc device code of `__nv_relfatbin`, reported apart."""

    path: str
    objects: tuple[CodeObject, ...]
    relocatable: tuple[CodeObject, ...] = ()

    @property
    def cubins(self) -> Counter[str]:
        return Counter(o.arch.name for o in self.objects if not o.arch.ptx)

    @property
    def ptx(self) -> list[str]:
        return sorted({o.arch.name for o in self.objects if o.arch.ptx}, key=arch_sort_key)

    @property
    def relocatable_cubins(self) -> Counter[str]:
        return Counter(o.arch.name for o in self.relocatable if not o.arch.ptx)

    @property
    def relocatable_ptx(self) -> list[str]:
        return sorted({o.arch.name for o in self.relocatable if o.arch.ptx}, key=arch_sort_key)

    def families(self) -> dict[str, Counter[str]]:
        """family -> {arch name: kernel count}, loadable code only."""
        out: dict[str, Counter[str]] = {}
        for o in self.objects:
            for fam, n in o.families.items():
                out.setdefault(fam, Counter())[o.arch.name] += n
        return out

    @property
    def undecoded(self) -> int:
        return sum(1 for o in self.objects if not o.decoded)


@dataclass(frozen=True)
class UnreadableFile:
    path: str
    reason: str


@dataclass
class ScanStats:
    files_seen: int = 0
    bytes_read: int = 0
    sass_cubins: int = 0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ScanResult:
    """Everything `audit_tree` found: CUDA files, files it could not read, and files a stack
    requires to hold kernels that hold none."""

    files: tuple[FileAudit, ...]
    unreadable: tuple[UnreadableFile, ...]
    empty_required: tuple[tuple[str, str], ...]  # (path, why it must hold kernels)


@dataclass(frozen=True)
class SassPolicy:
    """What is decoded beyond the headers, for the verdicts asked: NVFP4 cubins that a target
    chip would load natively are disassembled (`enabled`); PTX, whose kernel names need the
    whole text inflated (1.5 GB in vLLM 0.33.0), is read only where a target would JIT it,
    or everywhere with `all_ptx`."""

    targets: tuple[CC, ...] = ()
    enabled: bool = False
    all_ptx: bool = False

    def __call__(self, arch: CudaArch) -> bool:
        return self.enabled and any(
            arch.load_on(cc) is Load.NATIVE and sass.checkable(cc.major) for cc in self.targets
        )

    def ptx(self, arch: CudaArch) -> bool:
        return self.all_ptx or any(arch.load_on(cc) is Load.JIT for cc in self.targets)


NO_SASS = SassPolicy()


def arch_sort_key(name: str) -> tuple[int, int, str, str]:
    a = CudaArch.parse(name)
    return (a.major, a.minor, a.suffix, name)


def safe_name(name: str) -> str:
    """A file or member name fit to print: control and format characters shown as '?'."""
    clean = "".join("?" if unicodedata.category(c)[0] == "C" else c for c in name)
    return clean if len(clean) <= 300 else clean[:297] + "..."


# --- what to read ------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    display: str
    size: int
    path: str | None = None  # a file on disk
    member: Member | None = None  # or a wheel member


def plan(path: Path) -> tuple[list[Task], list[UnreadableFile]]:
    """The files and wheel members to read under `path`, and those refused up front."""
    if not path.exists():
        raise ConfigError(
            f"{path}: no such file or directory",
            hint="pass a directory (e.g. a site-packages exported from an image), a .whl, "
            "or a .so/.cubin/.fatbin/.o file",
        )
    if (kind := special(path)) is not None and kind != "a folder":
        raise ConfigError(f"{path}: is {kind}, not a file or folder to audit",
                          hint="pass a directory, a .whl, or a .so/.cubin/.fatbin/.o file (FIFOs and devices "
                          "are never read)")
    tasks: list[Task] = []
    bad: list[UnreadableFile] = []
    if path.is_file():
        if path.suffix in (".whl", ".zip"):
            _plan_wheel(path, path.name, tasks, bad)
        else:
            tasks.append(Task(safe_name(path.name), path.stat().st_size, path=str(path)))
        return tasks, bad
    seen: set[tuple[int, int]] = set()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = Path(root) / name
            if full.is_symlink():
                continue  # the target is audited under its own name
            rel = safe_name(full.relative_to(path).as_posix())
            if (kind := special(full)) is not None:
                if name.endswith(".whl") or _CANDIDATE_RE.search(name):
                    bad.append(UnreadableFile(rel, f"is {kind}, not a regular file (never read)"))
                continue
            if name.endswith(".whl"):
                _plan_wheel(full, rel, tasks, bad)
            elif _CANDIDATE_RE.search(name):
                st = full.stat()
                if (st.st_dev, st.st_ino) in seen or st.st_size == 0:
                    continue
                seen.add((st.st_dev, st.st_ino))
                tasks.append(Task(rel, st.st_size, path=str(full)))
    return tasks, bad


def _plan_wheel(path: Path, display: str, tasks: list[Task], bad: list[UnreadableFile]) -> None:
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        bad.append(UnreadableFile(display, f"not a readable zip archive ({exc})"))
        return
    # Entries whose data overlap another's are the building block of zip bombs that
    # inflate one compressed run many times over; real wheels never have them.
    spans = sorted((i.header_offset, i.header_offset + 30 + i.compress_size, i.filename) for i in infos)
    overlapping = {
        name for (s1, e1, name), (s2, _e2, _n2) in zip(spans, spans[1:], strict=False) if s2 < e1
    }
    if len(infos) > MAX_WHEEL_MEMBERS:
        bad.append(UnreadableFile(display, f"{len(infos)} members: over {MAX_WHEEL_MEMBERS}, no real wheel has "
                                  "that many (not audited)"))
        return
    empty = [i.filename for i in infos if not i.is_dir() and _CANDIDATE_RE.search(i.filename) and i.file_size == 0]
    if empty:
        # a library of 0 bytes cannot be loaded: the wheel is damaged, whatever else it holds
        bad.append(UnreadableFile(display, f"{len(empty)} library member(s) of 0 bytes, e.g. {safe_name(empty[0])}"))
    total = 0
    for info in infos:
        name = info.filename
        if info.is_dir() or not _CANDIDATE_RE.search(name) or info.file_size == 0:
            continue
        shown = f"{display}!{safe_name(name)}"
        if name in overlapping:
            bad.append(UnreadableFile(shown, "zip entry overlaps the next one (zip bomb layout)"))
            continue
        total += info.file_size
        if total > MAX_WHEEL_TOTAL:
            bad.append(UnreadableFile(shown, f"wheel declares over {MAX_WHEEL_TOTAL >> 30} GiB of libraries"))
            continue
        tasks.append(Task(shown, info.file_size, member=member_of(str(path), info)))


# --- reading one file -------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcome:
    display: str
    audit: FileAudit | None = None
    unreadable: str | None = None
    bytes_read: int = 0
    sass_cubins: int = 0


def scan_one(task: Task, policy: SassPolicy = NO_SASS) -> _Outcome:
    """Read one file or member; any problem with its bytes is an outcome, not an exception."""
    counter = [0]
    try:
        if task.member is not None:
            reader: Reader = open_member(task.member)
        elif task.path is not None:
            reader = Reader(task.path)
        else:  # plan() sets one of the two
            raise Unreadable("neither a file nor a wheel member")
    except Unreadable as exc:
        return _Outcome(task.display, unreadable=str(exc))
    except OSError as exc:
        return _Outcome(task.display, unreadable=f"cannot open: {exc.strerror or exc}")
    except _INFLATE_ERRORS as exc:
        return _Outcome(task.display, unreadable=f"compressed data damaged ({type(exc).__name__}: {exc})")
    try:
        loadable, relocatable = _read(reader, policy, counter)
        reader.finish()
    except Unreadable as exc:
        return _Outcome(task.display, unreadable=str(exc), bytes_read=reader.size)
    except OSError as exc:
        return _Outcome(task.display, unreadable=f"read error: {exc.strerror or exc}")
    except _INFLATE_ERRORS as exc:
        # a deflate stream that ends early (ISA-L raises EOFError) or is corrupt: this member's problem
        return _Outcome(task.display, unreadable=f"compressed data ends early or is damaged "
                        f"({type(exc).__name__}: {exc})", bytes_read=reader.size)
    except (struct.error, ValueError, IndexError, OverflowError, MemoryError) as exc:
        # A shape no check above foresaw: still this file's problem, not the audit's end.
        return _Outcome(task.display, unreadable=f"malformed ({type(exc).__name__}: {exc})")
    finally:
        reader.close()
    audit = FileAudit(task.display, tuple(loadable), tuple(relocatable)) if loadable or relocatable else None
    return _Outcome(task.display, audit=audit, bytes_read=reader.size, sass_cubins=counter[0])


def _read(reader: Reader, policy: SassPolicy, counter: list[int]) -> tuple[list[CodeObject], list[CodeObject]]:
    if reader.size < 4:
        raise Unreadable(f"{reader.size} bytes: too short for any binary")
    head = reader.read_at(0, min(64, reader.size))
    if elf.is_elf(head):
        hdr = elf.header(head)
        if hdr.machine == elf.EM_CUDA:
            if reader.size > MAX_CUBIN:
                raise Unreadable(f"cubin of {reader.size} bytes (cap {MAX_CUBIN >> 20} MiB)")
            return [_bare_cubin(reader.read_at(0, reader.size), hdr, policy, counter)], []
        return _host_elf(reader, hdr, policy, counter)
    if head.startswith(fatbin.MAGIC):
        return [_describe_entry(reader, e, policy, counter) for e in fatbin.iter_entries(reader)], []
    if head.startswith(AR_MAGIC):
        # A static archive's objects are linked into something else, never loaded as is.
        return [], [_describe_entry(reader, e, policy, counter) for e in fatbin.iter_entries(reader)]
    if head.lstrip().startswith(_LD_SCRIPT):
        return [], []  # a linker script named libfoo.so: text, no code
    raise Unreadable(f"not an ELF file, fatbin or ar archive (starts with {head[:8].hex()})")


def _host_elf(
    reader: Reader, hdr: elf.Header, policy: SassPolicy, counter: list[int]
) -> tuple[list[CodeObject], list[CodeObject]]:
    if hdr.shoff == 0:
        return [], []
    failed: list[tuple[int, str]] = []
    if isinstance(reader, StreamReader):
        # Forward only: read every container as it passes, then keep those the section
        # table (at the end, where linkers put it; kept in the window) places in a fatbin
        # section. A container that does not parse counts only if it is in one.
        found = []
        pos = reader.find(fatbin.MAGIC, 0, reader.size)
        while pos >= 0:
            try:
                stop = fatbin.container_end(reader, pos, reader.size)
                for e in fatbin.container_entries(reader, pos, stop):
                    found.append((pos, _describe_entry(reader, e, policy, counter)))
            except Unreadable as exc:
                failed.append((pos, str(exc)))
                stop = pos + 1
            pos = reader.find(fatbin.MAGIC, stop, reader.size)
        secs = elf.sections(reader, hdr)
    else:
        secs = elf.sections(reader, hdr)
        found = [
            (e.container, _describe_entry(reader, e, policy, counter))
            for s in secs
            if s.name in elf.FATBIN_SECTIONS
            for e in fatbin.iter_entries(reader, s.offset, s.end)
        ]
    loadable, relocatable = [], []
    ranges = [(s.offset, s.end, s.name) for s in secs if s.name in elf.FATBIN_SECTIONS]
    for _start, end, name in ranges:
        if end > reader.size:
            raise Unreadable(f"truncated: section {name} ends at {end}, the file has {reader.size} bytes")
    for offset, reason in failed:
        if any(start <= offset < end for start, end, _ in ranges):
            raise Unreadable(reason)
    for offset, obj in found:
        where = next((name for start, end, name in ranges if start <= offset < end), None)
        if where == elf.LOADABLE_FATBIN:
            loadable.append(obj)
        elif where == elf.RELOCATABLE_FATBIN:
            relocatable.append(obj)
    return loadable, relocatable


def _describe_entry(reader: Reader, entry: fatbin.Entry, policy: SassPolicy, counter: list[int]) -> CodeObject:
    if entry.compression == "lz":
        return CodeObject(entry.arch, Counter(), decoded=False)  # the pre-12.8 LZ scheme: counted only
    if entry.compression == "zstd" and not zstd.available():
        return CodeObject(entry.arch, Counter(), decoded=False)
    if entry.arch.ptx and not policy.ptx(entry.arch):
        return CodeObject(entry.arch, Counter(), decoded=False)
    where = f"{entry.arch.name} entry at {entry.offset}"
    try:
        if entry.arch.ptx:
            stored = reader.read_at(entry.offset, entry.stored_size)
            text = zstd.decompress(stored, entry.uncompressed_size) if entry.compression == "zstd" else stored
            names = [m.decode() for m in _PTX_ENTRY_RE.findall(text)]
            return CodeObject(entry.arch, Counter(map(family_of, names)), decoded=True)
        if entry.compression == "none":
            # Read in place, not copied whole: the leading name table when nvcc's layout is
            # there, else the section table and its names.
            names = _plain_kernels(View(reader, entry.offset, entry.stored_size))
        else:
            names = _entry_kernels(reader.read_at(entry.offset, entry.stored_size), entry)
        fams = [family_of(n) for n in names]
        fp4 = tuple(n for n, f in zip(names, fams, strict=True) if f == NVFP4)
        native = None
        if fp4 and sass.checkable(entry.arch.major) and policy(entry.arch):
            native = _sass([_entry_cubin(reader, entry)], entry.arch, fp4, counter)
        return CodeObject(entry.arch, Counter(fams), True, fp4, native)
    except zstd.FrameError as exc:
        raise Unreadable(f"{where}: {exc}") from exc
    except Unreadable as exc:
        raise Unreadable(f"{where}: {exc}") from exc


def _entry_cubin(reader: Reader, entry: fatbin.Entry) -> bytes | bytearray:
    stored = reader.read_at(entry.offset, entry.stored_size)
    return zstd.decompress(stored, entry.uncompressed_size) if entry.compression == "zstd" else stored


def _cubin_header(head: bytes | bytearray) -> elf.Header:
    if not elf.is_elf(head):
        raise Unreadable("payload is not an ELF cubin")
    return elf.header(head)


def _plain_kernels(view: View) -> list[str]:
    """Kernel names of an uncompressed fatbin cubin, read in place: its header, section
    table and names, not the whole cubin. (The leading-name-table shortcut of zstd cubins is
    not taken here: the uncompressed cubins of older toolchains, bitsandbytes 0.50.2's
    CUDA 11.8/12.1 builds, keep names in that table that no section has.)"""
    return elf.kernel_names(view, _cubin_header(view.read_at(0, min(64, view.size))))


def _entry_kernels(stored: bytes, entry: fatbin.Entry) -> list[str]:
    """Kernel names of a fatbin cubin. An uncompressed one is read by its section table. A
    zstd one (CUDA >= 12.8) is decoded only as far as its leading section-name table when
    nvcc's layout is there (elf.leading_name_table; 2.2 GB of cubins in vLLM 0.33.0 need not
    be inflated for their names), else whole."""
    cubin: bytes | bytearray = stored
    if entry.compression == "zstd":
        size = NAME_PREFIX
        while True:
            prefix = zstd.decompress_prefix(stored, size, entry.uncompressed_size)
            if not elf.is_elf(prefix):
                raise Unreadable("payload is not an ELF cubin")
            table = elf.leading_name_table(prefix, elf.header(prefix[:64]).ehsize)
            if table is not None:
                return elf.kernel_names_from_table(table)
            if len(prefix) < size:
                break  # the whole cubin is in hand and the fast layout is not there
            size *= 8
        cubin = zstd.decompress(stored, entry.uncompressed_size)
    return elf.kernel_names(BytesReader(cubin), _cubin_header(cubin[:64]))


def _bare_cubin(data: bytes, hdr: elf.Header, policy: SassPolicy, counter: list[int]) -> CodeObject:
    secs = elf.sections(BytesReader(data), hdr)
    arch = elf.cubin_arch(data, hdr, secs)
    names = elf.kernel_names(BytesReader(data), hdr)
    fams = [family_of(n) for n in names]
    fp4 = tuple(n for n, f in zip(names, fams, strict=True) if f == NVFP4)
    native = _sass(data, arch, fp4, counter) if fp4 and sass.checkable(arch.major) and policy(arch) else None
    return CodeObject(arch, Counter(fams), True, fp4, native)


def _sass(
    cubin: bytes | list[bytes | bytearray], arch: CudaArch, fp4: tuple[str, ...], counter: list[int]
) -> dict[str, str]:
    """SASS verdicts for the FP4 kernels of one cubin (a one-item list hands it over, so it
    is not held while nvdisasm runs)."""
    counter[0] += 1
    scanned = sass.scan_cubin(cubin, arch.major, fp4).native_fp4
    verdicts = dict.fromkeys(fp4, "")  # every kernel asked, "" where the disassembly said nothing
    verdicts.update((k, v) for k, v in scanned.items() if k in verdicts)
    return verdicts


def audit_bytes(
    display: str, data: bytes, want_sass: SassPolicy = NO_SASS, stats: ScanStats | None = None
) -> FileAudit | None:
    """The CUDA code in one file's bytes, or None when it has none; raises Unreadable."""
    counter = [0]
    loadable, relocatable = _read(BytesReader(bytes(data)), want_sass, counter)
    if stats is not None:
        stats.bytes_read += len(data)
        stats.sass_cubins += counter[0]
    return FileAudit(display, tuple(loadable), tuple(relocatable)) if loadable or relocatable else None


# --- the whole tree -----------------------------------------------------------------------


def _run_batch(batch: list[Task], policy: SassPolicy) -> list[_Outcome]:
    return [scan_one(t, policy) for t in batch]


def _batches(tasks: list[Task]) -> list[list[Task]]:
    """Big files alone, small ones grouped, largest first (so the pool ends evenly)."""
    out: list[list[Task]] = []
    current: list[Task] = []
    weight = 0
    for t in sorted(tasks, key=lambda t: -t.size):
        if t.size >= _BATCH_BYTES:
            out.append([t])
            continue
        current.append(t)
        weight += t.size
        if weight >= _BATCH_BYTES or len(current) >= _BATCH_FILES:
            out.append(current)
            current, weight = [], 0
    if current:
        out.append(current)
    return out


def audit_tree(path: Path, policy: SassPolicy, stats: ScanStats, jobs: int | None = None) -> ScanResult:
    """Every file under `path` that holds CUDA code, in a stable order; what could not be read."""
    tasks, refused = plan(path)
    batches = _batches(tasks)
    jobs = min(jobs or os.cpu_count() or 1, len(batches))
    if jobs <= 1 or sum(t.size for t in tasks) < (16 << 20):
        outcomes = [o for b in batches for o in _run_batch(b, policy)]
    else:
        with ProcessPoolExecutor(max_workers=jobs, initializer=tune_malloc) as pool:
            futures = [pool.submit(_run_batch, b, policy) for b in batches]
            outcomes = [o for f in futures for o in f.result()]
    order = {t.display: i for i, t in enumerate(tasks)}  # each outcome is one task's (scan_one)
    outcomes.sort(key=lambda o: order[o.display])
    stats.files_seen += len(tasks) + len(refused)
    files, bad, empty = [], list(refused), []
    for o in outcomes:
        stats.bytes_read += o.bytes_read
        stats.sass_cubins += o.sass_cubins
        if o.unreadable is not None:
            bad.append(UnreadableFile(o.display, o.unreadable))
        elif o.audit is not None and o.audit.objects:
            files.append(o.audit)
        else:
            if o.audit is not None:
                files.append(o.audit)  # relocatable code only
            why = must_hold_kernels(o.display)
            if why:
                empty.append((o.display, why))
    return ScanResult(tuple(files), tuple(bad), tuple(empty))
