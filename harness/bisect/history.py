"""Histories to bisect: the commits of a git repository, or the releases of a package index.

A history is an ordered list of points, oldest first, from the good one to the bad one, and a
way to unpack the source tree of one point into a folder. Git runs through harness/proc.py and
never checks anything out in the user's repository (`git archive` of the commit); a URL is
cloned once, bare, into the cache. A release list comes from the index's JSON API (PyPI's shape)
and is kept next to the cached sdists, so a bisect over cached releases runs offline.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Protocol

from packaging.version import InvalidVersion, Version
from pydantic import BeforeValidator, ValidationError

from harness import git, http
from harness.errors import ConfigError, EnvironmentProblem
from harness.image.sources import CACHE_ROOT, SDIST_CACHE, SDIST_MAX_BYTES
from harness.record import Open
from harness.safety import grammar, paths, readers
from harness.safety.roots import Root

PYPI_JSON = "https://pypi.org/pypi/{name}/json"
_PROJECT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")  # PEP 508 names
GIT_CACHE = CACHE_ROOT / "bisect-git"


@dataclass(frozen=True)
class Point:
    id: str  # full commit SHA, or a version
    title: str = ""  # commit subject, or "vllm 0.20.2 (2026-05-10)"
    date: str = ""

    @property
    def short(self) -> str:
        return self.id[:12] if re.fullmatch(r"[0-9a-f]{40}", self.id) else self.id


class HistorySpec(Open):
    """What a history is, as bisect.json and result.json keep it (`history`): the commits of
    `repo` (kind git) or the releases of `project` on `index` (kind releases), good..bad.
    Written with the keys that were given (store.dump), so a git history has no release keys."""

    kind: Literal["git", "releases"]
    repo: str | None = None  # git
    project: str | None = None  # releases
    good: str
    bad: str
    index: str | None = None  # releases: the JSON API's URL, {name} for the project
    minor_first: bool = True  # releases: the newest patch of each minor first


class Unavailable(Exception):
    """This point's source cannot be had (no sdist, a download refused): it is skipped."""


class History(Protocol):
    kind: str

    def spec(self) -> HistorySpec: ...
    def points(self) -> list[Point]: ...
    def preferred(self, points: list[Point]) -> set[int]: ...
    def unpack(self, point: Point, dest: Path) -> None: ...


