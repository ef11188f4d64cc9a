"""Meet the build requirements the harness read from the pinned sources (stdlib + pip only).

    build_requirements.py FILE [PIP_ARGS...]

FILE is build-requirements.txt from the build context: one requirement a line, `  # origins`
after it (harness/image/requirements.py writes it). Each requirement the image already meets is
kept; the others are installed with `python -m pip install PIP_ARGS REQ...` (PIP_ARGS: none for
a package index, `--no-index --find-links DIR` for a wheelhouse); then every requirement is
checked again. Exit 1 names each requirement still unmet, with the file it came from and what
the image has, before any compile starts.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

try:  # a build requirement itself; pip always carries a copy
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - depends on the image
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]


def read(path: str) -> list[tuple[Requirement, str]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            text, _, origin = raw.partition("#")
            if text.strip():
                out.append((Requirement(text.strip()), origin.strip()))
    return out


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unmet(reqs: list[tuple[Requirement, str]]) -> list[tuple[Requirement, str, str | None]]:
    bad = []
    for req, origin in reqs:
        have = installed(canonicalize_name(req.name))
        ok = False
        if have is not None:
            try:
                ok = req.specifier.contains(Version(have), prereleases=True)
            except InvalidVersion:
                ok = False
        if not ok:
            bad.append((req, origin, have))
    return bad


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    reqs = read(argv[0])
    pip_args = argv[1:]
    missing = unmet(reqs)
    for req, origin, have in missing:
        print(f"build requirement {req} ({origin}): {'installing' if have is None else f'has {have}, installing'}")
    if missing:
        cmd = [sys.executable, "-m", "pip", "install", *pip_args, *[str(r) for r, _, _ in missing]]
        print("+ " + " ".join(cmd), flush=True)
        subprocess.run(cmd, check=False)
    still = unmet(reqs)
    for req, origin, have in still:
        print(f"harness: build requirement {req} from {origin} is not met: "
              f"{'not installed' if have is None else f'the image has {have}'}", file=sys.stderr)
    bad = {str(r) for r, _, _ in still}
    for req, _origin in reqs:
        if str(req) not in bad:
            print(f"build requirement {req}: {installed(canonicalize_name(req.name))}")
    return 1 if still else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
