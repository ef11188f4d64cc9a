"""Bounded Zstandard decompression of fatbin payloads through the system libzstd (ctypes).

CUDA >= 12.8 compresses every cubin inside a fatbin with zstd. Python 3.11 has no zstd in
its standard library, but libzstd.so.1 is on every Debian/Ubuntu host (apt and dpkg link
it), so we call it directly. Without it the audit still counts archs (headers are never
compressed); only kernel names and SASS need this.

A frame is data from an untrusted binary: its declared size is checked against a fixed cap
and against `MAX_RATIO` times the frame's own length BEFORE anything is allocated (a
150-byte frame may claim 64 GiB). The largest ratio seen in a real wheel is 97:1 (vLLM
0.33.0 cu130, a 62 MiB cubin), the largest cubin 62 MiB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
MAX_OUTPUT = 256 << 20  # no real cubin or PTX seen above 62 MiB
MAX_RATIO = 512
_UNKNOWN = 2**64 - 1
_ERROR = 2**64 - 2


class FrameError(ValueError):
    """A frame that is corrupt, or that declares more than the caps allow."""


class _InBuffer(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


class _OutBuffer(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


@lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL | None:
    for name in (ctypes.util.find_library("zstd"), "libzstd.so.1", "libzstd.dylib"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.ZSTD_decompress.restype = ctypes.c_size_t
        lib.ZSTD_decompress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        lib.ZSTD_isError.restype = ctypes.c_uint
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        lib.ZSTD_getErrorName.restype = ctypes.c_char_p
        lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
        lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
        lib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.ZSTD_createDCtx.restype = ctypes.c_void_p
        lib.ZSTD_freeDCtx.argtypes = [ctypes.c_void_p]
        lib.ZSTD_decompressStream.restype = ctypes.c_size_t
        lib.ZSTD_decompressStream.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(_OutBuffer),
            ctypes.POINTER(_InBuffer),
        ]
        return lib
    return None


def available() -> bool:
    return _lib() is not None


def declared_size(data: bytes, fallback: int = 0) -> int:
    """What the frame says it inflates to (the fatbin header's figure when the frame is silent),
    checked against the caps; raises FrameError."""
    lib = _lib()
    if lib is None:
        raise FrameError("libzstd not found")
    if not data.startswith(ZSTD_MAGIC):
        raise FrameError("not a zstd frame (bad magic)")
    size = lib.ZSTD_getFrameContentSize(data, len(data))
    if size == _ERROR:
        raise FrameError("corrupt zstd frame header")
    if size == _UNKNOWN:
        size = fallback
    if size <= 0:
        raise FrameError("zstd frame of unknown size")
    limit = min(MAX_OUTPUT, max(1 << 20, MAX_RATIO * len(data)))
    if size > limit:
        raise FrameError(
            f"zstd frame of {len(data)} bytes declares {size} bytes (cap {limit}: "
            f"{MAX_OUTPUT >> 20} MiB or {MAX_RATIO}x the frame)"
        )
    return size


def decompress(data: bytes, size_hint: int = 0) -> bytearray:
    """The whole frame, bounded by `declared_size`; raises FrameError. A bytearray, not
    copied into bytes: a 62 MB cubin is held once."""
    lib = _lib()
    size = declared_size(data, size_hint)
    assert lib is not None
    out = bytearray(size)  # written in place: no zero-filled ctypes buffer, no extra copy
    got = lib.ZSTD_decompress((ctypes.c_char * size).from_buffer(out), size, data, len(data))
    if lib.ZSTD_isError(got):
        raise FrameError(f"zstd: {lib.ZSTD_getErrorName(got).decode()}")
    del out[got:]
    return out


def decompress_prefix(data: bytes, n: int, size_hint: int = 0) -> bytearray:
    """At least the first `n` bytes of the frame (all of it when shorter), decoding no more
    blocks than needed: a cubin's section names sit at its start, its code after. The
    buffer it was decoded into, not a copy."""
    lib = _lib()
    total = declared_size(data, size_hint)
    assert lib is not None
    want = min(n, total)
    out = bytearray(want)
    dctx = lib.ZSTD_createDCtx()
    if not dctx:
        raise MemoryError("ZSTD_createDCtx")
    try:
        src = ctypes.c_char_p(data)
        inb = _InBuffer(ctypes.cast(src, ctypes.c_void_p), len(data), 0)
        outb = _OutBuffer(ctypes.addressof((ctypes.c_char * want).from_buffer(out)), want, 0)
        while outb.pos < want:
            before = (inb.pos, outb.pos)
            ret = lib.ZSTD_decompressStream(dctx, ctypes.byref(outb), ctypes.byref(inb))
            if lib.ZSTD_isError(ret):
                raise FrameError(f"zstd: {lib.ZSTD_getErrorName(ret).decode()}")
            if ret == 0 or (inb.pos, outb.pos) == before:
                break  # the frame ended, or the input did, before `want` bytes
    finally:
        lib.ZSTD_freeDCtx(dctx)
    del out[outb.pos :]
    return out
