"""How fast can a wheel member be inflated? Each inflater alone, one member, same process.

    python benchmarks/audit_inflaters.py WHEEL MEMBER [--repeats 3]
    python benchmarks/audit_inflaters.py WHEEL --all    # the audit's own reader, every library

Why it matters: `harness audit WHEEL` must inflate every library in the wheel (a deflate
stream decodes only from its start), so the fastest inflater sets the audit's CPU floor.
Tried: ISA-L (`isal`, what the audit uses: streaming, 512 KiB in, 4 MiB out), the stdlib's
zlib (the audit's fallback), and, when installed (`pip install zlib-ng deflate rapidgzip`,
not dependencies of the harness): zlib-ng streaming, libdeflate whole-buffer (needs the
whole output in memory: not usable for an 800 MB member under a 400 MB goal), rapidgzip
with 1 and 2 threads. Every output is checked against the member's CRC. Prints wall and
CPU seconds (user + system of this process, threads included), the median of the repeats.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import struct
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator

IN, OUT = 512 << 10, 4 << 20


def _raw_span(wheel: str, info: zipfile.ZipInfo) -> tuple[int, int]:
    with open(wheel, "rb") as fh:
        fh.seek(info.header_offset)
        head = fh.read(30)
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.compress_size


def _pieces(fd: int, start: int, size: int) -> Iterator[memoryview]:
    buf = memoryview(bytearray(IN))
    pos = 0
    while pos < size:
        got = os.preadv(fd, [buf[: min(IN, size - pos)]], start + pos)
        yield buf[:got]
        pos += got


def _stream(make: Callable[[], object], fd: int, start: int, size: int) -> Iterator[bytes]:
    """ISA-L's decompressor keeps unread input itself (needs_input); zlib's hands it back
    (unconsumed_tail)."""
    d = make()
    pieces = _pieces(fd, start, size)
    keeps_input = hasattr(d, "needs_input")
    tail: bytes | memoryview = b""
    while not d.eof:
        if keeps_input:
            raw = next(pieces, None) if d.needs_input else b""
            if raw is None:
                return
            out = d.decompress(raw, OUT)
        else:
            if not tail:
                tail = next(pieces, None)
                if tail is None:
                    return
            out = d.decompress(tail, OUT)
            tail = d.unconsumed_tail
        if out:
            yield out


def inflaters(fd: int, start: int, size: int, usize: int) -> dict[str, Callable[[], Iterator[bytes]]]:
    out: dict[str, Callable[[], Iterator[bytes]]] = {}
    try:
        from isal import igzip_lib

        out["isal (ISA-L) stream"] = lambda: _stream(
            lambda: igzip_lib.IgzipDecompressor(flag=igzip_lib.DECOMP_DEFLATE), fd, start, size
        )
    except ImportError:
        pass
    out["zlib (stdlib) stream"] = lambda: _stream(lambda: zlib.decompressobj(-15), fd, start, size)
    try:
        from zlib_ng import zlib_ng

        out["zlib-ng stream"] = lambda: _stream(lambda: zlib_ng.decompressobj(-15), fd, start, size)
    except ImportError:
        pass
    try:
        import deflate

        out["libdeflate whole buffer"] = lambda: iter([deflate.deflate_decompress(os.pread(fd, size, start), usize)])
    except ImportError:
        pass
    try:
        import rapidgzip

        class Window(io.RawIOBase):
            def __init__(self) -> None:
                self.pos = 0

            def readable(self) -> bool:
                return True

            def seekable(self) -> bool:
                return True

            def tell(self) -> int:
                return self.pos

            def seek(self, off: int, whence: int = 0) -> int:
                self.pos = off if whence == 0 else self.pos + off if whence == 1 else size + off
                return self.pos

            def readinto(self, b) -> int:  # noqa: ANN001
                n = max(0, min(len(b), size - self.pos))
                data = os.pread(fd, n, start + self.pos)
                b[: len(data)] = data
                self.pos += len(data)
                return len(data)

        def rg(threads: int) -> Iterator[bytes]:
            f = rapidgzip.RapidgzipFile(Window(), parallelization=threads)
            while chunk := f.read(OUT):
                yield chunk

        out["rapidgzip 1 thread"] = lambda: rg(1)
        out["rapidgzip 2 threads"] = lambda: rg(2)
    except ImportError:
        pass
    return out


def inflate_all(wheel: str, repeats: int) -> int:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from harness.audit import scan, source

    tasks, refused = scan.plan(Path(wheel))
    total = sum(t.size for t in tasks)
    print(f"{Path(wheel).name}: {len(tasks)} libraries, {total / 1e6:.0f} MB inflated ({len(refused)} refused); "
          f"load average {os.getloadavg()[0]:.1f}")
    cpus, walls = [], []
    for _ in range(repeats):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for t in tasks:
            for _chunk in source.member_chunks(t.member):
                pass
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    print(f"harness member_chunks, every library: wall {statistics.median(walls):.2f} s, "
          f"CPU {statistics.median(cpus):.2f} s (median of {repeats})")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel")
    ap.add_argument("member", nargs="?")
    ap.add_argument(
        "--all",
        action="store_true",
        help="inflate every library the audit would read (harness.audit.source.member_chunks: "
        "ISA-L, length and CRC checked) in this one process, and print the CPU it took",
    )
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.all:
        return inflate_all(args.wheel, args.repeats)
    if not args.member:
        ap.error("name a MEMBER, or pass --all")
    with zipfile.ZipFile(args.wheel) as zf:
        info = zf.getinfo(args.member)
    start, size = _raw_span(args.wheel, info)
    fd = os.open(args.wheel, os.O_RDONLY)
    print(f"{args.member}: {info.compress_size / 1e6:.0f} MB deflated, {info.file_size / 1e6:.0f} MB inflated; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    for name, run in inflaters(fd, start, size, info.file_size).items():
        walls, cpus = [], []
        for _ in range(args.repeats):
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            crc = n = 0
            for chunk in run():
                crc = zlib.crc32(chunk, crc)
                n += len(chunk)
            walls.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            if (n, crc) != (info.file_size, info.CRC):
                print(f"{name}: WRONG OUTPUT ({n} bytes, crc {crc:08x})")
                return 1
        print(f"{name:26s} wall {statistics.median(walls):.2f} s, CPU {statistics.median(cpus):.2f} s "
              f"(inflate + zlib.crc32 of the output)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
