"""DockerRunner: the stack's image, the GPU attached, the model cache mounted read-only.

Works with any engine docker-py reaches (local socket, DOCKER_HOST=ssh://...). The container
carries run-id labels and is removed on every way out unless `keep_failed` is set and the cell
failed. The server's port is published on 127.0.0.1 at a free host port, or, with host
networking, vLLM binds `spec.port` on the host itself (checked free before the start).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from harness.engine import ContainerSpec, Engine, RunningContainer
from harness.gpu_attach import require_port_free
from harness.runners.base import LogBuffer, ProcessState, ServeSpec


class DockerServer:
    def __init__(self, container: RunningContainer, port: int, log: LogBuffer, network: str = "bridge") -> None:
        self.container = container
        self.log = log
        host_port = port if network == "host" else container.host_port(port)
        self.base_url = f"http://127.0.0.1:{host_port}"
        self.failed = False

    def mark_failed(self) -> None:
        """The cell failed: with keep_failed, the container stays for `docker logs`."""
        self.failed = True

    def record(self) -> dict:
        return {"kind": "docker", "container": self.container.name}

    def run_python(self, source: bytes, *, timeout_s: float = 120) -> tuple[int, str]:
        self.container.put_file("/tmp", "harness_program.py", source)
        return self.container.exec(["python3", "/tmp/harness_program.py"], timeout_s=timeout_s)

    def state(self) -> ProcessState:
        st = self.container.state()
        running = st.get("Status") in ("created", "running", "restarting")
        detail = "OOMKilled" if st.get("OOMKilled") else (st.get("Error") or "")
        return ProcessState(running, None if running else st.get("ExitCode"), detail)


def container_spec(spec: ServeSpec) -> ContainerSpec:
    """The container a ServeSpec asks for: image, command, GPU attach mode, network, security options."""
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
    )


class DockerRunner:
    name = "docker"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def serve(self, spec: ServeSpec) -> Iterator[DockerServer]:
        if spec.image is None:
            raise ValueError("DockerRunner needs spec.image")
        cspec = container_spec(spec)
        if spec.network == "host":
            require_port_free(spec.port)
        log = LogBuffer(spec.log_path, spec.header)
        stop = threading.Event()
        state = {"failed": True}
        try:
            with self.engine.container(cspec, keep=lambda: spec.keep_failed and state["failed"]) as container:
                pump = container.follow_logs(log.add, stop)
                server = DockerServer(container, spec.port, log, spec.network)
                try:
                    yield server
                    state["failed"] = server.failed
                finally:
                    stop.set()
                    container.stop(timeout=10)
                    pump.join(timeout=5)
        finally:
            log.close()
