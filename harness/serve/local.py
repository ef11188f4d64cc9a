"""LocalRunner: `vllm serve` from an existing Python environment on this host.

For machines without Docker and for validating the tool on a GPU host with vLLM installed.
The server runs in its own process session, so stopping it stops its engine-core children too.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from harness import proc
from harness.proc import start_ticks
from harness.results.partial import ServerRecord
from harness.serve.base import DRAIN_S, LogBuffer, ProcessState, ServeSpec, lines_of
from harness.serve.signals import kill_orphan_group


class LocalServer:
    def __init__(self, popen: proc.Popen, spec: ServeSpec, log: LogBuffer, *,
                 stop_timeout_s: float = 30) -> None:
        self.popen = popen
        self.stop_timeout_s = stop_timeout_s
        self.base_url = f"http://127.0.0.1:{spec.port}"
        self.log = log
        self._python = spec.argv[0]
        self._env = {**os.environ, **spec.env}

    def mark_failed(self) -> None:  # nothing to keep: the log file is the record
        pass

    def record(self) -> ServerRecord:
        # the server leads its own process group (start_new_session): its pid is the group's id
        return ServerRecord(kind="local", pgid=self.popen.pid, started=start_ticks(self.popen.pid))

    def run_python(self, source: bytes, *, timeout_s: float = 120) -> tuple[int, str]:
        with tempfile.NamedTemporaryFile("wb", suffix=".py", prefix="harness-") as f:
            f.write(source)
            f.flush()
            r = proc.run([self._python, f.name], timeout=timeout_s, env=self._env)
        return r.returncode, r.stdout + r.stderr

    def state(self) -> ProcessState:
        code = self.popen.poll()
        return ProcessState(code is None, code)

    def stop(self) -> None:
        # the whole group: engine-core children of a crashed server would hold its output open
        proc.end_group(self.popen, self.stop_timeout_s)


class LocalRunner:
    name = "local"

    def __init__(self, stop_timeout_s: float = 30) -> None:
        self.stop_timeout_s = stop_timeout_s

    @contextmanager
    def serve(self, spec: ServeSpec) -> Iterator[LocalServer]:
        env = {**os.environ, **spec.env}
        log = LogBuffer(spec.log_path, spec.header)
        popen = proc.spawn(spec.argv, env=env, stdout=proc.PIPE)

        def pump_lines() -> None:
            try:
                for line in lines_of(popen.stdout):
                    log.add(line)
            except (OSError, ValueError):  # the pipe closed under it
                pass
            finally:
                log.end()

        pump = threading.Thread(target=pump_lines, daemon=True, name=f"log-{spec.cell_id}")
        pump.start()
        server = LocalServer(popen, spec, log, stop_timeout_s=self.stop_timeout_s)
        try:
            yield server
        finally:
            try:
                server.stop()
            finally:
                # what it printed while stopping is in the log file before it closes
                log.drain(DRAIN_S)
                pump.join(timeout=5)
                log.close()


def kill_group(pgid: int, started: float | None) -> bool:
    """SIGKILL a server's process group left by a dead controller, if it is still the same
    process (its start time matches) and carries the tool's marker; returns whether it was killed."""

    if started is None or start_ticks(pgid) != started:
        return False
    # the run folder only says where to look: the process itself must prove the tool started it
    return kill_orphan_group(pgid)
