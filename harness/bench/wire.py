"""The benchmark's one HTTP client: HTTP/1.1 over an asyncio Protocol, nothing in between.

Why not aiohttp here: at 64 streams on 2 cores the client's own event loop decides TTFT and
ITL. A protocol gets each network read in `data_received`, with no stream reader, future or
timer per read (profile before and after: benchmarks/README.md). It also lets the client open
and warm its connections outside the timed round, and stamp a request's start when its bytes
are written, not when a pool hands out a socket.

Each read is stamped with the time its bytes ARRIVED, as the kernel recorded it
(SO_TIMESTAMPNS), not when the event loop got round to reading them: on a busy machine the
client's process waits its turn, and a stamp taken then is late by that wait (at 64 streams
beside two busy loops, the aggregate read ~3 % low: benchmarks/README.md). Plain http reads
its socket itself for that (`_StampedReader`, the event loop only says when it is readable);
https, or a kernel without the option, falls back to the time of the read.

Scope: what an OpenAI-compatible server answers: status line, headers, a body framed by
`transfer-encoding: chunked`, `content-length` or connection close; keep-alive unless the
server says `connection: close`; http and https.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl as ssl_mod
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

_now = time.perf_counter
# Linux (asm-generic, so x86-64 and arm64): SO_TIMESTAMPNS, and its control message of the same
# number, a struct timespec of the receive time on CLOCK_REALTIME
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35) if sys.platform.startswith("linux") else None
_ANC_SIZE = socket.CMSG_SPACE(16)
_READ_SIZE = 256 * 1024  # as asyncio's transports read

BodySink = Callable[[bytes, float], None]


@dataclass(frozen=True)
class Target:
    """Where the server is: scheme, host, port, and the path prefix before /v1."""

    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Target:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = u.port or (443 if u.scheme == "https" else 80)
        return cls(u.scheme, u.hostname, port, u.path.rstrip("/"))

    @property
    def base(self) -> str:
        default = 443 if self.scheme == "https" else 80
        hostport = self.host if self.port == default else f"{self.host}:{self.port}"
        return f"{self.scheme}://{hostport}{self.prefix}"


class HTTPError(Exception):
    """The connection failed or the response could not be read as HTTP."""


class _Response:
    """Parses one response as its bytes arrive; the body goes to `sink` with each read's time."""

    __slots__ = (
        "head",
        "status",
        "headers",
        "sink",
        "mode",
        "need",
        "crlf",
        "buf",
        "done",
        "close",
        "body",
    )

    def __init__(self, sink: BodySink | None) -> None:
        self.head = bytearray()
        self.status = 0
        self.headers: dict[str, str] = {}
        self.sink = sink
        self.mode = ""  # "chunked" | "length" | "eof"
        self.need = 0  # chunked: data bytes left in this chunk; length: bytes left
        self.crlf = 0  # chunked: CRLF bytes left after this chunk's data
        self.buf = bytearray()  # chunked: an incomplete size line
        self.done = False
        self.close = False
        self.body: list[bytes] | None = None if sink else []

    def feed(self, data: bytes, t: float) -> None:
        if not self.mode:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > 65536:
                    raise HTTPError("response head over 64 KiB")
                return
            data = bytes(self.head[end + 4 :])
            self._parse_head(bytes(self.head[:end]))
            if self.done or not data:
                return
        if self.mode == "chunked":
            self._chunked(data, t)
        elif self.mode == "length":
            take = data[: self.need]
            self.need -= len(take)
            self._emit(take, t)
            if self.need == 0:
                self.done = True
        else:
            self._emit(data, t)

    def eof(self, t: float) -> None:
        if self.mode == "eof":
            self.done = True
        self.close = True

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise HTTPError(f"not an HTTP response: {lines[0][:80]!r}")
        self.status = int(parts[1])
        connection = transfer_encoding = ""  # the two framing headers, as the last of each says
        for ln in lines[1:]:
            k, sep, v = ln.partition(":")
            if sep:
                name, value = k.strip().lower(), v.strip()
                self.headers[name] = value
                if name == "connection":
                    connection = value
                elif name == "transfer-encoding":
                    transfer_encoding = value
        self.close = connection.lower() == "close" or parts[0] == "HTTP/1.0"
        if self.status != 200 and self.sink is not None:
            self.sink, self.body = None, []  # an error body is kept whole, not streamed
        if "chunked" in transfer_encoding.lower():
            self.mode = "chunked"
        elif "content-length" in self.headers:
            self.mode = "length"
            self.need = int(self.headers["content-length"])
            self.done = self.need == 0
        else:
            self.mode = "eof"
            self.close = True

    def _emit(self, data: bytes, t: float) -> None:
        if not data:
            return
        if self.sink is not None:
            self.sink(data, t)
        elif self.body is not None:  # always: body is kept exactly when there is no sink
            self.body.append(data)

    def _chunked(self, data: bytes, t: float) -> None:
        pos, n = 0, len(data)
        while pos < n and not self.done:
            if self.need:
                take = min(self.need, n - pos)
                self._emit(data[pos : pos + take], t)
                self.need -= take
                pos += take
                continue
            if self.crlf:
                take = min(self.crlf, n - pos)
                self.crlf -= take
                pos += take
                continue
            end = data.find(b"\n", pos)
            if end < 0:
                self.buf += data[pos:]
                return
            line = bytes(self.buf) + data[pos:end]
            self.buf.clear()
            pos = end + 1
            size_text = line.split(b";", 1)[0].strip()
            if not size_text:
                continue  # the blank line that ends the trailers
            size = int(size_text, 16)
            if size == 0:
                self.done = True  # trailers, if any, are not read
            else:
                self.need, self.crlf = size, 2


