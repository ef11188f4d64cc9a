"""Paths named by data: resolved, kept under the root they belong to, regular files only, read
with a bound.

A results folder, a bundle manifest or a lock file names files by relative path. Each is joined
to its root, resolved (symlinks included) and must stay under that root; an absolute path or a
`..` part is refused before anything is opened. A FIFO would block a read forever and a device
(/dev/zero, /dev/urandom) never ends, so files are opened non-blocking and checked with fstat on
the open descriptor (no window between the check and the read), and no read takes more than the
bound its caller gives.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from harness.errors import ConfigError

MiB = 1 << 20


def kind_of(mode: int) -> str:
    """What a file is, in words, for a message."""
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def special(path: Path | str) -> str | None:
    """Why `path` (followed) is not a plain file to read, or None when it is one or is missing."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def _open_regular(path: Path, what: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{what} {path}: a loop of symbolic links", hint="point it at a real file") from None
        raise ConfigError(f"{what} {path}: cannot open it ({exc.strerror})",
                          hint="check the path: it must be a file you can read") from None
    except ValueError:  # a NUL in the name
        raise ConfigError(f"{what} {path!r}: not a file name", hint="give a file path") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise ConfigError(f"{what} {path}: is {kind_of(mode)}, not a regular file",
                          hint="give a regular file (FIFOs, devices and sockets are never read)")
    return fd


def read_bytes(path: Path | str, *, limit: int, what: str = "file") -> bytes:
    """The whole of a regular file of at most `limit` bytes; anything else is a ConfigError."""
    path = Path(path)
    fd = _open_regular(path, what)
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it ({exc.strerror})", hint="check the file") from None
    if len(data) > limit:
        raise ConfigError(f"{what} {path}: larger than {limit} bytes",
                          hint="this is not the file expected here: check the path")
    return data


def read_text(path: Path | str, *, limit: int, what: str = "file") -> str:
    return read_bytes(path, limit=limit, what=what).decode("utf-8", errors="replace")


def tail_text(path: Path | str, *, max_bytes: int = 4 * MiB, what: str = "log") -> str:
    """The last `max_bytes` of a regular file, decoded leniently (a log tail of any size)."""
    path = Path(path)
    fd = _open_regular(path, what)
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                f.seek(size - max_bytes)
            data = f.read(max_bytes)
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it ({exc.strerror})", hint="check the file") from None
    return data.decode("utf-8", errors="replace")


def open_fd(path: Path | str, *, what: str = "file") -> int:
    """A read-only descriptor of a regular file (FIFOs, devices, sockets refused); the caller closes it."""
    return _open_regular(Path(path), what)


def open_regular(path: Path | str, *, what: str = "file"):
    """A binary file object on a regular file (FIFOs, devices, sockets refused); the caller bounds reads."""
    return os.fdopen(_open_regular(Path(path), what), "rb", closefd=True)


def is_inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def under(root: Path | str, rel: str, *, what: str, hint: str = "") -> Path:
    """`root / rel`, resolved, when `rel` is a relative path that stays under `root` (symlinks
    followed); an absolute path, a `..` part, a NUL or a symlink loop is a ConfigError naming `what`."""
    root = Path(root)
    text = str(rel)
    fix = hint or f"a path here is relative to {root} and stays inside it"
    if not text or "\x00" in text or "\n" in text or "\r" in text:
        raise ConfigError(f"{what}: {text!r} is not a file name", hint=fix)
    raw = Path(text)
    if raw.is_absolute() or ".." in raw.parts:
        raise ConfigError(f"{what}: {text!r} leaves {root} (absolute or '..')", hint=fix)
    try:
        base = root.resolve()
        target = (base / raw).resolve()
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"{what}: cannot resolve {text!r}: {exc}", hint=fix) from None
    if not is_inside(target, base):
        raise ConfigError(f"{what}: {text!r} resolves to {target}, outside {base}", hint=fix)
    return target
