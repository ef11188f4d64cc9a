"""`harness lock`: pin base-image digests and PyPI sha256s into <matrix>.lock (harness/lock.py)."""

from __future__ import annotations

from harness.console import err, out
from harness.errors import ConfigError
from harness.lock import (
    Moved,
    _shown,
    lock_path,
    mismatches,
    pinned_lines,
    read_lock,
    resolve,
    wants,
    write_lock,
)
from harness.matrix.load import load_matrix


def register(sub) -> None:
    p = sub.add_parser("lock", help="pin base-image digests and PyPI sha256s into <matrix>.lock")
    p.add_argument("-m", "--matrix", required=True, help="the matrix file; the lock goes next to it")
    p.add_argument("--update", action="store_true",
                   help="accept pins that resolve differently than the existing lock says")
    p.add_argument("--check", action="store_true",
                   help="resolve and compare with the existing lock, write nothing (exit 2 when it moved)")
    p.set_defaults(func=run)


def run(args) -> int:
    matrix = load_matrix(args.matrix)
    path = lock_path(matrix)
    previous = read_lock(path)
    if not wants(matrix):
        out.print(f"{matrix.path.name}: no docker stack builds anything, nothing to lock", markup=False)
        return 0
    lock = resolve(matrix, previous=previous, update=args.update,
                   say=lambda s: err.print(s, markup=False))
    for line in pinned_lines(lock):
        out.print(line, markup=False)
    if args.check:
        if previous is None:
            raise ConfigError(f"{path}: there is no lock to check", hint=f"`harness lock -m {args.matrix}`")
        if problems := mismatches(matrix, previous):
            raise Moved(problems, hint=f"`harness lock -m {args.matrix}`")
        out.print(f"{_shown(path)}: up to date", markup=False)
        return 0
    write_lock(lock, path)
    out.print(f"wrote {_shown(path)}", markup=False)
    return 0
