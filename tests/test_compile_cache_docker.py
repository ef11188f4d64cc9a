"""The compile cache on a real engine: the harness's store on this host's loopback address, a
legacy-builder build on the host's network, ccache (Debian's) in the step, real gcc compiles.

Needs harness-test/ccache:bookworm (tools/base-images.sh: Debian + gcc + ccache). Each build
changes an ARG the step reads, so the engine's layer cache never answers for the step: every
build really runs its compiles, and only the compile cache decides what is compiled.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from harness.image import compile_cache
from harness.image.builder import build_one
from harness.image.render import DOCKER_DIR, Rendered
from harness.results.model import BuildOutcome

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BASE = "harness-test/ccache:bookworm"
SOURCES = {
    "a.c": b"int a(int x) { return x * 3 + 1; }\n",
    "b.c": b"#include <string.h>\nint b(const char *s) { return (int)strlen(s); }\n",
    "c.c": b"static int t[64];\nint c(int i) { t[i & 63] += i; return t[i & 63]; }\n",
}
DOCKERFILE = """FROM {base}
COPY compile_cache.py /opt/build/compile_cache.py
COPY src /opt/build/src
ARG CFLAGS
ARG NOTE
ARG COMPILE_CACHE_URL
RUN cd /opt/build/src && echo "build $NOTE" \\
 && eval "$(python3 /opt/build/compile_cache.py env "${{COMPILE_CACHE_URL}}")" \\
 && for f in *.c; do $CMAKE_C_COMPILER_LAUNCHER gcc $CFLAGS -c "$f" -o "${{f%.c}}.o"; done \\
 && python3 /opt/build/compile_cache.py stats compile
"""


@pytest.fixture(scope="module")
def engine():
    from harness.engine import connect

    eng = connect(timeout=30)
    if eng.image_id(BASE) is None:
        pytest.fail(f"{BASE} is missing: run tools/base-images.sh")
    return eng


@pytest.fixture
def store(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port of our own: other sessions may build on this engine
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HARNESS_COMPILE_CACHE_PORT", str(port))
    monkeypatch.setenv("HARNESS_COMPILE_CACHE_DIR", str(tmp_path / "store"))
    return tmp_path / "store"


def _rendered(name: str, cflags: str, sources: dict[str, bytes]) -> Rendered:
    run = uuid.uuid4().hex[:12]
    files = (("compile_cache.py", (DOCKER_DIR / "compile_cache.py").read_bytes()),
             *((f"src/{n}", data) for n, data in sorted(sources.items())))
    return Rendered(stack_name=name, dockerfile=DOCKERFILE.format(base=BASE),
                    buildargs={"CFLAGS": cflags, "NOTE": run},
                    labels={"harness.role": "test-image", "harness.test": "compile-cache"},
                    files=files, patches=(), content_hash=run * 5)


def _build(engine, tmp_path, name, cflags="-O2", sources=SOURCES) -> BuildOutcome:
    return _build_rendered(engine, tmp_path, _rendered(name, cflags, sources))


def _build_rendered(engine, tmp_path, rendered: Rendered) -> BuildOutcome:
    o = build_one(rendered, engine=engine, log_dir=tmp_path / "logs", audit=False)
    try:
        assert o.status == "built", (o.reason, o.log_tail)
    finally:
        engine.remove_image(o.image_ref)
    assert o.compile_cache is not None, o.log_tail
    assert o.compile_cache.off is None, o.compile_cache.off
    return o


def test_second_build_compiles_nothing_and_other_flags_or_sources_miss(engine, store, tmp_path):
    first = _build(engine, tmp_path, "cc-first").compile_cache
    assert (first.hits, first.misses, first.uncacheable) == (0, 3, 0)
    assert first.hit_rate == 0.0 and first.seconds_compiling is not None
    assert first.namespace and first.namespace.startswith("x86_64-") or first.namespace.startswith("aarch64-")

    # another build with the same sources and flags (another stack, a later build): all hits
    again = _build(engine, tmp_path, "cc-again").compile_cache
    assert (again.hits, again.misses, again.hit_rate) == (3, 0, 1.0)
    assert again.namespace == first.namespace

    # other flags (as another arch list is to nvcc): every object misses
    flags = _build(engine, tmp_path, "cc-flags", cflags="-O1").compile_cache
    assert (flags.hits, flags.misses) == (0, 3)

    # one line of one source changed: that object alone is compiled
    changed = {**SOURCES, "b.c": SOURCES["b.c"].replace(b"(int)strlen(s)", b"(int)strlen(s) + 1")}
    one = _build(engine, tmp_path, "cc-one-line", sources=changed).compile_cache
    assert (one.hits, one.misses) == (2, 1)
    assert one.missed == ("b.c",) and one.store_errors == ()  # the record names what was compiled
    assert first.missed == ("a.c", "b.c", "c.c") and again.missed == ()

    # the store: one folder for this toolchain, named by it; `harness cache` reads it
    (folder,) = compile_cache.usage(store)
    assert folder.name == first.namespace and folder.objects > 0 and folder.bytes > 0
    assert folder.toolchain.machine in folder.name and "gcc" in folder.toolchain.program("gcc")
    removed, freed = compile_cache.prune(0, store)
    assert removed == folder.objects and freed == folder.bytes
    assert compile_cache.usage(store)[0].objects == 0
    after = _build(engine, tmp_path, "cc-after-prune").compile_cache
    assert (after.hits, after.misses) == (0, 3)


PARALLEL = """FROM {base}
COPY compile_cache.py /opt/build/compile_cache.py
COPY src /opt/build/src
ARG NOTE
ARG COMPILE_CACHE_URL
RUN cd /opt/build/src && echo "build $NOTE" \\
 && eval "$(python3 /opt/build/compile_cache.py env "${{COMPILE_CACHE_URL}}")" \\
 && ls *.c | xargs -P 48 -I@ "$CMAKE_C_COMPILER_LAUNCHER" gcc -O2 -c @ -o @.o \\
 && python3 /opt/build/compile_cache.py stats compile
