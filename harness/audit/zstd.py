"""Zstandard decompression of fatbin payloads through the system libzstd (ctypes).

CUDA >= 12.8 compresses every cubin inside a fatbin with zstd. Python 3.11 has no zstd in
its standard library and the project adds no wheel for it, but libzstd.so.1 is on every
Debian/Ubuntu host (apt and dpkg link it), so we call it directly. Without it the audit
still counts archs (headers are never compressed); only kernel names and SASS need this.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


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
        lib.ZSTD_decompress.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        lib.ZSTD_isError.restype = ctypes.c_uint
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
        lib.ZSTD_getFrameContentSize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        return lib
    return None


def available() -> bool:
    return _lib() is not None


def decompress(data: bytes, size_hint: int = 0) -> bytes | None:
    """The decompressed bytes, or None when libzstd is missing or the frame is bad."""
    lib = _lib()
    if lib is None or not data.startswith(ZSTD_MAGIC):
        return None
    size = lib.ZSTD_getFrameContentSize(data, len(data))
    # 2**64-1 / 2**64-2 mean "unknown" / "error": fall back to the fatbin header's figure.
    if size >= 2**64 - 2:
        size = size_hint
    if size <= 0:
        return None
    out = bytearray(size)  # written in place: no zero-filled ctypes buffer, no extra copy
    got = lib.ZSTD_decompress((ctypes.c_char * size).from_buffer(out), size, data, len(data))
    if lib.ZSTD_isError(got):
        return None
    del out[got:]
    return bytes(out)
