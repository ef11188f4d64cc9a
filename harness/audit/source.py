"""Bytes of one file to audit, read without trusting it: a file on disk or a wheel member.

Everything here treats its input as hostile data. Nothing is extracted: a wheel member is
inflated as a stream (bounded by what its zip entry declares, checked before reading, and
by its CRC at the end) and read forward through a window, so an 800 MB library costs a few
MB of memory. A member's name never reaches a path or a subprocess.

A reader answers `read_at(offset, n)` with exactly n bytes or raises `Unreadable`; a
forward reader that is asked for bytes it already let go of starts the stream again
(rare: only an ELF whose section names sit far before its section table).
"""

from __future__ import annotations

import ctypes
import os
import struct
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType

from harness.errors import ConfigError
from harness.safety import paths

_igzip: ModuleType | None  # isal's modules, or None / zlib where isal is missing
_crc_mod: ModuleType
try:  # ISA-L inflates 2.3x faster than zlib (0.93 s vs 2.15 s for sgl-kernel's 813 MB library)
    from isal import igzip_lib as _igzip
    from isal import isal_zlib as _crc_mod
except ImportError:  # pragma: no cover - isal is a dependency; zlib gives the same bytes
    _igzip = None
    _crc_mod = zlib

CHUNK = 4 << 20  # most bytes one read or one inflate call returns
IN_CHUNK = 512 << 10  # compressed bytes read at a time
WINDOW = 32 << 20  # history a forward reader keeps (section names sit just before the table)
MAX_MEMBER = 4 << 30  # no real wheel member seen above 813 MB (sgl-kernel 0.3.21)
MAX_WHEEL_TOTAL = 32 << 30  # declared bytes of all members read from one wheel
MAX_DEFLATE_RATIO = 1100  # deflate cannot do better than ~1032:1


def tune_malloc() -> None:
    """For a process that inflates gigabytes 4 MiB at a time (a pool worker): keep freed
    chunks in the heap instead of giving them back and faulting them in again (glibc's
    default trims the heap top at 128 KiB-8 MiB and maps big blocks apart). 0.1 s less
    system time per 800 MB inflated (benchmarks/README.md, "audit"); a no-op without glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-1, 16 << 20)  # M_TRIM_THRESHOLD: 16 MB saves as much as 64 and holds less
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


class Unreadable(Exception):
    """This file cannot be read to the end: why, in words a user can act on."""


class Reader:
    """Random access to one file's bytes (os.pread), with the same interface as a stream."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        try:  # non-blocking, regular files only: a FIFO or a device is a reason, not a hang
            self._fd = paths.open_fd(os.fspath(path))
        except ConfigError as exc:
            raise Unreadable(exc.message) from None
        self.size = os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)

    def read_at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise Unreadable(
                f"truncated: needs bytes {offset}..{offset + n}, the file has {self.size}"
            )
        data = os.pread(self._fd, n, offset)
        if len(data) != n:
            raise Unreadable(f"short read at {offset}: {len(data)} of {n} bytes")
        return data

    def find(self, needle: bytes, start: int, end: int) -> int:
        """First offset of `needle` in [start, end), or -1."""
        end = min(end, self.size)
        pos = start
        while pos < end:
            block = os.pread(self._fd, min(CHUNK, end - pos), pos)
            hit = block.find(needle)
            if hit >= 0 and pos + hit + len(needle) <= end:
                return pos + hit
            if len(block) < len(needle) or pos + len(block) >= end:
                return -1
            pos += len(block) - len(needle) + 1
        return -1

    def release(self, before: int) -> None:
        """Bytes before `before` will not be asked for again (a no-op with random access)."""

    def finish(self) -> None:
        """Read to the end, so that a stream's length and CRC are checked (no-op here)."""


class BytesReader(Reader):
    """The same interface over bytes already in memory (a bare cubin, a decoded payload)."""

    def __init__(self, data: bytes | bytearray) -> None:
        self._data = data
        self.size = len(data)

    def close(self) -> None:
        pass

    def read_at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise Unreadable(f"truncated: needs bytes {offset}..{offset + n}, there are {self.size}")
        return bytes(memoryview(self._data)[offset : offset + n])  # one copy, as slicing bytes makes

    def find(self, needle: bytes, start: int, end: int) -> int:
        return self._data.find(needle, start, min(end, self.size))


