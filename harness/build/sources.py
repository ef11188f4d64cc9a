"""Pinned sources, fetched once into .cache/sources/ and checked against their pins.

A PyPI sdist comes from the simple index (`#sha256=` in the link) and must match the matrix's
sdist_sha256; a git source is fetched at its full commit. The unpacked tree is what the patch
preflight applies to, so a stale patch is found in seconds instead of after an hour of build.
Already-downloaded sdists in .cache/sdist/ are used first (offline runs, fast tests).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness import proc
from harness.errors import ConfigError, EnvironmentProblem

# Downloads are kept across runs and checkouts: HARNESS_CACHE_DIR, else the user's cache folder.
CACHE_ROOT = Path(os.environ.get("HARNESS_CACHE_DIR")
                  or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-bw-harness")
CACHE = CACHE_ROOT / "sources"
SDIST_CACHE = CACHE_ROOT / "sdist"
SIMPLE_INDEX = "https://pypi.org/simple/{name}/"
HREF = re.compile(r'href="([^"#]+)(?:#sha256=([0-9a-f]{64}))?"')


@dataclass(frozen=True)
class Source:
    project: str  # "vllm" or "flashinfer"
    kind: str  # "pypi" or "git"
    name: str  # distribution name or git URL
    pin: str  # version or commit
    sha256: str | None = None

    @property
    def key(self) -> str:
        tail = self.pin if self.kind == "pypi" else self.pin[:12]
        return f"{self.project}-{self.kind}-{tail}"


def vllm_source(stack) -> Source:
    v = stack.vllm
    return Source("vllm", "pypi", "vllm", v.pypi, v.sdist_sha256) if v.pypi else Source("vllm", "git", v.git, v.commit)


def flashinfer_source(stack) -> Source:
    f = stack.flashinfer
    if f.version:
        return Source("flashinfer", "pypi", "flashinfer-python", f.version, f.sdist_sha256)
    return Source("flashinfer", "git", f.git, f.commit)


def sdist_filename(name: str, version: str) -> str:
    return f"{re.sub(r'[-.]+', '_', name).lower()}-{version}.tar.gz"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_sdist_url(name: str, version: str, index: str = SIMPLE_INDEX) -> tuple[str, str | None]:
    url = index.format(name=re.sub(r"[-_.]+", "-", name).lower())
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            page = resp.read().decode()
    except (urllib.error.URLError, TimeoutError) as exc:
        raise EnvironmentProblem(f"cannot read {url}: {exc}",
                                 hint=f"put {sdist_filename(name, version)} in {SDIST_CACHE} to work offline") from None
    want = sdist_filename(name, version)
    for href, sha in HREF.findall(page):
        if href.rsplit("/", 1)[-1].lower() == want:
            return urllib.request.urljoin(url, href), sha
    raise ConfigError(f"{name} {version}: no sdist {want} on {url}", hint="check the version in the matrix")


def sdist(source: Source, cache: Path = CACHE) -> Path:
    """The verified sdist tarball of a PyPI source (cached)."""
    want = sdist_filename(source.name, source.pin)
    for candidate in (SDIST_CACHE / want, cache / want):
        if candidate.is_file():
            path = candidate
            break
    else:
        cache.mkdir(parents=True, exist_ok=True)
        url, listed = find_sdist_url(source.name, source.pin)
        path = cache / want
        tmp = path.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=600) as resp, tmp.open("wb") as f:
            shutil.copyfileobj(resp, f)
        if listed and _sha256(tmp) != listed:
            tmp.unlink()
            raise EnvironmentProblem(f"{url}: download does not match the index's sha256", hint="try again")
        tmp.rename(path)
    got = _sha256(path)
    if source.sha256 and got != source.sha256:
        raise ConfigError(f"{path.name}: sha256 {got} does not match the pinned sdist_sha256 {source.sha256}",
                          hint="the pin is wrong or the file is corrupt: delete it, or fix the matrix")
    return path


def tree(source: Source, cache: Path = CACHE) -> Path:
    """The unpacked, pristine source tree (never patched in place: preflight copies it)."""
    dest = cache / source.key
    if (dest / ".harness-complete").is_file():
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    cache.mkdir(parents=True, exist_ok=True)
    if source.kind == "pypi":
        tarball = sdist(source, cache)
        staging = cache / f".{source.key}.unpack"
        shutil.rmtree(staging, ignore_errors=True)
        with tarfile.open(tarball) as tar:
            tar.extractall(staging, filter="data")
        (top,) = [p for p in staging.iterdir() if p.is_dir()]
        top.rename(dest)
        shutil.rmtree(staging)
    else:
        for argv in (["git", "init", "-q", str(dest)],
                     ["git", "-C", str(dest), "fetch", "-q", "--depth", "1", source.name, source.pin],
                     ["git", "-C", str(dest), "checkout", "-q", "FETCH_HEAD"]):
            res = proc.run(argv, timeout=1800)
            if not res.ok:
                raise EnvironmentProblem(f"{source.name}@{source.pin}: {' '.join(argv[:4])} failed: "
                                         f"{res.stderr.strip()[-400:]}", hint="check the URL, the commit and the network")
        shutil.rmtree(dest / ".git")
    (dest / ".harness-complete").write_text(f"{source}\n")
    return dest
