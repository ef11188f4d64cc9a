"""The compile cache without an engine: the store's HTTP answers (a real server on loopback, asked
by the step's own client), the settings, its keying (docker/compile_cache.py's folder per platform
and toolchain), the figures read from real build output and from real `ccache --print-stats`,
prune, and `harness cache`. The hostile cases are in tests/test_compile_cache_hostile.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.image import cache_store, compile_cache
from harness.image.render import DOCKER_DIR

FIX = Path(__file__).resolve().parent / "fixtures" / "compile_cache"
ROOT = Path(__file__).resolve().parent.parent

spec = importlib.util.spec_from_file_location("step_compile_cache", DOCKER_DIR / "compile_cache.py")
assert spec and spec.loader
step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step)


NS = "x86_64-" + "ab" * 12  # a toolchain folder's name as docker/compile_cache.py makes it
KEY = f"/{NS}/ab/cdefghijklmnop"  # a ccache key in its `subdirs` layout


def test_the_store_answers_ccache_with_the_build_secret_and_nothing_else(tmp_path):
    with cache_store.serving(tmp_path / "store") as served:
        assert served.on and served.secret not in repr(served)
        port, secret = served.port, served.secret
        assert step.request(port, "GET", KEY, secret=secret)[0] == 404
        assert step.request(port, "PUT", KEY, secret=secret, body=b"object bytes")[0] == 201
        assert step.request(port, "GET", KEY, secret=secret) == (200, b"object bytes")
        assert step.request(port, "HEAD", KEY, secret=secret)[0] == 200
        assert step.request(port, "PUT", f"/{NS}/toolchain.json", secret=secret, body=b"{}")[0] == 201
        for bad in ("/../escape", f"/{NS}/../../escape", "/.hidden", f"/{NS}/ab/c/d/e", "/top-level-object",
                    f"/{NS}/ab/UPPERCASE123", f"/{NS}/abc/defghijklm", f"{KEY}?x=1"):
            assert step.request(port, "PUT", bad, secret=secret, body=b"no")[0] == 400, bad
        # no listing: a folder is not an object
        assert step.request(port, "GET", f"/{NS}/ab", secret=secret)[0] == 404
        assert step.request(port, "GET", f"/{NS}", secret=secret)[0] == 404
        assert step.identify(port, secret) is None
    store = tmp_path / "store"
    assert (store / NS / "ab" / "cdefghijklmnop").read_bytes() == b"object bytes"
    assert (store / compile_cache.MARKER).is_file()
    assert oct(store.stat().st_mode & 0o777) == "0o700"
    assert oct((store / NS / "ab" / "cdefghijklmnop").stat().st_mode & 0o777) == "0o600"
    assert not (tmp_path / "escape").exists() and not (store / ".hidden").exists()


def test_the_step_and_the_store_speak_the_same_protocol():
    served = cache_store.Served(port=40001, secret="5e" * 24)
    ((name, ip),) = served.extra_hosts().items()
    assert ip == "127.0.0.1" and step.ENTRY.fullmatch(name)
    assert step.IDENTITY == cache_store.IDENTITY and step.PROOF_CONTEXT == cache_store.PROOF_CONTEXT
    # /etc/hosts as the engine (Debian's docker.io 20.10, legacy builder, network host) wrote it in a
    # RUN step given that extra host: once with a tab, once with spaces
    hosts = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
             f"127.0.0.1\t{name}\n127.0.0.1       {name}\n")
    assert step.store_entry(hosts) == (40001, "5e" * 24)
    for other in (f"10.0.0.1\t{name}\n", f"# 127.0.0.1 {name}\n", f"127.0.0.1 {name}x\n",
                  "127.0.0.1 harness-compile-cache.99999." + "5e" * 24 + "\n",
                  "127.0.0.1 harness-compile-cache.4000\u0661." + "5e" * 24 + "\n", ""):
        assert step.store_entry(other) is None, other


def test_off_by_setting_and_only_exact_values(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_COMPILE_CACHE", "off")
    with cache_store.serving(tmp_path) as served:
        assert not served.on and "HARNESS_COMPILE_CACHE=off" in served.why_off and served.extra_hosts() == {}
    assert not (tmp_path / compile_cache.MARKER).exists()  # off: the folder is not even opened
    for bad in ("OFF ", "OFF", " off", "of", "nein", "off\n", ""):
        monkeypatch.setenv("HARNESS_COMPILE_CACHE", bad)
        with pytest.raises(ConfigError, match="HARNESS_COMPILE_CACHE="):
            compile_cache.enabled()
    for good, on in (("on", True), ("1", True), ("no", False), ("false", False)):
        monkeypatch.setenv("HARNESS_COMPILE_CACHE", good)
        assert compile_cache.enabled() is on


def test_numbers_are_finite_ascii_and_bounded(monkeypatch):
    assert compile_cache.gib("0", "--max-gib") == 0 and compile_cache.gib("0.5", "--max-gib") == 1 << 29
    assert compile_cache.gib("40", "--max-gib") == 40 << 30
    # the plain decimal forms of harness.safety.numbers, the one parser of numbers from a flag or
    # the environment, are sizes; anything else is refused naming the option
    assert [compile_cache.gib(ok, "--max-gib") for ok in ("1e3", "+1", "1.", ".5")] == \
        [1000 << 30, 1 << 30, 1 << 30, 1 << 29]
    for bad in ("nan", "inf", "-inf", "1e999", "-1", "", " 1", "1 ", "\u0664\u0660", "0x10", "1_0",
                "10000000", "NaN", "\uff14\uff10"):
        with pytest.raises(ConfigError, match="--max-gib"):
            compile_cache.gib(bad, "--max-gib")
    for bad in ("nan", "inf", "1e999", "\u0664"):
        monkeypatch.setenv("HARNESS_COMPILE_CACHE_MAX_GIB", bad)
        with pytest.raises(ConfigError, match="HARNESS_COMPILE_CACHE_MAX_GIB"):
            compile_cache.max_bytes()
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT", raising=False)
    assert compile_cache.port() is None  # a random port per build
    for bad in ("\u0664\u0667\u0663\u0662\u0660", "0", "65536", "-1", "47320 ", "4.7e4", "99999999999"):
        monkeypatch.setenv("HARNESS_COMPILE_CACHE_PORT", bad)
        with pytest.raises(ConfigError, match="HARNESS_COMPILE_CACHE_PORT"):
            compile_cache.port()
    monkeypatch.setenv("HARNESS_COMPILE_CACHE_PORT", "47320")
    assert compile_cache.port() == 47320


TOOLS = {"machine": "x86_64", "ccache": "ccache version 4.9.1", "gcc": "/usr/bin/x86_64-linux-gnu-gcc-13 aa",
         "nvcc": "/usr/local/cuda-13.0/bin/nvcc bb", "ptxas": "/usr/local/cuda-13.0/bin/ptxas cc"}


def test_a_folder_per_platform_and_toolchain():
    same = step.namespace(dict(TOOLS))
    assert same == step.namespace(dict(TOOLS)) and same.startswith("x86_64-")
    arm = step.namespace({**TOOLS, "machine": "aarch64"})
    assert arm.startswith("aarch64-") and arm != same  # another platform: another cache
    for key, value in (("nvcc", "/usr/local/cuda-13.0/bin/nvcc dd"), ("ptxas", "/x/ptxas cc"),
                       ("gcc", "/usr/bin/x86_64-linux-gnu-gcc-12 aa"), ("ccache", "ccache version 4.7.5")):
        assert step.namespace({**TOOLS, key: value}) != same, key  # another toolchain: another cache
    assert step.namespace({k: v for k, v in TOOLS.items() if k != "nvcc"}) != same


def test_this_hosts_toolchain_names_its_compilers_by_content():
    tools = step.toolchain()
    assert tools["machine"] == os.uname().machine
    gcc = tools.get("gcc")
    if gcc is None:
        pytest.skip("no gcc on this host")
    path, digest = gcc.rsplit(" ", 1)
    assert Path(path).is_file() and len(digest) == 64 and "cc1" in tools  # gcc's own pass too


def test_ccache_counters_from_real_print_stats():
    # ccache 4.7.5 after one nvcc compile (two -gencode) and the same compile again
    c = step.counters((FIX / "ccache-4.7.5-nvcc-print-stats.txt").read_text())
    assert c["direct_cache_hit"] == 1 and c["cache_miss"] == 1
    assert step.summary(c) == {"hits": 1, "misses": 1, "uncacheable": 0, "failed": 0, "remote_errors": 0}
    assert step.summary({"unsupported_compiler_option": 2, "called_for_link": 5})["uncacheable"] == 2


def test_figures_from_real_build_output():
    lines = (FIX / "two-builds.log").read_text().splitlines()  # two builds' compile steps, 3 misses then 3 hits
    c = compile_cache.from_build_output(lines)
    assert c is not None and (c.hits, c.misses, c.uncacheable, c.hit_rate) == (3, 3, 0, 0.5)
    assert c.namespace and c.namespace.startswith("x86_64-") and c.seconds_compiling is not None
    second = lines[len(lines) // 2:]
    assert compile_cache.from_build_output(second).hit_rate == 1.0
    assert compile_cache.from_build_output(["Step 1/2 : FROM x", " ---> Using cache"]).off == compile_cache.NOT_RUN
    off = compile_cache.from_build_output(["\x1b[91mharness-compile-cache: off: no ccache in this image (x)",
                                           'harness-compile-cache: {"off": true, "step": "compile"}'])
    assert off is not None and off.off == "no ccache in this image (x)" and off.hits == 0
    only_install = ['harness-compile-cache: {"step": "install", "hits": 0, "misses": 0, "uncacheable": 0, '
                    '"seconds": 40.0, "namespace": "x86_64-1"}']
    c = compile_cache.from_build_output(only_install)
    assert c.hit_rate is None and c.seconds_compiling == 0.0  # nothing looked up: no rate to claim


def test_units_from_a_real_stats_log():
    # ccache 4.7.5 (Debian bookworm), CCACHE_STATSLOG, in the step's working folder /w: a.c and b.c
    # compiled against the harness's store (misses), a.c again (a hit), b.c to stdout
    # (uncacheable: bad_output_file), then b.c with other flags against a store that never answers
    units = step.units((FIX / "ccache-4.7.5-stats.log").read_text(), "/w")
    assert units == {"missed": ["src/a.c", "src/b.c"], "store_errors": ["src/b.c"]}
    # a unit outside the working folder keeps its absolute path; lines torn by another writer
    # (counters before any source line) are ignored
    assert step.units("cache_miss\n# /opt/x.cu\ncache_miss\n# /w/k.cu\ndirect_cache_hit\n", "/w") == {
        "missed": ["/opt/x.cu"], "store_errors": []}


def test_remote_storage_gets_bounds_ccache_accepts():
    # ccache 4.7.5 refuses an http timeout over 60000 ms and then uses no remote storage at all
    assert 0 < step.CONNECT_MS <= 60_000 and 0 < step.OPERATION_MS <= 60_000
    assert step.CONNECT_MS >= 1000  # a busy host takes longer than ccache's default 100 ms to accept


def test_step_figures_from_the_build_output_are_checked():
    good = {"step": "compile", "hits": 2, "misses": 1, "uncacheable": 0, "seconds": 3.0, "namespace": "x86_64-ab",
            "missed": ["csrc/a.cu", "/abs/b.cu", "bad\u001b[31m.cu", "x" * 301], "store_errors": ["csrc/a.cu"]}
    import json

    lines = [f"harness-compile-cache: {json.dumps(good)}",
             'harness-compile-cache: {"step": "install", "hits": -5, "misses": 1}',  # off-shape: dropped
             'harness-compile-cache: {"step": "install", "hits": 0, "misses": 0, "namespace": "../../x"}']
    c = compile_cache.from_build_output(lines)
    assert (c.hits, c.misses) == (2, 1)
    assert c.missed == ("/abs/b.cu", "csrc/a.cu")  # a path with a control character, or too long, is dropped
    assert c.store_errors == ("csrc/a.cu",)
    assert compile_cache.compiled_line(c) == "compiled (2): /abs/b.cu, csrc/a.cu; the store failed 1 of its lookups"
    many = c.model_copy(update={"missed": tuple(f"u{i}.cu" for i in range(20)), "store_errors": ()})
    assert compile_cache.compiled_line(many, limit=3) == "compiled (20): u0.cu, u1.cu, u2.cu (+17 more)"
    assert compile_cache.compiled_line(compile_cache.from_build_output([])) is None


def _fill(folder: Path, names: list[str], size: int, start: int = 0) -> None:
    for i, n in enumerate(names, start):
        p = folder / n[:2] / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * size)
        os.utime(p, (1_000_000 + i, 1_000_000 + i))  # oldest first


def _store(path: Path) -> Path:
    path.mkdir(mode=0o700)
    (path / compile_cache.MARKER).write_bytes(compile_cache.MARKER_TEXT)
    return path


def test_prune_drops_the_least_recently_used_first_and_counts_every_file(tmp_path):
    root = _store(tmp_path / "store")
    _fill(root / "x86_64-a", ["aa1", "aa2", "aa3"], 100)
    _fill(root / "aarch64-b", ["bb1"], 100, start=10)  # used after every aa
    (root / "stray").write_bytes(b"y" * 100)  # a file at the top: counted and pruned like any other
    os.utime(root / "stray", (1_000_020, 1_000_020))
    (root / "x86_64-a" / "toolchain.json").write_text('{"machine": "x86_64"}')
    os.utime(root / "x86_64-a" / "toolchain.json", (1_000_030, 1_000_030))
    with compile_cache.open_store(root, create=False) as store:
        assert [(f.name, f.objects, f.bytes) for f in compile_cache.usage(store)] == [
            (compile_cache.TOP, 1, 100), ("aarch64-b", 1, 100), ("x86_64-a", 4, 321)]
        assert compile_cache.usage(store)[2].toolchain.machine == "x86_64"
        assert compile_cache.prune(250, store) == (3, 300)  # the three oldest: aa1, aa2, aa3
        assert sorted(p.name for p in root.rglob("*") if p.is_file()) == [
            compile_cache.MARKER, "bb1", "stray", "toolchain.json"]
        assert compile_cache.prune(0, store, only="aarch64-b") == (1, 100)
        with pytest.raises(ConfigError, match="no folder"):
            compile_cache.prune(0, store, only="nope")
        assert compile_cache.prune(0, store) == (2, 121)  # the top-level file too; the marker stays
    assert [p.name for p in root.rglob("*") if p.is_file()] == [compile_cache.MARKER]


def test_a_store_being_marked_by_another_process_is_waited_for_not_refused(tmp_path):
    """Two builds (or two test workers) opening a new store at once: the first one's marker is
    written under a temporary name first, which the second would see in the listing without the
    marker and refuse. The second waits on the folder's lock instead."""
    import fcntl
    import threading

    root = tmp_path / "store"
    root.mkdir(mode=0o700)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # "the other process", half-way through marking the folder
    half = root / f".{compile_cache.MARKER}.0123456789ab.tmp"
    half.write_bytes(compile_cache.MARKER_TEXT)
    outcome: list[object] = []

    def second() -> None:
        try:
            with compile_cache.open_store(root, create=True) as store:
                outcome.append(store.exists((compile_cache.MARKER,)))
        except BaseException as exc:  # what the old check raised at once
            outcome.append(exc)

    t = threading.Thread(target=second)
    t.start()
    t.join(2)  # time for the old check to raise (the lock keeps the new one waiting)
    os.link(half, root / compile_cache.MARKER)  # the other process publishes its marker ...
    half.unlink()
    fcntl.flock(fd, fcntl.LOCK_UN)  # ... and lets go
    os.close(fd)
    t.join()
    assert outcome == [True]