class View(Reader):
    """Bytes [base, base + size) of another reader, addressed from 0 (a cubin in a fatbin)."""

    def __init__(self, reader: Reader, base: int, size: int) -> None:
        self._reader = reader
        self._base = base
        self.size = size

    def close(self) -> None:
        pass

    def read_at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise Unreadable(f"truncated: needs bytes {offset}..{offset + n}, there are {self.size}")
        return self._reader.read_at(self._base + offset, n)

    def find(self, needle: bytes, start: int, end: int) -> int:
        hit = self._reader.find(needle, self._base + start, self._base + min(end, self.size))
        return hit - self._base if hit >= 0 else -1


class StreamReader(Reader):
    """Forward reading over chunks from `open_stream()`, keeping `WINDOW` bytes of history.

    Chunks are kept as they come (a deque of (offset, bytes)): no buffer is ever regrown
    or copied whole, only the pieces a read spans are joined.
    """

    def __init__(self, open_stream: Callable[[], Iterator[bytes]], size: int) -> None:
        self._open = open_stream
        self.size = size
        self._restart()

    def _restart(self) -> None:
        self._chunks = self._open()
        self._held: deque[tuple[int, bytes]] = deque()
        self._end = 0  # stream offset just past the last chunk held
        self._low = 0  # nothing before this is wanted again
        self._eof = False

    @property
    def _base(self) -> int:
        return self._held[0][0] if self._held else self._end

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close:
            close()

    def _fill(self, upto: int) -> None:
        while self._end < upto and not self._eof:
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self._eof = True
                break
            keep = self._low - WINDOW
            while self._held and self._held[0][0] + len(self._held[0][1]) <= keep:
                self._held.popleft()
            self._held.append((self._end, chunk))
            self._end += len(chunk)

    def _rewind_if_needed(self, offset: int) -> None:
        if offset < self._base:
            self.close()
            self._restart()

    def read_at(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise Unreadable(
                f"truncated: needs bytes {offset}..{offset + n}, the member has {self.size}"
            )
        self._rewind_if_needed(offset)
        self._fill(offset + n)
        if self._end < offset + n:
            raise Unreadable(f"truncated: the stream ended at {self._end} of {self.size} bytes")
        parts = []
        for start, chunk in self._held:
            stop = start + len(chunk)
            if stop <= offset:
                continue
            if start >= offset + n:
                break
            parts.append(chunk[max(0, offset - start) : offset + n - start])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def find(self, needle: bytes, start: int, end: int) -> int:
        end = min(end, self.size)
        pos = start
        self._rewind_if_needed(pos)
        while pos < end:
            self._fill(pos + 1)
            hit = -1
            for cstart, chunk in self._held:
                cstop = cstart + len(chunk)
                if cstop <= pos:
                    continue
                lo = max(pos, cstart) - cstart
                hit = chunk.find(needle, lo, min(end, cstop) - cstart)
                if hit >= 0:
                    return cstart + hit
                # A needle split across this chunk and the next.
                if cstop < min(end, self._end):
                    across = self.read_at(max(pos, cstop - len(needle) + 1), min(2 * len(needle) - 2, end - max(pos, cstop - len(needle) + 1)))
                    j = across.find(needle)
                    if j >= 0:
                        return max(pos, cstop - len(needle) + 1) + j
            if self._end >= end or self._eof:
                return -1
            pos = max(pos, self._end - len(needle) + 1)
            self.release(pos)
            self._fill(self._end + 1)
        return -1

    def release(self, before: int) -> None:
        self._low = max(self._low, before)

    def finish(self) -> None:
        self.release(self.size)
        self._fill(self.size + 1)


@dataclass(frozen=True)
class Member:
    """One wheel member to read: where its bytes are and what its entry declares."""

    wheel: str
    name: str
    header_offset: int
    compress_type: int
    compress_size: int
    file_size: int
    crc: int
    flag_bits: int


def member_of(wheel: str, info: zipfile.ZipInfo) -> Member:
    return Member(
        wheel,
        info.filename,
        info.header_offset,
        info.compress_type,
        info.compress_size,
        info.file_size,
        info.CRC,
        info.flag_bits,
    )


def check_member(m: Member) -> None:
    """What a member's zip entry declares, judged before a byte of it is inflated."""
    if m.flag_bits & 0x1:
        raise Unreadable("encrypted zip member")
    if m.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise Unreadable(f"zip compression method {m.compress_type} (only stored and deflate are read)")
    if m.file_size > MAX_MEMBER:
        raise Unreadable(f"declares {m.file_size} bytes, over the {MAX_MEMBER >> 30} GiB cap")
    if m.compress_type == zipfile.ZIP_STORED and m.compress_size != m.file_size:
        raise Unreadable(f"stored member of {m.compress_size} bytes declares {m.file_size}")
    if m.file_size > MAX_DEFLATE_RATIO * m.compress_size + (1 << 20):
        raise Unreadable(
            f"zip bomb: {m.compress_size} compressed bytes declare {m.file_size} "
            f"(deflate cannot exceed ~1032:1)"
        )


_LOCAL = struct.Struct("<4sHHHHHIIIHH")


class _Inflater:
    """Raw deflate with a cap on each output: ISA-L's IgzipDecompressor (keeps unread input
    itself, no copy of the tail per call), or zlib's decompressobj."""

    def __init__(self) -> None:
        self._isal = _igzip.IgzipDecompressor(flag=_igzip.DECOMP_DEFLATE) if _igzip else None
        self._zlib = None if self._isal else zlib.decompressobj(-15)
        self._tail = b""

    @property
    def needs_input(self) -> bool:
        return self._isal.needs_input if self._isal else not self._tail

    @property
    def eof(self) -> bool:
        if self._isal:
            return self._isal.eof
        assert self._zlib is not None  # __init__ sets exactly one of the two
        return self._zlib.eof

    def inflate(self, raw: bytes | memoryview, max_length: int) -> bytes:
        if self._isal:
            return self._isal.decompress(raw, max_length)
        assert self._zlib is not None  # __init__ sets exactly one of the two
        out = self._zlib.decompress(self._tail + raw if self._tail else raw, max_length)
        self._tail = self._zlib.unconsumed_tail
        return out


_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, ValueError) + (
    (_igzip.IsalError, _igzip.error) if _igzip else ()
)


