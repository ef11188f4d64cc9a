"""DockerRunner: the stack's image, the GPU attached, the model cache mounted read-only.

Works with any engine docker-py reaches (local socket, ssh://, tcp://). The container carries
run-id labels and is removed on every way out unless `keep_failed` is set and the cell failed.
The server's port is published at a free host port on 127.0.0.1 (or on the host's `address`, for
another machine's engine); with host networking, vLLM binds `spec.port` on the engine's machine
itself (checked free before the start when that machine is this one).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from harness.engine import ContainerSpec, Engine, RunningContainer
from harness.errors import EngineError
from harness.results.partial import ServerRecord
from harness.serve.base import DRAIN_S, LogBuffer, ProcessState, ServeSpec
from harness.serve.gpu_attach import require_port_free

STOP_TIMEOUT_S = 10  # SIGTERM, then SIGKILL after this


class DockerServer:
    def __init__(self, container: RunningContainer, port: int, log: LogBuffer, *,
                 address: str = "127.0.0.1", host_network: bool = False) -> None:
        self.container = container
        self.log = log
        # on the host network the server listens on the engine's machine itself
        published: int | None = port
        if not host_network:
            try:
                published = container.host_port(port)
            except EngineError:
                if self.state().running:
                    raise
                # it ended before its port could be read (a server that crashes at once): no
                # address, and readiness reads it as exited, with its last lines
                published = None
        self.base_url = f"http://{address}:{published}" if published is not None else ""
        self.failed = False

    def mark_failed(self) -> None:
        """The cell failed: with keep_failed, the container stays for `docker logs`."""
        self.failed = True

    def record(self) -> ServerRecord:
        return ServerRecord(kind="docker", container=self.container.name)

    def run_python(self, source: bytes, *, timeout_s: float = 120) -> tuple[int, str]:
        # The program travels on the command line: an image may have no /tmp (a VM's root
        # imported as a base has none) and no shell, and `-c` needs neither.
        return self.container.exec(["python3", "-c", source.decode()], timeout_s=timeout_s)

    def stop(self) -> None:
        self.container.stop(timeout=STOP_TIMEOUT_S)  # its log stream ends with it

    def state(self) -> ProcessState:
        st = self.container.state()
        running = st.status in ("created", "running", "restarting")
        detail = "OOMKilled" if st.oom_killed else (st.error or "")
        return ProcessState(running, None if running else st.exit_code, detail)


def container_spec(spec: ServeSpec, *, publish_ip: str = "127.0.0.1") -> ContainerSpec:
    """The container a ServeSpec asks for: image, command, GPU attach mode, network, security options."""
    if spec.image is None:
        raise ValueError("a container needs spec.image")
    return ContainerSpec(
        image=spec.image,
        entrypoint=(spec.argv[0],),
        command=tuple(spec.argv[1:]),
        env=tuple(spec.env.items()),
        labels=tuple(spec.labels.items()),
        ports={} if spec.network == "host" else {spec.port: None},
        volumes=spec.mounts,
        gpus=spec.gpus,
        ipc_host=spec.ipc_host,
        shm_size=spec.shm_size,
        gpu_attach=spec.gpu_attach,
        devices=spec.devices,
        cdi_devices=spec.cdi_devices,
        network_mode="host" if spec.network == "host" else None,
        security_opt=spec.security_opt,
        publish_ip=publish_ip,
    )


class DockerRunner:
    name = "docker"

    def __init__(self, engine: Engine, *, network: str | None = None, address: str = "127.0.0.1") -> None:
        """`network` (a [hosts] entry's) overrides the spec's; `address` is where the engine's
        machine is reached from here."""
        self.engine = engine
        self.network = network
        self.address = address

    @contextmanager
    def serve(self, spec: ServeSpec) -> Iterator[DockerServer]:
        if spec.image is None:
            raise ValueError("DockerRunner needs spec.image")
        if self.network is not None and self.network != spec.network:
            spec = dataclasses.replace(spec, network=self.network)
        host_network = spec.network == "host"
        cspec = container_spec(spec, publish_ip=_publish_ip(self.address))
        if host_network and self.address in ("127.0.0.1", "localhost"):
            require_port_free(spec.port)
        log = LogBuffer(spec.log_path, spec.header)
        stop = threading.Event()
        state = {"failed": True}
        try:
            with self.engine.container(cspec, keep=lambda: spec.keep_failed and state["failed"]) as container:
                pump = container.follow_logs(log.add, stop, on_end=log.end)
                try:
                    server = DockerServer(container, spec.port, log, address=self.address,
                                          host_network=host_network)
                    yield server
                    state["failed"] = server.failed
                finally:
                    try:
                        container.stop(timeout=STOP_TIMEOUT_S)  # what server.stop() does
                    finally:  # even when the engine is gone: the log is closed after its pump
                        # the stream ends with the container: what it printed while stopping is in
                        log.drain(DRAIN_S)
                        stop.set()
                        pump.join(timeout=5)
        finally:
            log.close()


def _publish_ip(address: str) -> str:
    """Publish where the controller will knock: that IP, or every interface for a host name."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return "0.0.0.0"
    return address
