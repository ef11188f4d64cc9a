"""The compile cache's store against what another process, another user, a program on its port,
the build's own code, a planted link or a racing rename can try (harness/image/cache_store.py,
harness/safety/held.py). Every case runs the real server on loopback and real clients; the
prune race is made deterministic with `prune`'s `before_folder` hook."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.image import cache_store, compile_cache
from harness.image.render import DOCKER_DIR

spec = importlib.util.spec_from_file_location("step_compile_cache_hostile", DOCKER_DIR / "compile_cache.py")
assert spec and spec.loader
step = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step)

NS = "x86_64-" + "cd" * 12
KEY = f"/{NS}/ab/cdefghijklmnop"
OTHER = f"/{NS}/ef/ghijklmnopqrst"
GiB = 1 << 30

# another process's client: standard library only, so that any user's Python runs it
CLIENT = r"""
import http.client, json, sys
port, key, other, guess = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def ask(method, path, auth=None, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request(method, path, body=body, headers={"Authorization": auth} if auth else {})
        r = c.getresponse()
        return [r.status, r.read(100).decode("latin-1")]
    except (OSError, http.client.HTTPException) as exc:
        return ["failed", type(exc).__name__]
    finally:
        c.close()
out = {}
for name, auth in (("none", None), ("guess", "Bearer " + guess), ("basic", "Basic " + guess),
                   ("empty", "Bearer "), ("prefix", "Bearer " + guess[:8])):
    out[name] = {
        "get": ask("GET", key, auth), "head": ask("HEAD", key, auth),
        "overwrite": ask("PUT", key, auth, b"poison"), "put_new": ask("PUT", other, auth, b"poison"),
        "delete": ask("DELETE", key, auth), "list": ask("GET", key.rsplit("/", 1)[0], auth),
    }
try:
    import os
    out["store_listing"] = sorted(os.listdir(sys.argv[5]))
except OSError as exc:
    out["store_listing"] = type(exc).__name__
print(json.dumps(out))
"""


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink()}


@pytest.fixture
def served(tmp_path, monkeypatch):
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT", raising=False)
    monkeypatch.delenv("HARNESS_COMPILE_CACHE", raising=False)
    with cache_store.serving(tmp_path / "store") as s:
        assert s.on
        assert step.request(s.port, "PUT", KEY, secret=s.secret, body=b"the real object")[0] == 201
        yield s


def _another_process(served, store: Path, *, user: int | None = None) -> dict:
    guess = "0123456789abcdef" * 3  # a well-formed secret that is not this build's
    r = subprocess.run(["/usr/bin/python3" if user is not None else sys.executable, "-c", CLIENT, str(served.port),
                        KEY, OTHER, guess, str(store)],
                       capture_output=True, text=True, timeout=120, user=user, cwd="/")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _refused_everything(answers: dict) -> None:
    for name in ("none", "guess", "basic", "empty", "prefix"):
        for method, (status, _body) in answers[name].items():
            assert status == 401, (name, method, status)


def test_another_process_without_the_secret_can_do_nothing(served, tmp_path):
    before = _snapshot(tmp_path / "store")
    answers = _another_process(served, tmp_path / "store")
    _refused_everything(answers)
    assert _snapshot(tmp_path / "store") == before  # nothing written, replaced, removed or touched
    assert served.counts["refused"] >= 30 and served.counts["writes"] == 1 and served.counts["hits"] == 0


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/python3").exists(),
                    reason="needs root to run a client as another user (nobody) with /usr/bin/python3")
def test_another_user_can_neither_ask_the_store_nor_read_its_folder(monkeypatch):
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT", raising=False)
    base = Path(tempfile.mkdtemp(dir="/tmp", prefix="harness-cc-test-"))
    try:
        base.chmod(0o755)  # another user may walk to the store: only the store's own mode stops them
        with cache_store.serving(base / "store") as s:
            assert step.request(s.port, "PUT", KEY, secret=s.secret, body=b"the real object")[0] == 201
            before = _snapshot(base / "store")
            answers = _another_process(s, base / "store", user=65534)
            _refused_everything(answers)
            assert answers["store_listing"] == "PermissionError"  # made 0700
            assert _snapshot(base / "store") == before
    finally:
        shutil.rmtree(base)


def test_the_build_itself_cannot_overwrite_delete_or_list(served, tmp_path):
    port, secret = served.port, served.secret
    assert step.request(port, "PUT", KEY, secret=secret, body=b"poison")[0] == 200  # accepted, dropped
    assert step.request(port, "GET", KEY, secret=secret) == (200, b"the real object")
    assert step.request(port, "DELETE", KEY, secret=secret)[0] == 405
    assert step.request(port, "POST", KEY, secret=secret, body=b"x")[0] == 405
    for folder in (f"/{NS}/ab", f"/{NS}", "/", f"/{NS}/ab/"):
        assert step.request(port, "GET", folder, secret=secret)[0] == 404
    assert step.request(port, "PUT", "/toplevel", secret=secret, body=b"x")[0] == 400
    assert _files(tmp_path / "store")[f"{NS}/ab/cdefghijklmnop"] == b"the real object"
    assert served.counts["kept"] == 1


class _Squatter(BaseHTTPRequestHandler):
    """A program that took a port first and answers everything as a store would have."""

    seen: list[str] = []
    root = ""

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        _Squatter.seen.append(self.headers.get("Authorization", ""))
        body = json.dumps({"root": self.root, "proof": "0" * 64}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_PUT = do_GET  # noqa: N815


def test_a_program_on_the_port_is_never_taken_for_the_store(tmp_path, monkeypatch):
    squatter = ThreadingHTTPServer(("127.0.0.1", 0), _Squatter)
    _Squatter.root = str(tmp_path / "store")
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        port = squatter.server_address[1]
        # the harness asked for that port: the build goes on uncached, never shares it
        monkeypatch.setenv("HARNESS_COMPILE_CACHE_PORT", str(port))
        with cache_store.serving(tmp_path / "store") as off:
            assert not off.on and f"port {port}" in off.why_off and off.extra_hosts() == {}
        # a step sent to it (as if /etc/hosts named it) asks for proof without sending the secret
        why = step.identify(port, "5e" * 24)
        assert why is not None and "not this build's store" in why
        assert _Squatter.seen and all(seen == "" for seen in _Squatter.seen)
    finally:
        squatter.shutdown()
        squatter.server_close()
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT")
    with cache_store.serving(tmp_path / "store") as real:  # the real store proves itself; a wrong secret does not
        assert step.identify(real.port, real.secret) is None
        assert step.identify(real.port, "5e" * 24) is not None
        for bad in ("", "?challenge=", "?challenge=xyz", "?other=00112233445566778899aabbccddeeff"):
            assert step.request(real.port, "GET", cache_store.IDENTITY + bad)[0] == 400


def test_a_link_planted_in_the_store_is_never_followed(served, tmp_path):
    port, secret = served.port, served.secret
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ghijklmnopqrst").write_bytes(b"outside file")
    (outside / "canary").write_bytes(b"outside canary")
    store = tmp_path / "store"
    os.symlink(outside, store / NS / "ef")  # a folder of keys linked out
    os.makedirs(store / NS / "aa")
    os.symlink(outside / "canary", store / NS / "aa" / "linkedobject")  # an object linked out
    before = _snapshot(outside)
    assert step.request(port, "GET", OTHER, secret=secret)[0] == 404
    assert step.request(port, "PUT", f"/{NS}/ef/newobjectname", secret=secret, body=b"through")[0] == 400
    assert step.request(port, "GET", f"/{NS}/aa/linkedobject", secret=secret)[0] == 404
    assert step.request(port, "HEAD", f"/{NS}/aa/linkedobject", secret=secret)[0] == 404
    assert step.request(port, "PUT", f"/{NS}/aa/linkedobject", secret=secret, body=b"through")[0] == 200  # kept
    assert step.request(port, "DELETE", f"/{NS}/aa/linkedobject", secret=secret)[0] == 405
    assert step.request(port, "DELETE", OTHER, secret=secret)[0] == 405
    assert _snapshot(outside) == before and not (outside / "newobjectname").exists()
    assert (store / NS / "aa" / "linkedobject").is_symlink()
    # the whole toolchain folder linked out
    os.rename(store / NS, store / "moved")
    os.symlink(outside, store / NS)
    assert step.request(port, "PUT", f"/{NS}/ab/vvvvvvvvvvvvvv", secret=secret, body=b"through")[0] == 400
    assert step.request(port, "GET", KEY, secret=secret)[0] == 404
    assert _snapshot(outside) == before and not (outside / "ab").exists()


def _fill(folder: Path, n: int, *, old: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        p = folder / f"obj{i:05d}"
        p.write_bytes(b"o" * 10)
        if old:
            os.utime(p, (1_000_000 + i, 1_000_000 + i))


@pytest.mark.parametrize("swap", ["link", "folder"])
def test_a_folder_swapped_during_prune_loses_nothing_outside_the_store(tmp_path, swap):
    with compile_cache.open_store(tmp_path / "store", create=True) as store:
        root = tmp_path / "store"
        _fill(root / NS / "ab", 500, old=True)
        _fill(root / NS / "cd", 20, old=True)
        outside = tmp_path / "documents"
        _fill(outside, 500, old=False)  # the same names as the store's folder: what a swap would expose
        before = _snapshot(outside)

        def race(parts: tuple[str, ...]) -> None:
            if parts != (NS, "ab"):
                return
            os.rename(root / NS / "ab", tmp_path / "ab.moved")
            if swap == "link":
                os.symlink(outside, root / NS / "ab")
            else:  # another real folder moved in under the same name
                os.rename(outside, root / NS / "ab")

        removed, _ = compile_cache.prune(0, store, before_folder=race)
        assert removed == 20  # only the folder that stayed what the scan saw
        if swap == "folder":
            os.rename(root / NS / "ab", outside)
        assert _snapshot(outside) == before
        assert len(list((tmp_path / "ab.moved").iterdir())) == 500


def test_a_body_that_stops_early_stores_nothing(served, tmp_path, monkeypatch):
    store = tmp_path / "store"
    before = _files(store)
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as c:
        c.sendall(f"PUT {OTHER} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {served.secret}\r\n"
                  "Content-Length: 100000\r\n\r\n".encode() + b"only ten b")
        c.shutdown(socket.SHUT_WR)
        c.settimeout(10)
        assert c.recv(100) == b""  # closed unanswered: nothing to answer for
    _wait(lambda: served.counts["short"] == 1)
    assert _files(store) == before  # no object, no temporary file
    assert step.request(served.port, "GET", OTHER, secret=served.secret)[0] == 404


def test_a_silent_writer_is_dropped_and_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store._Handler, "timeout", 1)
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT", raising=False)
    with cache_store.serving(tmp_path / "store") as s:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
            c.sendall(f"PUT {OTHER} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {s.secret}\r\n"
                      "Content-Length: 1000\r\n\r\n".encode() + b"half")
            c.settimeout(10)
            assert c.recv(100) == b""  # the server gave up on it
        _wait(lambda: s.counts["short"] == 1)
        assert [p.name for p in (tmp_path / "store").rglob("*") if p.is_file()] == [compile_cache.MARKER]


def _wait(cond, timeout: float = 10) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def _put_head(port: int, secret: str, path: str, length: str, extra: str = "") -> socket.socket:
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(f"PUT {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n"
              f"Content-Length: {length}\r\n{extra}\r\n".encode())
    return c


def _status(c: socket.socket) -> int:
    c.settimeout(10)
    return int(c.recv(200).split(b" ", 2)[1])


def test_declared_sizes_are_bounded_before_a_byte_is_read(served, tmp_path):
    tracemalloc.start()
    try:
        conns = [_put_head(served.port, served.secret, f"/{NS}/a{i}/vvvvvvvvvvvvvv", str(2 * GiB)) for i in range(3)]
        assert [_status(c) for c in conns] == [413, 413, 413]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        for c in conns:
            c.close()
    assert peak < 16 << 20  # nothing the size of a declared body was allocated
    for bad, extra in (("\u0661\u0660", ""), ("-5", ""), ("5", "Transfer-Encoding: chunked\r\n"), ("", ""),
                       ("1" * 13, "")):
        with _put_head(served.port, served.secret, OTHER, bad, extra) as c:
            assert _status(c) == 411, bad
    assert [p.name for p in (tmp_path / "store" / NS).rglob("*") if p.is_file()] == ["cdefghijklmnop"]


@pytest.mark.skipif(os.statvfs("/tmp").f_bavail * os.statvfs("/tmp").f_frsize < 4 * GiB,
                    reason="needs 4 GiB free where pytest keeps its temporary folders")
def test_writes_in_flight_share_one_bound(served, tmp_path):
    # two writes of 1 GiB each (the most one object may be) are being received; a third must wait
    first = _put_head(served.port, served.secret, f"/{NS}/a1/vvvvvvvvvvvvvv", str(cache_store.MAX_OBJECT))
    second = _put_head(served.port, served.secret, f"/{NS}/a2/vvvvvvvvvvvvvv", str(cache_store.MAX_OBJECT))
    try:
        _wait(lambda: len([p for p in (tmp_path / "store" / NS).rglob("*.tmp")]) == 2)
        with _put_head(served.port, served.secret, f"/{NS}/a3/vvvvvvvvvvvvvv", "10") as third:
            assert _status(third) == 503
    finally:
        first.close()
        second.close()
    _wait(lambda: served.counts["short"] == 2)
    assert not list((tmp_path / "store" / NS).rglob("*.tmp"))
    assert step.request(served.port, "PUT", f"/{NS}/a3/vvvvvvvvvvvvvv", secret=served.secret, body=b"x" * 10)[0] == 201


def test_a_large_object_is_streamed_not_held_in_memory(served, tmp_path):
    size = 96 << 20
    block = b"z" * (1 << 20)
    tracemalloc.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
        conn.request("PUT", OTHER, body=(block for _ in range(size // len(block))),
                     headers={"Authorization": f"Bearer {served.secret}", "Content-Length": str(size)})
        assert conn.getresponse().status == 201
        conn.close()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 << 20, peak
    assert (tmp_path / "store" / NS / "ef" / "ghijklmnopqrst").stat().st_size == size


def test_connections_beyond_the_bound_are_closed_and_the_store_recovers(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_store, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(cache_store._Handler, "timeout", 2)
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT", raising=False)
    with cache_store.serving(tmp_path / "store") as s:
        idle = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(4)]
        time.sleep(0.3)  # the four hold every slot, saying nothing
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as extra:
            extra.settimeout(10)
            assert extra.recv(10) == b""  # closed unanswered
        for c in idle:
            c.close()

        def answered() -> bool:
            try:  # until the four handlers have seen their peers go, a new connection may be cut too
                return step.request(s.port, "PUT", KEY, secret=s.secret, body=b"ok")[0] == 201
            except (OSError, http.client.HTTPException):
                return False

        _wait(answered)


def test_the_end_of_a_build_cuts_every_connection_before_the_folder_is_let_go(tmp_path, monkeypatch):
    monkeypatch.delenv("HARNESS_COMPILE_CACHE_PORT", raising=False)
    with cache_store.serving(tmp_path / "store") as s:
        silent = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        writer = _put_head(s.port, s.secret, OTHER, "1000")  # a write still being received
        _wait(lambda: len(list((tmp_path / "store").rglob("*.tmp"))) == 1)
    try:
        for c in (silent, writer):
            c.settimeout(30)
            assert c.recv(100) == b""  # cut by the server, not left to time out
        assert s.store is not None and s.store.fd == -1  # closed once no handler could use it
        assert not list((tmp_path / "store").rglob("*.tmp")) and s.counts["short"] == 1
    finally:
        silent.close()
        writer.close()
