"""Pinned sources, fetched once into .cache/sources/ and checked against their pins.

A PyPI sdist comes from the simple index (`#sha256=` in the link) and must match the matrix's
sdist_sha256; a git source is fetched at its full commit. The unpacked tree is what the patch
preflight applies to, so a stale patch is found in seconds instead of after an hour of build.
Already-downloaded sdists in .cache/sdist/ are used first (offline runs, fast tests).
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from harness import git, http, proc
from harness.bundle import sha256_file
from harness.errors import ConfigError, EnvironmentProblem
from harness.matrix.model import FULL_SHA, GIT_URL, VERSION
from harness.safety import paths, readers
from harness.safety.roots import Root

# Downloads are kept across runs and checkouts: HARNESS_CACHE_DIR, else the user's cache folder.
CACHE_ROOT = Path(os.environ.get("HARNESS_CACHE_DIR")
                  or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm-bw-harness")
CACHE = CACHE_ROOT / "sources"
SDIST_CACHE = CACHE_ROOT / "sdist"
SIMPLE_INDEX = "https://pypi.org/simple/{name}/"
HREF = re.compile(r'href="([^"#]+)(?:#sha256=([0-9a-f]{64}))?"')
SDIST_MAX_BYTES = 1 << 30
# Only these transports, whatever git's own defaults or the user's config say (ext:: and file://
# run or read things on this host).
GIT_SAFE = git.OPTIONS  # kept for callers that build their own argv; new calls use harness.git.run


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


def check_source(source: Source) -> Source:
    """The matrix model checked these shapes already; a Source built elsewhere is checked again
    here, because its fields become git arguments and cache paths."""
    if source.kind == "git":
        if not GIT_URL.fullmatch(source.name) or git.url_problem(source.name):
            raise ConfigError(f"{source.project}: {source.name!r} is not a git URL (https://, ssh:// or user@host:path)",
                              hint="fix the `git` key of the stack")
        if not FULL_SHA.fullmatch(source.pin):
            raise ConfigError(f"{source.project}: commit {source.pin!r} is not a full 40-hex SHA",
                              hint="run `git rev-parse <ref>` and pin the full SHA")
    elif source.kind == "pypi":
        if not VERSION.fullmatch(source.pin):
            raise ConfigError(f"{source.project}: {source.pin!r} is not a release version", hint="e.g. '0.33.0'")
    else:
        raise ConfigError(f"{source.project}: unknown source kind {source.kind!r}", hint="use 'pypi' or 'git'")
    return source


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


def find_sdist_url(name: str, version: str, index: str = SIMPLE_INDEX) -> tuple[str, str | None]:
    url = index.format(name=re.sub(r"[-_.]+", "-", name).lower())
    try:
        page = http.get(url, accept="text/html", timeout=60, max_bytes=32 << 20).decode("utf-8", "replace")
    except http.HttpError as exc:
        raise EnvironmentProblem(f"cannot read {url}: {exc.message}",
                                 hint=f"put {sdist_filename(name, version)} in {SDIST_CACHE} to work offline") from None
    want = sdist_filename(name, version)
    for href, sha in HREF.findall(page):
        if href.rsplit("/", 1)[-1].lower() == want:
            return urllib.parse.urljoin(url, href), sha
    raise ConfigError(f"{name} {version}: no sdist {want} on {url}", hint="check the version in the matrix")


def sdist(source: Source, cache: Path | None = None) -> Path:
    """The verified sdist tarball of a PyPI source (cached; `cache` defaults to CACHE, read at the
    call, so that the test suite can give each test a cache of its own)."""
    cache = CACHE if cache is None else cache
    want = sdist_filename(source.name, source.pin)
    # the caches are roots: a link planted in one is refused, never followed (harness.safety.roots)
    for folder in (SDIST_CACHE, cache):
        if Root(folder, what="sdist cache").exists(want):
            path = folder / want
            break
    else:
        cache.mkdir(parents=True, exist_ok=True)
        url, listed = find_sdist_url(source.name, source.pin, SIMPLE_INDEX)  # read now: tests point it at a local index
        path = cache / want
        tmp = cache / f".{want}.download"
        http.download(url, tmp, timeout=600, max_bytes=SDIST_MAX_BYTES)
        if listed and sha256_file(tmp) != listed:
            tmp.unlink()
            raise EnvironmentProblem(f"{url}: download does not match the index's sha256", hint="try again")
        tmp.rename(path)
    got = Root(path.parent, what="sdist cache").sha256(want)
    if source.sha256 and got != source.sha256:
        raise ConfigError(f"{path.name}: sha256 {got} does not match the pinned sdist_sha256 {source.sha256}",
                          hint="the pin is wrong or the file is corrupt: delete it, or fix the matrix")
    return path


def tree(source: Source, cache: Path | None = None) -> Path:
    """The unpacked, pristine source tree (never patched in place: preflight copies it)."""
    cache = CACHE if cache is None else cache
    check_source(source)
    dest = cache / source.key
    # the cache is a root: a source folder there that is a link is refused, never built from
    if Root(cache, what="source cache", create=True).exists(f"{source.key}/.harness-complete"):
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    cache.mkdir(parents=True, exist_ok=True)
    if source.kind == "pypi":
        tarball = sdist(source, cache)
        staging = cache / f".{source.key}.unpack"
        shutil.rmtree(staging, ignore_errors=True)
        with paths.open_regular(tarball, what="sdist") as f:
            readers.extract_tree(f, staging, name=f"sdist {tarball}")
        tops = [staging / name for name in Root(staging, what="unpacked sdist").folders()]
        if len(tops) != 1:
            shutil.rmtree(staging)
            raise EnvironmentProblem(f"{tarball.name}: expected one top folder in the sdist, found {len(tops)}",
                                     hint="delete the cached file and try again; the pin may name a broken sdist")
        tops[0].rename(dest)
        shutil.rmtree(staging)
    else:
        _git_checkout(source, dest)
    Root(dest, what="source cache").save_text(".harness-complete", f"{source}\n")
    return dest


def _git_checkout(source: Source, dest: Path) -> None:
    proc.require_tool("git", "fetches git-pinned sources")
    # `--` ends the options: the URL and the commit are positionals whatever they hold.
    # the checkout reads no system or global config (a filter defined there would run)
    steps = (("init", ["init", "-q", "--", str(dest)], False),
             ("fetch", ["-C", str(dest), "fetch", "-q", "--depth", "1", "--", source.name, source.pin], True),
             ("checkout", ["-C", str(dest), "checkout", "-q", "--detach", "FETCH_HEAD"], False),
             ("rev-parse", ["-C", str(dest), "rev-parse", "--verify", "HEAD^{commit}"], False))
    for step, argv, fetch in steps:
        res = git.run(argv, timeout=1800, fetch=fetch)
        if not res.ok:
            shutil.rmtree(dest, ignore_errors=True)
            raise EnvironmentProblem(f"{source.name}@{source.pin}: git {step} failed: {res.stderr.strip()[-400:]}",
                                     hint="check the URL, the commit and the network")
    if res.stdout.strip() != source.pin:
        shutil.rmtree(dest, ignore_errors=True)
        raise EnvironmentProblem(f"{source.name}: fetched {res.stdout.strip()}, not the pinned {source.pin}",
                                 hint="the remote answered another commit: check the URL")
    shutil.rmtree(dest / ".git")