def data_offset(fd: int, header_offset: int) -> int:
    """Where a zip member's data starts: past its local header, whose name and extra field
    lengths may differ from the central directory's."""
    head = os.pread(fd, _LOCAL.size, header_offset)
    if len(head) != _LOCAL.size or head[:4] != b"PK\x03\x04":
        raise Unreadable("bad zip local header")
    name_len, extra_len = _LOCAL.unpack(head)[-2:]
    return header_offset + _LOCAL.size + name_len + extra_len


def member_chunks(m: Member) -> Iterator[bytes]:
    """The member's bytes, inflated at most CHUNK at a time, length and CRC checked at the end.

    Compressed bytes are read IN_CHUNK at a time into one reused buffer (the inflater keeps
    what it has not consumed itself): 512 KiB in, up to 4 MiB out keeps every allocation
    under glibc's mmap threshold, which saves 0.06 s of page faults per 800 MB inflated
    (benchmarks/README.md, "audit")."""
    try:
        fd = paths.open_fd(m.wheel, what="wheel")
    except ConfigError as exc:
        raise Unreadable(exc.message) from None
    try:
        pos = data_offset(fd, m.header_offset)
        left_in = m.compress_size
        left_out = m.file_size
        crc = 0
        inflater = _Inflater() if m.compress_type == zipfile.ZIP_DEFLATED else None
        step = IN_CHUNK if inflater is not None else CHUNK
        buf = memoryview(bytearray(min(step, max(left_in, 1)))) if inflater is not None else None
        while left_out > 0:
            raw: bytes | memoryview = b""
            if inflater is None or inflater.needs_input:
                if left_in <= 0:
                    break
                if buf is None:  # stored, not deflated (buf is made for an inflater only)
                    raw = os.pread(fd, min(step, left_in), pos)  # handed on as is: a new buffer
                else:
                    raw = buf[: os.preadv(fd, [buf[: min(step, left_in)]], pos)]
                if not raw:
                    break
                pos += len(raw)
                left_in -= len(raw)
            if inflater is None:
                out = bytes(raw)
            else:
                try:
                    out = inflater.inflate(raw, min(left_out, CHUNK) + 1)
                except _INFLATE_ERRORS as exc:
                    raise Unreadable(f"corrupt deflate stream: {exc}") from exc
            if len(out) > left_out:
                raise Unreadable(f"inflates past its declared {m.file_size} bytes")
            left_out -= len(out)
            crc = _crc_mod.crc32(out, crc)
            if out:
                yield out
            elif inflater is not None and (inflater.eof or not raw):
                break  # the stream ended, or made no progress: judged by the length below
        if left_out:
            raise Unreadable(
                f"truncated: inflates to {m.file_size - left_out} of its declared {m.file_size} bytes"
            )
        if crc != m.crc:
            raise Unreadable(f"CRC mismatch (zip says {m.crc:08x}, data gives {crc:08x})")
    finally:
        os.close(fd)


def open_member(m: Member) -> StreamReader:
    check_member(m)
    return StreamReader(lambda: member_chunks(m), m.file_size)
