"""The compile cache on a real engine: the harness's store on this host's loopback address, a
legacy-builder build on the host's network, ccache (Debian's 4.7.5) in the step, real gcc
compiles, the store's secret carried by the steps' /etc/hosts and sent by ccache itself.

Needs harness-test/ccache:bookworm (tools/base-images.sh: Debian + gcc + ccache). Each build
changes an ARG the step reads, so the engine's layer cache never answers for the step: every
build really runs its compiles, and only the compile cache decides what is compiled.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.image import builder, cache_store, compile_cache
from harness.image.builder import build_one
from harness.image.render import DOCKER_DIR, Rendered
from harness.results.build import BuildOutcome

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
RUN cd /opt/build/src && echo "build $NOTE" \\
 && eval "$(python3 /opt/build/compile_cache.py env)" \\
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
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT", raising=False)  # a port picked at random per build
    monkeypatch.setenv("HARNESS_COMPILE_CACHE_DIR", str(tmp_path / "store"))
    return tmp_path / "store"


@pytest.fixture
def served(monkeypatch) -> list[cache_store.Served]:
    """What each build was served (the real store; kept to learn the secret it was given)."""
    seen: list[cache_store.Served] = []
    real = cache_store.serving

    @contextlib.contextmanager
    def spy(*a, **k):
        with real(*a, **k) as s:
            seen.append(s)
            yield s

    monkeypatch.setattr(builder.cache_store, "serving", spy)
    return seen


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
    with compile_cache.open_store(store, create=False) as held:
        (folder,) = compile_cache.usage(held)
        assert folder.name == first.namespace and folder.objects > 0 and folder.bytes > 0
        assert folder.toolchain.machine in folder.name and "gcc" in folder.toolchain.program("gcc")
        removed, freed = compile_cache.prune(0, held)
        assert removed == folder.objects and freed == folder.bytes
        assert compile_cache.usage(held)[0].objects == 0
    after = _build(engine, tmp_path, "cc-after-prune").compile_cache
    assert (after.hits, after.misses) == (0, 3)


PARALLEL = """FROM {base}
COPY compile_cache.py /opt/build/compile_cache.py
COPY src /opt/build/src
ARG NOTE
RUN cd /opt/build/src && echo "build $NOTE" \\
 && eval "$(python3 /opt/build/compile_cache.py env)" \\
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
    assert "something else holds it" in off.compile_cache.off


def test_a_base_without_ccache_builds_uncached_and_says_so(engine, store, tmp_path):
    r = _rendered("cc-no-ccache", "-O2", SOURCES)
    r = replace(r, dockerfile=r.dockerfile.replace(BASE, "harness-test/debian-python:bookworm")
                .replace('&& for f in *.c; do $CMAKE_C_COMPILER_LAUNCHER gcc $CFLAGS -c "$f" -o "${f%.c}.o"; done ', ""))
    o = build_one(r, engine=engine, log_dir=tmp_path / "logs", audit=False)
    engine.remove_image(o.image_ref)
    assert o.status == "built", o.log_tail
    assert o.compile_cache is not None and "no ccache in this image" in (o.compile_cache.off or "")
    assert Path(o.log_path or "").read_text().count("harness-compile-cache: off:") == 1


PROBE = r'''
import importlib.util, json
spec = importlib.util.spec_from_file_location("step", "/opt/build/compile_cache.py")
step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step)
with open("/etc/hosts") as f:
    port, secret = step.store_entry(f.read())
ns = open("/tmp/harness-ccache/harness-started").read().split()[1]
key = f"/{ns}/toolchain.json"
out = {
    "put_anonymous": step.request(port, "PUT", f"/{ns}/ab/zzzzzzzzzzzzzzzz", body=b"x")[0],
    "get_wrong_bearer": step.request(port, "GET", key, secret="0" * 48)[0],
    "delete": step.request(port, "DELETE", key, secret=secret)[0],
    "overwrite": step.request(port, "PUT", key, secret=secret, body=b'{"machine": "evil"}')[0],
    "after": json.loads(step.request(port, "GET", key, secret=secret)[1])["machine"],
}
print("store-probe: " + json.dumps(out, sort_keys=True))
print("hosts line, as hostile build code could print it: " + open("/etc/hosts").read().splitlines()[-1])
'''
HOSTILE = """FROM {base}
COPY compile_cache.py /opt/build/compile_cache.py
COPY probe_store.py /opt/build/probe_store.py
COPY src /opt/build/src
ARG CFLAGS
ARG NOTE
RUN cd /opt/build/src && echo "build $NOTE" \\
 && eval "$(python3 /opt/build/compile_cache.py env)" \\
 && for f in *.c; do $CMAKE_C_COMPILER_LAUNCHER gcc $CFLAGS -c "$f" -o "${{f%.c}}.o"; done \\
 && python3 /opt/build/probe_store.py \\
 && python3 /opt/build/compile_cache.py stats compile
"""


def _holds(engine, ref: str, needle: bytes) -> bool:
    """Whether `needle` is anywhere in `docker save` of `ref` (layers, config, history)."""
    tail = b""
    for chunk in engine.client.api.get_image(ref):
        buf = tail + chunk
        if needle in buf:
            return True
        tail = buf[-len(needle):]
    return False


