"""Inside a build step: point ccache at the harness's compile cache, and say what it did.

    eval "$(python /opt/build/compile_cache.py env "$COMPILE_CACHE_URL")"   # before the compile
    python /opt/build/compile_cache.py stats compile                        # after it

`env` prints the shell exports that send every C++ and CUDA compile through ccache (CMake reads
CMAKE_<LANG>_COMPILER_LAUNCHER from the environment, here a launcher that leaves CMake's configure
checks out; vLLM's setup.py also finds ccache on PATH and passes it to CMake itself)
with the harness's HTTP store as ccache's only storage, under a folder named by this toolchain:
the machine, the ccache version and the content of every compiler program (gcc, g++, nvcc and
the CUDA programs nvcc runs). ccache's own key adds the flags (arch list included), the sources
and every header they read, so a hit is the same object a compile would give; another platform
or toolchain never shares a folder. Without ccache in the image, without a URL, or when the
store does not answer, it prints why on stderr and no exports: the build compiles uncached.

`stats STEP` prints one line `harness-compile-cache: {json}` (the step's name, hits, misses,
uncacheable compiles, seconds since `env`, and which translation units were compiled rather than
taken from the cache: `missed`, read from ccache's stats log), which the harness reads from the
build output. Python's standard library only: this runs in the image being built.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

MARK = "harness-compile-cache:"
LOCAL = "/tmp/harness-ccache"  # ccache's counters only: objects live in the harness's store
STARTED = Path(LOCAL) / "harness-started"
LAUNCHER = f"{LOCAL}/launcher"
STATS_LOG = f"{LOCAL}/stats.log"  # ccache's stats_log: `# <source>` then that compile's counters
# ccache's HTTP client gives up on a connection after 100 ms and on a request after 10 s by
# default, and each give-up is a compile run again (counted remote_storage_timeout, then a miss).
# With every core compiling and the harness reading the build's output, the store (on this host's
# loopback) can take longer than 100 ms to accept: 64 parallel compiles against a harness kept
# busy gave 25 hits of 96 on the second pass with the defaults, 96 of 96 with these.
CONNECT_MS = 10_000
OPERATION_MS = 60_000  # ccache refuses a timeout over 60000 ms (and then uses no remote storage at all)
MAX_UNITS = 2000  # names kept of missed units (the count is always whole)
# CMake's configure checks (try_compile) compile a source written into a new scratch folder with a
# random name each time, so their lookups would always miss; they take milliseconds, are not the
# build's translation units, and go straight to the compiler, neither cached nor counted. A
# try_compile project reads the launcher from the environment like the build does.
LAUNCHER_TEXT = """#!/bin/sh
case "$PWD" in */CMakeFiles/CMakeScratch/*|*/CMakeFiles/CMakeTmp*) exec "$@" ;; esac
exec ccache "$@"
"""
# the programs whose bytes decide an object: the host compiler and the CUDA tool chain
PROGRAMS = ("cc", "c++", "gcc", "g++", "cc1", "cc1plus", "as", "ld", "nvcc", "cicc", "ptxas",
            "cudafe++", "fatbinary", "nvlink")
# counters that are compiles ccache declined to cache (they ran, uncached)
UNCACHEABLE = ("unsupported_compiler_option", "unsupported_code_directive", "unsupported_source_language",
               "unsupported_environment_variable", "multiple_source_files", "output_to_stdout",
               "compiler_produced_stdout", "could_not_use_precompiled_header", "could_not_use_modules",
               "autoconf_test", "bad_output_file", "compiler_produced_no_output",
               "compiler_produced_empty_output", "preprocessor_error", "internal_error")


def _cuda_dirs() -> list[Path]:
    nvcc = shutil.which("nvcc")
    if not nvcc:
        return []
    root = Path(os.path.realpath(nvcc)).parent.parent
    return [root / "bin", root / "nvvm" / "bin"]


def _find(name: str) -> str | None:
    for d in _cuda_dirs():
        if (d / name).is_file():
            return str(d / name)
    found = shutil.which(name)
    if found:
        return found
    if name.startswith("cc1"):  # gcc's own passes sit outside PATH
        try:
            out = subprocess.run(["gcc", f"-print-prog-name={name}"], capture_output=True, text=True,
                                 timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None
        return out if out and os.path.isabs(out) and os.path.isfile(out) else None
    return None


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def toolchain() -> dict[str, str]:
    """What names this cache's folder: the machine and each compiler program by content."""
    out = {"machine": platform.machine(), "ccache": _ccache_version()}
    for name in PROGRAMS:
        path = _find(name)
        if path:
            real = os.path.realpath(path)
            out[name] = f"{real} {_file_digest(real)}"
    return out


def namespace(tools: dict[str, str]) -> str:
    """The store folder of a toolchain: its machine, then a digest of everything in `tools`."""
    digest = hashlib.sha256(json.dumps(tools, sort_keys=True).encode()).hexdigest()[:24]
    return f"{tools.get('machine', 'unknown')}-{digest}"