def test_only_a_folder_the_harness_made_is_a_store(tmp_path):
    assert compile_cache.open_store(tmp_path / "none", create=False) is None
    with compile_cache.open_store(tmp_path / "new", create=True) as store:  # made: marked
        assert store.exists((compile_cache.MARKER,))
    empty = tmp_path / "empty"
    empty.mkdir(mode=0o700)
    with compile_cache.open_store(empty, create=False):  # empty: nothing to lose, adopted
        assert (empty / compile_cache.MARKER).is_file()
    docs = tmp_path / "documents"  # a user's folder named by HARNESS_COMPILE_CACHE_DIR
    docs.mkdir(mode=0o700)
    (docs / "thesis.tex").write_text("years of work")
    for create in (False, True):
        with pytest.raises(ConfigError, match="not a compile cache the harness made"):
            compile_cache.open_store(docs, create=create)
    assert not (docs / compile_cache.MARKER).exists()
    os.symlink(tmp_path / "new" / compile_cache.MARKER, docs / compile_cache.MARKER)  # a marker by link
    with pytest.raises(ConfigError, match="link"):
        compile_cache.open_store(docs, create=False)
    shared = _store(tmp_path / "shared")
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="others can write into it"):
        compile_cache.open_store(shared, create=False)


def test_harness_cache_show_and_prune(tmp_path):
    root = _store(tmp_path / "store")
    _fill(root / "x86_64-a", ["aa1", "aa2"], 1000)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "letter.txt").write_text("keep me")
    env = {**os.environ, "HARNESS_COMPILE_CACHE_DIR": str(root)}
    env.pop("HARNESS_COMPILE_CACHE_MAX_GIB", None)

    def harness(*args: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                              env={**env, **extra}, cwd=ROOT, timeout=120)

    shown = harness("cache", "show")
    assert shown.returncode == 0 and "x86_64-a  2 objects" in shown.stdout, shown.stdout + shown.stderr
    for bad in ("nan", "inf", "1e999", "-1", "\u0664"):
        r = harness("cache", "prune", "--max-gib", bad)
        assert r.returncode == 2 and "--max-gib" in r.stderr and "Traceback" not in r.stderr, (bad, r.stderr)
    for bad in ("nan", "inf"):
        r = harness("cache", "show", HARNESS_COMPILE_CACHE_MAX_GIB=bad)
        assert r.returncode == 2 and "HARNESS_COMPILE_CACHE_MAX_GIB" in r.stderr and "Traceback" not in r.stderr
    pruned = harness("cache", "prune", "--max-gib", "0")
    assert pruned.returncode == 0 and "removed 2 object(s)" in pruned.stdout
    # a folder that is not a store: refused whole, nothing under it removed
    for verb in (("show",), ("prune", "--max-gib", "0")):
        r = harness("cache", *verb, HARNESS_COMPILE_CACHE_DIR=str(docs))
        assert r.returncode == 2 and "not a compile cache the harness made" in " ".join(r.stderr.split()), r.stderr
    assert (docs / "letter.txt").read_text() == "keep me"
    gone = harness("cache", "show", HARNESS_COMPILE_CACHE_DIR=str(tmp_path / "nothing"))
    assert gone.returncode == 0 and "none yet" in gone.stdout and not (tmp_path / "nothing").exists()
