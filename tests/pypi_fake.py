"""A local HTTP server answering in the shape of PyPI's JSON API, for the lock tests.

The answers are shaped like https://pypi.org/pypi/vllm/json as read on 2026-12-01 (its
`info.version`, `releases` and per-file `filename`, `packagetype`, `digests.sha256`); the sha256
values and file names are the ones PyPI lists for these releases (the vllm and flashinfer sdist
sha256s are also the pins of matrix/spark.toml). Only the per-project document is served: the
per-version URL answers 404, as it did through this machine's PyPI access.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import http, lock

VLLM_SDIST = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"
FI_SDIST = "af60319898dcfd552ba12a34165b9dd46c0bbd83d48ce665b1df6bd6ae77e9f1"
FI_WHEEL = "bfdc18b9e1e4d8d0730fe4343dc0e284cd0c160086de80f99888bc4867922d49"
CUBIN_WHEEL = "41e4848c2d09d220e8394489b2fb6cfec6b6ad09f897b5ab8b39fc23055f6c24"


def _file(name: str, kind: str, sha: str) -> dict:
    return {"filename": name, "packagetype": kind, "digests": {"sha256": sha}, "size": 1}


RELEASES = {
    "vllm": {"0.33.0": [
        _file("vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl", "bdist_wheel", "e9e404f52c8494b69bd83fe99fe7ecfa9f6b89fbd156d2a9639c24ea41d6d606"),
        _file("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", "bdist_wheel", "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"),
        _file("vllm-0.33.0.tar.gz", "sdist", VLLM_SDIST)]},
    "flashinfer-python": {"0.7.2.post1": [
        _file("flashinfer_python-0.7.2.post1.tar.gz", "sdist", FI_SDIST),
        _file("flashinfer_python-0.7.2.post1-py3-none-any.whl", "bdist_wheel", FI_WHEEL)]},
    "flashinfer-cubin": {"0.6.13": [_file("flashinfer_cubin-0.6.13-py3-none-any.whl", "bdist_wheel",
                                          CUBIN_WHEEL)]},
}


class FakePyPI(BaseHTTPRequestHandler):
    """Per-project JSON only: the per-version URL answers 404."""

    seen: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        FakePyPI.seen.append(self.path)
        parts = self.path.strip("/").split("/")  # pypi/<name>/json or pypi/<name>/<version>/json
        if len(parts) == 3 and parts[0] == "pypi" and parts[1] in RELEASES:
            rel = RELEASES[parts[1]]
            body = {"info": {"name": parts[1], "version": sorted(rel)[-1]}, "releases": rel}
            self._send(200, body)
        else:
            self._send(404, {"message": "Not Found"})

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def pypi(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakePyPI)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(http, "ALLOW_LOOPBACK_HTTP", True)  # lock's requests go through harness.http
    monkeypatch.setattr(lock, "PYPI_VERSION_JSON", base + "/pypi/{name}/{version}/json")
    monkeypatch.setattr(lock, "PYPI_PROJECT_JSON", base + "/pypi/{name}/json")
    FakePyPI.seen = []
    yield base
    server.shutdown()
    server.server_close()


