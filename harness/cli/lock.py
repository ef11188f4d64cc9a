"""`harness lock`: pin base-image digests and PyPI sha256s into <matrix>.lock (harness/lock.py).

For every `offline = true` stack it then fetches into the cache (or checks, when cached) what
that build reads from the network: the sdists and each pinned source vLLM's CMake would clone,
minus what the stack's patches leave out (harness/image/prefetch.py). After `harness lock` the
build needs no network.
"""

from __future__ import annotations

from harness import platforms
from harness.console import err, out
from harness.errors import ConfigError
from harness.lock import (
    Moved,
    _shown,
    apply_lock,
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
    p.add_argument("--platform", default=None,
                   help="CPU platform to pick wheels for (linux/amd64, linux/arm64); default: this host's")
    p.add_argument("--mirror", action="append", default=[], metavar="URL=PATH",
                   help="offline stacks: read this git URL from a local clone instead of the network")
    p.set_defaults(func=run)


def run(args) -> int:
    matrix = load_matrix(args.matrix)
    path = lock_path(matrix)
    previous = read_lock(path)
    if not wants(matrix):
        out.print(f"{matrix.path.name}: no docker stack builds anything, nothing to lock", markup=False)
        return 0
    offline = _offline_needs(matrix, args)
    target = platforms.parse(args.platform) if args.platform else platforms.host()
    lock = resolve(matrix, previous=previous, update=args.update,
                   say=lambda s: err.print(s, markup=False), platform=target)
    for line in pinned_lines(lock):
        out.print(line, markup=False)
    if args.check:
        if previous is None:
            raise ConfigError(f"{path}: there is no lock to check", hint=f"`harness lock -m {args.matrix}`")
        if problems := mismatches(matrix, previous, platform=target):
            raise Moved(problems, hint=f"`harness lock -m {args.matrix}`")
        out.print(f"{_shown(path)}: up to date", markup=False)
        return 0
    write_lock(lock, path)
    out.print(f"wrote {_shown(path)}", markup=False)
    if offline:
        _prefetch(apply_lock(matrix, lock, platform=target), offline, args)
    return 0


def _offline_needs(matrix, args) -> list:
    """The offline stacks' needs, refused now (before anything is resolved) where their build
    would be: no source table, or a source vLLM fetches that the table does not pin."""
    from harness.image.prefetch import check_offline, needs, parse_mirrors

    parse_mirrors(args.mirror)  # a bad flag is bad input before any network
    wanted = [n for n in needs(matrix) if n.offline]
    if not args.check:
        check_offline(matrix, wanted)
    return wanted


def _prefetch(matrix, wanted: list, args) -> None:
    from harness.image.prefetch import fetch_all, needs, parse_mirrors

    names = {n.stack for n in wanted}
    wanted = [n for n in needs(matrix) if n.stack in names]  # now with the lock's sdist sha256s
    got = fetch_all(wanted, matrix_path=args.matrix, repos=parse_mirrors(args.mirror),
                    say=lambda s: err.print(s, markup=False))
    out.print(f"offline stacks {', '.join(sorted(names))}: {len(got)} file(s) in the cache, "
              "every sdist and pinned source its build reads is cached", markup=False)
    for g in sorted(got, key=lambda g: g.file):
        out.print(f"  {g.file}  {g.path.stat().st_size / 1e6:.1f} MB  {g.how}", markup=False)
