"""Structured files from data, read with bounds: JSON, TOML, and the tar.xz of a bundle.

Every reader takes a size bound (a file is read through harness.safety.paths, so a FIFO or a
device is refused before a byte is read) and a nesting bound (deep nesting is a RecursionError
inside json and tomllib, and in every walk of the result afterwards). Every decode problem is
one ConfigError (exit 2) that names the file.
"""

from __future__ import annotations

import gzip
import json
import lzma
import tarfile
import tomllib
import zlib
from pathlib import Path
from typing import Any

from harness.errors import ConfigError
from harness.safety import writes
from harness.safety.paths import MiB, read_bytes

MAX_DEPTH = 32


def depth(obj: Any, limit: int = MAX_DEPTH) -> int:
    """Nesting depth of lists and dicts in `obj`, counted without recursion; stops past `limit`."""
    deepest = 0
    stack = [(obj, 1)]
    while stack:
        item, d = stack.pop()
        if isinstance(item, dict | list | tuple):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((v, d + 1) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


def _bad(name: str, what: str, hint: str) -> ConfigError:
    return ConfigError(f"{name}: {what}", hint=hint)


def loads_json(data: bytes | str, *, name: str, max_depth: int = MAX_DEPTH,
               hint: str = "the file is damaged or not the one expected: restore it or write it again") -> Any:
    try:
        obj = json.loads(data)
    except RecursionError:
        raise _bad(name, "not readable JSON: nested too deep", hint) from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _bad(name, f"not valid JSON ({str(exc)[:200]})", hint) from None
    if depth(obj, max_depth) > max_depth:
        raise _bad(name, f"not readable JSON: nested deeper than {max_depth} levels", hint)
    return obj


def load_json(path: Path | str, *, limit: int = 64 * MiB, max_depth: int = MAX_DEPTH, what: str = "file",
              hint: str = "the file is damaged or not the one expected: restore it or write it again") -> Any:
    return loads_json(read_bytes(path, limit=limit, what=what), name=f"{what} {path}", max_depth=max_depth, hint=hint)


def loads_toml(data: bytes | str, *, name: str, max_depth: int = MAX_DEPTH,
               hint: str = "correct the TOML syntax at the line named") -> dict:
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        obj = tomllib.loads(text)
    except RecursionError:
        raise _bad(name, "not readable TOML: nested too deep", hint) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise _bad(name, f"not valid TOML ({str(exc)[:200]})", hint) from None
    if depth(obj, max_depth) > max_depth:
        raise _bad(name, f"not readable TOML: nested deeper than {max_depth} levels", hint)
    return obj


def load_toml(path: Path | str, *, limit: int = 4 * MiB, max_depth: int = MAX_DEPTH, what: str = "file",
              hint: str = "correct the TOML syntax at the line named") -> dict:
    return loads_toml(read_bytes(path, limit=limit, what=what), name=f"{what} {path}", max_depth=max_depth, hint=hint)


# xz -9 needs a 64 MiB dictionary; more than this is not a bundle the tool made
XZ_MEMLIMIT = 256 * MiB


class _Xz:
    """An xz stream decoded with a memory limit (lzma.LZMAFile has none), read as a file."""

    def __init__(self, raw) -> None:
        self.raw = raw
        self.dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=XZ_MEMLIMIT)
        self.buf = b""

    def _more(self, want: int) -> bool:
        if self.dec.eof:
            rest = self.dec.unused_data
            if not rest.strip(b"\0"):
                return False
            self.dec = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=XZ_MEMLIMIT)
            self.buf += self.dec.decompress(rest, max_length=want)
            return True
        data = b"" if not self.dec.needs_input else self.raw.read(1 << 16)
        if self.dec.needs_input and not data:
            raise EOFError("the xz stream ends early")
        self.buf += self.dec.decompress(data, max_length=want)
        return True

    def read(self, n: int = -1) -> bytes:
        want = n if n is not None and n >= 0 else 1 << 20
        while len(self.buf) < want and self._more(want - len(self.buf)):
            if n is None or n < 0:
                want = len(self.buf) + (1 << 20)
        out, self.buf = self.buf[:want], self.buf[want:]
        return out


def extract_flat_tar_xz(stream, dest: Path, *, name: str, allowed: set[str] | None, max_bytes: int,
                        max_members: int = 10_000) -> list[str]:
    """Unpack a tar.xz read from `stream` into `dest`: regular files at its top level only, named
    in `allowed` (when given), at most `max_members` of them and `max_bytes` unpacked in all
    (an xz bomb stops at the bound, not at the end of the disk). Returns the names written."""

    hint = "the bundle is damaged or not one `harness bundle make` wrote: copy it again"
    written: list[str] = []
    total = 0
    try:
        # a stream ("r|") tar only calls read(); typeshed asks for a whole IO[bytes]
        with tarfile.open(fileobj=_Xz(stream), mode="r|") as tar:  # type: ignore[call-overload]
            for member in tar:
                if len(written) >= max_members:
                    raise _bad(name, f"more than {max_members} files in the archive", hint)
                base = member.name.removeprefix("./")
                if not member.isfile() or "/" in base or "\0" in base or base in ("", ".", ".."):
                    raise _bad(name, f"archive member {member.name!r} is not a plain file at the top level", hint)
                if allowed is not None and base not in allowed:
                    raise _bad(name, f"archive member {base!r} is not listed in the manifest's lock", hint)
                total += member.size
                if member.size < 0 or total > max_bytes:
                    raise _bad(name, f"unpacks to more than {max_bytes} bytes (the manifest's archive is far "
                               "smaller: not a wheelhouse)", hint)
                src = tar.extractfile(member)
                data = src.read(member.size + 1) if src is not None else b""
                if len(data) != member.size:
                    raise _bad(name, f"archive member {base!r} is cut short", hint)
                writes.write_bytes(dest / base, data, flag=f"{name}: member")
                written.append(base)
    except (lzma.LZMAError, tarfile.TarError, EOFError) as exc:  # OSError (a full disk) is not the archive's fault
        raise _bad(name, f"not a readable tar.xz ({type(exc).__name__}: {str(exc)[:200]})", hint) from None
    return written


def extract_tree(stream, dest: Path, *, name: str, max_bytes: int = 8 << 30, max_members: int = 500_000,
                 hint: str = "the archive is damaged or not a source tarball: delete it to fetch it again") -> None:
    """Unpack a source tarball (an sdist, a `git archive`) read from the binary file `stream` into
    `dest`, with tarfile's "data" filter (no absolute names, no link that leaves `dest`, no device
    or FIFO), at most `max_members` members and `max_bytes` unpacked: a bomb stops at the header
    that crosses the bound, before its data is inflated."""
    total = 0
    try:
        with tarfile.open(fileobj=stream, mode="r:*") as tar:
            for count, member in enumerate(tar, 1):
                total += max(member.size, 0)
                if count > max_members or total > max_bytes:
                    raise _bad(name, f"unpacks to more than {max_members} files or {max_bytes} bytes", hint)
                try:
                    tar.extract(member, dest, filter="data")
                except tarfile.FilterError as exc:
                    raise _bad(name, f"member {member.name[:200]!r} refused ({exc})", hint) from None
    except (tarfile.TarError, lzma.LZMAError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise _bad(name, f"is not a readable archive ({type(exc).__name__}: {str(exc)[:200]})", hint) from None
