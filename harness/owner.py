"""Who owns a run: this controller's identity (host, pid, start time), and whether another one is still alive.

Everything the tool starts (containers, local servers) and every run directory records the
controller's host, pid and process start time. A run whose controller is gone (SIGKILL, a
power cut, a closed laptop) left its servers behind: the next run, or `harness reap`, finds
them by that record and removes them, as testcontainers' reaper does. The start time guards
against a recycled pid.
"""

from __future__ import annotations

import os
import socket
from functools import cache

from pydantic import BaseModel, ConfigDict, Field

from harness.labels import CONTROLLER_HOST, CONTROLLER_PID, CONTROLLER_STARTED
from harness.proc import start_ticks
from harness.results.model import Controller


@cache
def me() -> Controller:
    pid = os.getpid()
    return Controller(host=socket.gethostname(), pid=pid, started=start_ticks(pid))


def labels() -> dict[str, str]:
    c = me()
    return {CONTROLLER_HOST: c.host, CONTROLLER_PID: str(c.pid), CONTROLLER_STARTED: str(c.started or "")}


def alive(c: Controller) -> bool | None:
    """True/False for a controller on this host; None when it ran on another host."""
    if c.host != socket.gethostname():
        return None
    try:
        os.kill(c.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, someone else's
    if c.started is not None:
        now = start_ticks(c.pid)
        if now is not None and now != c.started:
            return False  # the pid was reused by another process
    return True


class ControllerLabels(BaseModel):
    """The controller labels `labels()` puts on what the tool starts, as read back from a
    container (its other labels are kept)."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    host: str | None = Field(None, alias=CONTROLLER_HOST)
    pid: str | None = Field(None, alias=CONTROLLER_PID)
    started: str | None = Field(None, alias=CONTROLLER_STARTED)

    def controller(self) -> Controller | None:
        """The controller these labels name; None when they name none (or not readably)."""
        if self.host is None or self.pid is None:
            return None
        try:
            return Controller(host=self.host, pid=int(self.pid),
                              started=float(self.started) if self.started else None)
        except ValueError:
            return None
