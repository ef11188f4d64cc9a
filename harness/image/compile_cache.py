"""The compile cache: ccache's objects in a folder on this host (the store), its settings, its
upkeep (`harness cache show` / `prune`) and what a build's compile steps say it did.

Every source build (the stacks of a matrix, later builds, `harness build --probe`, bisect points)
reuses what an earlier one compiled. The engine API drives the legacy builder, which has no
`RUN --mount`, so the store is served to each build over HTTP on the loopback address, private to
that build (harness/image/cache_store.py); the step side is docker/compile_cache.py, which names a
folder of the store by its toolchain (machine + compiler programs by content), so no object
crosses platforms or toolchains; ccache keys each object by flags, arch list, source and headers.

The store is a folder the harness made (it holds MARKER; a folder without it is never served,
counted or pruned), owned by this user and writable by nobody else, held open while it is used
(harness/safety/held.py): each object is one file whose mtime is its last use (a hit touches
it), so `prune` drops the least recently used first, through the held folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import re
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.errors import ConfigError
from harness.image.sources import CACHE_ROOT
from harness.results.build import CompileCache
from harness.safety import numbers
from harness.safety.held import Entry, Held

DEFAULT_MAX_GIB = 40
MAX_GIB = 1_000_000  # a bound above this is a typo, not a disk
MARK = "harness-compile-cache:"
STEP = "/opt/build/compile_cache.py env"  # what a Dockerfile's compile step runs to use the cache
MARKER = ".harness-compile-cache"
MARKER_TEXT = (b"A compile cache of vllm-bw-harness (harness/image/compile_cache.py): `harness cache show`\n"
               b"and `harness cache prune` act only on a folder that holds this file.\n")
TOP = "(top level)"  # the row of files lying directly in the store, outside any toolchain folder
_ON = {"on": True, "1": True, "yes": True, "true": True, "off": False, "0": False, "no": False, "false": False}
# a translation unit's path as the build named it (relative to the source tree, or absolute)
_SOURCE = re.compile(r"[A-Za-z0-9_./+=@-]{1,300}")
_COUNT = 10**9  # more compiles than any build makes: a line claiming more is not a step's


# --- settings ------------------------------------------------------------------------------------
# read strictly: float() and int() would take nan, inf, 1e999, signs, spaces and non-ASCII digits


def cache_root() -> Path:
    return Path(os.environ.get("HARNESS_COMPILE_CACHE_DIR") or CACHE_ROOT / "compile")


def gib(raw: str, name: str) -> int:
    """`raw` GiB as bytes: a finite number of ASCII digits, 0 to MAX_GIB (harness.safety.numbers,
    the one parser of numbers from a flag or the environment); `name` (the option, or
    "environment variable X") is named when it is not one."""
    value = numbers.parse(raw, name, float, lo=0, hi=MAX_GIB, sep="=" if name.startswith("environment") else " ",
                          hint=f"give a plain decimal number of GiB from 0 to {MAX_GIB}, e.g. 40 or 0.5 "
                               "(0 keeps nothing)")
    return int(Decimal(repr(value)) * (1 << 30))


def port() -> int | None:
    """HARNESS_COMPILE_CACHE_PORT, or None: a port picked at random for each build."""
    raw = os.environ.get("HARNESS_COMPILE_CACHE_PORT")
    if raw is None or raw == "":
        return None
    return numbers.parse(raw, "environment variable HARNESS_COMPILE_CACHE_PORT", int, lo=1, hi=65535, sep="=",
                         hint="give a TCP port number of ASCII digits (1-65535), or unset it for a random one")


def max_bytes() -> int:
    raw = os.environ.get("HARNESS_COMPILE_CACHE_MAX_GIB") or str(DEFAULT_MAX_GIB)
    return gib(raw, "environment variable HARNESS_COMPILE_CACHE_MAX_GIB")


def enabled() -> bool:
    raw = os.environ.get("HARNESS_COMPILE_CACHE", "on")
    if raw not in _ON:
        raise ConfigError(f"HARNESS_COMPILE_CACHE={raw!r} is neither on nor off",
                          hint="give one of: " + ", ".join(_ON) + " (lower case, nothing around it), or unset it")
    return _ON[raw]


# --- the store's folder --------------------------------------------------------------------------


def open_store(root: Path | None = None, *, create: bool) -> Held | None:
    """The store, held open (close it, or use it as a context manager); None when it does not
    exist and `create` is false. A new or empty folder gets MARKER; a folder without it is
    refused (exit 2), as is one another user owns or can write into."""
    root = root or cache_root()
    try:
        store = Held(root, what="compile cache", create_mode=0o700 if create else None)
    except FileNotFoundError:
        return None
    try:
        _check_ours(store)
    except BaseException:
        store.close()
        raise
    return store


def _check_ours(store: Held) -> None:
    root = store.path
    st = store.stat()
    if st.st_uid != os.geteuid():
        raise ConfigError(f"compile cache {root}: belongs to another user (uid {st.st_uid})",
                          hint="point HARNESS_COMPILE_CACHE_DIR at a folder of your own")
    if st.st_mode & 0o022:
        raise ConfigError(f"compile cache {root}: others can write into it (mode {st.st_mode & 0o777:o})",
                          hint=f"chmod go-w {root}, or point HARNESS_COMPILE_CACHE_DIR at a folder of your own")
    # Two harness processes opening a new store at once (two builds, two test workers) would
    # otherwise see each other's marker half-written (its temporary name is in the listing, the
    # marker is not yet): the check and the marker's creation hold the folder's lock.
    fcntl.flock(store.fd, fcntl.LOCK_EX)
    try:
        _check_marker(store)
    finally:
        fcntl.flock(store.fd, fcntl.LOCK_UN)


def _check_marker(store: Held) -> None:
    root = store.path
    with contextlib.suppress(FileNotFoundError):
        store.open_file((MARKER,))[0].close()  # a link or a FIFO in its place is refused here
        return
    if store.listing():
        raise ConfigError(f"compile cache {root}: not a compile cache the harness made (no {MARKER} in it); "
                          "nothing in it is served, counted or removed",
                          hint="point HARNESS_COMPILE_CACHE_DIR at a new or empty folder (or unset it); a cache "
                               f"an earlier harness made can be kept with `touch {root / MARKER}`")
    store.create((MARKER,), io.BytesIO(MARKER_TEXT), len(MARKER_TEXT))


def _objects(store: Held) -> list[Entry]:
    return [e for e in store.scan() if e.folder or e.name != MARKER]


# --- what a build did ---------------------------------------------------------------------------


NOT_RUN = "no compile step ran (the engine's layer cache held them)"


class StepFigures(BaseModel):
    """One `harness-compile-cache: {json}` line of a build step (docker/compile_cache.py `stats`).
    It comes from the build's output: anything off-shape drops the line, never the build."""

    model_config = ConfigDict(extra="ignore")

    step: str = Field("compile", max_length=40)
    off: bool = False
    hits: int = Field(0, ge=0, le=_COUNT)
    misses: int = Field(0, ge=0, le=_COUNT)
    uncacheable: int = Field(0, ge=0, le=_COUNT)
    failed: int = Field(0, ge=0, le=_COUNT)
    remote_errors: int = Field(0, ge=0, le=_COUNT)
    seconds: float = Field(0.0, ge=0, le=1e7, allow_inf_nan=False)
    namespace: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,80}$")
    missed: tuple[str, ...] = ()
    store_errors: tuple[str, ...] = ()

    @field_validator("missed", "store_errors")
    @classmethod
    def _source_paths(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(p for p in v if _SOURCE.fullmatch(p))


def from_build_output(lines: list[str], why_off: str = "") -> CompileCache:
    """The compile cache's figures of one build, from the `harness-compile-cache:` lines its
    compile steps printed (docker/compile_cache.py); `off` says why when none was used, also
    when no step printed one (the engine's layer cache held every compile step: nothing ran)."""
    steps: list[StepFigures] = []
    off = why_off
    for line in lines:
        _, mark, rest = line.partition(MARK)
        if not mark:
            continue
        rest = rest.strip()
        if rest.startswith("off:"):
            off = off or rest[4:].strip()
        elif rest.startswith("{"):
            with contextlib.suppress(ValueError):  # pydantic's ValidationError is one
                steps.append(StepFigures.model_validate_json(rest))
    if not steps:
        return CompileCache(off=off or NOT_RUN)
    used = [s for s in steps if not s.off]
    if not used:
        return CompileCache(off=off or "the compile steps ran without the cache")
    hits, misses, uncacheable = (sum(s.hits for s in used), sum(s.misses for s in used),
                                 sum(s.uncacheable for s in used))
    looked = hits + misses + uncacheable
    return CompileCache(
        hits=hits, misses=misses, uncacheable=uncacheable,
        hit_rate=round(hits / looked, 4) if looked else None,
        seconds_compiling=round(sum(s.seconds for s in used if s.step == "compile"), 1),
        remote_errors=sum(s.remote_errors for s in used),
        namespace=next((s.namespace for s in used if s.namespace), None),
        missed=tuple(sorted({p for s in used for p in s.missed})),
        store_errors=tuple(sorted({p for s in used for p in s.store_errors})))


def compiled_line(cache: CompileCache, limit: int = 8) -> str | None:
    """The units a build compiled rather than took from the cache, named when they are few."""
    if cache.off or not cache.missed:
        return None
    n = len(cache.missed)
    named = ", ".join(cache.missed[:limit]) + (f" (+{n - limit} more)" if n > limit else "")
    errors = f"; the store failed {len(cache.store_errors)} of its lookups" if cache.store_errors else ""
    return f"compiled ({n}): {named}{errors}"


# --- show and prune ---------------------------------------------------------------------------


class Toolchain(BaseModel):
    """A store folder's toolchain.json, written by the build step (docker/compile_cache.py
    `toolchain()`): the machine, the ccache version, and each compiler program as `<path>
    <sha256>`; a program the image lacks is absent. Read only to show it: off-shape reads as empty."""

    model_config = ConfigDict(frozen=True, extra="allow")

    machine: str = ""
    ccache: str = ""
    gcc: str = ""
    nvcc: str = ""

    def program(self, name: str) -> str:
        """`gcc`'s or `nvcc`'s path as the step found it, '' when the image had none."""
        return {"gcc": self.gcc, "nvcc": self.nvcc}[name].split(" ")[0]



@dataclass(frozen=True)
class Folder:
    name: str  # <machine>-<digest of the toolchain>, or TOP
    objects: int  # every regular file in it (toolchain.json and a write's leftovers too)
    bytes: int
    last_used: float  # epoch seconds; 0 when empty
    toolchain: Toolchain


def usage(store: Held) -> list[Folder]:
    """Each folder of the store (and the files lying at its top, as TOP), every file counted."""
    by: dict[str, list[Entry]] = {name: [] for name, is_dir in store.listing() if is_dir}
    for e in _objects(store):
        by.setdefault(e.folder[0] if e.folder else TOP, []).append(e)
    out = []
    for name, entries in sorted(by.items()):
        tools = Toolchain()
        if name != TOP:
            with contextlib.suppress(OSError, ValueError, ConfigError):  # pydantic's ValidationError is a ValueError
                tools = Toolchain.model_validate_json(store.load((name, "toolchain.json"), limit=65536))
        out.append(Folder(name, len(entries), sum(e.size for e in entries),
                          max((e.mtime for e in entries), default=0.0), tools))
    return out


def prune(limit: int, store: Held, only: str | None = None, *, before_folder=None) -> tuple[int, int]:
    """Remove the least recently used files until the store (or its folder `only`) holds at
    most `limit` bytes, through the held folder (harness/safety/held.py: a folder swapped for a
    link or another folder meanwhile loses nothing); returns (files removed, bytes freed)."""
    entries = _objects(store)
    if only is not None:
        if only not in {name for name, is_dir in store.listing() if is_dir}:
            raise ConfigError(f"harness cache: no folder {only!r} in {store.path}",
                              hint="`harness cache show` lists the folders")
        entries = [e for e in entries if e.folder[:1] == (only,)]
    entries.sort(key=lambda e: (e.mtime, e.folder, e.name))
    size = sum(e.size for e in entries)
    victims = []
    for e in entries:
        if size <= limit:
            break
        victims.append(e)
        size -= e.size
    return store.remove(victims, before_folder=before_folder)


def age(seconds_since_epoch: float) -> str:
    if not seconds_since_epoch:
        return "never"
    ago = max(0.0, time.time() - seconds_since_epoch)
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if ago >= span:
            return f"{ago / span:.0f} {unit} ago"
    return f"{ago:.0f} s ago"
