"""Fetch one pinned source tree inside the image build (stdlib only: it runs before any pip).

    fetch_source.py pypi <name> <version> --sha256 <hex> --dest DIR
    fetch_source.py git <url> <commit> --dest DIR
    fetch_source.py file <path> <version> --sha256 <hex> --dest DIR   (an sdist in the build context)

The sdist comes from PyPI's simple index and must match the sha256 pinned in the matrix; a
git source is checked out at the full commit SHA. The tree lands in DIR with no top folder.
The matrix loader has checked every argument already; they are checked again here because
they arrive through a shell-expanded build ARG: a URL by scheme and shape, a commit as 40 hex,
`--` before git's positionals, and only https (or ssh for git) on the wire.
"""

from __future__ import annotations

import argparse
import hashlib
import html.parser
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

INDEX = "https://pypi.org/simple/{name}/"
# The same shapes as harness/matrix/model.py (GIT_URL, FULL_SHA, VERSION): this file is stdlib only.
GIT_URL = re.compile(
    r"^(?:https://[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{1,5})?/[A-Za-z0-9._~/+-]+"
    r"|ssh://(?:[A-Za-z0-9][A-Za-z0-9._-]*@)?[A-Za-z0-9][A-Za-z0-9.-]*(?::\d{1,5})?/[A-Za-z0-9._~/+-]+"
    r"|[A-Za-z0-9][A-Za-z0-9._-]*@[A-Za-z0-9][A-Za-z0-9.-]*:[A-Za-z0-9_~/][A-Za-z0-9._~/+-]*)$"
)
FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
VERSION = re.compile(r"^[0-9][0-9A-Za-z.+!_-]{0,63}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
GIT_SAFE = ["-c", "protocol.allow=never", "-c", "protocol.https.allow=always", "-c", "protocol.ssh.allow=always"]


def _https(url: str) -> str:
    if not url.startswith("https://"):
        sys.exit(f"fetch_source: refusing {url!r}: only https:// is fetched")
    return url


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def sdist_url(name: str, version: str, index: str = INDEX) -> tuple[str, str | None]:
    with urllib.request.urlopen(_https(index.format(name=_normalize(name))), timeout=60) as resp:
        page = resp.read().decode()
    links = _Links()
    links.feed(page)
    want = f"{re.sub(r'[-.]+', '_', name).lower()}-{version}.tar.gz"
    for href in links.hrefs:
        url, _, frag = href.partition("#")
        if url.rsplit("/", 1)[-1].lower() == want:
            return urllib.parse.urljoin(index.format(name=_normalize(name)), url), frag.removeprefix("sha256=") or None
    sys.exit(f"fetch_source: no {want} on {index.format(name=_normalize(name))}")


def _extract(tar: tarfile.TarFile, dest: str) -> None:
    """extractall with the "data" filter, or (Pythons before 3.11.4 have none) after refusing
    absolute paths, `..` and links that leave the tree, which is what that filter refuses."""
    try:
        tar.extractall(dest, filter="data")
    except TypeError:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if m.name.startswith("/") or ".." in parts or m.isdev() or (
                    (m.issym() or m.islnk()) and (m.linkname.startswith("/") or ".." in Path(m.linkname).parts)):
                sys.exit(f"fetch_source: refusing archive member {m.name!r}")
        tar.extractall(dest)


def fetch_pypi(name: str, version: str, sha256: str, dest: Path) -> None:
    url, _listed = sdist_url(name, version)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sdist.tar.gz"
        with urllib.request.urlopen(_https(url), timeout=600) as resp, path.open("wb") as f:
            shutil.copyfileobj(resp, f)
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if sha256 and got != sha256:
            sys.exit(f"fetch_source: {url}: sha256 {got} != pinned {sha256}")
        with tarfile.open(path) as tar:
            _extract(tar, tmp)
        (top,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        shutil.move(str(top), dest)


def unpack_sdist(path: Path, sha256: str, dest: Path) -> None:
    """An sdist already in the build context (offline builds): checked, then unpacked like a download."""
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != sha256:
        sys.exit(f"fetch_source: {path}: sha256 {got} != pinned {sha256}")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(path) as tar:
            _extract(tar, tmp)
        (top,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        shutil.move(str(top), dest)


def fetch_git(url: str, commit: str, dest: Path) -> None:
    subprocess.run(["git", "init", "-q", "--", str(dest)], check=True)
    subprocess.run(["git", *GIT_SAFE, "-C", str(dest), "fetch", "--depth", "1", "--", url, commit], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", "--detach", "FETCH_HEAD"], check=True)
    head = subprocess.run(["git", "-C", str(dest), "rev-parse", "--verify", "HEAD^{commit}"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if head != commit:
        sys.exit(f"fetch_source: {url} answered {head}, not the pinned {commit}")
    # submodule URLs come from the pinned commit's own .gitmodules; the same transports only
    subprocess.run(["git", *GIT_SAFE, "-C", str(dest), "submodule", "update", "--init", "--recursive",
                    "--depth", "1"], check=True)


def check_args(kind: str, what: str, pin: str, sha256: str) -> None:
    if kind == "file":
        if not re.fullmatch(r"/opt/build/sources/[A-Za-z0-9._+-]+\.tar\.gz", what) or not VERSION.fullmatch(pin):
            sys.exit(f"fetch_source: {what!r} is not an sdist under /opt/build/sources/")
        if not sha256:
            sys.exit("fetch_source: a file source needs --sha256")
    elif kind == "git":
        if not GIT_URL.fullmatch(what):
            sys.exit(f"fetch_source: {what!r} is not a git URL (https://, ssh:// or user@host:path)")
        if not FULL_SHA.fullmatch(pin):
            sys.exit(f"fetch_source: {pin!r} is not a full 40-hex commit SHA")
    else:
        if not NAME.fullmatch(what) or not VERSION.fullmatch(pin):
            sys.exit(f"fetch_source: {what!r} {pin!r} is not a distribution name and version")
    if sha256 and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        sys.exit(f"fetch_source: --sha256 {sha256!r} is not 64 hex characters")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["pypi", "git", "file"])
    ap.add_argument("what")
    ap.add_argument("pin")
    ap.add_argument("--sha256", default="")
    ap.add_argument("--dest", type=Path, required=True)
    a = ap.parse_args()
    check_args(a.kind, a.what, a.pin, a.sha256)
    if a.kind == "file":
        unpack_sdist(Path(a.what), a.sha256, a.dest)
    elif a.kind == "pypi":
        fetch_pypi(a.what, a.pin, a.sha256, a.dest)
    else:
        fetch_git(a.what, a.pin, a.dest)
    print(f"fetch_source: {a.kind} {a.what} {a.pin} -> {a.dest}")


if __name__ == "__main__":
    main()
