"""What every runner gives the pipeline: a started server with a live log and a state.

A runner is a context manager factory (`Runner.serve(spec)`); leaving the context stops and
removes what it started, on every path out. `LogBuffer` keeps every line (and writes it to the
cell's log file as it arrives) and the time of the last one, which is what hang detection reads.

A thread pumps the server's output into its LogBuffer, and may lag behind it (a busy machine):
the lines a crashing server prints last, the ones that say why, can still be in the pipe when
the process is seen ended. So whoever reads the log of an ended server first waits for the pump
to reach the end of the output (`LogBuffer.drain`), and every runner stops the server, then
drains, then closes the log (crash, hang or timeout kill, normal stop alike).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.redact import redact_text
from harness.results.partial import ServerRecord
from harness.safety.writes import open_new

# how long to wait, once a server has ended, for the end of its output to be read
DRAIN_S = 30.0


@dataclass(frozen=True)
class ServeSpec:
    cell_id: str
    argv: tuple[str, ...]  # the full command: interpreter / program first
    env: dict[str, str]
    port: int  # port inside the container (docker) or on the host (local)
    log_path: Path
    labels: dict[str, str] = field(default_factory=dict)
    image: str | None = None  # docker only
    gpus: str | None = "all"  # docker only: None = no GPU request
    mounts: tuple[tuple[str, str, str], ...] = ()  # docker only: (host, container, mode)
    shm_size: str = "16g"
    ipc_host: bool = True
    keep_failed: bool = False
    header: tuple[str, ...] = ()  # lines written at the top of the log (command, env)
    # docker only, from the matrix's [host] (harness.gpu_attach.serve_fields):
    gpu_attach: str = "runtime"  # runtime (device_requests) | cdi | devices
    devices: tuple[str, ...] = ()  # 'devices' mode: "/dev/nvidia0:/dev/nvidia0:rwm", ...
    cdi_devices: tuple[str, ...] = ()  # 'cdi' mode: "nvidia.com/gpu=all", ...
    network: str = "bridge"  # bridge: port published on 127.0.0.1; host: vLLM binds `port` on the host
    security_opt: tuple[str, ...] = ()  # e.g. ("seccomp=unconfined",)


class LogBuffer:
    """Thread-safe list of log lines, mirrored to a file, with the arrival time of the last."""

    def __init__(self, path: Path, header: tuple[str, ...] = ()) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # a resumed run folder is data: a link planted at the log's place is never written through
        self._f = open_new(path, flag="server log")
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self.last_line_at = time.monotonic()
        self._ended = threading.Event()
        self._header = tuple(redact_text(line) for line in header)
        for line in self._header:
            self._f.write(line + "\n")
        self._f.flush()

    def add(self, line: str) -> None:
        # vLLM echoes its arguments (`non-default args: {... 'api_key': ...}`): mask on the way in
        line = redact_text(line.rstrip("\r\n"))
        with self._lock:
            self._lines.append(line)
            self.last_line_at = time.monotonic()
            if not self._f.closed:  # a pump that outlived its runner's wait: kept in memory only
                self._f.write(line + "\n")
                self._f.flush()

    def end(self) -> None:
        """Said by the pump of the server's own output when that output has ended (or can no
        longer be read): every line the server wrote is in."""
        self._ended.set()

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Wait, at most `timeout_s`, until the pump has handed over the end of the server's
        output; whether it has. Call it after the process has ended and before reading its last
        lines (a process that leaves children holding its output ends when they do)."""
        return self._ended.wait(timeout_s)

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    def text(self) -> str:
        with self._lock:
            return "\n".join(self._lines)

    def stored_text(self) -> str:
        """The log as its file holds it: the harness's header, then the server's lines. Line
        numbers read from it (a cell's fingerprint) are the file's, as `harness rejudge` reads them."""
        with self._lock:
            return "\n".join((*self._header, *self._lines))

    def tail(self, n: int = 40) -> list[str]:
        with self._lock:
            return self._lines[-n:]

    def __len__(self) -> int:
        with self._lock:
            return len(self._lines)

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()


@dataclass(frozen=True)
class ProcessState:
    running: bool
    exit_code: int | None
    detail: str = ""  # e.g. "OOMKilled" for a container


class Server(Protocol):
    """A started server, whatever runs it. The pipeline needs nothing else of a runner."""

    base_url: str
    log: LogBuffer

    def state(self) -> ProcessState:
        """Is it still running, and if not, how did it end."""

    def stop(self) -> None:
        """End the server now, with every process it started (a no-op when it has ended);
        its output is drained into the log by its pump. The runner's exit does it too."""

    def mark_failed(self) -> None:
        """The cell failed: a runner with keep-on-failure keeps what it started."""

    def run_python(self, source: bytes, *, timeout_s: float = 120) -> tuple[int, str]:
        """Run a Python program in the server's environment (its image, or its local python
        and env); returns (exit code, stdout+stderr)."""

    def record(self) -> ServerRecord:
        """How to find what was started again (pid, container name): written with the cell's
        partial result, so a later run can reap it if this controller dies."""


class Runner(Protocol):
    name: str

    def serve(self, spec: ServeSpec) -> AbstractContextManager[Server]:
        """Start the server of `spec`; leaving the context stops and removes it."""


def _gpu_present() -> str | None:
    return None


@dataclass(frozen=True)
class Placement:
    """Where one cell's server runs, fixed by the scheduler before the cell starts: the serve
    stage reads its port and GPUs, the store records its host. Nothing else is rewritten per cell."""

    runner: Runner
    host: str | None = None  # recorded in the cell; None: the one host of a matrix without [hosts]
    slot: int = 0
    # the port the server binds on the host itself (a local server, host networking, a Ray
    # head); None: the matrix's serve.port, published by the engine where it likes
    port: int | None = None
    gpus: tuple[str, ...] | None = None  # the slot's GPU ids; None: serve.gpus as the matrix says
    # why this host cannot give the cell a GPU (None: it can); probed once per host, on first need
    no_gpu: Callable[[], str | None] = _gpu_present


def lines_of(stream) -> Iterator[str]:
    for raw in iter(stream.readline, b""):
        yield raw.decode("utf-8", "replace")
