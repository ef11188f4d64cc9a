"""A server's last lines reach its cell and its log file, however far behind the log pump is.

The pump here is held outright: no line the server writes is taken in until someone waits for
the end of its output (`LogBuffer.drain`). That is the slowest a pump can be, made
deterministic: code that reads the tail of an ended server without draining first reads it
empty, every time, instead of once in a full `make test` on a loaded machine. The servers are
real processes (a local child, a busybox container) that print why they end, as vLLM does.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid

import pytest
from support.local import free_port

from harness.serve import docker as docker_runner
from harness.serve import local as local_runner
from harness.serve.base import LogBuffer, ServeSpec
from harness.serve.readiness import wait_ready

WHY = "RuntimeError: CUDA error: an illegal memory access was encountered"
ON_TERM = "shutting down on SIGTERM: stuck in cudaGraphLaunch"


class HeldPump(LogBuffer):
    """A LogBuffer whose pump is held until the end of the output is waited for."""

    made: list[HeldPump] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        HeldPump.made.append(self)

    def add(self, line: str) -> None:
        self.gate.wait()
        super().add(line)

    def drain(self, timeout_s: float = 30.0) -> bool:
        self.gate.set()
        return super().drain(timeout_s)


@pytest.fixture
def held(monkeypatch):
    """Every runner's log pump held; released at the end whatever happened (no thread left
    waiting on it)."""
    HeldPump.made = []
    monkeypatch.setattr(local_runner, "LogBuffer", HeldPump)
    monkeypatch.setattr(docker_runner, "LogBuffer", HeldPump)
    yield
    for log in HeldPump.made:
        log.gate.set()


def _local(tmp_path, source: str) -> ServeSpec:
    return ServeSpec("drain/local", (sys.executable, "-u", "-c", source), {}, 1, tmp_path / "server.log")


CRASH = f"print('starting the engine'); print({WHY!r}); raise SystemExit(3)"


def _hang(armed) -> str:
    """A server that hangs, and says where when it is stopped; `armed` appears once it would."""
    return (f"import pathlib, signal, sys, time\n"
            f"def term(*_):\n    print({ON_TERM!r}); sys.exit(0)\n"
            f"signal.signal(signal.SIGTERM, term)\n"
            f"print('capturing CUDA graphs')\n"
            f"pathlib.Path({str(armed)!r}).touch()\n"
            f"while True:\n    time.sleep(0.05)\n")


def _wait_for(check) -> None:
    """Until `check()` holds (the child got that far); a bound only against a hang of the test."""
    deadline = time.monotonic() + 120
    while not check():
        assert time.monotonic() < deadline, "the child never got there"
        time.sleep(0.02)


@pytest.mark.usefixtures("held")
def test_a_crashed_local_server_s_last_lines_are_in_its_tail(tmp_path):
    with local_runner.LocalRunner(stop_timeout_s=5).serve(_local(tmp_path, CRASH)) as server:
        ready = wait_ready(server, timeout_s=120, quiet_s=120, poll_s=0.05)
    assert ready.state == "exited" and ready.exit_code == 3
    assert WHY in ready.tail and "starting the engine" in ready.tail, ready.tail
    assert WHY in (tmp_path / "server.log").read_text()


@pytest.mark.usefixtures("held")
def test_a_hung_local_server_is_stopped_and_what_it_said_is_in_its_tail(tmp_path):
    armed = tmp_path / "armed"
    with local_runner.LocalRunner(stop_timeout_s=5).serve(_local(tmp_path, _hang(armed))) as server:
        _wait_for(armed.exists)
        ready = wait_ready(server, timeout_s=120, quiet_s=0.5, poll_s=0.05)
        assert not server.state().running  # ended here, not left to the runner's exit
    assert ready.state == "hung"
    assert ready.tail == ("capturing CUDA graphs", ON_TERM), ready.tail
    assert ON_TERM in (tmp_path / "server.log").read_text()


@pytest.mark.usefixtures("held")
def test_a_timed_out_local_server_is_stopped_and_drained(tmp_path):
    armed = tmp_path / "armed"
    with local_runner.LocalRunner(stop_timeout_s=5).serve(_local(tmp_path, _hang(armed))) as server:
        _wait_for(armed.exists)
        ready = wait_ready(server, timeout_s=0.3, quiet_s=120, poll_s=0.05)
    assert ready.state == "timeout" and ON_TERM in ready.tail, ready.tail


@pytest.mark.usefixtures("held")
def test_a_normal_stop_writes_every_line_to_the_log_file_before_it_closes(tmp_path):
    armed = tmp_path / "armed"
    with local_runner.LocalRunner(stop_timeout_s=5).serve(_local(tmp_path, _hang(armed))):
        _wait_for(armed.exists)  # the cell is done: the runner stops the server
    text = (tmp_path / "server.log").read_text()
    assert "capturing CUDA graphs" in text and ON_TERM in text, text


# --- the Docker runner: the same, with the container's log stream as the pump -----------------

BUSYBOX = "harness-test/busybox:latest"


def _container(tmp_path, script: str, network: str = "host") -> ServeSpec:
    # on the host's network, nothing listens on this free port: readiness only watches the container
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    return ServeSpec("drain/docker", ("sh", "-c", script), {}, free_port(), tmp_path / "server.log",
                     labels={"harness.run-id": run_id, "harness.role": "test"}, image=BUSYBOX,
                     gpus=None, ipc_host=False, shm_size="64m", network=network)


@pytest.fixture
def engine():
    from harness.engine import connect

    return connect()


@pytest.mark.docker
@pytest.mark.usefixtures("held")
@pytest.mark.parametrize("network", ["host", "bridge"])
def test_a_crashed_container_s_last_lines_are_in_its_tail(tmp_path, engine, network):
    # on a bridge, a container that ends at once may end before its published port is read:
    # that is a crash with its last lines too, not an engine error
    spec = _container(tmp_path, f"echo 'starting the engine'; echo '{WHY}'; exit 3", network)
    with docker_runner.DockerRunner(engine).serve(spec) as server:
        ready = wait_ready(server, timeout_s=120, quiet_s=120, poll_s=0.05)
    assert ready.state == "exited" and ready.exit_code == 3
    assert WHY in ready.tail, ready.tail
    assert WHY in (tmp_path / "server.log").read_text()


@pytest.mark.docker
@pytest.mark.usefixtures("held")
def test_a_hung_container_is_stopped_and_what_it_said_is_in_its_tail(tmp_path, engine):
    # sh as PID 1 ignores SIGTERM unless it traps it, as a server that handles it does
    spec = _container(tmp_path, f"trap \"echo '{ON_TERM}'; exit 0\" TERM; echo 'capturing CUDA graphs'; "
                                "touch /tmp/armed; while true; do sleep 0.1; done")
    with docker_runner.DockerRunner(engine).serve(spec) as server:
        _wait_for(lambda: server.container.exec(["test", "-f", "/tmp/armed"], timeout_s=30)[0] == 0)
        ready = wait_ready(server, timeout_s=120, quiet_s=1, poll_s=0.05)
    assert ready.state == "hung" and ON_TERM in ready.tail, ready.tail
    assert ON_TERM in (tmp_path / "server.log").read_text()


# --- a whole run: the crash cell of the stand-in vLLM, as `harness run` stores it ----------------


@pytest.mark.usefixtures("held")
def test_a_crash_cell_stores_the_lines_that_say_why(tmp_path):
    # the cell of tests/test_pipeline_local.py that once lost its last lines on a loaded machine
    from test_pipeline_local import matrix_text

    from harness.matrix.load import load_matrix
    from harness.results.model import Status
    from harness.run.options import RunOptions
    from harness.run.session import run_matrix

    path = tmp_path / "fake.toml"
    path.write_text(matrix_text(free_port()) + '\n[configs.crash]\nenv = { FAKE_VLLM_MODE = "crash" }\n')
    store = run_matrix(load_matrix(path), k="qwen-fp8 and crash", opts=RunOptions(results_root=tmp_path / "r"))
    (crash,) = store.cells()
    assert crash.status is Status.CRASHED and crash.serve.exit_code == 3
    assert any("illegal memory access" in line for line in crash.serve.log_tail), crash.serve.log_tail
    assert any("illegal" in s for s in crash.fingerprint.signatures), crash.fingerprint.signatures