def _extract(tarball: Path, dest: Path) -> None:
    """Unpack a tarball whose members sit under one top folder (an sdist) or none (git archive)."""
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
    try:
        with paths.open_regular(tarball, what="sdist") as f:
            readers.extract_tree(f, staging, name=f"sdist {tarball}")
        root = Root(staging, what="unpacked sdist")
        tops, loose = root.folders(), root.files()
        top = staging / tops[0] if len(tops) == 1 and not loose else staging
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

    def _git(self, *args: str, timeout: float = 600):
        return git.run([f"--git-dir={self.git_dir}", *args], timeout=timeout,
                       purpose="reads the upstream history it bisects")

    @staticmethod
    def _open(repo: str) -> str:
        """The git folder to read: a bare mirror in the cache, never the repository itself (its
        config, hooks and attributes would run: harness/git.py)."""
        path = Path(repo).expanduser()
        if path.exists():
            return git.mirror(path, GIT_CACHE)
        if not re.match(r"^(https://|ssh://|[\w.-]+@[\w.-]+:)", repo):
            raise ConfigError(f"{grammar.one_line(repo)[:200]}: no such folder, and not a git URL (https://, ssh:// "
                              "or user@host:path)", hint="give a local clone or mirror, or the repository's URL")
        return git.clone_url(repo, GIT_CACHE)

    def _commit(self, ref: str, flag: str) -> str:
        if ref.startswith("-"):
            raise ConfigError(f"{flag} {ref!r}: not a commit", hint="give a commit SHA, a tag or a branch")
        res = self._git("rev-parse", "--verify", "-q", "--end-of-options", f"{ref}^{{commit}}")
        if not res.ok:
            raise ConfigError(f"{flag} {ref}: no such commit in {self.repo}",
                              hint="fetch it into the mirror, or give a SHA, tag or branch it holds")
        return res.stdout.strip()

    def spec(self) -> HistorySpec:
        return HistorySpec(kind="git", repo=self.repo, good=self.good, bad=self.bad)

    def points(self) -> list[Point]:
        if not self._git("merge-base", "--is-ancestor", "--end-of-options", self.good, self.bad).ok:
            raise ConfigError(f"--good {self.good_ref} is not an ancestor of --bad {self.bad_ref}",
                              hint="give the older, good commit as --good and the newer, bad one as --bad")
        # the commits on a path from good to bad, in an order where a parent comes first: for a
        # linear history this is git bisect's own list; merges are bisected in that order
        res = self._git("log", "--reverse", "--topo-order", "--ancestry-path", "--format=%H%x09%cs%x09%s",
                        "--end-of-options", f"{self.good}..{self.bad}")
        if not res.ok:
            raise EnvironmentProblem(f"git log {self.good[:12]}..{self.bad[:12]} failed: {res.stderr.strip()[-300:]}")
        head = self._git("log", "-1", "--format=%H%x09%cs%x09%s", "--end-of-options", self.good).stdout
        out = []
        for line in [head.strip(), *res.stdout.splitlines()]:
            sha, date, title = (line.split("\t", 2) + ["", ""])[:3]
            out.append(Point(git.commit_id(sha, where="git log"), title, date))
        return out

    def preferred(self, points: list[Point]) -> set[int]:
        return set()

    def unpack(self, point: Point, dest: Path) -> None:
        commit = git.commit_id(point.id, where="point id")  # never an option: `--output=...` is refused here
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
            tarball = Path(tmp) / "tree.tar"
            res = self._git("archive", "--format=tar", "-o", str(tarball), "--end-of-options", commit)
            if not res.ok:
                raise Unavailable(f"git archive {point.short} failed: {res.stderr.strip()[-300:]}")
            dest.mkdir(parents=True, exist_ok=True)
            with paths.open_regular(tarball, what="git archive") as f:
                readers.extract_tree(f, dest, name=f"git archive of {point.short}")

    def changed(self, a: str, b: str, paths: list[str]) -> list[Point]:
        """The commits after `a` up to `b` that touched `paths`: what to read for the cause."""
        a, b = git.commit_id(a, where="last good"), git.commit_id(b, where="first bad")
        res = self._git("log", "--reverse", "--format=%H%x09%cs%x09%s", "--end-of-options", f"{a}..{b}", "--", *paths)
        rows = [(ln.split("\t", 2) + ["", ""])[:3] for ln in res.stdout.splitlines() if ln]
        return [Point(sha, title, date) for sha, date, title in rows]


# --- the index's answer (PyPI's JSON API), read leniently: an answer of the wrong type lists
# nothing or reads as missing, it never raises past `ProjectPage.of`


def _text(value: object) -> object:
    """A text field of an index answer; anything else there reads as missing."""
    return value if isinstance(value, str) else ""


IndexText = Annotated[str, BeforeValidator(_text)]


class Digests(Open):
    # what the index says, of any type: checked against the sha256 grammar where it is used
    sha256: object = None


def _digests(value: object) -> object:
    return value if isinstance(value, dict) else None


def _entries(value: object) -> object:
    """The files the index lists for a release: only entries of the right shape."""
    return [f for f in value if isinstance(f, dict)] if isinstance(value, list) else []


class IndexFile(Open):
    """One file of a release, as the index lists it."""

    filename: IndexText = ""
    packagetype: IndexText = ""
    upload_time: IndexText = ""
    url: IndexText = ""
    digests: Annotated[Digests | None, BeforeValidator(_digests)] = None


