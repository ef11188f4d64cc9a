"""The compile cache without an engine: the store's HTTP answers (a real server on loopback),
its keying (docker/compile_cache.py's folder per platform and toolchain), the figures read from
real build output and from real `ccache --print-stats`, prune, and `harness cache`."""

from __future__ import annotations

import http.client
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.image import compile_cache
from harness.image.render import DOCKER_DIR

FIX = Path(__file__).resolve().parent / "fixtures" / "compile_cache"
ROOT = Path(__file__).resolve().parent.parent

spec = importlib.util.spec_from_file_location("step_compile_cache", DOCKER_DIR / "compile_cache.py")
assert spec and spec.loader
step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _req(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_the_store_answers_what_ccache_asks_and_nothing_outside_its_folder(tmp_path):
    port = _free_port()
    with compile_cache.serving(tmp_path / "store", port) as served:
        assert served.url == f"http://127.0.0.1:{port}"
        assert _req(port, "GET", "/x86_64-abc/ab/cdef")[0] == 404
        assert _req(port, "PUT", "/x86_64-abc/ab/cdef", b"object bytes")[0] == 201
        assert _req(port, "GET", "/x86_64-abc/ab/cdef") == (200, b"object bytes")
        assert _req(port, "HEAD", "/x86_64-abc/ab/cdef")[0] == 200
        for bad in ("/../escape", "/x86_64-abc/../../escape", "/.hidden", "/a/b/c/d/e"):
            assert _req(port, "PUT", bad, b"no")[0] == 400, bad
        assert _req(port, "GET", "/.harness-compile-cache")[0] == 200
    assert (tmp_path / "store" / "x86_64-abc" / "ab" / "cdef").read_bytes() == b"object bytes"
    assert not (tmp_path / "escape").exists() and not (tmp_path / "store" / ".hidden").exists()


def test_a_second_harness_shares_the_store_and_another_folder_or_program_turns_it_off(tmp_path):
    port = _free_port()
    with compile_cache.serving(tmp_path / "a", port) as first:
        with compile_cache.serving(tmp_path / "a", port) as same:
            assert same.url == first.url  # the same folder: shared
        with compile_cache.serving(tmp_path / "b", port) as other:
            assert other.url is None and "a store of" in other.why_off
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with compile_cache.serving(tmp_path / "a", held.getsockname()[1]) as off:
            assert off.url is None and "another program" in off.why_off


def test_off_by_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_COMPILE_CACHE", "off")
    with compile_cache.serving(tmp_path) as served:
        assert served.url is None and "HARNESS_COMPILE_CACHE=off" in served.why_off


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


def test_prune_drops_the_least_recently_used_first(tmp_path):
    _fill(tmp_path / "x86_64-a", ["aa1", "aa2", "aa3"], 100)
    _fill(tmp_path / "aarch64-b", ["bb1"], 100, start=10)  # used after every aa
    (tmp_path / "x86_64-a" / "toolchain.json").write_text('{"machine": "x86_64"}')
    assert [(f.name, f.objects, f.bytes) for f in compile_cache.usage(tmp_path)] == [
        ("aarch64-b", 1, 100), ("x86_64-a", 3, 300)]
    assert compile_cache.prune(250, tmp_path) == (2, 200)  # the two oldest objects: aa1, aa2
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["aa3", "bb1", "toolchain.json"]
    assert compile_cache.prune(0, tmp_path, only="aarch64-b") == (1, 100)
    with pytest.raises(Exception, match="no folder"):
        compile_cache.prune(0, tmp_path, only="nope")


def test_harness_cache_show_and_prune(tmp_path):
    _fill(tmp_path / "x86_64-a", ["aa1", "aa2"], 1000)
    env = {**os.environ, "HARNESS_COMPILE_CACHE_DIR": str(tmp_path)}

    def harness(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=120)

    shown = harness("cache", "show")
    assert shown.returncode == 0 and "x86_64-a  2 objects" in shown.stdout, shown.stdout + shown.stderr
    pruned = harness("cache", "prune", "--max-gib", "0")
    assert pruned.returncode == 0 and "removed 2 object(s)" in pruned.stdout
    bad = harness("cache", "prune", "--max-gib", "-1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    env["HARNESS_COMPILE_CACHE_MAX_GIB"] = "lots"
    bad = harness("cache", "show")
    assert bad.returncode == 2 and "HARNESS_COMPILE_CACHE_MAX_GIB" in bad.stderr and "Traceback" not in bad.stderr
