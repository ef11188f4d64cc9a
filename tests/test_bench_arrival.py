"""The benchmark client stamps each read with the time its bytes arrived (the kernel's receive
time), not with the time its event loop got round to reading them (harness/bench/wire.py).

A real socket server thread answers one streamed request; the client's event loop is held busy
until the server has sent every byte, and a while longer. Every token's stamp must come before
the loop was let go: no wall-clock threshold, only the order of events."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time

import pytest

from harness.bench.stream import stream_request
from harness.bench.wire import Connection, Target

BODY = b"".join(
    b"%x\r\n%s\r\n" % (len(m), m)
    for m in (b'data: {"id": "r", "choices": [{"text": " a"}]}\n\n',
              b'data: {"id": "r", "choices": [{"text": " b"}], "usage": {"completion_tokens": 2}}\n\n',
              b"data: [DONE]\n\n")
) + b"0\r\n\r\n"
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _serve_once(listener: socket.socket, sent: threading.Event) -> None:
    conn, _ = listener.accept()
    with conn:
        data = b""
        while not data.endswith(b"\r\n\r\n{}"):  # the request: its head, then its body `{}`
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        conn.sendall(HEAD + BODY)  # on loopback: in the client's receive queue when this returns
        sent.set()
        conn.recv(1)  # until the client closes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")
def test_a_read_is_stamped_when_its_bytes_arrived_not_when_the_loop_read_them():
    listener = socket.create_server(("127.0.0.1", 0))
    sent = threading.Event()
    server = threading.Thread(target=_serve_once, args=(listener, sent), daemon=True)
    server.start()

    async def go():
        conn = Connection(Target.parse(f"http://127.0.0.1:{listener.getsockname()[1]}"))
        await conn.open(30)
        task = asyncio.ensure_future(stream_request(conn, "/v1/completions", b"{}", read_timeout_s=30))
        await asyncio.sleep(0)  # the request is written
        assert sent.wait(60), "the server never answered"
        held_until = time.perf_counter()  # every byte is in the kernel by now
        time.sleep(0.2)  # the loop stays busy: a read stamped when read would come after this
        rec = await task
        conn.close()
        return rec, held_until

    try:
        rec, held_until = asyncio.run(go())
    finally:
        listener.close()
        server.join(10)
    assert rec.ok, rec.error
    assert rec.text == " a b" and rec.tokens == 2
    assert rec.chunk_times and all(rec.start < t <= held_until for t in rec.chunk_times), (rec, held_until)
