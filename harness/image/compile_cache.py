"""The compile cache: ccache's objects in a folder on this host, served to the build steps over
HTTP on the loopback address, so that every source build (the stacks of a matrix, later builds,
`harness build --probe`, bisect points) reuses what an earlier one compiled.

Why this way (docs/building.md says more): the engine API drives the legacy builder, which has
no `RUN --mount`, so nothing on the host can be mounted into a compile step; ccache's remote
storage over HTTP needs only that the step reaches the host (the build runs on the host's
network), works alike on Docker 20.10 and on a current Docker with BuildKit, and needs no image
from a registry. The step side is docker/compile_cache.py: it names the folder by its toolchain
(machine + compiler programs by content), so no object crosses platforms or toolchains; ccache
keys each object by flags, arch list, source and headers.

The store is a folder per toolchain under `cache_root()`; each object is one file whose mtime
is its last use (a hit touches it), so `prune` drops the least recently used first.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.errors import ConfigError
from harness.image.sources import CACHE_ROOT
from harness.results.model import CompileCache
from harness.safety.roots import Root

DEFAULT_PORT = 47320
DEFAULT_MAX_GIB = 40.0
MARK = "harness-compile-cache:"
ARG = "COMPILE_CACHE_URL"  # the build ARG the template's compile steps read
IDENTITY = "/.harness-compile-cache"
MAX_OBJECT = 2 << 30
_PATH = re.compile(r"^(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127}){1,4}$")
# a translation unit's path as the build named it (relative to the source tree, or absolute)
_SOURCE = re.compile(r"[A-Za-z0-9_./+=@-]{1,300}")


def cache_root() -> Path:
    return Path(os.environ.get("HARNESS_COMPILE_CACHE_DIR") or CACHE_ROOT / "compile")


def port() -> int:
    raw = os.environ.get("HARNESS_COMPILE_CACHE_PORT", str(DEFAULT_PORT))
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"HARNESS_COMPILE_CACHE_PORT={raw!r} is not a port",
                          hint="give a free TCP port number (1-65535), or unset it")
    return int(raw)


def max_bytes() -> int:
    raw = os.environ.get("HARNESS_COMPILE_CACHE_MAX_GIB", str(DEFAULT_MAX_GIB))
    try:
        gib = float(raw)
    except ValueError:
        gib = -1.0
    if gib < 0:
        raise ConfigError(f"HARNESS_COMPILE_CACHE_MAX_GIB={raw!r} is not a size",
                          hint="give the cache's bound in GiB, e.g. 40 (0 keeps nothing)")
    return int(gib * (1 << 30))


def enabled() -> bool:
    return os.environ.get("HARNESS_COMPILE_CACHE", "on").lower() not in ("off", "0", "no")


# --- the store, served ---------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # a line per object would bury the build's own output

    def _path(self) -> Path | None:
        path = self.path.split("?", 1)[0]
        if path == IDENTITY or not _PATH.match(path) or ".." in path:
            return None
        return self.server.root / path.lstrip("/")

    def _store(self) -> Root:
        # the store is a root: an object path through a link planted in it is refused, never followed
        return Root(self.server.root, what="compile cache")

    def _answer(self, code: int, body: bytes = b"", head_only: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head_only:
            self.wfile.write(body)

    def _read(self, head_only: bool) -> None:
        if self.path == IDENTITY:
            self._answer(200, json.dumps({"root": str(self.server.root)}).encode(), head_only)
            return
        path = self._path()
        try:
            data = self._store().load_bytes(str(path.relative_to(self.server.root)), limit=MAX_OBJECT) if path else None
        except (OSError, ConfigError):
            data = None
        if data is None or path is None:
            self.server.count("misses")
            self._answer(404, head_only=head_only)
            return
        with contextlib.suppress(OSError):
            os.utime(path)  # last use, for prune
        self.server.count("hits")
        self._answer(200, data, head_only)

    def do_GET(self):  # noqa: N802 - http.server's names
        self._read(False)

    def do_HEAD(self):  # noqa: N802
        self._read(True)

    def do_PUT(self):  # noqa: N802
        path = self._path()
        length = self.headers.get("Content-Length", "")
        if path is None or not length.isdigit() or int(length) > MAX_OBJECT:
            self.close_connection = True
            self._answer(400)
            return
        data = self.rfile.read(int(length))
        try:  # whole or not at all, never through a link
            self._store().save_bytes(str(path.relative_to(self.server.root)), data)
        except ConfigError:
            self._answer(400)
            return
        self.server.count("writes")
        self._answer(201)

    def do_DELETE(self):  # noqa: N802
        path = self._path()
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()
        self._answer(204)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # every core's compile asks at once; socketserver's default backlog of 5 drops the rest of a
    # burst of connections, which ccache then waits a second for (or gives up on)
    request_queue_size = 128

    def __init__(self, addr, root: Path):
        self.root = root
        self.counts = {"hits": 0, "misses": 0, "writes": 0}
        self._lock = threading.Lock()
        super().__init__(addr, _Handler)

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1


@dataclass(frozen=True)
class Served:
    url: str | None  # what the build steps get (COMPILE_CACHE_URL); None: the cache is off
    why_off: str = ""


def _theirs(port_: int) -> str | None:
    """The root of a compile-cache store already serving on the loopback port, if one is."""
    conn = http.client.HTTPConnection("127.0.0.1", port_, timeout=3)
    try:
        conn.request("GET", IDENTITY)
        resp = conn.getresponse()
        return _Identity.model_validate_json(resp.read(4096)).root if resp.status == 200 else None
    except (OSError, ValueError, http.client.HTTPException):
        return None
    finally:
        conn.close()


@contextlib.contextmanager
def serving(root: Path | None = None, port_: int | None = None) -> Iterator[Served]:
    """The store served on 127.0.0.1 for the length of a build. Another harness on this host
    already serving the same folder on that port is shared; a port held by anything else turns
    the cache off for this build (recorded, never an error: the build compiles uncached)."""
    if not enabled():
        yield Served(None, "HARNESS_COMPILE_CACHE=off")
        return
    root = (root or cache_root()).resolve()
    port_ = port() if port_ is None else port_
    root.mkdir(parents=True, exist_ok=True)
    try:
        server = _Server(("127.0.0.1", port_), root)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        other = _theirs(port_)
        if other == str(root):
            yield Served(f"http://127.0.0.1:{port_}")
        else:
            yield Served(None, f"port {port_} is held by {'a store of ' + other if other else 'another program'}"
                               " (HARNESS_COMPILE_CACHE_PORT picks another)")
        return
    thread = threading.Thread(target=server.serve_forever, name="compile-cache", daemon=True)
    thread.start()
    try:
        yield Served(f"http://127.0.0.1:{port_}")
    finally:
        server.shutdown()
        server.server_close()


# --- what a build did ---------------------------------------------------------------------------


NOT_RUN = "no compile step ran (the engine's layer cache held them)"


class StepFigures(BaseModel):
    """One `harness-compile-cache: {json}` line of a build step (docker/compile_cache.py `stats`).
    It comes from the build's output: anything off-shape drops the line, never the build."""

    model_config = ConfigDict(extra="ignore")

    step: str = Field("compile", max_length=40)
    off: bool = False
    hits: int = Field(0, ge=0)
    misses: int = Field(0, ge=0)
    uncacheable: int = Field(0, ge=0)
    failed: int = Field(0, ge=0)
    remote_errors: int = Field(0, ge=0)
    seconds: float = Field(0.0, ge=0)
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