def _ccache_version() -> str:
    try:
        out = subprocess.run(["ccache", "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0] if out else ""


def _off(why: str) -> int:
    print(f"{MARK} off: {why}", file=sys.stderr)
    return 0


def cmd_env(url: str) -> int:
    if not url:
        return _off("no store given (COMPILE_CACHE_URL is empty: `harness build` without a compile cache)")
    if not shutil.which("ccache"):
        return _off("no ccache in this image (install it in the base: Debian/Ubuntu package `ccache`)")
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/.harness-compile-cache", timeout=5) as r:
            r.read(4096)
    except (urllib.error.URLError, OSError) as exc:
        return _off(f"the store at {url} does not answer ({exc}); is the build on the host's network?")
    tools = toolchain()
    ns = namespace(tools)
    folder = f"{url.rstrip('/')}/{ns}"
    try:  # what the folder holds, for `harness cache show`
        req = urllib.request.Request(folder + "/toolchain.json", data=json.dumps(tools, indent=1).encode(),
                                     method="PUT")
        urllib.request.urlopen(req, timeout=10).read()
    except (urllib.error.URLError, OSError) as exc:
        return _off(f"the store at {url} refused a write ({exc})")
    os.makedirs(LOCAL, exist_ok=True)
    Path(LAUNCHER).write_text(LAUNCHER_TEXT)
    os.chmod(LAUNCHER, 0o755)
    Path(STATS_LOG).write_text("")  # this step's compiles only
    env = {
        "CCACHE_DIR": LOCAL,
        "CCACHE_REMOTE_STORAGE": f"{folder}|connect-timeout={CONNECT_MS}|operation-timeout={OPERATION_MS}",
        "CCACHE_STATSLOG": STATS_LOG,
        "CCACHE_REMOTE_ONLY": "true",
        # sources are unpacked by an earlier step of the same build; nothing edits them during it
        "CCACHE_SLOPPINESS": "include_file_mtime,include_file_ctime",
        "CMAKE_C_COMPILER_LAUNCHER": LAUNCHER,
        "CMAKE_CXX_COMPILER_LAUNCHER": LAUNCHER,
        "CMAKE_CUDA_COMPILER_LAUNCHER": LAUNCHER,
    }
    subprocess.run(["ccache", "--zero-stats"], env={**os.environ, **env}, capture_output=True, check=False)
    STARTED.write_text(f"{time.time():.3f}\n{ns}\n")
    print(f"{MARK} on: {folder} ({tools.get('ccache')})", file=sys.stderr)
    print("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()))
    return 0


def counters(text: str) -> dict[str, int]:
    """`ccache --print-stats` (one `name<TAB>value` a line) as numbers."""
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().lstrip("-").isdigit():
            out[name.strip()] = int(value)
    return out


def summary(c: dict[str, int]) -> dict[str, int]:
    return {"hits": c.get("direct_cache_hit", 0) + c.get("preprocessed_cache_hit", 0),
            "misses": c.get("cache_miss", 0),
            "uncacheable": sum(c.get(k, 0) for k in UNCACHEABLE),
            "failed": c.get("compile_failed", 0),
            "remote_errors": c.get("remote_storage_error", 0) + c.get("remote_storage_timeout", 0)}


def units(text: str, cwd: str) -> dict[str, list[str]]:
    """ccache's stats log (a `# <source>` line, then that compile's counters, one a line) as the
    sources compiled (`missed`: not in the cache, or not cacheable) and those whose lookup or
    store failed against the store (`store_errors`); paths under `cwd` relative to it, sorted."""
    missed: set[str] = set()
    errors: set[str] = set()
    source, ids = None, set()

    def close() -> None:
        if source is None:
            return
        name = os.path.relpath(source, cwd) if source.startswith(cwd.rstrip("/") + "/") else source
        if "cache_miss" in ids or ids.intersection(UNCACHEABLE):
            missed.add(name)
        if ids.intersection(("remote_storage_error", "remote_storage_timeout")):
            errors.add(name)

    for line in text.splitlines():
        if line.startswith("# "):
            close()
            source, ids = line[2:].strip(), set()
        elif line.strip():
            ids.add(line.strip())
    close()
    return {"missed": sorted(missed)[:MAX_UNITS], "store_errors": sorted(errors)[:MAX_UNITS]}


def cmd_stats(step: str) -> int:
    if not STARTED.is_file() or not os.environ.get("CCACHE_REMOTE_STORAGE"):
        print(MARK + " " + json.dumps({"step": step, "off": True}))
        return 0
    started, ns = STARTED.read_text().split("\n")[:2]
    text = subprocess.run(["ccache", "--print-stats"], capture_output=True, text=True, check=False).stdout
    record = {"step": step, **summary(counters(text)), "seconds": round(time.time() - float(started), 1), "namespace": ns}
    try:
        record.update(units(Path(STATS_LOG).read_text(errors="replace"), os.getcwd()))
    except OSError:
        pass
    print(MARK + " " + json.dumps(record, sort_keys=True))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["env"]:
        return cmd_env(argv[1] if len(argv) > 1 else "")
    if argv[:1] == ["stats"]:
        return cmd_stats(argv[1] if len(argv) > 1 else "compile")
    print("usage: compile_cache.py env URL | stats STEP", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
