"""Histories to bisect: the commits of a git repository, or the releases of a package index.

A history is an ordered list of points, oldest first, from the good one to the bad one, and a
way to unpack the source tree of one point into a folder. Git runs through harness/proc.py and
never checks anything out in the user's repository (`git archive` of the commit); a URL is
cloned once, bare, into the cache. A release list comes from the index's JSON API (PyPI's shape)
and is kept next to the cached sdists, so a bisect over cached releases runs offline.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from packaging.version import InvalidVersion, Version

from harness import http, proc
from harness.build.sources import CACHE_ROOT, GIT_SAFE, SDIST_CACHE, SDIST_MAX_BYTES
from harness.bundle import sha256_file
from harness.errors import ConfigError, EnvironmentProblem
from harness.results.store import atomic_write_text

PYPI_JSON = "https://pypi.org/pypi/{name}/json"
GIT_CACHE = CACHE_ROOT / "bisect-git"


@dataclass(frozen=True)
class Point:
    id: str  # full commit SHA, or a version
    title: str  # commit subject, or "vllm 0.20.2 (2026-05-10)"
    date: str = ""

    @property
    def short(self) -> str:
        return self.id[:12] if re.fullmatch(r"[0-9a-f]{40}", self.id) else self.id


class Unavailable(Exception):
    """This point's source cannot be had (no sdist, a download refused): it is skipped."""


class History(Protocol):
    kind: str

    def spec(self) -> dict: ...
    def points(self) -> list[Point]: ...
    def preferred(self, points: list[Point]) -> set[int]: ...
    def unpack(self, point: Point, dest: Path) -> None: ...