class _Identity(BaseModel):
    root: str


@dataclass(frozen=True)
class Folder:
    name: str  # <machine>-<digest of the toolchain>
    objects: int
    bytes: int
    last_used: float  # epoch seconds; 0 when empty
    toolchain: Toolchain


def _objects(folder: Path) -> Iterator[os.DirEntry]:
    stack = [folder]
    while stack:
        with os.scandir(stack.pop()) as it:
            for entry in it:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False) and entry.name != "toolchain.json":
                    yield entry


def usage(root: Path | None = None) -> list[Folder]:
    root = root or cache_root()
    if not root.is_dir():
        return []
    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        n = size = 0
        last = 0.0
        for e in _objects(d):
            st = e.stat(follow_symlinks=False)
            n, size, last = n + 1, size + st.st_size, max(last, st.st_mtime)
        tools = Toolchain()
        with contextlib.suppress(OSError, ValueError):  # pydantic's ValidationError is one
            tools = Toolchain.model_validate_json(
                Root(d, what="compile cache folder").load_text("toolchain.json", limit=65536))
        out.append(Folder(d.name, n, size, last, tools))
    return out


def prune(limit: int, root: Path | None = None, only: str | None = None) -> tuple[int, int]:
    """Remove the least recently used objects until the store (or the folder `only`) holds at
    most `limit` bytes; returns (objects removed, bytes freed)."""
    root = root or cache_root()
    folders = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (only is None or p.name == only)
               ] if root.is_dir() else []
    if only is not None and not folders:
        raise ConfigError(f"harness cache: no folder {only!r} in {root}",
                          hint="`harness cache show` lists the folders")
    entries = []
    for d in folders:
        for e in _objects(d):
            st = e.stat(follow_symlinks=False)
            entries.append((st.st_mtime, st.st_size, e.path))
    entries.sort()
    size = sum(s for _, s, _ in entries)
    removed = freed = 0
    for _, s, path in entries:
        if size <= limit:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed, freed, size = removed + 1, freed + s, size - s
    return removed, freed


def age(seconds_since_epoch: float) -> str:
    if not seconds_since_epoch:
        return "never"
    ago = max(0.0, time.time() - seconds_since_epoch)
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if ago >= span:
            return f"{ago / span:.0f} {unit} ago"
    return f"{ago:.0f} s ago"
