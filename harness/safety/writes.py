"""Files the tool writes: whole or not at all, at the path asked, and never through a link.

`--out /dev/null` run as root must not replace the device node, and a symlink planted at the
target must not be followed nor silently replaced by a file: the target is checked with lstat
and must be missing or a regular file. The text goes to a temporary file beside it, is synced
and renamed over the target, so a reader only ever sees a whole file. A folder is created only
when the caller says so (a run directory); a file the user names (`--out x.html`) must have
its folder already.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from harness.errors import ConfigError
from harness.safety.paths import kind_of

# What users type for "write it to the terminal": `-`, and /dev/stdout (a link to
# /proc/self/fd/1, which is never written through: the text goes to standard output instead).
STDOUT_NAMES = frozenset({"-", "/dev/stdout", "/proc/self/fd/1", "/dev/fd/1"})


def is_stdout(path: Path | str | None) -> bool:
    """Whether an output flag names standard output rather than a file."""
    return path is not None and str(path) in STDOUT_NAMES


def target_problem(path: Path) -> str | None:
    """Why `path` must not be written (replaced), or None."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot inspect it ({exc.strerror})"
    except ValueError:
        return "not a file name"
    if stat.S_ISREG(mode):
        return None
    return f"is {kind_of(mode)}: never written through or replaced"


def check_target(path: Path | str, flag: str = "output") -> Path:
    """`path` when it may be written: missing or a regular file, in an existing folder."""
    path = Path(path)
    hint = f"give {flag} a new file name or an existing regular file, in a folder that exists"
    if "\x00" in str(path) or not path.name:
        raise ConfigError(f"{flag} {str(path)!r}: not a file name", hint=hint)
    if (why := target_problem(path)) is not None:
        raise ConfigError(f"{flag} {path}: {why}", hint=hint)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: {parent} {'is not a folder' if parent.exists() else 'does not exist'}",
                          hint=hint)
    return path


def write_bytes(path: Path | str, data: bytes, *, make_parents: bool = False, flag: str = "output") -> None:
    """Atomically write `data` to `path` (see the module doc for what is refused)."""
    path = Path(path)
    if make_parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    check_target(path, flag)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:80]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # checked again just before the rename: a link planted meanwhile is not replaced
        if (why := target_problem(path)) is not None:
            raise ConfigError(f"{flag} {path}: {why}", hint=f"give {flag} a regular file path")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The rename itself must reach the disk too, or a power cut can undo it.
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def write_text(path: Path | str, text: str, *, make_parents: bool = False, flag: str = "output") -> None:
    write_bytes(path, text.encode("utf-8"), make_parents=make_parents, flag=flag)


def open_new(path: Path | str, *, flag: str = "output", binary: bool = False):
    """A text file object writing `path` from the start (a log written as it grows): the target
    is checked as for write_bytes, and opened with O_NOFOLLOW, so a link planted between the
    check and the open is refused by the kernel, not followed."""
    path = check_target(path, flag)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write it ({exc.strerror})",
                          hint=f"give {flag} a regular file path you can write") from None
    return os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")


def remove_file(path: Path | str, *, flag: str = "output") -> None:
    """Unlink a regular file the tool wrote; anything else there is left alone and refused."""
    path = Path(path)
    if (why := target_problem(path)) is not None:
        raise ConfigError(f"{flag} {path}: {why}", hint="remove it yourself if it is yours")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
