"""Fetch one pinned source tree inside the image build (stdlib only: it runs before any pip).

    fetch_source.py pypi <name> <version> --sha256 <hex> --dest DIR
    fetch_source.py git <url> <commit> --dest DIR

The sdist comes from PyPI's simple index and must match the sha256 pinned in the matrix; a
git source is checked out at the full commit SHA. The tree lands in DIR with no top folder.
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
import urllib.request
from pathlib import Path

INDEX = "https://pypi.org/simple/{name}/"


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
    with urllib.request.urlopen(index.format(name=_normalize(name)), timeout=60) as resp:
        page = resp.read().decode()
    links = _Links()
    links.feed(page)
    want = f"{re.sub(r'[-.]+', '_', name).lower()}-{version}.tar.gz"
    for href in links.hrefs:
        url, _, frag = href.partition("#")
        if url.rsplit("/", 1)[-1].lower() == want:
            return url, frag.removeprefix("sha256=") or None
    sys.exit(f"fetch_source: no {want} on {index.format(name=_normalize(name))}")


def fetch_pypi(name: str, version: str, sha256: str, dest: Path) -> None:
    url, _listed = sdist_url(name, version)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sdist.tar.gz"
        with urllib.request.urlopen(url, timeout=600) as resp, path.open("wb") as f:
            shutil.copyfileobj(resp, f)
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        if sha256 and got != sha256:
            sys.exit(f"fetch_source: {url}: sha256 {got} != pinned {sha256}")
        with tarfile.open(path) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        shutil.move(str(top), dest)


def fetch_git(url: str, commit: str, dest: Path) -> None:
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "fetch", "--depth", "1", url, commit], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", "FETCH_HEAD"], check=True)
    subprocess.run(["git", "-C", str(dest), "submodule", "update", "--init", "--recursive", "--depth", "1"],
                   check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["pypi", "git"])
    ap.add_argument("what")
    ap.add_argument("pin")
    ap.add_argument("--sha256", default="")
    ap.add_argument("--dest", type=Path, required=True)
    a = ap.parse_args()
    if a.kind == "pypi":
        fetch_pypi(a.what, a.pin, a.sha256, a.dest)
    else:
        fetch_git(a.what, a.pin, a.dest)
    print(f"fetch_source: {a.kind} {a.what} {a.pin} -> {a.dest}")


if __name__ == "__main__":
    main()
