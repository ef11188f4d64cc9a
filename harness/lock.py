"""`harness lock`: every pin a build fetches, resolved once and written next to the matrix.

`matrix/spark.toml` gets `matrix/spark.lock` (TOML). Per docker stack it records the digest its
base image tag resolved to (through the Docker engine itself: pull, then the image's
RepoDigests; no buildx, which Debian's docker.io 20.10 does not have) and the sha256 of every
file the build takes from PyPI (the vLLM and FlashInfer sdists, the flashinfer-cubin wheel),
from PyPI's JSON API. `harness build` and `harness run` build from the lock; `harness run`
writes it first when there is none.

A pin written in the matrix wins, and the lock must agree with it. A lock that no longer
matches its matrix (a tag, version or digest edited in the matrix, a stack added) is an error
naming what moved and the fix (`harness lock -m MATRIX`). Locking again over an existing lock
is how an upstream move is noticed: a tag that now resolves to another digest is an error
naming the image, unless `--update` accepts it.

A lock is written for one CPU platform (this host's, or `--platform`) and records it: a wheel
pin is the file for that CPU (or a pure one). The sdists and the base image's digest (the tag's
digest as the registry lists it, which a multi-platform tag shares across its platforms) are the
same on every platform; a lock whose pinned wheel is for another CPU than the build's is a
mismatch naming the file and both platforms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness import __version__, http, platforms
from harness.errors import ConfigError, EnvironmentProblem
from harness.http import HttpError
from harness.matrix.load import Matrix
from harness.matrix.model import DIGEST
from harness.safety.readers import load_toml
from harness.safety.writes import write_text

# The production index. PyPI's per-version JSON first; the per-project JSON (its `releases`)
# when that answers 404: both are PyPI's documented JSON API, and some mirrors serve only one.
PYPI_VERSION_JSON = "https://pypi.org/pypi/{name}/{version}/json"
PYPI_PROJECT_JSON = "https://pypi.org/pypi/{name}/json"
FORMAT = 1

HEADER = """\
# Written by `harness lock -m {matrix}`; refresh it with the same command (never by hand).
# Each [stacks.<stack>.<pin>] table pins one thing the build of that stack fetches:
#   base_image        the digest its repository:tag resolved to (docker pull, then RepoDigests)
#   vllm, flashinfer  the sha256 of the sdist the build downloads (checked after download)
#   flashinfer-cubin  the sha256 of the prebuilt-kernel wheel (recorded; pip installs it by version)
# [lock] platform is the CPU the wheel pins were picked for (a pure wheel suits every CPU).
# `source` says where the value came from (engine, pypi, or the matrix, which wins) and
# `locked` when. A tag that later resolves elsewhere fails `harness lock` until --update.
"""

JsonGetter = Callable[[str], dict]


# --- a package index's JSON answer, validated where it comes in --------------------------------


def _text_digests(value: object) -> dict[str, object]:
    """An index entry's digests, the text ones only (an answer of the wrong type has none)."""
    return {k: v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


class Digests(BaseModel):
    """An index file's `digests` (algorithm -> hex): the text values kept, others dropped."""

    model_config = ConfigDict(frozen=True, extra="allow")
    sha256: str = ""


class IndexFile(BaseModel):
    """One file an index lists for a version (PyPI's `urls` entry); unknown keys are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")
    filename: str = Field(strict=True)
    packagetype: str = Field(strict=True)
    digests: Digests = Digests()

    @field_validator("digests", mode="before")
    @classmethod
    def _digests(cls, value: object) -> object:
        return value if isinstance(value, Digests) else _text_digests(value)


class IndexInfo(BaseModel):
    """The project's `info` table; only its latest version is read (for a message)."""

    model_config = ConfigDict(frozen=True, extra="allow")
    version: object = "?"


def _file_entries(value: object) -> list[IndexFile]:
    """An index's file list, entries of the right shape only (a text filename and packagetype,
    digests of text): an answer of the wrong type lists nothing, it never raises."""
    out = []
    for f in value if isinstance(value, list) else []:
        try:
            out.append(IndexFile.model_validate(f))
        except ValidationError:
            continue
    return out


class IndexAnswer(BaseModel):
    """PyPI's JSON API answer, per version (`urls`) or per project (`releases`, `info`); a field of
    the wrong type reads as absent."""

    model_config = ConfigDict(frozen=True, extra="allow")
    urls: list[IndexFile] = []
    releases: dict[str, list[IndexFile]] = {}
    info: IndexInfo = IndexInfo()

    @field_validator("urls", mode="before")
    @classmethod
    def _urls(cls, value: object) -> list[IndexFile]:
        return _file_entries(value)

    @field_validator("releases", mode="before")
    @classmethod
    def _releases(cls, value: object) -> dict[str, list[IndexFile]]:
        return {str(v): _file_entries(files) for v, files in value.items()} if isinstance(value, dict) else {}

    @field_validator("info", mode="before")
    @classmethod
    def _info(cls, value: object) -> object:
        return value if isinstance(value, dict) else {}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LockedImage(_Strict):
    reference: str = Field(description="repository:tag as the matrix names it.")
    digest: str = Field(pattern=DIGEST.pattern, description="sha256:<64 hex> the tag resolved to.")
    source: Literal["engine", "matrix"] = Field(description="Resolved by the engine, or copied from the matrix.")
    locked: str = Field(description="When (UTC, ISO 8601).")


class LockedFile(_Strict):
    project: str = Field(description="PyPI project name.")
    version: str
    kind: Literal["sdist", "wheel"]
    file: str = Field(description="The file name on PyPI.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    source: Literal["pypi", "matrix"]
    locked: str


class LockMeta(_Strict):
    format: int = FORMAT
    matrix: str = Field(description="The matrix file name this lock belongs to.")
    written: str
    tool: str
    platform: str | None = Field(None, description="The CPU platform wheels were picked for (linux/amd64, "
                                 "linux/arm64); absent in locks written before it was recorded.")


PinKey = Literal["base_image", "vllm", "flashinfer", "flashinfer-cubin"]


class StackPins(_Strict):
    """The pins of one stack (`[stacks.<stack>]`): each table present only when the stack fetches it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    base_image: LockedImage | None = None
    vllm: LockedFile | None = None
    flashinfer: LockedFile | None = None
    flashinfer_cubin: LockedFile | None = Field(None, alias="flashinfer-cubin")

    def of(self, key: PinKey) -> LockedImage | LockedFile | None:
        """The pin a Want's key names."""
        return {"base_image": self.base_image, "vllm": self.vllm, "flashinfer": self.flashinfer,
                "flashinfer-cubin": self.flashinfer_cubin}[key]

    def items(self) -> list[tuple[PinKey, LockedImage | LockedFile]]:
        """The pins present, as (key, pin) in the lock's order."""
        keys: tuple[PinKey, ...] = ("base_image", "vllm", "flashinfer", "flashinfer-cubin")
        return [(k, pin) for k in keys if (pin := self.of(k)) is not None]


class LockFile(_Strict):
    lock: LockMeta
    stacks: dict[str, StackPins] = Field(default_factory=dict)

    def pins(self, stack: str) -> StackPins:
        """The pins of `stack`; none (all fields None) for a stack the lock does not hold."""
        return self.stacks.get(stack) or StackPins()


# --- what a matrix asks to be pinned ------------------------------------------------------------


class Want(BaseModel):
    """One pin a stack needs: an image to resolve or a PyPI file to hash."""

    model_config = ConfigDict(frozen=True)
    stack: str
    key: PinKey
    what: str  # "nvidia/cuda:13.0.1-devel-ubuntu24.04" or "vllm==0.33.0 (sdist)"
    given: str | None = None  # the value written in the matrix, which wins
    kind: Literal["image", "sdist", "wheel"] = "image"
    project: str = ""
    version: str = ""

    @property
    def where(self) -> str:
        return f"stacks.{self.stack}.{self.key}"


def wants(matrix: Matrix, stacks: list[str] | None = None) -> list[Want]:
    """Every pin the docker stacks build from, in matrix order; prebuilt and local stacks have none."""
    out: list[Want] = []
    for name, s in matrix.spec.stacks.items():
        if (stacks is not None and name not in stacks) or s.runner != "docker" or s.image:
            continue
        b = s.base_image
        # An image made on this host (`local = true` where the matrix model has it) has no
        # registry digest: the build pins it by image ID.
        if b is not None and not getattr(b, "local", False):
            out.append(Want(stack=name, key="base_image", what=f"{b.repository}:{b.tag}", given=b.digest))
        if s.vllm and s.vllm.pypi:
            out.append(Want(stack=name, key="vllm", what=f"vllm=={s.vllm.pypi} (sdist)", kind="sdist",
                            project="vllm", version=s.vllm.pypi, given=s.vllm.sdist_sha256))
        if s.flashinfer and s.flashinfer.version:
            fi = s.flashinfer
            out.append(Want(stack=name, key="flashinfer", what=f"flashinfer-python=={fi.version} (sdist)",
                            kind="sdist", project="flashinfer-python", version=fi.version,
                            given=fi.sdist_sha256))
            if fi.cubin:
                out.append(Want(stack=name, key="flashinfer-cubin",
                                what=f"flashinfer-cubin=={fi.version} (wheel)", kind="wheel",
                                project="flashinfer-cubin", version=fi.version))
    return out


def lock_path(matrix: Matrix | Path | str) -> Path:
    path = matrix.path if isinstance(matrix, Matrix) else Path(matrix)
    return path.with_suffix(".lock")


# --- resolving: the engine for images, PyPI's JSON API for files --------------------------------


def get_json(url: str, *, timeout: float = 60) -> dict:
    """GET a JSON document through harness.http (https only, capped, transient failures retried);
    a failure is a PyPIError with the HTTP status (404 means "no such version")."""
    try:
        doc = http.get_json(url, timeout=timeout, max_bytes=8 << 20)
    except HttpError as exc:
        raise PyPIError(url, exc.status, exc.message.removeprefix(f"GET {url}: ")) from None
    if not isinstance(doc, dict):
        raise PyPIError(url, None, f"not a JSON object (a {type(doc).__name__})")
    return doc


class PyPIError(EnvironmentProblem):
    def __init__(self, url: str, status: int | None, why: str) -> None:
        super().__init__(f"{url}: {why}", hint="check that this host reaches pypi.org, then run again")
        self.status = status


def _norm(project: str) -> str:
    return re.sub(r"[-_.]+", "-", project).lower()


def pypi_files(project: str, version: str, *, fetch: JsonGetter | None = None,
               version_url: str | None = None, project_url: str | None = None) -> list[IndexFile]:
    """The files PyPI lists for project==version (its `urls` entries)."""
    fetch = fetch or get_json
    version_url = version_url or PYPI_VERSION_JSON
    project_url = project_url or PYPI_PROJECT_JSON
    name = _norm(project)
    url = version_url.format(name=name, version=version)
    try:
        return _index_doc(fetch(url), url).urls
    except PyPIError as exc:
        if exc.status != 404:
            raise
    url = project_url.format(name=name)
    doc = _index_doc(fetch(url), url)
    releases = doc.releases
    if version not in releases:
        known = [v for v in releases if releases[v]]
        raise ConfigError(f"{project} {version} is not on PyPI",
                          hint=f"pin a released version (latest: {str(doc.info.version)[:40]}; "
                               f"{len(known)} releases listed)")
    return releases[version]


def _index_doc(doc: object, url: str) -> IndexAnswer:
    if not isinstance(doc, dict):
        raise EnvironmentProblem(f"{url}: not a package index's JSON (a {type(doc).__name__}, not an object)",
                                 hint="check the index URL; PyPI's JSON API answers an object")
    return IndexAnswer.model_validate(doc)


def pick_file(files: list[IndexFile], project: str, version: str, kind: str,
              platform: platforms.Platform | None = None) -> IndexFile:
    """The one file the build downloads: the sdist, or the wheel for `platform` (default: this
    host's), a pure one first."""
    if kind == "sdist":
        mine = [f for f in files if f.packagetype == "sdist"]
    else:
        target = platform or platforms.host()
        wheels = [f for f in files if f.packagetype == "bdist_wheel"]
        mine = ([f for f in wheels if "any" in platforms.wheel_targets(f.filename)]
                or [f for f in wheels if target.takes_wheel(f.filename)])
    if not mine:
        listed = ", ".join(f.filename for f in files) or "no files"
        what = kind if kind == "sdist" else f"{kind} for {(platform or platforms.host()).describe()}"
        raise ConfigError(f"{project} {version} has no {what} on PyPI (listed: {listed})",
                          hint="pin a version that publishes one")
    chosen = sorted(mine, key=lambda f: f.filename)[0]
    if not re.fullmatch(r"[0-9a-f]{64}", chosen.digests.sha256):
        raise ConfigError(f"{project} {version}: PyPI lists no sha256 for {chosen.filename}")
    return chosen


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Moved(ConfigError):
    """Pins the lock holds that upstream (or the matrix) no longer agrees with."""

    def __init__(self, problems: list[str], hint: str) -> None:
        self.problems = problems
        super().__init__("\n  - ".join(["the lock no longer matches:", *problems]), hint=hint)


class _Puller(Protocol):
    """What resolve() asks of an engine (harness.engine.Engine has it)."""

    def pull_digest(self, repository: str, tag: str) -> str: ...


def resolve(matrix: Matrix, *, engine_factory: Callable[[], _Puller] | None = None,
            fetch: JsonGetter | None = None, previous: LockFile | None = None, update: bool = False,
            say: Callable[[str], None] = lambda _s: None,
            platform: platforms.Platform | None = None) -> LockFile:
    """A lock for every docker stack of the matrix, its wheels picked for `platform` (default:
    this host's). With `previous`, a pin that resolves to a different value than before is an
    error (unless `update`); a pin whose matrix entry changed, or a wheel locked before for
    another platform, is simply resolved again."""
    target = platform or platforms.host()
    other_cpu = previous is not None and previous.lock.platform not in (None, target.docker)
    now = _now()
    images: dict[str, str] = {}
    engine = None
    moved: list[str] = []
    stacks: dict[str, dict[str, LockedImage | LockedFile]] = {}
    for w in wants(matrix):
        before = previous.pins(w.stack).of(w.key) if previous else None
        pin: LockedImage | LockedFile
        if w.kind == "image":
            if w.given:
                pin = LockedImage(reference=w.what, digest=w.given, source="matrix", locked=now)
            else:
                if w.what not in images:
                    if engine is None:
                        if engine_factory is None:
                            from harness.engine import connect

                            engine_factory = connect
                        engine = engine_factory()
                    repo, _, tag = w.what.rpartition(":")
                    say(f"pulling {w.what} to read its digest (the build needs the image anyway)")
                    images[w.what] = engine.pull_digest(repo, tag)
                pin = LockedImage(reference=w.what, digest=images[w.what], source="engine", locked=now)
            if (isinstance(before, LockedImage) and before.reference == pin.reference
                    and before.digest != pin.digest and not update and pin.source == "engine"):
                moved.append(f"{w.where}: {w.what} now resolves to {pin.digest}; the lock has "
                             f"{before.digest} (the tag was pushed again)")
        else:
            files = pypi_files(w.project, w.version, fetch=fetch)
            if w.given:
                fname = next((f.filename for f in files if f.packagetype == "sdist"), "")
                chosen = IndexFile(filename=fname, packagetype="sdist", digests=Digests(sha256=w.given))
                listed = {f.digests.sha256 for f in files if f.packagetype == "sdist"}
                if w.given not in listed:
                    raise ConfigError(f"{w.where}.sdist_sha256: {w.given} is not the sha256 of any "
                                      f"{w.project} {w.version} sdist on PyPI ({', '.join(sorted(listed))})",
                                      hint="copy the sha256 PyPI lists, or remove the key and lock again")
            else:
                chosen = pick_file(files, w.project, w.version, w.kind, target)
            pin = LockedFile(project=w.project, version=w.version, kind=w.kind, file=chosen.filename,
                             sha256=chosen.digests.sha256, source="matrix" if w.given else "pypi",
                             locked=now)
            if (isinstance(before, LockedFile) and (before.project, before.version, before.kind)
                    == (pin.project, pin.version, pin.kind) and before.sha256 != pin.sha256 and not update
                    and not (other_cpu and pin.kind == "wheel")):
                moved.append(f"{w.where}: {w.what} is now {pin.file} sha256 {pin.sha256}; the lock "
                             f"has {before.file} sha256 {before.sha256}")
        stacks.setdefault(w.stack, {})[w.key] = pin
    if moved:
        rel = _shown(matrix.path)
        raise Moved(moved, hint=f"if the new content is what you want: `harness lock -m {rel} --update`; "
                    "to keep building what you had, write the old digest into the matrix")

    return LockFile(lock=LockMeta(matrix=matrix.path.name, written=now, tool=f"harness {__version__}",
                                  platform=target.docker),
                    stacks={name: StackPins.model_validate(pins) for name, pins in stacks.items()})


# --- reading, writing, applying -----------------------------------------------------------------


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def write_lock(lock: LockFile, path: Path) -> None:
    import tomli_w

    body = tomli_w.dumps(lock.model_dump(mode="json", exclude_none=True, by_alias=True))  # TOML has no null: an unset field is left out

    write_text(path, HEADER.format(matrix=_shown(path.with_suffix(".toml"))) + "\n" + body, flag="lock file")


def read_lock(path: Path) -> LockFile | None:
    """The lock at `path`, None when there is none; a broken one is bad input, named."""
    if not path.exists() and not path.is_symlink():
        return None
    fix = f"remove {path} and run `harness lock -m {_shown(path.with_suffix('.toml'))}`"
    data = load_toml(path, what="lock file", hint=fix)  # regular, bounded in size and depth
    try:
        lock = LockFile.model_validate(data)
    except ValidationError as exc:
        first = str(exc).splitlines()[0]
        raise ConfigError(f"{path}: not a lock this version can read ({first})", hint=fix) from None
    if lock.lock.format != FORMAT:
        raise ConfigError(f"{path}: lock format {lock.lock.format}, this version reads {FORMAT}", hint=fix)
    return lock


def mismatches(matrix: Matrix, lock: LockFile, stacks: list[str] | None = None,
               platform: platforms.Platform | None = None) -> list[str]:
    """What the matrix asks for that the lock does not hold, one line each, named by key path; a
    wheel pinned for another CPU than `platform` (default: this host's) is one of them."""
    target = platform or platforms.host()
    problems: list[str] = []
    for w in wants(matrix, stacks):
        pin = lock.pins(w.stack).of(w.key)
        if pin is None:
            problems.append(f"{w.where}: {w.what} is not in the lock (added after it was written)")
        elif isinstance(pin, LockedImage):
            if pin.reference != w.what:
                problems.append(f"{w.where}: the matrix asks for {w.what}; the lock pinned {pin.reference}")
            elif w.given and w.given != pin.digest:
                problems.append(f"{w.where}.digest: the matrix says {w.given}; the lock says {pin.digest} "
                                "(the matrix wins: lock again to record it)")
        elif (pin.project, pin.version, pin.kind) != (w.project, w.version, w.kind):
            problems.append(f"{w.where}: the matrix asks for {w.what}; the lock pinned "
                            f"{pin.project}=={pin.version} ({pin.kind})")
        elif w.given and w.given != pin.sha256:
            problems.append(f"{w.where}.sdist_sha256: the matrix says {w.given}; the lock says "
                            f"{pin.sha256} (the matrix wins: lock again to record it)")
        elif pin.kind == "wheel" and (why := platforms.wheel_refusal(pin.file, target)):
            problems.append(f"{w.where}: the lock (written for {lock.lock.platform or 'an unrecorded platform'}) "
                            f"pinned {why}: lock again with --platform {target.docker}")
    return problems


def apply_lock(matrix: Matrix, lock: LockFile, stacks: list[str] | None = None,
               platform: platforms.Platform | None = None) -> Matrix:
    """The matrix with the lock's digests and sha256s where it wrote none; a mismatch (a wheel
    pinned for another CPU than `platform` among them) is an error."""
    if problems := mismatches(matrix, lock, stacks, platform):
        raise Moved(problems, hint=f"`harness lock -m {_shown(matrix.path)}` (it re-resolves what changed "
                    "and keeps the rest)")
    new_stacks = dict(matrix.spec.stacks)
    for name, s in matrix.spec.stacks.items():
        if name not in lock.stacks or s.runner != "docker" or s.image or (stacks is not None and name not in stacks):
            continue
        pins = lock.stacks[name]
        update: dict[str, object] = {}
        img = pins.base_image
        if img is not None and s.base_image is not None and s.base_image.digest is None:
            update["base_image"] = s.base_image.model_copy(update={"digest": img.digest})
        for key, field, pin in (("vllm", s.vllm, pins.vllm), ("flashinfer", s.flashinfer, pins.flashinfer)):
            if pin is not None and field is not None and field.sdist_sha256 is None:
                update[key] = field.model_copy(update={"sdist_sha256": pin.sha256})
        if update:
            new_stacks[name] = s.model_copy(update=update)
    return matrix._replace(spec=matrix.spec.model_copy(update={"stacks": new_stacks}))


def pinned_lines(lock: LockFile) -> list[str]:
    lines = []
    for stack, pins in lock.stacks.items():
        for key, pin in pins.items():
            if isinstance(pin, LockedImage):
                lines.append(f"stacks.{stack}.{key}: {pin.reference} -> {pin.digest} ({pin.source})")
            else:
                lines.append(f"stacks.{stack}.{key}: {pin.file} sha256 {pin.sha256} ({pin.source})")
    return lines


def ensure_lock(matrix: Matrix, stacks: list[str] | None = None, *, lock_if_missing: bool = False,
                say: Callable[[str], None] = lambda _s: None,
                engine_factory: Callable[[], _Puller] | None = None,
                platform: platforms.Platform | None = None) -> LockFile | None:
    """Pins first, before anything starts (`harness run`, `harness build`): the matrix's lock,
    checked against it (a stale one is refused); without one, and with `lock_if_missing`, lock
    first (and say what was pinned) when some stack lacks a pin. None: no lock (the build then
    refuses what is unpinned). Applying it is the build's (harness.image.stackbuild.resolve)."""
    path = lock_path(matrix)
    lock = read_lock(path)
    if lock is None:
        needed = [w for w in wants(matrix, stacks) if not w.given]
        if not needed or not lock_if_missing:
            return None
        say(f"no lock for {matrix.path.name}: locking {len(needed)} pin(s) first ({_shown(path)})")
        lock = resolve(matrix, engine_factory=engine_factory, say=say, platform=platform)
        write_lock(lock, path)
        for line in pinned_lines(lock):
            say(f"  pinned {line}")
    if problems := mismatches(matrix, lock, stacks, platform):
        raise Moved(problems, hint=f"`harness lock -m {_shown(matrix.path)}` (it re-resolves what changed "
                    "and keeps the rest)")
    return lock


def locked_matrix(matrix: Matrix, stacks: list[str] | None = None, *, lock_if_missing: bool = False,
                  say: Callable[[str], None] = lambda _s: None,
                  engine_factory: Callable[[], _Puller] | None = None,
                  platform: platforms.Platform | None = None) -> Matrix:
    """The matrix with its lock applied (ensure_lock first): what a build is resolved from."""
    lock = ensure_lock(matrix, stacks, lock_if_missing=lock_if_missing, say=say, engine_factory=engine_factory,
                       platform=platform)
    return matrix if lock is None else apply_lock(matrix, lock, stacks, platform)