def arrival(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The kernel's receive time of a read (its SCM_TIMESTAMPNS message), on perf_counter's
    clock; None without one. Never later than now (a clock step cannot put it in the future)."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = struct.unpack("qq", data[:16])
            age_ns = time.time_ns() - (sec * 1_000_000_000 + nsec)
            return _now() - max(age_ns, 0) / 1e9
    return None


class _StampedReader(asyncio.Transport):
    """A plain TCP socket read by recvmsg, each read handed on with its bytes' arrival time.
    The event loop (asyncio's or uvloop's) only says when the socket is readable; writes are
    a request's few bytes, sent at once (the rest, if the kernel takes less, when it can)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, conn: Connection) -> None:
        super().__init__()
        self._loop, self._sock, self._conn = loop, sock, conn
        self._closed = False
        self._sending: asyncio.Task | None = None  # the rest of a write the kernel did not take at once
        loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data, anc, _flags, _addr = self._sock.recvmsg(_READ_SIZE, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.close()
            self._conn.connection_lost(exc)
            return
        if not data:
            self.close()
            self._conn.eof_received()
            return
        self._conn.received(data, arrival(anc))

    def write(self, data: bytes | bytearray | memoryview) -> None:
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.close()
            self._conn.connection_lost(exc)
            return
        if sent < len(data):
            self._sending = self._loop.create_task(self._loop.sock_sendall(self._sock, bytes(data[sent:])))

    def is_closing(self) -> bool:
        return self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()


async def _stamped_connect(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    """A connected, non-blocking TCP socket with receive timestamps on (where the kernel has them)."""
    last: OSError | None = None
    for family, kind, proto, _name, addr in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                if SO_TIMESTAMPNS is not None:
                    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            except OSError:
                pass  # no such option here: reads are stamped when read
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"no address for {host}")


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.transport: asyncio.Transport | None = None
        self.closed = True
        self.resp: _Response | None = None
        self.waiter: asyncio.Future | None = None
        self.last_byte = 0.0
        self.error: Exception | None = None

    # -- protocol callbacks (the event loop calls these) -----------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.closed = False

    def data_received(self, data: bytes) -> None:
        self.received(data, None)

    def received(self, data: bytes, arrived: float | None) -> None:
        """A read, with its bytes' arrival time where the kernel gave it (else now)."""
        self.last_byte = _now()
        t = self.last_byte if arrived is None else arrived
        resp = self.resp
        if resp is None:
            return  # bytes nobody asked for: dropped, and the connection is not reused
        try:
            resp.feed(data, t)
        except (HTTPError, ValueError) as exc:
            self._finish(HTTPError(str(exc)))
            return
        if resp.done:
            self._finish(None)

    def eof_received(self) -> bool:
        if self.resp is not None:
            self.resp.eof(_now())
        self.closed = True
        self._finish(None if self.resp is not None and self.resp.done else HTTPError("closed"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._finish(HTTPError(f"connection lost: {exc}" if exc else "connection closed"))

    def _finish(self, error: Exception | None) -> None:
        w = self.waiter
        if w is not None and not w.done():
            if error is None:
                w.set_result(None)
            else:
                w.set_exception(error)

    # -- use ------------------------------------------------------------------------------
    async def open(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            if self.target.scheme == "http":
                sock = await asyncio.wait_for(_stamped_connect(loop, self.target.host, self.target.port), timeout_s)
                self.connection_made(_StampedReader(loop, sock, self))
                return
            ctx = ssl_mod.create_default_context()
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: self, self.target.host, self.target.port, ssl=ctx, server_hostname=self.target.host
                ),
                timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            raise HTTPError(f"cannot connect to {self.target.base}: {exc}") from exc

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True

    def send(
        self, method: str, path: str, body: bytes | None, sink: BodySink | None
    ) -> tuple[float, _Response, asyncio.Future]:
        """Write one request now; return (time written, the response being read, its waiter)."""
        t = self.target
        head = (
            f"{method} {t.prefix}{path} HTTP/1.1\r\nHost: {t.host}:{t.port}\r\n"
            "User-Agent: harness-bench\r\nAccept: */*\r\n"
        )
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.resp = resp = _Response(sink)
        self.waiter = waiter = asyncio.get_running_loop().create_future()
        start = _now()
        if self.transport is None:  # create_connection calls connection_made before it returns
            raise HTTPError("send on a connection that was never made")
        self.transport.write(head.encode() + b"\r\n" + (body or b""))
        self.last_byte = start
        return start, resp, waiter

    async def wait(self, waiter: asyncio.Future, idle_timeout_s: float) -> None:
        """Wait for the response to end; TimeoutError if no byte came for `idle_timeout_s`.

        One timer per idle period, not one per read: the deadline is checked when the timer
        fires and pushed back to the last byte's time plus the timeout."""
        while True:
            remaining = self.last_byte + idle_timeout_s - _now()
            if remaining <= 0:
                self.close()
                raise TimeoutError
            done, _ = await asyncio.wait({waiter}, timeout=remaining)
            if done:
                break
        waiter.result()
        if self.resp is not None and self.resp.close:
            self.close()
        self.resp = None


async def request(
    target: Target, method: str, path: str, body: dict | None = None, *, timeout_s: float = 30
) -> tuple[int, bytes]:
    """One plain request on a fresh connection: (status, body). For /metrics and /tokenize."""
    conn = Connection(target)
    await conn.open(timeout_s)
    try:
        raw = json.dumps(body).encode() if body is not None else None
        _, resp, waiter = conn.send(method, path, raw, None)
        await conn.wait(waiter, timeout_s)
        return resp.status, b"".join(resp.body or [])
    finally:
        conn.close()