"""


def test_a_busy_harness_and_every_core_compiling_still_hit(engine, store, tmp_path):
    # A build's compiles all ask the store at once while the harness process is busy reading the
    # build's output (here: three threads holding the interpreter). With ccache's default HTTP
    # bounds (100 ms to connect) and a backlog of 5, most of the second build's lookups gave up
    # and compiled again (25 hits of 96 in one try); every lookup must be answered.
    sources = {f"u{i:03d}.c": f"#include <stdio.h>\nint u{i}(int x) {{ return x * {i}; }}\n".encode()
               for i in range(96)}
    stop = threading.Event()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(20000):
                x += i * i

    spinners = [threading.Thread(target=spin, daemon=True) for _ in range(3)]
    for t in spinners:
        t.start()
    try:
        figures = []
        for name in ("cc-busy-1", "cc-busy-2"):
            r = replace(_rendered(name, "-O2", sources), dockerfile=PARALLEL.format(base=BASE))
            figures.append(_build_rendered(engine, tmp_path, r).compile_cache)
    finally:
        stop.set()
    cold, warm = figures
    assert (cold.misses, len(cold.missed)) == (96, 96)
    assert (warm.hits, warm.misses, warm.remote_errors) == (96, 0, 0), warm
    assert warm.missed == () and warm.store_errors == ()


def test_a_build_record_carries_the_figures_and_a_held_port_turns_the_cache_off(engine, store, tmp_path,
                                                                                 monkeypatch):
    o = _build(engine, tmp_path, "cc-record")
    record = json.loads(o.model_dump_json())
    assert set(record["compile_cache"]) >= {"hits", "misses", "hit_rate", "seconds_compiling"}
    assert record["duration_s"] > 0
    assert BuildOutcome.from_json(record).compile_cache == o.compile_cache

    with socket.socket() as held:  # a port taken by something that is not a store
        held.bind(("127.0.0.1", 0))
        held.listen()
        monkeypatch.setenv("HARNESS_COMPILE_CACHE_PORT", str(held.getsockname()[1]))
        off = build_one(_rendered("cc-off", "-O2", SOURCES), engine=engine, log_dir=tmp_path / "logs", audit=False)
    engine.remove_image(off.image_ref)
    assert off.status == "built"  # the build goes on, uncached, and says why
    assert off.compile_cache is not None and off.compile_cache.off
    assert "held by another program" in off.compile_cache.off


def test_a_base_without_ccache_builds_uncached_and_says_so(engine, store, tmp_path):
    r = _rendered("cc-no-ccache", "-O2", SOURCES)
    r = replace(r, dockerfile=r.dockerfile.replace(BASE, "harness-test/debian-python:bookworm")
                .replace('&& for f in *.c; do $CMAKE_C_COMPILER_LAUNCHER gcc $CFLAGS -c "$f" -o "${f%.c}.o"; done ', ""))
    o = build_one(r, engine=engine, log_dir=tmp_path / "logs", audit=False)
    engine.remove_image(o.image_ref)
    assert o.status == "built", o.log_tail
    assert o.compile_cache is not None and "no ccache in this image" in (o.compile_cache.off or "")
    assert Path(o.log_path or "").read_text().count("harness-compile-cache: off:") == 1
