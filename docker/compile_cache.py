"""Inside a build step: point ccache at the harness's compile cache, and say what it did.

    eval "$(python /opt/build/compile_cache.py env)"    # before the compile
    python /opt/build/compile_cache.py stats compile    # after it

`env` prints the shell exports that send every C++ and CUDA compile through ccache (CMake reads
CMAKE_<LANG>_COMPILER_LAUNCHER from the environment, here a launcher that leaves CMake's configure
checks out; vLLM's setup.py also finds ccache on PATH and passes it to CMake itself)
with the harness's HTTP store as ccache's only storage, under a folder named by this toolchain:
the machine, the ccache version and the content of every compiler program (gcc, g++, nvcc and
the CUDA programs nvcc runs). ccache's own key adds the flags (arch list included), the sources
and every header they read, so a hit is the same object a compile would give; another platform
or toolchain never shares a folder. Without ccache in the image, without a store, or when the
store does not prove it is this build's, it prints why on stderr and no exports: the build
compiles uncached.

The store (harness/image/cache_store.py) is served to this build alone: its port and a secret
made for this build come as one entry of the step's /etc/hosts, `harness-compile-cache.<port>.
<secret>` (the engine's extra hosts: never a build argument, which the image's history would
keep, nor a file of a layer). Before the secret is sent anywhere, the store must answer a fresh
challenge with its HMAC under the secret; then ccache sends the secret with every request
(`bearer-token`, ccache 4.7.5), from its environment only: never on a command line, which every
user of the host can read in /proc.

`stats STEP` prints one line `harness-compile-cache: {json}` (the step's name, hits, misses,
uncacheable compiles, seconds since `env`, and which translation units were compiled rather than
taken from the cache: `missed`, read from ccache's stats log), which the harness reads from the
build output. Python's standard library only: this runs in the image being built.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

MARK = "harness-compile-cache:"
HOSTS = "/etc/hosts"
# the store's protocol, as harness/image/cache_store.py serves it (tests/test_compile_cache.py
# holds the two to the same values)
IDENTITY = "/.harness-compile-cache"
PROOF_CONTEXT = b"harness-compile-cache identity v1\0"
ENTRY = re.compile(r"harness-compile-cache\.([0-9]{1,5})\.([0-9a-f]{48})")
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


def store_entry(text: str) -> tuple[int, str] | None:
    """The store's port and this build's secret, from the text of /etc/hosts."""
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2 or fields[0] != "127.0.0.1":
            continue
        for name in fields[1:]:
            m = ENTRY.fullmatch(name)
            if m and 0 < int(m.group(1)) < 65536:
                return int(m.group(1)), m.group(2)
    return None


def request(port: int, method: str, path: str, *, secret: str = "", body: bytes | None = None,
            timeout: float = 10) -> tuple[int, bytes]:
    """One request to the store on 127.0.0.1 (http.client: no proxy of the environment applies)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {secret}"} if secret else {})
        resp = conn.getresponse()
        return resp.status, resp.read(65536)
    finally:
        conn.close()


def identify(port: int, secret: str) -> str | None:
    """None when the server on `port` proves it holds `secret` (an HMAC of a fresh challenge,
    asked without sending the secret); else why not."""
    challenge = os.urandom(16).hex()
    try:
        status, body = request(port, "GET", f"{IDENTITY}?challenge={challenge}", timeout=5)
    except (OSError, http.client.HTTPException) as exc:
        return f"it does not answer ({exc}); is the build on the host's network?"
    if status != 200:
        return f"it answered the identity challenge with HTTP {status}"
    try:
        got = json.loads(body)["proof"]
    except (ValueError, KeyError, TypeError):
        return "its answer to the identity challenge holds no proof"
    want = hmac.new(secret.encode(), PROOF_CONTEXT + challenge.encode(), hashlib.sha256).hexdigest()
    if not isinstance(got, str) or not hmac.compare_digest(got.encode(), want.encode()):
        return "its proof is wrong: it is not this build's store"
    return None


def _read_hosts(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""


def cmd_env(hosts: str = HOSTS) -> int:
    entry = store_entry(_read_hosts(hosts))
    if entry is None:
        return _off("no store given (this build has no compile cache: HARNESS_COMPILE_CACHE=off, "
                    "or the image is not built by `harness build`)")
    if not shutil.which("ccache"):
        return _off("no ccache in this image (install it in the base: Debian/Ubuntu package `ccache`)")
    port, secret = entry
    url = f"http://127.0.0.1:{port}"
    if (why := identify(port, secret)) is not None:
        return _off(f"the store at {url} is not used: {why}")
    tools = toolchain()
    ns = namespace(tools)
    try:  # what the folder holds, for `harness cache show` (a folder's first one stays)
        status, _ = request(port, "PUT", f"/{ns}/toolchain.json", secret=secret,
                            body=json.dumps(tools, indent=1).encode())
    except (OSError, http.client.HTTPException) as exc:
        return _off(f"the store at {url} refused a write ({exc})")
    if status not in (200, 201):
        return _off(f"the store at {url} refused a write (HTTP {status})")
    os.makedirs(LOCAL, exist_ok=True)
    Path(LAUNCHER).write_text(LAUNCHER_TEXT)
    os.chmod(LAUNCHER, 0o755)
    Path(STATS_LOG).write_text("")  # this step's compiles only
    env = {
        "CCACHE_DIR": LOCAL,
        "CCACHE_REMOTE_STORAGE": f"{url}/{ns}|bearer-token={secret}|connect-timeout={CONNECT_MS}"
                                 f"|operation-timeout={OPERATION_MS}",
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
    print(f"{MARK} on: {url}/{ns} ({tools.get('ccache')})", file=sys.stderr)
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
    if argv == ["env"]:
        return cmd_env()
    if argv[:1] == ["stats"]:
        return cmd_stats(argv[1] if len(argv) > 1 else "compile")
    print("usage: compile_cache.py env | stats STEP", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
