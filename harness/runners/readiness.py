"""Wait for a server to be ready, and say why when it is not.

Ready means `/health` answers 200 and then `/v1/models` answers 200. The wait stops at once when
the process exits (crashed), when no new log line arrives for `quiet_s` while not ready (hung:
the CUDA-graph capture hang on SM_121 looks like this), or at `timeout_s`.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from harness.runners.base import Server


@dataclass(frozen=True)
class Readiness:
    state: str  # "ready" | "exited" | "hung" | "timeout"
    startup_s: float
    exit_code: int | None
    tail: tuple[str, ...]
    detail: str = ""

    @property
    def ready(self) -> bool:
        return self.state == "ready"


def _ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:  # noqa: S310 - our own server
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_ready(server: Server, *, timeout_s: float, quiet_s: float, poll_s: float = 0.5) -> Readiness:
    t0 = time.monotonic()
    server.log.last_line_at = max(server.log.last_line_at, t0)
    while True:
        now = time.monotonic()
        st = server.state()
        if not st.running:
            return Readiness("exited", now - t0, st.exit_code, tuple(server.log.tail(40)), st.detail)
        if _ok(server.base_url + "/health") and _ok(server.base_url + "/v1/models"):
            return Readiness("ready", now - t0, None, ())
        if now - server.log.last_line_at > quiet_s:
            return Readiness("hung", now - t0, None, tuple(server.log.tail(40)),
                             f"no new log line for {now - server.log.last_line_at:.0f} s")
        if now - t0 > timeout_s:
            return Readiness("timeout", now - t0, None, tuple(server.log.tail(40)),
                             f"not ready after {timeout_s:.0f} s")
        time.sleep(poll_s)
