"""A wheel unpacked into a folder from data: a zip read with bounds, written through a root.

A wheel in a bundle is checked against its lock, but the lock came with the bundle: the zip
itself is data. Its members are regular files under relative names (no absolute name, no `..`,
no backslash, no NUL, no link), at most `max_members` of them and `max_bytes` inflated in all,
each no larger than the size its header declares; every file is written through
harness.safety.roots (a link planted in the destination is refused, never written through). A
file that is not a zip, or a damaged one, is one ConfigError naming it (exit 2).
"""

from __future__ import annotations

import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from harness.errors import ConfigError
from harness.safety import writes
from harness.safety.paths import open_regular
from harness.safety.roots import Root


class _Bounded:
    """A member's stream that stops at its declared size and at what is left of the whole."""

    def __init__(self, raw, declared: int, left: list[int], what: str) -> None:
        self.raw, self.declared, self.left, self.what, self.read_so_far = raw, declared, left, what, 0

    def read(self, n: int = -1) -> bytes:
        want = 1 << 20 if n is None or n < 0 else n
        block = self.raw.read(min(want, self.declared - self.read_so_far + 1))
        self.read_so_far += len(block)
        self.left[0] -= len(block)
        if self.read_so_far > self.declared:
            raise ConfigError(f"{self.what}: inflates past the size its header declares",
                              hint="the wheel is damaged or not a wheel: make the bundle again")
        if self.left[0] < 0:
            raise ConfigError(f"{self.what}: the wheel inflates past the bound",
                              hint="the wheel is damaged or not a wheel: make the bundle again")
        return block


def _member_name(name: str, where: str) -> tuple[str, ...]:
    p = PurePosixPath(name)
    if not name or "\x00" in name or "\\" in name or p.is_absolute() or ".." in p.parts:
        raise ConfigError(f"{where}: member {name[:200]!r} would leave the folder",
                          hint="the wheel is damaged or not a wheel: make the bundle again")
    return tuple(x for x in p.parts if x not in ("", "."))


def unpack_wheel(path: Path | str, dest: Root, *, max_bytes: int = 8 << 30, max_members: int = 100_000,
                 only: set[str] | None = None) -> list[str]:
    """Unpack the wheel at `path` into `dest` (see the module doc), or only its members named in
    `only`; the files written."""
    where = f"wheel {path}"
    hint = "the wheel is damaged or not a wheel: make the bundle again"
    left = [max_bytes]
    written: list[str] = []
    try:
        with open_regular(path, what="wheel") as f, zipfile.ZipFile(f) as zf:
            infos = zf.infolist()
            if len(infos) > max_members:
                raise ConfigError(f"{where}: more than {max_members} members", hint=hint)
            for info in infos:
                parts = _member_name(info.filename, where)
                if not parts or (only is not None and info.filename not in only):
                    continue
                if info.is_dir():
                    dest.mkdir("/".join(parts))
                    continue
                mode = info.external_attr >> 16
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # a link, a device: only its type bits say so
                    raise ConfigError(f"{where}: member {info.filename[:200]!r} is not a regular file", hint=hint)
                if info.file_size > left[0]:
                    raise ConfigError(f"{where}: unpacks to more than {max_bytes} bytes", hint=hint)
                rel = "/".join(parts)
                with zf.open(info) as raw:
                    dest.save_stream(rel, _Bounded(raw, info.file_size, left, f"{where}: member {rel}"),
                                     mode=0o755 if mode & 0o111 else 0o644)
                written.append(rel)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            ValueError) as exc:
        raise ConfigError(f"{where}: not a readable wheel ({type(exc).__name__}: {str(exc)[:200]})",
                          hint=hint) from None
    return written


def repack_wheel(src: Path | str, dest: Path | str, drop, *, max_bytes: int = 8 << 30,
                 max_members: int = 100_000) -> list[str]:
    """Copy wheel `src` to the new file `dest` (never written through a link) without the members
    `drop(name)` is true for; RECORD follows. Members are stored, not deflated: the bundle's xz
    compresses far better than zip's deflate. Bounded as `unpack_wheel`. The members dropped."""
    where = f"wheel {src}"
    hint = "the wheel is damaged or not a wheel: download it again"
    left = [max_bytes]
    removed: list[str] = []
    try:
        with open_regular(src, what="wheel") as f, zipfile.ZipFile(f) as zin, \
                writes.open_new(dest, flag="re-packed wheel", binary=True) as fout, \
                zipfile.ZipFile(fout, "w", zipfile.ZIP_STORED) as zout:
            infos = zin.infolist()
            if len(infos) > max_members:
                raise ConfigError(f"{where}: more than {max_members} members", hint=hint)
            record = next((i for i in infos if i.filename.endswith(".dist-info/RECORD")), None)
            for info in infos:
                if info is record:
                    continue
                _member_name(info.filename, where)
                if drop(info.filename):
                    removed.append(info.filename)
                    continue
                with zin.open(info) as raw:
                    data = _Bounded(raw, info.file_size, left, f"{where}: member {info.filename[:200]}").read(
                        info.file_size + 1)
                out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                out.external_attr = info.external_attr
                zout.writestr(out, data, compress_type=zipfile.ZIP_STORED)
            if record is not None:
                gone = set(removed)
                with zin.open(record) as raw:
                    text = _Bounded(raw, record.file_size, left, f"{where}: RECORD").read(record.file_size + 1)
                lines = [ln for ln in text.decode("utf-8", "replace").splitlines() if ln and ln.split(",")[0] not in gone]
                zout.writestr(zipfile.ZipInfo(record.filename, date_time=(1980, 1, 1, 0, 0, 0)), "\n".join(lines) + "\n")
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            ValueError) as exc:
        raise ConfigError(f"{where}: not a readable wheel ({type(exc).__name__}: {str(exc)[:200]})",
                          hint=hint) from None
    return removed
