"""The harness's download caches during the tests: empty unless a test asks for a download.

A test sees only what it was given, whatever ran before it and whatever an earlier run left:
- outside a test, and in every test that does not ask, the cache folders (harness.image.sources,
  .offline, .compile_cache, harness.bisect.history, and HARNESS_CACHE_DIR for the commands the
  tests start) are an empty folder of the test's own;
- the harness's own code never downloads an sdist during the tests: its index is a closed local
  port (the error names `pinned_sources`), in every test;
- a download goes through one session fixture, `pinned_sources` (tests/conftest.py): it fetches
  the pinned sdist into the suite's one cache (the user's, or CI's fresh one), sha256-checked,
  under a file lock (pytest-xdist workers are processes), and the test that asks for it sees that
  cache. So a test that reads a file another test happened to download fails in any order.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import harness.bisect.history as history
import harness.image.compile_cache as compile_cache
import harness.image.offline as offline
from harness.image import sources

# the suite's one download cache, as the environment named it when the tests started (CI: a
# fresh temporary folder, .ci/run; a developer: ~/.cache/vllm-bw-harness, kept between runs);
# a pytest-xdist worker inherits the controller's (its HARNESS_CACHE_DIR is changed below)
SHARED = Path(os.environ.setdefault("HARNESS_TESTS_SHARED_CACHE", str(sources.CACHE_ROOT)))
INDEX = sources.SIMPLE_INDEX  # PyPI: pinned_sources downloads from it, nothing else does

NO_DOWNLOAD = "https://127.0.0.1:9/no-sdist-download-outside-the-pinned_sources-fixture/{name}/"

# Every pinned sdist a test may download: (PyPI name, version) -> sha256 (the pins of the
# matrices and tests that use them; PyPI's own digests).
PINNED: dict[tuple[str, str], str] = {
    ("vllm", "0.33.0"): "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
    ("vllm", "0.25.1"): "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4",
    ("flashinfer-python", "0.7.2.post1"): "af60319898dcfd552ba12a34165b9dd46c0bbd83d48ce665b1df6bd6ae77e9f1",
    ("flashinfer-python", "0.6.13"): "8a6d7d3708c7c87952390ec4e3aabe6e1c356defa8c7211b26bccaa355a61c59",
}


def point(root: Path, setattr_, compile_root: Path | None = None) -> None:
    """Point every cache folder of the harness at `root` (with monkeypatch's setattr), the
    compile cache at `compile_root` when given (it is no download: a test keeps its own even
    where it reads the shared sdists), and its sdist index nowhere (PinnedSources alone downloads)."""
    setattr_(sources, "SIMPLE_INDEX", NO_DOWNLOAD)
    setattr_(sources, "CACHE_ROOT", root)
    setattr_(sources, "CACHE", root / "sources")
    setattr_(sources, "SDIST_CACHE", root / "sdist")
    setattr_(history, "SDIST_CACHE", root / "sdist")
    setattr_(offline, "OFFLINE", root / "offline")
    setattr_(compile_cache, "CACHE_ROOT", compile_root or root)


def no_cache_outside_tests(private_tmp: str) -> None:
    """Between tests (module and session fixtures included) the caches are an empty folder in
    the session's private temporary folder: a fixture downloads through PinnedSources, or not
    at all."""
    empty = Path(private_tmp) / "no-cache"
    point(empty, setattr)
    os.environ["HARNESS_CACHE_DIR"] = str(empty)


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One process at a time downloads or unpacks into the shared cache."""
    SHARED.mkdir(parents=True, exist_ok=True)
    with open(SHARED / ".tests.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class PinnedSources:
    """What `pinned_sources` hands a test: the pinned sdists and their unpacked trees, in the
    shared cache, downloaded the first time one is asked for. Only this writes there: a test
    whose harness code reads a tree (a dry run, a preflight) asks for it here first."""

    def sdist(self, source: sources.Source | str, version: str | None = None) -> Path:
        """The sdist of a Source (a matrix's) or of (PyPI name, version)."""
        return self._fetch(self._pinned(source, version), unpack=False)

    def tree(self, source: sources.Source | str, version: str | None = None) -> Path:
        """The unpacked tree of a Source (a matrix's) or of (PyPI name, version)."""
        return self._fetch(self._pinned(source, version), unpack=True)

    def _pinned(self, source: sources.Source | str, version: str | None) -> sources.Source:
        if isinstance(source, str):
            assert version is not None
            return self._source(source, version)
        if source.kind == "pypi":
            assert source.sha256 == self._source(source.name, source.pin).sha256, source  # the pinned one
        return source

    def _source(self, name: str, version: str) -> sources.Source:
        if (name, version) not in PINNED:
            raise AssertionError(f"{name} {version} is not in tests/support/caches.py PINNED: add it with its sha256")
        project = "vllm" if name == "vllm" else "flashinfer"
        return sources.Source(project, "pypi", name, version, PINNED[name, version])

    def _fetch(self, source: sources.Source, *, unpack: bool) -> Path:
        before = sources.SIMPLE_INDEX  # NO_DOWNLOAD
        sources.SIMPLE_INDEX = INDEX
        try:
            with locked():
                had = listing()
                path = (sources.tree if unpack else sources.sdist)(source, cache=SHARED / "sources")
                with open(SHARED / ".tests-made", "a") as f:  # every worker's, for `added_by_tests`
                    f.writelines(f"{name}\n" for name in sorted(listing() - had))
                return path
        finally:
            sources.SIMPLE_INDEX = before


def listing() -> set[str]:
    """What the shared cache holds, one level down (what a test may have added)."""
    return {f"{d}/{p.name}" for d in ("sources", "sdist", "offline") if (SHARED / d).is_dir()
            for p in (SHARED / d).iterdir()}


def downloads_in(root: Path) -> list[str]:
    """Sdists of real size in a test's own cache: something it ran downloaded them (a command it
    started sees HARNESS_CACHE_DIR, not this process's closed index)."""
    return sorted(p.name for d in ("sources", "sdist") if (root / d).is_dir()
                  for p in (root / d).glob("*.tar.gz") if p.stat().st_size > 1 << 20)


def added_by_tests(before: set[str]) -> list[str]:
    """What is new in the shared cache since `before` and was not made by PinnedSources (in any
    worker): a test's own code wrote it, where another worker may be reading or unpacking."""
    if not listing() - before:
        return []
    with locked():  # a PinnedSources elsewhere may be between its unpack and its note
        made = set((SHARED / ".tests-made").read_text().split()) if (SHARED / ".tests-made").exists() else set()
        return sorted(listing() - before - made)
