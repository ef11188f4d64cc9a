"""Wait for a server to be ready, and say why when it is not.

Ready means `/health` answers 200 and `/v1/models` lists the cell's own identity name: a server
that answers on the port but does not know that name is someone else's (an orphan of a killed
run, another user's), and is never taken for ours. The wait stops at once when the process
exits (crashed) or its log says it could not bind its port (crashed: nothing of ours will ever
answer there), when no new log line arrives for `quiet_s` while not ready (hung: the CUDA-graph
capture hang on SM_121 looks like this), or at `timeout_s`.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from harness.serve.base import Server

# uvicorn: "[Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address
# already in use"; Python: "OSError: [Errno 98] Address already in use".
_BIND_FAILED = re.compile(r"address already in use|error while attempting to bind", re.IGNORECASE)
MAX_MODELS_BYTES = 1 << 20


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


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:  # noqa: S310 - our own server
            return r.read(MAX_MODELS_BYTES) if r.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def model_names(body: bytes | None) -> set[str]:
    """The ids listed by an OpenAI `/v1/models` answer; empty for anything else."""
    try:
        data = json.loads(body or b"")
    except ValueError:
        return set()
    cards = data.get("data") if isinstance(data, dict) else None
    if not isinstance(cards, list):
        return set()
    return {c["id"] for c in cards if isinstance(c, dict) and isinstance(c.get("id"), str)}


def wait_ready(server: Server, *, timeout_s: float, quiet_s: float, identity: str | None = None,
               poll_s: float = 0.5) -> Readiness:
    t0 = time.monotonic()
    server.log.last_line_at = max(server.log.last_line_at, t0)
    foreign = ""
    while True:
        now = time.monotonic()
        st = server.state()
        if not st.running:
            return Readiness("exited", now - t0, st.exit_code, tuple(server.log.tail(40)), st.detail)
        bind = next((x for x in server.log.tail(40) if _BIND_FAILED.search(x)), None)
        if bind is not None:
            return Readiness("exited", now - t0, None, tuple(server.log.tail(40)),
                             f"could not bind its port: {bind.strip()[-200:]}")
        if _get(server.base_url + "/health") is not None:
            names = model_names(_get(server.base_url + "/v1/models"))
            if (identity is None and names) or identity in names:
                return Readiness("ready", now - t0, None, ())
            if names:
                foreign = (f"a server that is not this cell's answers at {server.base_url} "
                           f"(it serves {', '.join(sorted(names))[:200]})")
        if now - server.log.last_line_at > quiet_s:
            return Readiness("hung", now - t0, None, tuple(server.log.tail(40)),
                             f"no new log line for {now - server.log.last_line_at:.0f} s"
                             + (f"; {foreign}" if foreign else ""))
        if now - t0 > timeout_s:
            return Readiness("timeout", now - t0, None, tuple(server.log.tail(40)),
                             f"not ready after {timeout_s:.0f} s" + (f"; {foreign}" if foreign else ""))
        time.sleep(poll_s)
