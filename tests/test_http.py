"""harness.http against a local server: schemes, redirects, size caps, and which failures retry."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
import time

import pytest

from harness import http as hh
from harness.errors import ConfigError


class Script:
    """Answers, in order, for each request; the last one repeats."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.count = 0

    def next(self):
        self.count += 1
        return self.answers[min(self.count, len(self.answers)) - 1]


@pytest.fixture
def serve(monkeypatch):
    monkeypatch.setattr(hh, "ALLOW_LOOPBACK_HTTP", True)
    servers = []

    def start(script: Script) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                kind, *rest = script.next()
                if kind == "ok":
                    (body,) = rest
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif kind == "stream":  # no Content-Length: the cap must hold while reading
                    (body,) = rest
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(body)
                    self.close_connection = True
                elif kind == "status":
                    self.send_error(rest[0])
                elif kind == "redirect":
                    self.send_response(302)
                    self.send_header("Location", rest[0])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif kind == "reset":  # RST instead of an answer
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.close()
                    self.close_connection = True
                elif kind == "stall":
                    time.sleep(rest[0])
                    self.close_connection = True

            def log_message(self, *_a):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "http://example.com/x",
                                 "data:text/plain,hi", "https:///nohost", "//example.com", "-x", ""])
def test_only_https_is_fetched(url):
    with pytest.raises(ConfigError, match="only https://"):
        hh.check_url(url)


def test_loopback_http_only_with_the_hook(monkeypatch):
    with pytest.raises(ConfigError):
        hh.check_url("http://127.0.0.1:9/x")
    monkeypatch.setattr(hh, "ALLOW_LOOPBACK_HTTP", True)
    assert hh.check_url("http://127.0.0.1:9/x") and hh.check_url("http://[::1]:9/x")
    with pytest.raises(ConfigError):
        hh.check_url("http://10.0.0.1/x")  # the hook is for loopback only


def test_transient_status_is_retried_and_logged_before_the_sleep(serve, caplog):
    script = Script(("status", 503), ("status", 429), ("ok", b"body"))
    with caplog.at_level(logging.WARNING, logger="harness.http"):
        assert hh.get(serve(script) + "/x", wait_initial_s=0) == b"body"
    assert script.count == 3
    retries = [r for r in caplog.records if "Retrying" in r.getMessage()]
    assert len(retries) == 2 and "503" in retries[0].getMessage()


@pytest.mark.parametrize("status", [404, 403, 400, 401])
def test_other_status_is_not_retried(serve, status):
    script = Script(("status", status), ("ok", b"never"))
    with pytest.raises(hh.HttpError) as info:
        hh.get(serve(script) + "/x", wait_initial_s=0)
    assert info.value.status == status and script.count == 1
    assert info.value.exit_code == 3


def test_connection_reset_is_retried_then_given_up(serve):
    script = Script(("reset",))
    with pytest.raises(hh.HttpError, match="gave up after 3 attempts"):
        hh.get(serve(script) + "/x", attempts=3, wait_initial_s=0)
    assert script.count == 3


def test_reset_then_success(serve):
    script = Script(("reset",), ("ok", b"fine"))
    assert hh.get(serve(script) + "/x", wait_initial_s=0) == b"fine"


def test_a_timeout_is_transient(serve):
    script = Script(("stall", 4.0), ("ok", b"late"))
    # the first answer never comes in time; a retry gets the second (on a loaded machine a
    # retry may time out too, so only "more than one try" is asserted, never a duration)
    assert hh.get(serve(script) + "/x", timeout=1.0, wait_initial_s=0) == b"late"
    assert script.count >= 2


def test_refused_connection_is_not_retried():
    # nothing listens there: a wrong address, not a flaky one
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hh, "ALLOW_LOOPBACK_HTTP", True)
        with pytest.raises(hh.HttpError, match="refused"):
            hh.get(f"http://127.0.0.1:{port}/x", wait_initial_s=0)


def test_size_cap_by_content_length(serve):
    with pytest.raises(hh.HttpError, match="over the 10-byte cap"):
        hh.get(serve(Script(("ok", b"x" * 11))) + "/x", max_bytes=10)


def test_size_cap_while_streaming(serve, tmp_path):
    dest = tmp_path / "big.bin"
    with pytest.raises(hh.HttpError, match="exceeds the 1000-byte cap"):
        hh.download(serve(Script(("stream", b"x" * 5000))) + "/x", dest, max_bytes=1000)
    assert list(tmp_path.iterdir()) == []  # nothing half-written is left


def test_download_writes_the_whole_file(serve, tmp_path):
    dest = tmp_path / "f.bin"
    body = bytes(range(256)) * 1000
    assert hh.download(serve(Script(("status", 502), ("ok", body))) + "/x", dest, wait_initial_s=0) == len(body)
    assert dest.read_bytes() == body and list(tmp_path.iterdir()) == [dest]


@pytest.mark.parametrize("target", ["file:///etc/passwd", "http://example.com/x", "ftp://127.0.0.1/x"])
def test_redirects_are_checked_like_urls(serve, target):
    with pytest.raises(ConfigError, match="only https://"):
        hh.get(serve(Script(("redirect", target))) + "/x")


def test_a_redirect_to_an_allowed_url_is_followed(serve):
    inner = serve(Script(("ok", b"moved")))
    assert hh.get(serve(Script(("redirect", inner + "/y"))) + "/x") == b"moved"


def test_json(serve):
    assert hh.get_json(serve(Script(("ok", b'{"a": [1]}'))) + "/x") == {"a": [1]}
    with pytest.raises(hh.HttpError, match="not JSON"):
        hh.get_json(serve(Script(("ok", b"<html>"))) + "/x")
