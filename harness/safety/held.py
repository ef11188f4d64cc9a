"""A folder held open: opened once by its path, then reached only through that descriptor.

`roots.Root` opens its folder by path again for every call. A store that is served for the
length of a build and pruned while other processes may write beside it (the compile cache) is
held instead: after the one open, no path is ever resolved again. Every name below is reached
from the open descriptor of the folder above it (`openat` with O_NOFOLLOW, `mkdirat`), so a link
planted anywhere below, to a file or to a folder, is refused and never followed. Files are
created under a temporary name and published with `linkat`, which never replaces a name that is
there: a write adds a new file or nothing. Removal (`remove`) reaches each folder again from the
held descriptor and unlinks by name relative to it (`unlinkat`), only when the folder and the
file are the very ones (device and inode) the scan saw: a folder swapped for a link, or for
another folder, between the scan and the removal loses nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from harness.errors import ConfigError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
BLOCK = 1 << 20


class Source(Protocol):
    def read(self, n: int, /) -> bytes: ...


class Refused(ConfigError):
    """A name under the held folder that is a link, or not the kind asked for."""


class ShortBody(ValueError):
    """The source of a new file ended before the size it declared: nothing was stored."""


@dataclass(frozen=True)
class Entry:
    """One regular file a scan saw, and the identities `remove` checks before unlinking it."""

    folder: tuple[str, ...]  # names from the held folder down; () for the top
    name: str
    size: int
    mtime: float
    folder_id: tuple[int, int]  # (st_dev, st_ino) of the folder holding it
    file_id: tuple[int, int]


def _check_name(name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise Refused(f"{name!r} is not a name inside a folder", hint="a bug: names here come from the tool")
    return name


class Held:
    """One folder, open for as long as this object is (a context manager)."""

    def __init__(self, path: Path | str, *, what: str, create_mode: int | None = None) -> None:
        """Open `path` (a link at `path` itself is followed, once: the user named it); when
        `create_mode` is given, a missing folder is made with that mode first."""
        self.path = Path(path)
        self.what = what
        if "\x00" in str(self.path):
            raise ConfigError(f"{what} {str(self.path)!r}: not a folder name", hint="give a folder path")
        if create_mode is not None:
            try:
                self.path.mkdir(mode=create_mode, parents=True, exist_ok=True)
            except FileExistsError:
                pass  # a file there: the open below says so
            except OSError as exc:
                raise ConfigError(f"{what} {self.path}: cannot create it ({exc.strerror})",
                                  hint="give a folder you can write to") from None
        try:
            self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise
        except OSError as exc:
            why = "is not a folder" if exc.errno == errno.ENOTDIR else f"cannot open it ({exc.strerror})"
            raise ConfigError(f"{what} {self.path}: {why}", hint="give a folder") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd)

    def listing(self) -> list[tuple[str, bool]]:
        """The names directly in the held folder, each with whether it is a folder (not a link)."""
        with os.scandir(self.fd) as it:
            return sorted((e.name, e.is_dir(follow_symlinks=False)) for e in it)

    def free_bytes(self) -> int:
        st = os.fstatvfs(self.fd)
        return st.f_bavail * st.f_frsize

    # -- reaching a folder ------------------------------------------------------------------

    def _refused(self, parts: tuple[str, ...], exc: OSError) -> Refused:
        rel = "/".join(parts)
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            return Refused(f"{self.what} {self.path}: {rel} is a link or not a folder; nothing under this "
                           "folder is followed through a link", hint=f"remove {self.path / rel}")
        return Refused(f"{self.what} {self.path / rel}: cannot open it ({exc.strerror})",
                       hint="check the folder's permissions")

    @contextlib.contextmanager
    def folder(self, parts: tuple[str, ...], *, create_mode: int | None = None) -> Iterator[int]:
        """An open descriptor of folder `parts` below the held one (made, with `create_mode`,
        where missing); FileNotFoundError when missing and not made."""
        fd = self.fd
        try:
            for i, name in enumerate(parts):
                _check_name(name)
                if create_mode is not None:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(name, create_mode, dir_fd=fd)
                try:
                    nfd = os.open(name, _DIR, dir_fd=fd)
                except FileNotFoundError:
                    raise
                except OSError as exc:
                    raise self._refused(parts[: i + 1], exc) from None
                if fd != self.fd:
                    os.close(fd)
                fd = nfd
            yield fd
        finally:
            if fd != self.fd:
                os.close(fd)

    # -- reading -----------------------------------------------------------------------------

    def open_file(self, parts: tuple[str, ...]) -> tuple[BinaryIO, os.stat_result]:
        """Regular file `parts`, open for reading, and its fstat; FileNotFoundError when missing.
        The caller closes it (and bounds what it reads)."""
        name = _check_name(parts[-1])
        with self.folder(parts[:-1]) as dfd:
            try:
                fd = os.open(name, _FILE, dir_fd=dfd)
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise self._refused(parts, exc) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise Refused(f"{self.what} {self.path / '/'.join(parts)}: not a regular file",
                          hint="remove it (FIFOs, devices and sockets are never read)")
        return os.fdopen(fd, "rb"), st

    def load(self, parts: tuple[str, ...], *, limit: int) -> bytes:
        """The whole of regular file `parts`, refused when larger than `limit` bytes."""
        f, st = self.open_file(parts)
        with f:
            if st.st_size > limit:
                raise Refused(f"{self.what} {self.path / '/'.join(parts)}: larger than {limit} bytes",
                              hint="this is not the file expected here")
            return f.read(limit)

    def exists(self, parts: tuple[str, ...]) -> bool:
        """Whether anything (a file, a folder, a link) has the name `parts`."""
        try:
            with self.folder(parts[:-1]) as dfd:
                os.stat(_check_name(parts[-1]), dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    # -- writing -----------------------------------------------------------------------------

    def create(self, parts: tuple[str, ...], src: Source, size: int, *, mode: int = 0o600,
               folder_mode: int = 0o700) -> bool:
        """Add the file `parts` with exactly `size` bytes read from `src`, its folders made where
        missing; False (nothing written) when the name is already taken. The bytes go to a
        temporary file first and the name is published with linkat, which never replaces: a
        source that ends early raises ShortBody and leaves nothing."""
        name = _check_name(parts[-1])
        with self.folder(parts[:-1], create_mode=folder_mode) as dfd:
            with contextlib.suppress(FileNotFoundError):
                os.stat(name, dir_fd=dfd, follow_symlinks=False)
                return False
            tmp = f".{name[:80]}.{secrets.token_hex(6)}.tmp"
            fd = os.open(tmp, _NEW, mode, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    left = size
                    while left:
                        block = src.read(min(BLOCK, left))
                        if not block:
                            raise ShortBody(f"{left} of {size} bytes never came")
                        f.write(block)
                        left -= len(block)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                except FileExistsError:
                    return False  # another writer published the name first: it stays
                return True
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)

    def touch(self, f: BinaryIO) -> None:
        """Mark an open file as used now (its mtime), through its descriptor."""
        with contextlib.suppress(OSError):
            os.utime(f.fileno())

    # -- scanning and removing ------------------------------------------------------------------

    def scan(self, *, max_depth: int = 8, max_files: int = 10_000_000) -> list[Entry]:
        """Every regular file below the held folder; links are neither listed nor descended."""
        out: list[Entry] = []

        def visit(fd: int, parts: tuple[str, ...]) -> None:
            here = os.fstat(fd)
            with os.scandir(fd) as it:
                names = [(e.name, e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in it]
            for name, is_dir, is_file in names:
                if is_dir:
                    if len(parts) >= max_depth:
                        raise Refused(f"{self.what} {self.path}: folders nested deeper than {max_depth} levels",
                                      hint="this is not the folder expected here")
                    try:
                        child = os.open(name, _DIR, dir_fd=fd)
                    except OSError:
                        continue  # gone, or swapped for a link since the listing: not descended
                    try:
                        visit(child, (*parts, name))
                    finally:
                        os.close(child)
                elif is_file:
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        out.append(Entry(parts, name, st.st_size, st.st_mtime, (here.st_dev, here.st_ino),
                                         (st.st_dev, st.st_ino)))
                        if len(out) > max_files:
                            raise Refused(f"{self.what} {self.path}: more than {max_files} files",
                                          hint="this is not the folder expected here")

        visit(self.fd, ())
        return out

    def remove(self, entries: list[Entry], *,
               before_folder: Callable[[tuple[str, ...]], None] | None = None) -> tuple[int, int]:
        """Unlink `entries` (from `scan`): (files removed, bytes freed). Each folder is reached
        again from the held descriptor, without following a link, and must be the folder the
        scan saw; each name is unlinked relative to it, and only when it is still the file the
        scan saw. `before_folder` runs before each folder is reached (a test's race)."""
        by_folder: dict[tuple[tuple[str, ...], tuple[int, int]], list[Entry]] = {}
        for e in entries:
            by_folder.setdefault((e.folder, e.folder_id), []).append(e)
        removed = freed = 0
        for (parts, folder_id), group in by_folder.items():
            if before_folder is not None:
                before_folder(parts)
            try:
                with self.folder(parts) as dfd:
                    here = os.fstat(dfd)
                    if (here.st_dev, here.st_ino) != folder_id:
                        continue  # another folder under that name now: nothing in it is ours to remove
                    for e in group:
                        try:
                            st = os.stat(e.name, dir_fd=dfd, follow_symlinks=False)
                            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != e.file_id:
                                continue
                            os.unlink(e.name, dir_fd=dfd)
                        except OSError:
                            continue
                        removed, freed = removed + 1, freed + e.size
            except (OSError, Refused):
                continue  # gone, or a link now: nothing removed there
        return removed, freed
