"""Folders opened as roots: a bisect folder, a run folder, a cache, `--from`, `--out`, `--log-dir`.

The folder itself is the one the user (or the tool) named, and may be reached through a link.
Everything under it is walked one name at a time from an open descriptor of the folder above
(`openat` with O_NOFOLLOW): a link anywhere below the root, to a file or to a folder, is refused,
never followed, so nothing outside is read and nothing outside is written, whatever the folder
holds, and there is no window between a check and the open. Reads take a bound, as in `paths`;
a FIFO or a device is refused by fstat on the open descriptor. Writes are whole or not at all
(a temporary file beside the target, renamed over it) and never replace a link or a device.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from harness.errors import ConfigError
from harness.safety.paths import MiB, kind_of
from harness.safety.readers import MAX_DEPTH, loads_json

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


def _parts(rel: str | PurePosixPath, what: str, root: Path) -> tuple[str, ...]:
    text = str(rel)
    hint = f"a path here is relative to {root} and stays inside it"
    if not text or any(c in text for c in "\x00\n\r"):
        raise ConfigError(f"{what}: {text!r} is not a file name", hint=hint)
    p = PurePosixPath(text)
    if p.is_absolute() or ".." in p.parts:
        raise ConfigError(f"{what}: {text!r} leaves {root} (absolute or '..')", hint=hint)
    parts = tuple(x for x in p.parts if x not in ("", "."))
    if not parts:
        raise ConfigError(f"{what}: {text!r} names the folder itself, not a file in it", hint=hint)
    return parts


class Root:
    """One folder; every path under it is relative ("steps/0001-x.json") and link-free."""

    def __init__(self, path: Path | str, *, what: str = "folder", create: bool = False) -> None:
        self.path = Path(path)
        self.what = what
        if "\x00" in str(self.path):
            raise ConfigError(f"{what} {str(self.path)!r}: not a folder name", hint="give a folder path")
        if create:
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                pass  # a file there: the open below says so
            except OSError as exc:
                raise ConfigError(f"{what} {self.path}: cannot create it ({exc.strerror})",
                                  hint="give a folder you can write to") from None

    # -- walking -------------------------------------------------------------------------------

    def _refuse(self, rel: str, exc: OSError, *, folder: bool) -> ConfigError:
        where = self.path / rel
        if exc.errno in (errno.ELOOP, errno.EMLINK) or (folder and exc.errno == errno.ENOTDIR and _is_link(where)):
            return ConfigError(f"{self.what} {self.path}: {rel} is a symbolic link; nothing under this folder "
                               "is followed through a link", hint=f"remove the link {where}, or give another folder")
        if exc.errno == errno.ENOTDIR:
            return ConfigError(f"{self.what} {self.path}: {rel} is not a folder", hint=f"remove {where}")
        return ConfigError(f"{self.what} {where}: cannot open it ({exc.strerror})",
                           hint="check the folder: it must be one you can read and write")

    def _root_fd(self) -> int:
        try:
            return os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise
        except OSError as exc:
            what = "is not a folder" if exc.errno == errno.ENOTDIR else f"cannot open it ({exc.strerror})"
            raise ConfigError(f"{self.what} {self.path}: {what}", hint="give a folder") from None

    @contextlib.contextmanager
    def _dir(self, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
        """An open descriptor of the folder `parts` under the root (made when `create`)."""
        fd = self._root_fd()
        try:
            for i, name in enumerate(parts):
                if create:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, 0o777, dir_fd=fd)
                try:
                    nfd = os.open(name, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    raise
                except OSError as exc:
                    raise self._refuse("/".join(parts[: i + 1]), exc, folder=True) from None
                os.close(fd)
                fd = nfd
            yield fd
        finally:
            os.close(fd)

    def file(self, rel: str) -> Path:
        """The path of `rel` (for a message or a child process's argument); checked, not opened."""
        return self.path.joinpath(*_parts(rel, self.what, self.path))

    def mkdir(self, rel: str) -> Path:
        """Make the folder `rel` (and those above it) under the root, refusing links; its path."""
        parts = _parts(rel, self.what, self.path)
        with self._dir(parts, create=True):
            pass
        return self.path.joinpath(*parts)

    def exists(self, rel: str) -> bool:
        parts = _parts(rel, self.what, self.path)
        try:
            with self._dir(parts[:-1]) as fd:
                os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def files(self, rel: str = ".", *, suffix: str = "") -> list[str]:
        """The regular files directly in folder `rel` (sorted names, ending in `suffix`); a link,
        a FIFO or a device there is skipped, never opened. A missing folder has none."""
        parts = () if rel in (".", "") else _parts(rel, self.what, self.path)
        try:
            with self._dir(parts) as fd, os.scandir(fd) as it:
                return sorted(e.name for e in it if e.name.endswith(suffix) and e.is_file(follow_symlinks=False))
        except FileNotFoundError:
            return []

    def walk(self, rel: str = ".", *, suffix: str = "", max_files: int = 100_000, max_depth: int = 64) -> list[str]:
        """Every regular file under folder `rel`, as sorted paths relative to the root; links are
        neither listed nor descended, and a tree of more than `max_files` files or `max_depth`
        levels is refused (a walk is bounded like a read)."""
        start = () if rel in (".", "") else _parts(rel, self.what, self.path)
        out: list[str] = []
        todo = [start]
        while todo:
            parts = todo.pop()
            if len(parts) - len(start) > max_depth:
                raise ConfigError(f"{self.what} {self.path}: folders nested deeper than {max_depth} levels",
                                  hint="this is not the folder expected here")
            try:
                with self._dir(parts) as fd, os.scandir(fd) as it:
                    for e in it:
                        if e.is_dir(follow_symlinks=False):
                            todo.append((*parts, e.name))
                        elif e.is_file(follow_symlinks=False) and e.name.endswith(suffix):
                            out.append("/".join((*parts, e.name)))
            except FileNotFoundError:
                continue
            if len(out) > max_files:
                raise ConfigError(f"{self.what} {self.path}: more than {max_files} files",
                                  hint="this is not the folder expected here")
        return sorted(out)

    def folders(self, rel: str = ".") -> list[str]:
        """The folders directly in `rel` (sorted names); links to folders are not among them."""
        parts = () if rel in (".", "") else _parts(rel, self.what, self.path)
        try:
            with self._dir(parts) as fd, os.scandir(fd) as it:
                return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []

    # -- reading -------------------------------------------------------------------------------

    def open_file(self, rel: str):
        """A binary file object on regular file `rel` (the caller bounds its reads and closes it);
        FileNotFoundError when missing."""
        parts = _parts(rel, self.what, self.path)
        where = self.path.joinpath(*parts)
        with self._dir(parts[:-1]) as dfd:
            try:
                fd = os.open(parts[-1], _FILE, dir_fd=dfd)
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise self._refuse("/".join(parts), exc, folder=False) from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise ConfigError(f"{self.what} {where}: is {kind_of(mode)}, not a regular file",
                              hint=f"remove {where} (FIFOs, devices and sockets are never read)")
        return os.fdopen(fd, "rb")

    def sha256(self, rel: str) -> str:
        """The sha256 of regular file `rel`, read in blocks."""
        h = hashlib.sha256()
        with self.open_file(rel) as f:
            while block := f.read(1 << 20):
                h.update(block)
        return h.hexdigest()

    def load_bytes(self, rel: str, *, limit: int) -> bytes:
        """The whole of regular file `rel`, at most `limit` bytes; FileNotFoundError when missing."""
        where = self.file(rel)
        with self.open_file(rel) as f:
            try:
                data = f.read(limit + 1)
            except OSError as exc:
                raise ConfigError(f"{self.what} {where}: cannot read it ({exc.strerror})", hint="check the file") from None
        if len(data) > limit:
            raise ConfigError(f"{self.what} {where}: larger than {limit} bytes",
                              hint="this is not the file expected here: remove it or give another folder")
        return data

    def copy_in(self, src: Root, rel: str, *, to: str | None = None) -> Path:
        """Copy regular file `rel` of root `src` to `to` (default the same path) under this root,
        with its permission bits; a link on either side is refused."""
        with src.open_file(rel) as f:
            return self.save_stream(to or rel, f, mode=os.fstat(f.fileno()).st_mode)

    def load_text(self, rel: str, *, limit: int = 16 * MiB) -> str:
        return self.load_bytes(rel, limit=limit).decode("utf-8", errors="replace")

    def tail_text(self, rel: str, *, max_bytes: int = 4 * MiB) -> str:
        """The last `max_bytes` of regular file `rel`, decoded leniently (a log tail of any size)."""
        with self.open_file(rel) as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                f.seek(size - max_bytes)
            return f.read(max_bytes).decode("utf-8", errors="replace")

    def load_json(self, rel: str, *, limit: int = 64 * MiB, max_depth: int = MAX_DEPTH,
                  hint: str = "the file is damaged or not the one expected: restore it or write it again") -> Any:
        return loads_json(self.load_bytes(rel, limit=limit), name=f"{self.what} {self.file(rel)}",
                          max_depth=max_depth, hint=hint)

    # -- writing -------------------------------------------------------------------------------

    def save_bytes(self, rel: str, data: bytes) -> Path:
        """Write `rel` whole (its folders made, none of them a link); never through a link."""
        return self.save_stream(rel, io.BytesIO(data))

    def save_stream(self, rel: str, src, *, mode: int | None = None) -> Path:
        """Write `rel` whole from the binary file `src` (copied in blocks), with permission bits
        `mode` when given; as save_bytes, never through a link."""
        parts = _parts(rel, self.what, self.path)
        where = self.path.joinpath(*parts)
        name = parts[-1]
        with self._dir(parts[:-1], create=True) as dfd:
            self._check_target(dfd, name, where)
            tmp = f".{name[:80]}.{secrets.token_hex(4)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    while block := src.read(1 << 20):
                        f.write(block)
                    if mode is not None:
                        os.fchmod(f.fileno(), mode & 0o777)
                    f.flush()
                    os.fsync(f.fileno())
                self._check_target(dfd, name, where)  # a link planted meanwhile is not replaced
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            with contextlib.suppress(OSError):
                os.fsync(dfd)  # the rename itself reaches the disk
        return where

    def save_text(self, rel: str, text: str) -> Path:
        return self.save_bytes(rel, text.encode("utf-8"))

    def _check_target(self, dfd: int, name: str, where: Path) -> None:
        try:
            mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISREG(mode):
            raise ConfigError(f"{self.what} {where}: is {kind_of(mode)}: never written through or replaced",
                              hint=f"remove {where}, or give another folder")

    def remove(self, rel: str) -> None:
        """Unlink regular file `rel` when it is there; a link is unlinked itself, never followed."""
        parts = _parts(rel, self.what, self.path)
        try:
            with self._dir(parts[:-1]) as dfd:
                os.unlink(parts[-1], dir_fd=dfd)
        except FileNotFoundError:
            pass


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False
