"""What a vLLM source build fetches from GitHub, pinned, fetched once, handed over offline.

vLLM's CMake clones CUTLASS, vllm-flash-attn, FlashMLA, QuTLASS, DeepGEMM, triton_kernels and
fmha_sm100 at configure time. Each has an override variable naming a local tree; with those set
and `FETCHCONTENT_FULLY_DISCONNECTED=ON` the build reaches no network. The table of what a
release fetches lives in harness/data/sources/vllm-<version>.toml (commit, override variable,
the paths the build reads, and the sha256 of that trimmed tree).

The sha256 is of the tree's content, not of an archive: sorted `path NUL mode NUL sha256(file)`
lines, so the same commit trimmed on any host, packed by any tar or xz, gives the same pin.
Archives live in CACHE_ROOT/offline/; `harness sources fetch --out DIR` copies them for an
air-gapped host and `--from DIR` (there) checks and takes them in.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness import git
from harness.errors import ConfigError, EnvironmentProblem
from harness.image.sources import CACHE_ROOT
from harness.safety import paths as paths_mod
from harness.safety import readers
from harness.safety.paths import MiB
from harness.safety.roots import Root

MIRRORS = CACHE_ROOT / "mirrors"  # bare clones of the local repositories `--mirror URL=PATH` names
# A trimmed source archive (a few MB to a few hundred) and what it may unpack to.
ARCHIVE_MAX_BYTES = 1024 * MiB
ARCHIVE_MAX_UNPACKED = 1024 * MiB

OFFLINE = CACHE_ROOT / "offline"
TABLES = Path(str(resources.files("harness").joinpath("data", "sources")))
SHA = re.compile(r"^[0-9a-f]{40}$")
NAME = re.compile(r"^[a-z][a-z0-9_-]{0,40}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SubmoduleEntry(_Strict):
    path: str = Field(description="Where the submodule sits in the parent tree.")
    url: str = Field(description="Its git URL (https).")
    commit: str = Field(pattern=SHA.pattern, description="The commit the parent pins (git ls-tree).")


class SourceEntry(_Strict):
    name: str = Field(pattern=NAME.pattern, description="Short name, used in errors and file names.")
    url: str = Field(description="The git URL vLLM's CMake would clone.")
    commit: str = Field(pattern=SHA.pattern, description="The commit it pins (a tag is resolved to its commit).")
    ref: str = Field("", description="The tag or branch vLLM names, when it names one (for humans).")
    env: str = Field(pattern=r"^[A-Z][A-Z0-9_]+$", description="The override variable (an env var CMake reads).")
    declared_in: str = Field(description="The file of the vLLM source that declares the fetch.")
    keep: list[str] = Field(min_length=1, description="Paths of the tree the build reads; the rest is dropped.")
    submodules: list[SubmoduleEntry] = Field(default_factory=list, description="Submodules the build reads.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the trimmed tree's content (see module doc).")
    note: str = Field("", description="Why this source is needed, or what reads it.")


class Unpinned(_Strict):
    name: str = Field(pattern=NAME.pattern, description="Short name, as in a patch's Leaves-out line.")
    url: str = Field(description="The git URL vLLM's CMake would clone.")
    commit: str = Field("", description="The commit it names, if it names one.")
    ref: str = Field("", description="The tag it names, if it names one.")
    env: str = Field(pattern=r"^[A-Z][A-Z0-9_]+$", description="The override variable.")
    declared_in: str = Field(description="The file of the vLLM source that declares the fetch.")
    why: str = Field("", description="Why it is not pinned (what could not be had where the table was written).")


class StandInEntry(SourceEntry):
    stands_in_for: str = Field(min_length=1, description="The ref or commit vLLM names, which this tree replaces.")


class SourceTable(_Strict):
    vllm: str = Field(description="The vLLM release this table was read from.")
    read_from: str = Field(description="Where the table was read (sdist file and its sha256).")
    sources: list[SourceEntry]
    unpinned: list[Unpinned] = Field(default_factory=list, description="Fetched by the build, not pinned here.")
    stand_ins: list[StandInEntry] = Field(
        default_factory=list, description="Trees used instead of an unpinned source, only by a stack one of whose "
        "patches says `Stand-in: NAME`: another commit of the same repository, named in every image and record.")

    @model_validator(mode="after")
    def _stand_ins_replace_unpinned(self) -> SourceTable:
        unpinned = {u.name for u in self.unpinned}
        for s in self.stand_ins:
            if s.name not in unpinned:
                raise ValueError(f"stand_ins: {s.name!r} is not an [[unpinned]] source (a stand-in replaces one)")
        return self


@dataclass(frozen=True)
class Pin:
    name: str
    url: str
    commit: str
    env: str
    keep: tuple[str, ...]
    submodules: tuple[tuple[str, str, str], ...]
    sha256: str
    stands_in_for: str = ""  # a stand-in: the ref or commit vLLM names, which this tree replaces

    @property
    def archive_name(self) -> str:
        return f"{self.name}-{self.commit[:12]}.tar.xz"


def table_path(vllm_version: str) -> Path:
    return TABLES / f"vllm-{vllm_version}.toml"


@dataclass(frozen=True)
class Table:
    vllm: str
    pins: tuple[Pin, ...]
    unpinned: tuple[tuple[str, str, str], ...]  # (name, url, env): declared by vLLM, no pin here
    path: Path
    stand_ins: tuple[Pin, ...] = ()  # used for an unpinned source only when a patch asks (`Stand-in: NAME`)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pins) + tuple(u[0] for u in self.unpinned)


def load_table(vllm_version: str, path: Path | None = None) -> Table | None:
    """What a vLLM release fetches, or None when no table exists for it."""
    path = path or table_path(vllm_version)
    if not path.is_file():
        return None
    try:
        table = SourceTable.model_validate(tomllib.loads(paths_mod.read_text(path, limit=4 * MiB, what="source table")))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", hint="fix the file") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: {where}: {first['msg']}", hint="fix the source table") from None
    def pin(s: SourceEntry, stands_in_for: str = "") -> Pin:
        return Pin(s.name, s.url, s.commit, s.env, tuple(s.keep), tuple((m.path, m.url, m.commit) for m in s.submodules),
                   s.sha256, stands_in_for)

    return Table(table.vllm, tuple(pin(s) for s in table.sources),
                 tuple((u.name, u.url, u.env) for u in table.unpinned), path,
                 tuple(pin(s, s.stands_in_for) for s in table.stand_ins))


def tree_sha256(root: Path) -> str:
    """Content digest of a tree: sorted `path NUL mode NUL sha256` lines (mode 'x', '-' or 'l')."""
    lines = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            lines.append(f"{rel}\0l\0{os.readlink(path)}\n")
        elif path.is_file():
            mode = "x" if os.access(path, os.X_OK) else "-"
            lines.append(f"{rel}\0{mode}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _git(argv: list[str], what: str) -> str:
    res = git.run(argv, timeout=1800, fetch=True, purpose="fetches the pinned sources vLLM's CMake would clone")
    if not res.ok:
        raise EnvironmentProblem(f"{what}: git {argv[2] if len(argv) > 2 else argv[0]} failed: "
                                 f"{res.stderr.strip()[-300:]}", hint="check the URL, the commit and the network")
    return res.stdout


def _export(repo: str, commit: str, dest: Path, what: str, paths: list[str],
            gitlinks: tuple[str, ...] = ()) -> dict[str, str]:
    """`paths` of the tree of `commit` into dest: from a local git folder (a mirror) or a URL
    (depth-1 fetch). Only the kept paths are read: a mirror may lack the blobs of the rest.
    Returns the commit each of `gitlinks` (submodule paths) names in that tree."""
    with tempfile.TemporaryDirectory() as tmp:
        commit = git.commit_id(commit, where=f"{what}: commit")
        if Path(repo).is_dir():  # read through a bare mirror: the folder's own config and filters never run
            git_dir = git.mirror(Path(repo), MIRRORS)
        else:
            git_dir = str(Path(tmp) / "g")
            _git(["init", "-q", "--bare", "--", git_dir], what)
            _git(["-C", git_dir, "fetch", "-q", "--depth", "1", "--", repo, commit], what)
        tar_path = Path(tmp) / "tree.tar"
        # after --end-of-options the commit and every path are positionals (archive reads a
        # following `--` as a path)
        res = git.run(["-C", git_dir, "archive", "--format=tar", "-o", str(tar_path), "--end-of-options", commit,
                       *paths], timeout=1800)
        if not res.ok:
            raise EnvironmentProblem(f"{what}: cannot export {commit} from {repo}: {res.stderr.strip()[-300:]}",
                                     hint="fetch that commit into the mirror, or give its URL")
        with paths_mod.open_regular(tar_path, what="git archive") as f:
            readers.extract_tree(f, dest, name=f"{what}: git archive of {commit[:12]}")
        links = {}
        for path in gitlinks:
            res = git.run(["-C", git_dir, "ls-tree", "--end-of-options", commit, "--", path], timeout=60)
            entry = res.stdout.split("\t", 1)[0].split() if res.ok else []  # "160000 commit SHA"
            links[path] = entry[2] if len(entry) == 3 and entry[0] == "160000" else ""
        return links


def assemble(pin: Pin, repos: Mapping[str, str], dest: Path) -> None:
    """The trimmed tree of `pin` into dest. `repos` maps a URL to a local mirror to read instead.
    Each submodule's commit must be the one the parent's tree names."""
    subs = [path for path, _u, _c in pin.submodules]

    def under(rel: str, sub: str) -> bool:
        return rel == sub or rel.startswith(sub + "/")

    own = [k for k in pin.keep if not any(under(k, s) for s in subs)]
    links = _export(repos.get(pin.url, pin.url), pin.commit, dest, pin.name, own, tuple(subs))
    for path, url, commit in pin.submodules:
        if links[path] != commit:
            named = f"names {links[path]}" if links[path] else "has no submodule there"
            raise ConfigError(f"{pin.name}: the table pins submodule {path} at {commit}, but {pin.commit[:12]}'s "
                              f"tree {named}", hint="copy the commit from `git ls-tree COMMIT PATH` into the table")
        inner = [k[len(path) + 1:] for k in pin.keep if under(k, path) and k != path]
        _export(repos.get(url, url), commit, dest / path, f"{pin.name}/{path}", inner or ["."])
    for rel in pin.keep:
        if not (dest / rel).exists():
            raise ConfigError(f"{pin.name}: kept path {rel!r} is not in the tree", hint="fix `keep` in the source table")


def pack(tree: Path, archive: Path) -> None:
    """tar.xz with fixed owner and mtime (the pin is of the content; this keeps archives stable too)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_suffix(".part")

    def norm(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        return info

    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        for path in sorted(tree.rglob("*")):
            tar.add(path, arcname=path.relative_to(tree).as_posix(), recursive=False, filter=norm)
    tmp.rename(archive)


def check_archive(pin: Pin, archive: Path, *, hint: str = "", shown: Path | None = None) -> None:
    """Unpack to a scratch folder and compare the content digest with the pin; an archive that
    is unreadable or holds other content is refused, naming the source."""
    fix = hint or f"delete {archive} and run `harness sources fetch` again"
    named = shown or archive  # the file the user gave (`--from DIR`), not the scratch copy read
    with tempfile.TemporaryDirectory() as tmp:
        try:  # bounded: an xz bomb in the cache stops at the bound, not at the end of the disk
            with Root(archive.parent, what="source archive folder").open_file(archive.name) as f:  # never a link
                readers.extract_tree(f, Path(tmp), name=f"{pin.name}: {named}", max_bytes=ARCHIVE_MAX_UNPACKED)
        except ConfigError as exc:
            raise EnvironmentProblem(exc.message, hint=fix) from None
        except OSError as exc:
            raise EnvironmentProblem(f"{pin.name}: {named} is not a readable archive ({exc})", hint=fix) from None
        got = tree_sha256(Path(tmp))
    if got != pin.sha256:
        raise ConfigError(f"{pin.name}: {named} holds content sha256 {got}, not the pinned {pin.sha256} "
                          f"({pin.name} @ {pin.commit[:12]}): another commit, trimmed differently, or corrupted",
                          hint=fix)


def fetch(pin: Pin, *, repos: Mapping[str, str] | None = None, from_dir: Path | None = None,
          cache: Path | None = None, check_cached: bool = False) -> Path:
    """The checked archive of `pin` in the cache: already there (checked again with
    `check_cached`), from `from_dir` (archives another host made), or assembled from git (a
    mirror in `repos`, else the URL)."""
    archive = (cache or OFFLINE) / pin.archive_name
    cache = archive.parent
    if Root(cache, what="source cache").exists(pin.archive_name):  # a link there is refused when read
        if check_cached:
            check_archive(pin, archive)
        return archive
    if from_dir is not None:
        src = from_dir / pin.archive_name
        given = Root(from_dir, what="--from")  # a root: an archive there that is a link is refused
        if not given.exists(pin.archive_name):
            raise EnvironmentProblem(f"{pin.name}: {src} does not exist",
                                     hint="on a host with network: `harness sources fetch -m MATRIX --out DIR`")
        part_name = f".{pin.archive_name}.part"
        part = Root(cache, what="source cache", create=True).save_bytes(
            part_name, given.load_bytes(pin.archive_name, limit=ARCHIVE_MAX_BYTES))
        try:
            check_archive(pin, part, shown=src, hint=f"make {src.name} again on the host with network "
                                                    "(`harness sources fetch -m MATRIX --out DIR`)")
        except BaseException:
            Root(cache, what="source cache").remove(part_name)
            raise
        os.replace(part, archive)
        return archive
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        assemble(pin, repos or {}, tree)
        got = tree_sha256(tree)
        if got != pin.sha256:
            raise ConfigError(f"{pin.name} @ {pin.commit[:12]}: trimmed tree sha256 {got} does not match the pin "
                              f"{pin.sha256}", hint="the commit or the keep list changed: fix the source table")
        pack(tree, archive)
    return archive


def missing(pins: tuple[Pin, ...], cache: Path | None = None) -> list[Pin]:
    return [p for p in pins if not ((cache or OFFLINE) / p.archive_name).is_file()]


def fetch_attempts(log_text: str, table: Table) -> list[str]:
    """Names of the sources the configure log shows CMake trying to download (with the network
    off, failing to): a build that would fetch anyway is named, not guessed."""
    found = []
    lowered = log_text.lower()
    for name, url in [(p.name, p.url) for p in table.pins] + [(u[0], u[1]) for u in table.unpinned]:
        repo = url.removesuffix(".git").lower()
        if repo in lowered or re.search(rf"populating {re.escape(name.lower())}\b", lowered):
            found.append(name)
    return found
