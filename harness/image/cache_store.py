"""The compile cache's store, served over HTTP to one build and to nothing else.

ccache's HTTP remote storage (ccache 4.7.5, src/storage/remote/HttpStorage.cpp: GET, PUT and,
rarely, DELETE of `<url>/<2 chars>/<rest of the key>`; its `bearer-token` attribute sends
`Authorization: Bearer <token>` with every request) is answered by a server on 127.0.0.1 for the
length of one build. Anyone on the host can reach a loopback port, and the build's steps run on
the host's network, so the server trusts no connection by where it comes from:

- a secret of 192 bits (`secrets`) is made for each build and checked on every request (in
  constant time); it reaches the build's RUN steps as one /etc/hosts entry of theirs (the
  engine's `extra_hosts`: neither a build argument, which the legacy builder writes into the
  image's history, nor a layer, nor a label) and dies with the server when the build ends;
- the port is picked at random (HARNESS_COMPILE_CACHE_PORT fixes it; a port already held turns
  the cache off for that build, never shared with whatever holds it);
- `GET /.harness-compile-cache?challenge=HEX` answers an HMAC of the challenge under the secret,
  so the step proves the store is this build's before it sends the secret (a program that took
  the port first cannot answer it);
- PUT adds an object whose key is not there (a key already there keeps its first object: the
  body is read and dropped and the answer is 200, as ccache counts any refusal as a store
  error); the declared size is bounded (MAX_OBJECT, MAX_IN_FLIGHT for all writes at once, the
  disk's free space) before a byte is read, the body is streamed to a temporary file and
  published only whole (a body that stops early stores nothing);
- no DELETE, no listing, nothing outside the grammar of a ccache key under a toolchain folder;
- the store folder is held open (harness/safety/held.py): every name under it is reached from
  its descriptor without following a link.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import re
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harness.errors import ConfigError
from harness.image import compile_cache
from harness.safety.held import Held, ShortBody

HOST = "harness-compile-cache"  # the /etc/hosts name a build step reads: HOST.<port>.<secret>
IDENTITY = "/.harness-compile-cache"
PROOF_CONTEXT = b"harness-compile-cache identity v1\0"
SECRET_BYTES = 24
# one object (ccache result or manifest): the cut vLLM 0.25.1 build stored 224 of them in 0.10 GiB
# (examples/h200-cache/cold/cache-show.txt); a bound far above any, well below a disk
MAX_OBJECT = 1 << 30
MAX_IN_FLIGHT = 2 << 30  # all writes being received at once
KEEP_FREE = 1 << 30  # a write that would leave the disk with less is refused
MAX_CONNECTIONS = 128
IDLE_S = 60  # a connection silent this long is closed (ccache's own request bound is 60 s)
BLOCK = 1 << 20
_NS = r"[a-z0-9_]{1,32}-[0-9a-f]{24}"  # docker/compile_cache.py namespace(): <machine>-<digest>
# ccache's key in the `subdirs` layout: 4 base16 then base32hex digits, split after two
_OBJECT = re.compile(rf"/({_NS})/(?:([0-9a-f]{{2}})/([0-9a-v]{{8,126}})|(toolchain\.json))")
_CHALLENGE = re.compile(r"[0-9a-f]{32,128}")
_LENGTH = re.compile(r"[0-9]{1,12}")


def proof(secret: str, challenge: str) -> str:
    """What the store answers to `challenge`: only a holder of the secret can compute it."""
    return hmac.new(secret.encode(), PROOF_CONTEXT + challenge.encode(), hashlib.sha256).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_S
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass  # a line per object would bury the build's own output

    def _answer(self, code: int, body: bytes = b"", *, close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def _allowed(self) -> bool:
        given = self.headers.get("Authorization", "").encode("utf-8", "replace")
        if hmac.compare_digest(given, self.server.expected):
            return True
        self.server.count("refused")
        self._answer(401, close=True)  # the body of a refused PUT is never read
        return False

    def _key(self) -> tuple[str, ...] | None:
        m = _OBJECT.fullmatch(self.path)
        if m is None:
            return None
        ns, sub, rest, tools = m.groups()
        return (ns, tools) if tools else (ns, sub, rest)

    def _identity(self) -> None:
        path, _, query = self.path.partition("?")
        name, _, challenge = query.partition("=")
        if path != IDENTITY or name != "challenge" or not _CHALLENGE.fullmatch(challenge):
            self._answer(400, close=True)
            return
        self._answer(200, json.dumps({"proof": proof(self.server.secret, challenge)}).encode())

    def _read(self) -> None:
        if self.path.split("?", 1)[0] == IDENTITY:
            self._identity()
            return
        if not self._allowed():
            return
        key = self._key()
        try:
            if key is None:
                raise FileNotFoundError
            f, st = self.server.store.open_file(key)
        except (OSError, ConfigError):  # missing, a link, not a regular file: a miss, never followed
            if self.command == "GET":
                self.server.count("misses")
            self._answer(404)
            return
        with f:
            if st.st_size > MAX_OBJECT:
                self._answer(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(st.st_size))
            self.end_headers()
            if self.command == "GET":
                left = st.st_size
                while left:
                    block = f.read(min(BLOCK, left))
                    if not block:
                        self.close_connection = True  # shorter than its size said: the client sees it
                        return
                    self.wfile.write(block)
                    left -= len(block)
                self.server.store.touch(f)  # last use, for prune
                self.server.count("hits")

    def do_GET(self):  # noqa: N802 - http.server's names
        self._read()

    def do_HEAD(self):  # noqa: N802
        self._read()

    def do_PUT(self):  # noqa: N802
        if not self._allowed():
            return
        key = self._key()
        length = self.headers.get("Content-Length", "")
        if key is None:
            self._answer(400, close=True)
            return
        if self.headers.get("Transfer-Encoding") is not None or not _LENGTH.fullmatch(length):
            self._answer(411, close=True)  # a body of a size declared up front, or none
            return
        size = int(length)
        if size > MAX_OBJECT:
            self.server.count("too_large")
            self._answer(413, close=True)
            return
        store = self.server.store
        try:
            present = store.exists(key)
        except (OSError, ConfigError):  # a link or a file where a folder of the key is
            self._answer(400, close=True)
            return
        if present:
            self._drop(size)
            return
        if not self.server.reserve(size):
            self.server.count("too_large")
            self._answer(503, close=True)
            return
        try:
            if store.free_bytes() - size < KEEP_FREE:
                self.server.count("too_large")
                self._answer(507, close=True)
                return
            stored = store.create(key, self.rfile, size)
        except (ShortBody, OSError):  # the body stopped early or the peer went silent: nothing stored
            self.server.count("short")
            self.close_connection = True
            return
        except ConfigError:  # a link or a file where a folder of the key is
            self._answer(400, close=True)
            return
        finally:
            self.server.release(size)
        self.server.count("writes" if stored else "kept")
        self._answer(201 if stored else 200)

    def _drop(self, size: int) -> None:
        """Read a PUT's body to its end and keep nothing: the key's first object stays."""
        left = size
        while left:
            block = self.rfile.read(min(BLOCK, left))
            if not block:
                self.close_connection = True
                return
            left -= len(block)
        self.server.count("kept")
        self._answer(200)

    def _not_allowed(self) -> None:
        if self._allowed():
            self._answer(405, close=True)

    do_DELETE = do_POST = do_PATCH = do_OPTIONS = _not_allowed  # noqa: N815


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False  # nothing may share the port, even in TIME_WAIT games
    # every core's compile asks at once; socketserver's default backlog of 5 drops the rest of a
    # burst of connections, which ccache then waits a second for (or gives up on)
    request_queue_size = 128

    def __init__(self, addr, store: Held, secret: str):
        self.store = store
        self.secret = secret
        self.expected = f"Bearer {secret}".encode()
        self.counts = {"hits": 0, "misses": 0, "writes": 0, "kept": 0, "refused": 0, "too_large": 0, "short": 0,
                       "errors": 0}
        self._lock = threading.Lock()
        self._in_flight = 0
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._open: set[socket.socket] = set()
        super().__init__(addr, _Handler)

    def count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def reserve(self, size: int) -> bool:
        with self._lock:
            if self._in_flight + size > MAX_IN_FLIGHT:
                return False
            self._in_flight += size
            return True

    def release(self, size: int) -> None:
        with self._lock:
            self._in_flight -= size

    def handle_error(self, request, client_address):
        self.count("errors")  # a peer that went away or stalled: socketserver would print a traceback

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # more connections than a build makes: closed unanswered
            return
        with self._lock:
            self._open.add(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._done(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._done(request)

    def _done(self, request) -> None:
        with self._lock:
            self._open.discard(request)
        self._slots.release()

    def drain(self, timeout: float = 10) -> bool:
        """Stop serving, cut every open connection, and wait for their handlers: True when none
        is left, so the store's descriptor can be closed without a late handler using its number
        for another folder."""
        self.shutdown()
        with self._lock:
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for taken in range(MAX_CONNECTIONS):
            if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                for _ in range(taken):
                    self._slots.release()
                return False
        for _ in range(MAX_CONNECTIONS):
            self._slots.release()
        self.server_close()
        return True


@dataclass(frozen=True)
class Served:
    """The store as one build sees it; `port` 0 when the cache is off (`why_off` says why)."""

    why_off: str = ""
    port: int = 0
    secret: str = field(default="", repr=False)
    store: Held | None = field(default=None, repr=False, compare=False)
    counts: dict[str, int] = field(default_factory=dict, compare=False)

    @property
    def on(self) -> bool:
        return self.port != 0

    def extra_hosts(self) -> dict[str, str]:
        """The /etc/hosts entry that gives the build's steps the port and the secret."""
        return {f"{HOST}.{self.port}.{self.secret}": "127.0.0.1"} if self.on else {}


