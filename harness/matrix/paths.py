"""Where a matrix may reach on this host: its own repository, and folders it names to mount.

A matrix is data that somebody else may have written. The files it names (patches, local
checkpoints) are read into build contexts and bind-mounted into containers, so each one is
resolved (symlinks included) and must stay inside the matrix's repository: the git top level
of the matrix file, or its folder when it is not in a git work tree. A path the matrix marks
`allow_outside = true` may leave it; nothing may be a system folder, a socket or a device.
"""

from __future__ import annotations

import stat
from pathlib import Path

# Folders a container must never see from the host, and everything under them. `/` itself is
# refused as a mount, not its children (/home, /data, /mnt hold real caches and models).
SYSTEM_TREES: tuple[Path, ...] = tuple(Path(p) for p in (
    "/etc", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/usr", "/bin", "/sbin",
    "/lib", "/lib32", "/lib64", "/libx32", "/var/lib/docker", "/var/lib/containerd", "/var/log",
))
SYSTEM_EXACT: frozenset[Path] = frozenset(Path(p) for p in ("/", "/var", "/root", "/home", "/tmp", "/opt", "/srv"))
# Folders and files of credentials, wherever they sit (a home folder may be a matrix's folder).
SECRET_NAMES: frozenset[str] = frozenset({
    ".ssh", ".gnupg", ".aws", ".azure", ".docker", ".kube", ".netrc", ".git-credentials",
    ".password-store", ".pypirc", ".config", ".git", ".huggingface", "id_rsa", "id_ed25519", "id_ecdsa",
})


def secret_part(path: Path) -> str | None:
    """The credential folder or file that `path` is or lies in (`.ssh`, `.aws`, ...), or None."""
    return next((part for part in path.parts if part in SECRET_NAMES), None)


def repo_root(matrix_file: Path) -> Path:
    """The git top level that holds `matrix_file` (a `.git` folder or worktree file), else its folder.

    Found by walking up, not by running git: loading a matrix starts no process."""
    folder = matrix_file.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def is_inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def system_folder(path: Path) -> Path | None:
    """The system folder that `path` (already resolved) is, or lies under; None when it is neither."""
    if path in SYSTEM_EXACT:
        return path
    for tree in SYSTEM_TREES:
        if is_inside(path, tree):
            return tree
    return None


def mount_problem(path: Path) -> str | None:
    """Why `path` (absolute) must not be bind-mounted, or None. A path that does not exist
    (yet) on this host is judged by its name alone: plan runs on machines without the models."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        return f"cannot resolve {path}: {exc}"
    if (sysdir := system_folder(real)) is not None:
        shown = f"{path} (-> {real})" if real != path else str(path)
        return f"{shown} is the system folder {sysdir} or lies under it: never mounted into a container"
    if (part := secret_part(real)) is not None:
        return f"{path} lies in '{part}', a folder of credentials: never mounted into a container"
    if real.name.endswith(".sock"):
        return f"{path} names a socket: never mounted into a container"
    try:
        mode = real.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror}"
    if not stat.S_ISDIR(mode):
        kind = ("a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a pipe" if stat.S_ISFIFO(mode) else "a file")
        return f"{path} is {kind}, not a folder: only folders are mounted"
    return None
