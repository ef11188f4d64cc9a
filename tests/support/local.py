"""Run the fake server as a local subprocess on 127.0.0.1 and a free port, for tests and for
the client-accuracy benchmark. It is always stopped, by its own PID, on the way out."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from harness.errors import EnvironmentProblem

FAKESERVER = Path(__file__).with_name("fakeserver.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EnvironmentProblem(
                f"fake server exited with {proc.returncode} before it was healthy"
            )
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.02)
    raise EnvironmentProblem(f"fake server at {url} not healthy after {timeout_s:g} s")


@contextlib.contextmanager
def fake_server(
    *flags: str, python: str = sys.executable, log: Path | None = None
) -> Iterator[str]:
    """Start `fakeserver.py` with `flags`; yield its base URL; stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv: Sequence[str] = [python, str(FAKESERVER), "--port", str(port), *flags]
    sink = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if log:
            sink.close()