def _bind(store: Held, secret: str, port: int | None) -> _Server:
    if port is not None:
        return _Server(("127.0.0.1", port), store, secret)
    for _ in range(64):
        try:
            return _Server(("127.0.0.1", 20000 + secrets.randbelow(40000)), store, secret)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
    return _Server(("127.0.0.1", 0), store, secret)  # the kernel's pick


@contextlib.contextmanager
def serving(root: Path | None = None, port: int | None = None) -> Iterator[Served]:
    """The store served on 127.0.0.1 for the length of a build, with a secret of its own. A
    port that cannot be bound turns the cache off for this build (recorded, never an error:
    the build compiles uncached); a store folder that is not the harness's is an error."""
    if not compile_cache.enabled():
        yield Served("HARNESS_COMPILE_CACHE=off")
        return
    port = compile_cache.port() if port is None else port
    store = compile_cache.open_store(root, create=True)
    assert store is not None  # made when missing
    secret = secrets.token_hex(SECRET_BYTES)
    try:
        server = _bind(store, secret, port)
    except OSError as exc:
        store.close()
        yield Served(f"port {port} of 127.0.0.1 cannot be served ({exc.strerror}): something else holds it "
                     "(HARNESS_COMPILE_CACHE_PORT picks another; unset, a free one is picked at random)")
        return
    thread = threading.Thread(target=server.serve_forever, name="compile-cache", daemon=True)
    thread.start()
    try:
        yield Served(port=server.server_address[1], secret=secret, store=store, counts=server.counts)
    finally:
        if server.drain():
            store.close()
        # else a handler outlived its cut connection: the descriptor stays open (one fd) rather
        # than be closed under it