def _extract(tarball: Path, dest: Path) -> None:
    """Unpack a tarball whose members sit under one top folder (an sdist) or none (git archive)."""
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        with tarfile.open(tarball) as tar:
            tar.extractall(staging, filter="data")
        entries = list(staging.iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else staging
        shutil.rmtree(dest, ignore_errors=True)
        top.rename(dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class GitHistory:
    kind = "git"

    def __init__(self, repo: str, good: str, bad: str) -> None:
        self.repo, self.good_ref, self.bad_ref = repo, good, bad
        self.git_dir = self._open(repo)
        self.good = self._commit(good, "--good")
        self.bad = self._commit(bad, "--bad")

    def _git(self, *args: str, timeout: float = 600) -> proc.Result:
        proc.require_tool("git", "reads the upstream history it bisects")
        return proc.run(["git", *GIT_SAFE, f"--git-dir={self.git_dir}", *args], timeout=timeout)

    @staticmethod
    def _open(repo: str) -> str:
        path = Path(repo).expanduser()
        if path.exists():
            res = proc.run(["git", "-C", str(path), "rev-parse", "--absolute-git-dir"], timeout=60)
            if not res.ok:
                raise ConfigError(f"{repo}: not a git repository", hint="give a git repository's folder or a git URL")
            return res.stdout.strip()
        if not re.match(r"^(https://|ssh://|[\w.-]+@[\w.-]+:)", repo):
            raise ConfigError(f"{repo}: no such folder, and not a git URL (https://, ssh:// or user@host:path)",
                              hint="give a local clone or mirror, or the repository's URL")
        dest = GIT_CACHE / hashlib.sha256(repo.encode()).hexdigest()[:16]
        if not (dest / "HEAD").is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + ".partial")
            shutil.rmtree(tmp, ignore_errors=True)
            res = proc.run(["git", *GIT_SAFE, "clone", "-q", "--bare", "--", repo, str(tmp)], timeout=3600)
            if not res.ok:
                shutil.rmtree(tmp, ignore_errors=True)
                raise EnvironmentProblem(f"{repo}: git clone failed: {res.stderr.strip()[-300:]}",
                                         hint="check the URL and the network, or give a local mirror")
            tmp.rename(dest)
        return str(dest)

    def _commit(self, ref: str, flag: str) -> str:
        if ref.startswith("-"):
            raise ConfigError(f"{flag} {ref!r}: not a commit", hint="give a commit SHA, a tag or a branch")
        res = self._git("rev-parse", "--verify", "-q", "--end-of-options", f"{ref}^{{commit}}")
        if not res.ok:
            raise ConfigError(f"{flag} {ref}: no such commit in {self.repo}",
                              hint="fetch it into the mirror, or give a SHA, tag or branch it holds")
        return res.stdout.strip()

    def spec(self) -> dict:
        return {"kind": self.kind, "repo": self.repo, "good": self.good, "bad": self.bad}

    def points(self) -> list[Point]:
        if not self._git("merge-base", "--is-ancestor", self.good, self.bad).ok:
            raise ConfigError(f"--good {self.good_ref} is not an ancestor of --bad {self.bad_ref}",
                              hint="give the older, good commit as --good and the newer, bad one as --bad")
        # the commits on a path from good to bad, in an order where a parent comes first: for a
        # linear history this is git bisect's own list; merges are bisected in that order
        res = self._git("log", "--reverse", "--topo-order", "--ancestry-path", "--format=%H%x09%cs%x09%s",
                        f"{self.good}..{self.bad}")
        if not res.ok:
            raise EnvironmentProblem(f"git log {self.good[:12]}..{self.bad[:12]} failed: {res.stderr.strip()[-300:]}")
        head = self._git("log", "-1", "--format=%H%x09%cs%x09%s", self.good).stdout
        out = []
        for line in [head.strip(), *res.stdout.splitlines()]:
            sha, date, title = (line.split("\t", 2) + ["", ""])[:3]
            out.append(Point(sha, title, date))
        return out

    def preferred(self, points: list[Point]) -> set[int]:
        return set()

    def unpack(self, point: Point, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            tarball = Path(tmp) / "tree.tar"
            res = self._git("archive", "--format=tar", "-o", str(tarball), point.id)
            if not res.ok:
                raise Unavailable(f"git archive {point.short} failed: {res.stderr.strip()[-300:]}")
            dest.mkdir(parents=True, exist_ok=True)
            with tarfile.open(tarball) as tar:
                tar.extractall(dest, filter="data")

    def changed(self, a: str, b: str, paths: list[str]) -> list[Point]:
        """The commits after `a` up to `b` that touched `paths`: what to read for the cause."""
        res = self._git("log", "--reverse", "--format=%H%x09%cs%x09%s", f"{a}..{b}", "--", *paths)
        rows = [(ln.split("\t", 2) + ["", ""])[:3] for ln in res.stdout.splitlines() if ln]
        return [Point(sha, title, date) for sha, date, title in rows]


def _version(text: str, flag: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise ConfigError(f"{flag} {text!r} is not a release version", hint="e.g. 0.10.0") from None


class ReleaseHistory:
    """The releases of one project on a package index, good..bad; pre-releases left out."""

    kind = "releases"

    def __init__(self, project: str, good: str, bad: str, *, index: str = PYPI_JSON,
                 cache: Path | None = None, minor_first: bool = True) -> None:
        self.project, self.index, self.minor_first = project, index, minor_first
        self.cache = Path(cache or SDIST_CACHE)
        self.good, self.bad = _version(good, "--good"), _version(bad, "--bad")
        if not self.good < self.bad:
            raise ConfigError(f"--good {good} is not older than --bad {bad}",
                              hint="give the older, good release as --good")
        self._doc: dict | None = None

    def spec(self) -> dict:
        return {"kind": self.kind, "project": self.project, "good": str(self.good), "bad": str(self.bad),
                "index": self.index, "minor_first": self.minor_first}

    def _cached_doc(self) -> Path:
        return self.cache / f"{re.sub(r'[-_.]+', '-', self.project).lower()}.releases.json"

    def document(self) -> dict:
        """The index's JSON for the project; the cached copy when the index cannot be reached."""
        if self._doc is None:
            url = self.index.format(name=re.sub(r"[-_.]+", "-", self.project).lower())
            cached = self._cached_doc()
            try:
                doc = http.get_json(url, timeout=60, max_bytes=64 << 20, attempts=2)
            except http.HttpError as exc:
                if not cached.is_file():
                    raise EnvironmentProblem(f"cannot read {url}: {exc.message}",
                                             hint=f"run once with access to the index (it is kept in {self.cache})") from None
                try:
                    doc = json.loads(cached.read_text())
                except ValueError:
                    raise ConfigError(f"{cached}: not JSON", hint="delete it; the next run with the index "
                                      "writes it again") from None
                url = str(cached)
            if not isinstance(doc, dict) or not isinstance(doc.get("releases"), dict):
                raise EnvironmentProblem(f"{url}: not a package index's project JSON (no `releases` table)",
                                         hint="give --index a PyPI-style JSON API, e.g. https://pypi.org/pypi/{name}/json")
            if url != str(cached):
                atomic_write_text(cached, json.dumps(doc))
            self._doc = doc
        return self._doc

    def _files(self, version: str) -> list[dict]:
        return list((self.document().get("releases") or {}).get(version) or [])

    def points(self) -> list[Point]:
        found = []
        for text in self.document().get("releases") or {}:
            try:
                v = Version(text)
            except InvalidVersion:
                continue
            if v.is_prerelease or v.is_devrelease or not (self.good <= v <= self.bad):
                continue
            files = self._files(text)
            if not files:  # yanked or emptied: no source at all
                continue
            date = min((f.get("upload_time") or "")[:10] for f in files)
            sdist = any(f.get("packagetype") == "sdist" for f in files)
            found.append((v, Point(text, f"{self.project} {text}" + ("" if sdist else " (no sdist on the index)"), date)))
        found.sort()
        ids = [str(v) for v, _ in found]
        for end, flag in ((self.good, "--good"), (self.bad, "--bad")):
            if str(end) not in ids:
                raise ConfigError(f"{flag} {end}: no such release of {self.project} on the index",
                                  hint=f"releases in range: {', '.join(ids[:8]) or 'none'}")
        return [p for _, p in found]

    def preferred(self, points: list[Point]) -> set[int]:
        """The newest patch release of each minor: bisected first, then the patches between."""
        if not self.minor_first:
            return set()
        newest: dict[tuple[int, int], int] = {}
        for i, p in enumerate(points):
            v = Version(p.id)
            newest[(v.major, v.minor)] = i
        return set(newest.values())

    def sdist(self, point: Point) -> Path:
        files = [f for f in self._files(point.id) if f.get("packagetype") == "sdist"]
        if not files:
            raise Unavailable(f"{self.project} {point.id} has no sdist on the index")
        f = files[0]
        name = Path(f.get("filename") or "").name
        sha = (f.get("digests") or {}).get("sha256")
        if not name.endswith((".tar.gz", ".tgz")):
            raise Unavailable(f"{self.project} {point.id}: sdist {name!r} is not a .tar.gz")
        path = self.cache / name
        if not path.is_file():
            if not f.get("url"):
                raise Unavailable(f"{name}: not in {self.cache} and the index gives no URL")
            self.cache.mkdir(parents=True, exist_ok=True)
            try:  # written whole or not at all
                http.download(f["url"], path, timeout=900, max_bytes=SDIST_MAX_BYTES)
            except http.HttpError as exc:
                raise Unavailable(f"{name}: download failed: {exc.message}") from None
        if sha and sha256_file(path) != sha:
            raise Unavailable(f"{path}: sha256 differs from the index's {sha[:12]}… (delete it to download again)")
        return path

    def unpack(self, point: Point, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _extract(self.sdist(point), dest)