def test_the_secret_dies_with_the_build_and_the_build_cannot_overwrite_or_delete(engine, store, served, tmp_path):
    r = _rendered("cc-secret", "-O2", SOURCES)
    r = replace(r, dockerfile=HOSTILE.format(base=BASE), files=(*r.files, ("probe_store.py", PROBE.encode())))
    o = build_one(r, engine=engine, log_dir=tmp_path / "logs", audit=False)
    try:
        assert o.status == "built", (o.reason, o.log_tail)
        assert o.compile_cache is not None and o.compile_cache.off is None and o.compile_cache.misses == 3
        (s,) = served
        assert s.on and len(s.secret) == 48 and s.secret not in repr(s)
        # code running in the build (an sdist's setup.py) reads the secret as ccache does; even so
        # the store refuses a request without it, DELETE, and a second object under a key (the
        # probe's names hold no word the build log's masking would hide)
        log = Path(o.log_path or "").read_text()
        line = next(x for x in log.splitlines() if x.startswith("store-probe: "))
        assert json.loads(line.split(": ", 1)[1]) == {
            "put_anonymous": 401, "get_wrong_bearer": 401, "delete": 405,
            "overwrite": 200, "after": folder_machine(store)}
        assert s.counts["refused"] >= 2 and s.counts["kept"] >= 1
        # where build arguments end up (the image's history, in `docker save`): the NOTE is there,
        # the secret is nowhere in the image (layers, config, history, labels), nor in the build's log
        history = " ".join(h["CreatedBy"] for h in engine.client.api.history(o.image_ref))
        assert r.buildargs["NOTE"] in history and s.secret not in history
        assert _holds(engine, o.image_ref, r.buildargs["NOTE"].encode())
        assert not _holds(engine, o.image_ref, s.secret.encode())
        assert s.secret not in json.dumps(engine.client.api.inspect_image(o.image_ref))
        assert s.secret not in log  # masked where a step printed it
        assert f"harness-compile-cache.{s.port}.***" in log
    finally:
        engine.remove_image(o.image_ref)
    # and once the build is over, nothing answers on that port with that secret
    with socket.socket() as c:
        assert c.connect_ex(("127.0.0.1", s.port)) != 0


def folder_machine(store: Path) -> str:
    with compile_cache.open_store(store, create=False) as held:
        (folder,) = compile_cache.usage(held)
        return folder.toolchain.machine


def test_a_header_change_still_hits_after_its_first_build_without_store_errors(engine, store, served, tmp_path):
    # A changed header keeps a unit's ccache manifest key and adds a result to it: ccache 4.7.5
    # PUTs the manifest again under the same key, which the store keeps as it was (200, dropped).
    # The next build finds no entry for the new header in the old manifest, preprocesses, and hits
    # the result stored by the build before (a preprocessed hit): no store error either time.
    sources = {"h.h": b"#define K 3\n", "a.c": b'#include "h.h"\nint a(int x) { return x * K; }\n',
               "b.c": SOURCES["b.c"]}
    first = _build(engine, tmp_path, "cc-h1", sources=sources).compile_cache
    assert (first.hits, first.misses) == (0, 2)
    changed = {**sources, "h.h": b"#define K 4\n"}
    second = _build(engine, tmp_path, "cc-h2", sources=changed).compile_cache
    assert (second.hits, second.misses, second.remote_errors) == (1, 1, 0) and second.missed == ("a.c",)
    # kept: the toolchain.json every build's step offers, and a.c's manifest in its second version
    assert (served[0].counts["kept"], served[1].counts["kept"]) == (0, 2)
    third = _build(engine, tmp_path, "cc-h3", sources=changed).compile_cache
    assert (third.hits, third.misses, third.remote_errors) == (2, 0, 0), third
    assert third.store_errors == ()


def test_a_bad_setting_or_a_folder_that_is_not_a_store_stops_before_the_build(engine, store, tmp_path, monkeypatch):
    class NoBuild:
        def __getattr__(self, name):
            return getattr(engine, name)

        def build(self, *a, **k):
            raise AssertionError("the engine's build was called")

    docs = tmp_path / "documents"
    docs.mkdir()
    (docs / "notes.txt").write_text("mine")
    for var, value, says in (("HARNESS_COMPILE_CACHE", "OFF ", "HARNESS_COMPILE_CACHE="),
                             ("HARNESS_COMPILE_CACHE_MAX_GIB", "nan", "HARNESS_COMPILE_CACHE_MAX_GIB"),
                             ("HARNESS_COMPILE_CACHE_PORT", "\u0664\u0667\u0663\u0662\u0660", "HARNESS_COMPILE_CACHE_PORT"),
                             ("HARNESS_COMPILE_CACHE_DIR", str(docs), "not a compile cache the harness made")):
        with monkeypatch.context() as m:
            m.setenv(var, value)
            with pytest.raises(ConfigError, match=says):
                build_one(_rendered("cc-bad-setting", "-O2", SOURCES), engine=NoBuild(), log_dir=tmp_path / "logs",
                          audit=False)
    assert sorted(p.name for p in docs.iterdir()) == ["notes.txt"]
