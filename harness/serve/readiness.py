"""Wait for a server to be ready, and say why when it is not.

Ready means `/health` answers 200 and `/v1/models` lists the cell's own identity name: a server
that answers on the port but does not know that name is someone else's (an orphan of a killed
run, another user's), and is never taken for ours. The wait stops at once when the process
exits (crashed) or its log says it could not bind its port (crashed: nothing of ours will ever
answer there), when no new log line arrives for `quiet_s` while not ready (hung: the CUDA-graph
capture hang on SM_121 looks like this), or at `timeout_s`.

A server that is not ready is ended here, with everything it started, and its output drained
(harness.serve.base.LogBuffer.drain) before its last lines are read: a crashed server's last
lines, the ones that say why, may still be on their way through the log pump when its process
is seen gone, and a hung one may say something as it is stopped.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness import http
from harness.results.model import ServeState
from harness.serve.base import DRAIN_S, Server

# uvicorn: "[Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address
# already in use"; Python: "OSError: [Errno 98] Address already in use".
_BIND_FAILED = re.compile(r"address already in use|error while attempting to bind", re.IGNORECASE)
MAX_MODELS_BYTES = 1 << 20


@dataclass(frozen=True)
class Readiness:
    state: ServeState
    startup_s: float
    exit_code: int | None
    tail: tuple[str, ...]
    detail: str = ""

    @property
    def ready(self) -> bool:
        return self.state.ready


def _get(url: str) -> bytes | None:
    return http.server_get(url, timeout=3, max_bytes=MAX_MODELS_BYTES)


class ModelCard(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")
    id: str = Field(description="The name the server answers to.")


class ModelList(BaseModel):
    """An OpenAI `/v1/models` answer."""
    model_config = ConfigDict(frozen=True, extra="allow")
    data: list[ModelCard] = Field(description="The models served.")


def model_names(body: bytes | None) -> set[str]:
    """The ids listed by an OpenAI `/v1/models` answer; empty for anything else (not ready, or
    not an OpenAI server: readiness goes on waiting)."""
    try:
        return {card.id for card in ModelList.model_validate_json(body or b"").data}
    except ValidationError:
        return set()


def settle(server: Server) -> bool:
    """End the server (a no-op for one that has ended, but its children go too: they would hold
    its output open) and wait for its output to be read to the end, so that its last lines are
    in the log; whether they all are."""
    server.stop()
    return server.log.drain(DRAIN_S)


def _not_ready(server: Server, state: ServeState, startup_s: float, exit_code: int | None, detail: str) -> Readiness:
    if not settle(server):
        detail += f"{'; ' if detail else ''}its last output was not read within {DRAIN_S:.0f} s"
    return Readiness(state, startup_s, exit_code, tuple(server.log.tail(40)), detail)


def wait_ready(server: Server, *, timeout_s: float, quiet_s: float, identity: str | None = None,
               poll_s: float = 0.5) -> Readiness:
    t0 = time.monotonic()
    server.log.last_line_at = max(server.log.last_line_at, t0)
    foreign = ""
    while True:
        now = time.monotonic()
        st = server.state()
        if not st.running:
            return _not_ready(server, ServeState.EXITED, now - t0, st.exit_code, st.detail)
        bind = next((x for x in server.log.tail(40) if _BIND_FAILED.search(x)), None)
        if bind is not None:
            return _not_ready(server, ServeState.EXITED, now - t0, None, f"could not bind its port: {bind.strip()[-200:]}")
        if _get(server.base_url + "/health") is not None:
            names = model_names(_get(server.base_url + "/v1/models"))
            if (identity is None and names) or identity in names:
                return Readiness(ServeState.READY, now - t0, None, ())
            if names:
                foreign = (f"a server that is not this cell's answers at {server.base_url} "
                           f"(it serves {', '.join(sorted(names))[:200]})")
        if now - server.log.last_line_at > quiet_s:
            return _not_ready(server, ServeState.HUNG, now - t0, None,
                              f"no new log line for {now - server.log.last_line_at:.0f} s"
                              + (f"; {foreign}" if foreign else ""))
        if now - t0 > timeout_s:
            return _not_ready(server, ServeState.TIMEOUT, now - t0, None,
                              f"not ready after {timeout_s:.0f} s" + (f"; {foreign}" if foreign else ""))
        time.sleep(poll_s)