class ProjectPage(Open):
    """The index's JSON for one project: its `releases` table (version -> files)."""

    releases: dict[str, Annotated[list[IndexFile], BeforeValidator(_entries)]]

    @classmethod
    def of(cls, doc: object, url: str) -> ProjectPage:
        try:
            return cls.model_validate(doc)
        except ValidationError:
            raise EnvironmentProblem(f"{url}: not a package index's project JSON (no `releases` table)",
                                     hint="give --index a PyPI-style JSON API, e.g. https://pypi.org/pypi/{name}/json") from None

    def files(self, version: str) -> list[IndexFile]:
        """The files listed for `version`; none for a version the index does not list (a resumed
        bisect's point list is its own, read from bisect.json)."""
        return self.releases.get(version, [])


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
        if not isinstance(project, str) or not _PROJECT.fullmatch(project):
            raise ConfigError(f"pypi:{grammar.one_line(str(project))[:100]}: not a package name",
                              hint="e.g. pypi:vllm (letters, digits and . _ -)")
        if (why := grammar.url_template_problem(index)) is not None:
            raise ConfigError(f"--index {grammar.one_line(str(index))[:200]!r} {why}",
                              hint="give a package index's JSON API with {name} for the project, e.g. "
                                   "https://pypi.org/pypi/{name}/json")
        self.project, self.index, self.minor_first = project, index, minor_first
        self.cache = Path(cache or SDIST_CACHE)
        self.good, self.bad = _version(good, "--good"), _version(bad, "--bad")
        if not self.good < self.bad:
            raise ConfigError(f"--good {good} is not older than --bad {bad}",
                              hint="give the older, good release as --good")
        self._doc: ProjectPage | None = None

    def spec(self) -> HistorySpec:
        return HistorySpec(kind="releases", project=self.project, good=str(self.good), bad=str(self.bad),
                           index=self.index, minor_first=self.minor_first)

    def _cached_name(self) -> str:
        return f"{re.sub(r'[-_.]+', '-', self.project).lower()}.releases.json"

    def document(self) -> ProjectPage:
        """The index's JSON for the project; the cached copy when the index cannot be reached."""
        if self._doc is None:
            url = grammar.fill_url(self.index, name=re.sub(r"[-_.]+", "-", self.project).lower())
            cache = Root(self.cache, what="sdist cache")
            name = self._cached_name()
            try:
                doc = http.get_json(url, timeout=60, max_bytes=64 << 20, attempts=2)
            except http.HttpError as exc:
                if not cache.exists(name):
                    raise EnvironmentProblem(f"cannot read {url}: {exc.message}",
                                             hint=f"run once with access to the index (it is kept in {self.cache})") from None
                doc = cache.load_json(name, hint="delete it; the next run with the index writes it again")
                url = str(self.cache / name)
                self._doc = ProjectPage.of(doc, url)
            else:
                self._doc = ProjectPage.of(doc, url)  # checked before it is kept
                Root(self.cache, what="sdist cache", create=True).save_text(name, json.dumps(doc))
        return self._doc

    def _files(self, version: str) -> list[IndexFile]:
        return self.document().files(version)

    def points(self) -> list[Point]:
        found: dict[Version, Point] = {}
        for text in self.document().releases:
            try:
                v = Version(text)
            except InvalidVersion:
                continue
            if v.is_prerelease or v.is_devrelease or not (self.good <= v <= self.bad):
                continue
            files = self._files(text)
            if not files:  # yanked or emptied: no source at all
                continue
            date = min(f.upload_time[:10] for f in files)
            sdist = any(f.packagetype == "sdist" for f in files)
            point = Point(text, f"{self.project} {text}" + ("" if sdist else " (no sdist on the index)"), date)
            # `1.1` and `1.1.0` are one release (PEP 440): the spelling with an sdist stays
            if v not in found or ("no sdist" in found[v].title and sdist):
                found[v] = point
        ordered = sorted(found.items(), key=lambda kv: kv[0])
        ids = [v for v, _ in ordered]
        for end, flag in ((self.good, "--good"), (self.bad, "--bad")):
            if end not in ids:
                raise ConfigError(f"{flag} {end}: no such release of {self.project} on the index",
                                  hint=f"releases in range: {', '.join(p.id for _, p in ordered[:8]) or 'none'}")
        return [p for _, p in ordered]

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
        files = [f for f in self._files(point.id) if f.packagetype == "sdist"]
        if not files:
            raise Unavailable(f"{self.project} {point.id} has no sdist on the index")
        f = files[0]
        name = f.filename
        sha = f.digests.sha256 if f.digests else None
        if grammar.problem("file_name", name) or not name.endswith((".tar.gz", ".tgz")):
            raise Unavailable(f"{self.project} {point.id}: sdist {grammar.one_line(name)[:120]!r} is not a .tar.gz file name")
        if sha is not None and grammar.problem("sha256", sha):
            raise Unavailable(f"{self.project} {point.id}: the index's sha256 for {name} is not 64 hex characters")
        cache = Root(self.cache, what="sdist cache", create=True)
        path = self.cache / name
        if not cache.exists(name):
            url = f.url
            if not url:
                raise Unavailable(f"{name}: not in {self.cache} and the index gives no URL")
            try:  # written whole or not at all
                http.download(url, path, timeout=900, max_bytes=SDIST_MAX_BYTES)
            except http.HttpError as exc:
                raise Unavailable(f"{name}: download failed: {exc.message}") from None
        if isinstance(sha, str) and cache.sha256(name) != sha:  # a link in the cache is refused here, never followed
            raise Unavailable(f"{path}: sha256 differs from the index's {sha[:12]}… (delete it to download again)")
        return path

    def unpack(self, point: Point, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _extract(self.sdist(point), dest)
