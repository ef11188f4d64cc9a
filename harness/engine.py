"""The Docker engine: the one module that imports `docker`.

Every image and container the tool makes carries `harness.*` labels (run id, role, cell), so
`reap()` can remove leftovers of an interrupted run. A container is a context manager that
removes itself on every path out (success, error, timeout, Ctrl-C) unless asked to keep it.
Only transient engine errors are retried, by type, and each retry is logged before it sleeps.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import re
import secrets
import tarfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tenacity import (
    before_sleep_log,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from harness import owner as owners
from harness import platforms
from harness.errors import BuildFailed, EngineError, EnvironmentProblem
from harness.labels import CONTROLLER_HOST, RUN_ID
from harness.platforms import Platform
from harness.safety import readers

log = logging.getLogger("harness.engine")

def _transient(exc: BaseException) -> bool:
    """Connection resets, timeouts and 5xx answers may pass; anything else will not."""
    if isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return True
    if isinstance(exc, docker.errors.APIError):
        code = exc.status_code or 0
        return code >= 500 and "no such" not in str(exc).lower() and "could not select device" not in str(exc)
    return False


retry_transient = retry(
    retry=retry_if_exception(_transient),
    stop=stop_after_attempt(4),
    wait=wait_exponential(multiplier=1, min=1, max=15),
    before_sleep=before_sleep_log(log, logging.WARNING),
    reraise=True,
)


# --- the engine's answers ------------------------------------------------------------------
# Each JSON answer of the Docker API is validated once, here, into a model that names the fields
# this tool reads (snake_case, aliased to Docker's keys); every other key is kept. A malformed
# answer is an EngineError naming the call, not a KeyError three modules away.


def label_instruction(labels: dict[str, str]) -> str:
    """One Dockerfile LABEL instruction setting every label: each key and value double-quoted,
    with backslash, double quote and `$` (the builder expands variables in LABEL) escaped."""

    def quoted(text: str) -> str:
        if any(c in text for c in "\r\n\x00"):
            raise EngineError(f"image label {text[:60]!r} holds a line break",
                              hint="labels are one line each; this is a bug in what made the label")
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'

    return "LABEL " + " ".join(f"{quoted(k)}={quoted(v)}" for k, v in sorted(labels.items()))


def with_labels(context: bytes, dockerfile: str, labels: dict[str, str]) -> bytes | None:
    """The tar context with `labels` as one LABEL instruction at the end of its Dockerfile (the
    final stage, the image tagged), or None when the context has no such file. The engine API's
    own `labels` makes the legacy builder add one LABEL step per label, each a container started
    and committed: 28 steps for a source stack, seconds on an image of many layers."""
    src = tarfile.open(fileobj=io.BytesIO(context), mode="r:")
    buf = io.BytesIO()
    found = False
    with src, tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            data = src.extractfile(member) if member.isfile() else None
            if member.isfile() and member.name.removeprefix("./") == dockerfile.removeprefix("./") and data is not None:
                text = data.read().decode("utf-8", "replace").rstrip("\n")
                body = f"{text}\n{label_instruction(labels)}\n".encode()
                member.size = len(body)
                dst.addfile(member, io.BytesIO(body))
                found = True
            else:
                dst.addfile(member, data)
    return buf.getvalue() if found else None


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)


class VersionAnswer(_Answer):
    """`GET /version`."""
    version: str = Field("?", alias="Version", description="The engine's release.")
    api_version: str = Field("?", alias="ApiVersion", description="The newest API version it speaks.")


class InfoAnswer(_Answer):
    """`GET /info`."""
    operating_system: str = Field("?", alias="OperatingSystem", description="The host's OS, as the engine names it.")
    os_type: str | None = Field(None, alias="OSType", description="linux or windows.")
    architecture: str | None = Field(None, alias="Architecture", description="The host's CPU (x86_64, aarch64).")
    runtimes: dict[str, Any] | None = Field(None, alias="Runtimes", description="Container runtimes by name.")
    default_runtime: str = Field("runc", alias="DefaultRuntime", description="The runtime used when none is named.")
    cdi_spec_dirs: list[str] | None = Field(None, alias="CDISpecDirs", description="Where CDI device specs are read.")


class ImageAnswer(_Answer):
    """`GET /images/{name}/json`."""
    os: str | None = Field(None, alias="Os", description="The OS the image is for.")
    architecture: str | None = Field(None, alias="Architecture", description="The CPU the image is for.")
    repo_digests: list[str] | None = Field(None, alias="RepoDigests", description="repo@sha256:... it was pulled as.")


class PullEvent(_Answer):
    """One JSON message of `POST /images/create` (a pull)."""
    status: str | None = Field(None, description="Progress, or `Digest: sha256:...` near the end.")
    error: str | None = Field(None, description="Why the pull stopped.")


class ErrorDetail(_Answer):
    message: str = Field("build failed", description="What failed.")


class BuildAux(_Answer):
    id: str | None = Field(None, alias="ID", description="The built image's id.")


class BuildChunk(_Answer):
    """One JSON message of `POST /build`."""
    stream: str | None = Field(None, description="Build output text.")
    status: str | None = Field(None, description="Progress text (base image pulls).")
    aux: BuildAux | str | None = Field(None, description="Side data: the image id once built (BuildKit's "
                                       "trace messages are strings).")
    error: str | None = Field(None, description="Why the build stopped.")
    error_detail: ErrorDetail | None = Field(None, alias="errorDetail", description="The same, structured.")


class ContainerLabels(owners.ControllerLabels):
    """A container's labels: its run id and its controller read by name, the others kept."""

    run: str | None = Field(None, alias=RUN_ID, description="The run that started it.")


class ListedContainer(_Answer):
    """One entry of `GET /containers/json`."""
    id: str = Field(alias="Id", description="The container id.")
    names: list[str] | None = Field(None, alias="Names", description="Its names, each with a leading /.")
    labels: ContainerLabels | None = Field(None, alias="Labels", description="Its labels.")

    @property
    def name(self) -> str:
        return self.names[0].lstrip("/") if self.names else self.id[:12]


class ContainerState(_Answer):
    """A container's `State` (from `GET /containers/{id}/json`)."""
    status: str | None = Field(None, alias="Status", description="created, running, restarting, exited, ...")
    running: bool = Field(False, alias="Running", description="Whether its process runs.")
    exit_code: int | None = Field(None, alias="ExitCode", description="Its process's exit status, once ended.")
    oom_killed: bool = Field(False, alias="OOMKilled", description="Killed by the kernel for memory.")
    error: str | None = Field(None, alias="Error", description="Why the engine could not start or run it.")


class PortBinding(_Answer):
    host_port: str = Field(alias="HostPort", description="The host's port a container port is published on.")


class NetworkSettings(_Answer):
    ports: dict[str, list[PortBinding] | None] | None = Field(
        None, alias="Ports", description="Published bindings by `PORT/tcp`.")


class ContainerAnswer(_Answer):
    """`GET /containers/{id}/json` (docker inspect)."""
    state: ContainerState = Field(default_factory=ContainerState, alias="State", description="Its state.")
    network_settings: NetworkSettings = Field(default_factory=NetworkSettings, alias="NetworkSettings",
                                              description="Its networking, published ports included.")


class ExecCreated(_Answer):
    """`POST /containers/{id}/exec`."""
    id: str = Field(alias="Id", description="The exec instance's id.")


class ExecAnswer(_Answer):
    """`GET /exec/{id}/json`."""
    running: bool = Field(False, alias="Running", description="Whether the exec'd process runs.")
    exit_code: int | None = Field(None, alias="ExitCode", description="Its exit status, once ended.")


_A = TypeVar("_A", bound=_Answer)


def _answer(model: type[_A], data: object, call: str) -> _A:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        where = ".".join(str(p) for p in e["loc"]) or "(top)"
        raise EngineError(f"the Docker engine answered `{call}` with something this tool cannot read: "
                          f"{where}: {e['msg']}",
                          hint="check the engine's version (`docker version`); `harness doctor` says "
                          "what it needs") from None


@dataclass(frozen=True)
class EngineInfo:
    host: str
    version: str
    api_version: str
    os: str
    runtimes: tuple[str, ...]
    default_runtime: str
    cdi_spec_dirs: tuple[str, ...]
    gpu_capable: bool


class Engine:
    """A connection to one Docker engine (local socket or DOCKER_HOST, ssh:// included)."""

    def __init__(self, client: docker.DockerClient, *, url: str | None = None, name: str | None = None,
                 reconnect: Callable[[], docker.DockerClient] | None = None) -> None:
        self.client = client
        self.api = client.api
        self.url = url or client.api.base_url
        self.name = name
        self._reconnect = reconnect

    def ping(self) -> str | None:
        """None when the engine answers a new connection, else what went wrong (for `host X
        unreachable: ...`). A new one: a stopping dockerd still answers on kept-alive
        connections after its socket is gone."""
        client = None
        try:
            client = self._reconnect() if self._reconnect else self.client
            client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
            return _why_no_engine(exc)
        except Exception as exc:  # noqa: BLE001 - ssh transport errors
            return f"{type(exc).__name__}: {exc}"
        finally:
            if client is not None and client is not self.client:
                client.close()
        return None

    # --- engine ---------------------------------------------------------------------------

    def info(self) -> EngineInfo:
        ver = _answer(VersionAnswer, self.client.version(), "docker version")
        info = _answer(InfoAnswer, self.client.info(), "docker info")
        runtimes = tuple(sorted((info.runtimes or {}).keys()))
        cdi = tuple(info.cdi_spec_dirs or ())
        return EngineInfo(
            host=self.api.base_url,
            version=ver.version,
            api_version=ver.api_version,
            os=f"{info.operating_system} ({info.architecture or '?'})",
            runtimes=runtimes,
            default_runtime=info.default_runtime,
            cdi_spec_dirs=cdi,
            gpu_capable="nvidia" in runtimes or any(Path(d).is_dir() and any(Path(d).glob("nvidia*"))
                                                    for d in cdi),
        )

    # --- images ---------------------------------------------------------------------------

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """The image's labels, or None when it does not exist."""
        try:
            image = self.client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        return dict(image.labels or {})

    def image_id(self, ref: str) -> str | None:
        try:
            return self.client.images.get(ref).id
        except docker.errors.ImageNotFound:
            return None

    def platform(self) -> Platform:
        """The CPU platform this engine builds and runs natively (`docker info`), this host's if
        the engine reports one this tool does not build for."""
        info = _answer(InfoAnswer, self.client.info(), "docker info")
        return platforms.of_engine(info.os_type, info.architecture) or platforms.host()

    def image_platform(self, ref: str) -> Platform | None:
        """The platform an image says it is for (its Os/Architecture); None if it does not exist
        or names one this tool does not build for."""
        try:
            attrs = _answer(ImageAnswer, self.api.inspect_image(ref), f"docker image inspect {ref}")
        except docker.errors.ImageNotFound:
            return None
        return platforms.of_engine(attrs.os, attrs.architecture)

    @retry_transient
    def pull_digest(self, repository: str, tag: str) -> str:
        """Pull repository:tag and return the registry digest it resolved to: the pull's
        `Digest:` line, confirmed by the image's RepoDigests (the engine's own record)."""
        ref = f"{repository}:{tag}"
        told = None
        try:
            for raw in self.api.pull(repository, tag=tag, stream=True, decode=True):
                event = _answer(PullEvent, raw, f"docker pull {ref}")
                if event.error:
                    raise EngineError(f"cannot pull {ref}: {event.error}", hint=PULL_HINT)
                status = event.status or ""
                if status.startswith("Digest: "):
                    told = status.split()[1]
            attrs = _answer(ImageAnswer, self.api.inspect_image(ref), f"docker image inspect {ref}")
        except docker.errors.APIError as exc:
            raise EngineError(f"cannot pull {ref}: {exc.explanation or exc}", hint=PULL_HINT) from None
        want = _short_repo(repository)
        digests = [d.split("@", 1)[1] for d in attrs.repo_digests or ()
                   if _short_repo(d.split("@", 1)[0]) == want]
        if told and (told in digests or not digests):
            return told
        if told is None and len(digests) == 1:
            return digests[0]
        raise EngineError(f"cannot tell which digest {ref} resolved to (pull said {told}, "
                          f"RepoDigests list {', '.join(digests) or 'none'})",
                          hint=f"`docker image rm {ref}` and run again")

    def remove_image(self, ref: str) -> None:
        try:
            self.client.images.remove(ref, force=True)
        except docker.errors.ImageNotFound:
            pass

    def build(
        self,
        context: bytes,
        tag: str,
        *,
        labels: dict[str, str],
        buildargs: dict[str, str] | None = None,
        dockerfile: str = "Dockerfile",
        on_line: Callable[[str], None] = lambda _l: None,
        timeout: int = 6 * 3600,
        network_mode: str | None = None,
        platform: str | None = None,
        extra_hosts: dict[str, str] | None = None,
    ) -> str:
        """Build from a tar context through the streaming API; returns the image id.

        `on_line` sees every line of build output as it arrives (progress, log file). A failed
        step raises BuildFailed with the last lines; intermediate containers are removed.
        `network_mode="host"` puts the RUN steps on the host's network (the compile cache's
        store listens on the host's loopback address); `extra_hosts` are /etc/hosts entries of
        the RUN steps alone (never in a layer or the image's history: the store's secret).
        """
        tail: list[str] = []
        image_id: str | None = None

        def emit(text: str) -> None:
            for line in text.splitlines():
                tail.append(line)
                del tail[:-200]
                on_line(line)

        stream = self._start_build(context, tag, labels, buildargs or {}, dockerfile, timeout, platform,
                                   network_mode, extra_hosts)
        try:
            for raw in stream:
                chunk = _answer(BuildChunk, raw, f"docker build {tag}")
                if chunk.stream is not None:
                    emit(chunk.stream)
                elif chunk.status is not None:
                    emit(chunk.status)
                if isinstance(chunk.aux, BuildAux) and chunk.aux.id is not None:
                    image_id = chunk.aux.id
                if chunk.error is not None or chunk.error_detail is not None:
                    msg = chunk.error or (chunk.error_detail or ErrorDetail()).message
                    emit(msg)
                    raise BuildFailed(f"image {tag}: {msg.strip()}", log_tail=tail[-40:],
                                      hint="read the build log; a compile error is not retried")
        except (requests.exceptions.ConnectionError, docker.errors.APIError) as exc:
            raise BuildFailed(f"image {tag}: the engine broke off the build: {exc}", log_tail=tail[-40:],
                              hint="check the Docker daemon (`harness doctor`) and build again") from exc
        if image_id is None:
            image_id = self.image_id(tag)
        if image_id is None:
            raise BuildFailed(f"image {tag}: the build ended without an image", log_tail=tail[-40:])
        return image_id

    @retry_transient
    def _start_build(self, context, tag, labels, buildargs, dockerfile, timeout, platform=None,
                     network_mode=None, extra_hosts=None) -> Iterator[dict]:
        # `platform` picks the base image's variant; its RUN steps then run that CPU's binaries
        # (natively, or through the host's binfmt emulation: qemu-user-static for arm64 on amd64)
        extra = {"platform": platform} if platform else {}
        labelled = with_labels(context, dockerfile, labels) if labels else None
        if labelled is not None:
            context, labels = labelled, {}
        return self.api.build(
            fileobj=io.BytesIO(context), custom_context=True, tag=tag, labels=labels or None,
            buildargs=buildargs, dockerfile=dockerfile, rm=True, forcerm=True, decode=True,
            timeout=timeout, pull=False, network_mode=network_mode, extra_hosts=extra_hosts or None, **extra,
        )

    def export_path(self, ref: str, path: str, dest: Path, labels: dict[str, str]) -> Path:
        """Copy `path` out of an image (no start) into `dest`; for auditing installed binaries."""
        container = self.client.containers.create(ref, command=["true"], labels=labels)
        try:
            bits, _stat = container.get_archive(path)
            buf = io.BytesIO(b"".join(bits))
            dest.mkdir(parents=True, exist_ok=True)
            # the image is data: a member that is a link out (to /, /etc/passwd, ../../etc), a FIFO
            # or a device is refused by name (harness.safety.readers), never unpacked
            readers.extract_tree(buf, dest, name=f"{ref}:{path}",
                                 hint="the image holds a link, a FIFO or a device where a file or folder "
                                      "is expected: it is never followed; rebuild the image, or pass another path")
        except docker.errors.NotFound as exc:
            raise EngineError(f"{ref}: no {path} in the image", hint="check the image's Python prefix") from exc
        finally:
            container.remove(force=True)
        return dest

    # --- containers -----------------------------------------------------------------------

    @contextmanager
    def container(self, spec: ContainerSpec, *,
                  keep: bool | Callable[[], bool] = False) -> Iterator[RunningContainer]:
        """Start a container and remove it on every way out.

        `keep` (or what it returns when called at exit) keeps a container whose block raised, or
        that the caller marked failed, for debugging with `docker logs`.
        """
        created = None
        failed = True
        # Named before it exists: a Ctrl-C that lands while the engine is creating it (the
        # container exists, the answer has not arrived) can still find it by name below.
        if spec.name is None:
            spec = dataclasses.replace(spec, name=f"harness-{secrets.token_hex(6)}")
        try:
            created = self._create(spec)
            running = RunningContainer(self, created)
            try:
                created.start()
            except docker.errors.APIError as exc:
                raise EngineError(
                    f"container for {spec.image} did not start: {exc.explanation or exc}",
                    hint=_start_hint(str(exc), spec.gpu_attach),
                ) from exc
            yield running
            failed = False
        finally:
            keep_it = keep() if callable(keep) else (keep and failed)
            if created is None and not keep_it and spec.name is not None:  # named above
                created = self._find(spec.name)
            if created is not None and not keep_it:
                try:
                    created.remove(force=True, v=True)
                except docker.errors.NotFound:
                    pass
                except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
                    # the engine is gone or failing: the labels let the next run reap it
                    log.warning("could not remove container %s: %s", created.name, exc)

    def _find(self, name: str):
        try:
            return self.client.containers.get(name)
        except (docker.errors.APIError, requests.exceptions.RequestException):
            return None

    @retry_transient
    def _create(self, spec: ContainerSpec):
        return self.client.containers.create(**create_kwargs(spec))

    def reap(self, *, run_id: str | None = None) -> list[str]:
        """Remove what dead controllers left: every container carrying our controller labels
        whose controller (host + pid + start time) is no longer alive on this host, or every
        container of `run_id`. Returns the names removed."""

        filters = {"label": [f"{RUN_ID}={run_id}"] if run_id else [CONTROLLER_HOST]}
        removed = []
        for c in self._listed(filters):
            labels = c.labels or ContainerLabels()
            owner = labels.controller()
            if run_id is None and (owner is None or owners.alive(owner) is not False):
                continue  # alive, or another host's: not ours to remove
            name = c.name
            log.info("reaping container %s (run %s)", name, labels.run)
            try:
                self.client.api.remove_container(c.id, force=True, v=True)
            except docker.errors.NotFound:
                continue  # removed meanwhile (by its own controller, or another reaper)
            removed.append(name)
        return removed

    def containers(self, labels: dict[str, str]) -> list[str]:
        filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
        return [c.name for c in self._listed(filters)]

    def _listed(self, filters: dict) -> list[ListedContainer]:
        """Containers matching `filters`, from one list call. docker-py's
        `containers.list()` inspects each one after listing, and raises NotFound when one is
        removed in between, which other runs on a shared engine do at any time."""
        return [_answer(ListedContainer, c, "docker ps") for c in self.client.api.containers(all=True, filters=filters)]


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    command: tuple[str, ...] | None = None
    entrypoint: tuple[str, ...] | None = None
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    ports: dict[int, int | None] | None = None
    volumes: tuple[tuple[str, str, str], ...] = ()
    gpus: str | None = None
    ipc_host: bool = False
    shm_size: str | None = None
    name: str | None = None
    gpu_attach: str = "runtime"  # how `gpus` reaches the container: runtime | cdi | devices
    devices: tuple[str, ...] = ()  # 'devices': "/dev/nvidia0:/dev/nvidia0:rwm", ...
    cdi_devices: tuple[str, ...] = ()  # 'cdi': "nvidia.com/gpu=all", ...
    network_mode: str | None = None  # None = the engine's default (bridge); "host"
    security_opt: tuple[str, ...] = ()
    publish_ip: str = "127.0.0.1"  # where published ports listen on the engine's machine

    def __post_init__(self) -> None:
        if self.ports is None:
            object.__setattr__(self, "ports", {})
        if self.gpu_attach not in GPU_ATTACH_MODES:
            raise ValueError(f"gpu_attach must be one of {', '.join(GPU_ATTACH_MODES)}, not {self.gpu_attach!r}")


GPU_ATTACH_MODES = ("runtime", "cdi", "devices")


def _start_hint(message: str, mode: str) -> str:
    """What to do when the engine refuses to start a container, by what it said."""
    if "capabilities: [[gpu]]" in message:  # runtime mode without the NVIDIA runtime
        return ("this engine has no NVIDIA container runtime: install the NVIDIA Container Toolkit, or set "
                "[host].gpu_attach to 'cdi' or 'devices' (`harness doctor` says which works here)")
    if 'device driver "cdi"' in message or "CDI" in message:
        return ("this engine cannot resolve CDI devices (Docker >= 25 and `nvidia-ctk cdi generate` are needed), "
                "or set [host].gpu_attach to 'runtime' or 'devices' (`harness doctor`)")
    if mode == "devices" and ("no such file or directory" in message.lower() or "error gathering device" in message):
        return "a device node in [host].devices does not exist on the Docker host: `ls /dev/nvidia*` there"
    return "run `harness doctor`"


def create_kwargs(spec: ContainerSpec) -> dict:
    """docker-py `containers.create` arguments for a spec: the one place a GPU is attached.

    - runtime: a DeviceRequest with capability 'gpu' (what `docker run --gpus` sends); the NVIDIA
      Container Toolkit's runtime hook injects devices and driver libraries.
    - cdi: a DeviceRequest with driver 'cdi' and the CDI names (what `docker run --device
      nvidia.com/gpu=all` sends to Docker >= 25, moby api/types/container DeviceRequest).
    - devices: the device nodes themselves (`--device`); the driver's libraries come in as
      read-only mounts and LD_LIBRARY_PATH, which the caller puts in `volumes`/`env`.
    With network_mode 'host' nothing is published: the server's port is the host's.
    """

    device_requests = None
    devices = None
    if spec.gpus and spec.gpu_attach == "runtime":
        ids = None if spec.gpus == "all" else spec.gpus.split(",")
        device_requests = [docker.types.DeviceRequest(count=-1 if ids is None else None,
                                                      device_ids=ids, capabilities=[["gpu"]])]
    elif spec.gpus and spec.gpu_attach == "cdi":
        device_requests = [docker.types.DeviceRequest(driver="cdi", device_ids=list(spec.cdi_devices))]
    elif spec.gpus and spec.gpu_attach == "devices":
        devices = list(spec.devices)
    host_net = spec.network_mode == "host"
    return dict(
        image=spec.image,
        command=list(spec.command) if spec.command is not None else None,
        entrypoint=list(spec.entrypoint) if spec.entrypoint is not None else None,
        environment=dict(spec.env),
        # who started it: a dead controller's containers are reaped by the next run
        labels={**dict(spec.labels), **owners.labels()},
        # `or {}`: __post_init__ already made a None ports {}, the type still says Optional
        ports=None if host_net else {f"{p}/tcp": (spec.publish_ip, hp) for p, hp in (spec.ports or {}).items()},
        volumes={h: {"bind": c, "mode": m} for h, c, m in spec.volumes},
        device_requests=device_requests,
        devices=devices,
        network_mode=spec.network_mode,
        security_opt=list(spec.security_opt) or None,
        ipc_mode="host" if spec.ipc_host else None,
        shm_size=None if spec.ipc_host else spec.shm_size,
        name=spec.name,
        detach=True,
    )


class RunningContainer:
    def __init__(self, engine: Engine, container) -> None:
        self.engine = engine
        self._c = container

    @property
    def name(self) -> str:
        return self._c.name

    def state(self) -> ContainerState:
        """Docker's State: status, exit code, OOM kill, error."""
        return self._inspect().state

    def host_port(self, port: int) -> int:
        bindings = (self._inspect().network_settings.ports or {}).get(f"{port}/tcp") or []
        if not bindings:
            raise EngineError(f"container {self.name}: port {port} is not published")
        return int(bindings[0].host_port)

    def _inspect(self) -> ContainerAnswer:
        self._c.reload()
        return _answer(ContainerAnswer, self._c.attrs, f"docker inspect {self.name}")

    def logs(self) -> str:
        return self._c.logs(stdout=True, stderr=True).decode("utf-8", "replace")

    def follow_logs(self, sink: Callable[[str], None], stop: threading.Event,
                    on_end: Callable[[], None] | None = None) -> threading.Thread:
        """Copy log lines to `sink` from a daemon thread until the container ends or `stop` is
        set; then call `on_end` (every line is in)."""

        def pump() -> None:
            buf = b""
            try:
                for chunk in self._c.logs(stream=True, follow=True, stdout=True, stderr=True):
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        sink(line.decode("utf-8", "replace"))
                    if stop.is_set():
                        break
                if buf:
                    sink(buf.decode("utf-8", "replace"))
            except (docker.errors.APIError, requests.exceptions.RequestException):
                pass  # the container went away: the runner reads its state next
            finally:
                if on_end is not None:
                    on_end()

        t = threading.Thread(target=pump, daemon=True, name=f"logs-{self.name}")
        t.start()
        return t

    def stop(self, timeout: int = 10) -> None:
        try:
            self._c.stop(timeout=timeout)
        except docker.errors.NotFound:
            pass
        except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
            # a dying engine: the removal that follows tries again, the reaper after that
            log.warning("could not stop container %s: %s", self.name, exc)

    def exec(self, cmd: list[str], *, timeout_s: float = 120) -> tuple[int, str]:
        """Run `cmd` inside; (124, ...) when it outlasts `timeout_s` (the container's removal
        ends it)."""
        box: dict = {}

        def go() -> None:
            try:
                res = self._c.exec_run(cmd, stdout=True, stderr=True)
                box["res"] = (res.exit_code, res.output.decode("utf-8", "replace"))
            except (docker.errors.APIError, requests.exceptions.RequestException) as exc:
                box["exc"] = exc

        t = threading.Thread(target=go, daemon=True, name=f"exec-{self.name}")
        t.start()
        t.join(timeout_s)
        if t.is_alive():
            return 124, f"timed out after {timeout_s:.0f} s"
        if "exc" in box:
            raise EngineError(f"container {self.name}: exec failed: {box['exc']}")
        return box["res"]

    def exec_stream(self, cmd: list[str], *, env: dict[str, str], sink: Callable[[str], None],
                    on_end: Callable[[], None] | None = None) -> ExecProcess:
        """Start `cmd` inside, its output copied line by line to `sink` from a daemon thread
        (then `on_end` is called: every line is in); the process ends with the container."""
        api = self.engine.api
        exec_id = _answer(ExecCreated, api.exec_create(self._c.id, cmd, environment=dict(env), stdout=True,
                                                        stderr=True), f"docker exec {self.name}").id
        stream = api.exec_start(exec_id, stream=True)

        def pump() -> None:
            buf = b""
            try:
                for chunk in stream:
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        sink(line.decode("utf-8", "replace"))
                if buf:
                    sink(buf.decode("utf-8", "replace"))
            except (docker.errors.APIError, requests.exceptions.RequestException, ValueError):
                pass  # the container went away (or the log closed): state() says how it ended
            finally:
                if on_end is not None:
                    on_end()

        t = threading.Thread(target=pump, daemon=True, name=f"exec-log-{self.name}")
        t.start()
        return ExecProcess(api, exec_id, t)

    def put_file(self, dest_dir: str, name: str, data: bytes) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        self._c.put_archive(dest_dir, buf.getvalue())


PULL_HINT = ("check the image name and that this host reaches its registry (`docker pull` it by "
             "hand); or write base_image.digest in the matrix from a host that can")


def _short_repo(name: str) -> str:
    """'docker.io/library/ubuntu' and 'ubuntu' are one repository, as RepoDigests write it."""
    name = name.removeprefix("docker.io/").removeprefix("index.docker.io/")
    return name.removeprefix("library/")


def _why_no_engine(exc: BaseException) -> str:
    """A sentence for the usual reasons, instead of the client's nested exception tuple."""
    text = str(exc)
    for needle, why in (("FileNotFoundError", "its socket does not exist (no dockerd is running)"),
                        ("No such file or directory", "its socket does not exist (no dockerd is running)"),
                        ("PermissionError", "permission denied on its socket (root, or the docker group)"),
                        ("Permission denied", "permission denied on its socket (root, or the docker group)"),
                        ("Connection refused", "nothing listens there (dockerd stopped)"),
                        ("timed out", "it did not answer in time (dockerd busy or hung)")):
        if needle in text:
            return why
    return text.splitlines()[0][:200] if text else type(exc).__name__


class ExecProcess:
    """A process started in a running container by `exec_stream`."""

    def __init__(self, api, exec_id: str, pump: threading.Thread) -> None:
        self._api = api
        self.id = exec_id
        self.pump = pump

    def state(self) -> tuple[bool, int | None]:
        """(running, exit code)."""
        info = _answer(ExecAnswer, self._api.exec_inspect(self.id), "docker exec inspect")
        return info.running, info.exit_code


def connect(url: str | None = None, timeout: int = 30, *, tls=None, name: str | None = None) -> Engine:
    """The engine at `url` (unix://, ssh://user@host[:port], tcp:// with `tls`), or from
    DOCKER_HOST / the local socket when None; a clear error when none answers.

    ssh:// goes through paramiko (docker-py's transport: ~/.ssh/config and known_hosts apply,
    unknown host keys are refused) or, with `DOCKER_SSH_CLIENT=1`, through the `ssh` binary.
    `tls` is anything with ca_cert / client_cert / client_key / verify (harness.run.schedule.Tls)."""
    if isinstance(url, int):  # connect(10): the old positional timeout
        url, timeout = None, url
    where = url or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    label = f"host {name}" if name else "Docker engine"
    if where.startswith("ssh://") and os.environ.get("DOCKER_SSH_CLIENT") != "1":
        try:
            import paramiko  # noqa: F401 - docker-py's ssh:// transport
        except ImportError:
            raise EnvironmentProblem(
                f"{label}: {_safe_url(where)} is an ssh:// engine and paramiko is not installed",
                hint="pip install 'vllm-bw-harness[ssh]' (paramiko), or set DOCKER_SSH_CLIENT=1 to go "
                "through the ssh binary") from None
    def make() -> docker.DockerClient:
        if url is None:
            return docker.from_env(timeout=timeout)
        tls_config = None
        if tls is not None:
            tls_config = docker.tls.TLSConfig(client_cert=(tls.client_cert, tls.client_key),
                                              ca_cert=tls.ca_cert, verify=tls.ca_cert if tls.verify else False)
        kwargs = {"base_url": url, "timeout": timeout, "tls": tls_config or False,
                  "use_ssh_client": os.environ.get("DOCKER_SSH_CLIENT") == "1"}
        if tls is None or not tls.ca_cert:
            return docker.DockerClient(**kwargs)
        # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace the session's CA file
        # (psf/requests#3829): the engine's own CA, named in [hosts], must win. The API version
        # is asked ('auto', docker-py 7.x) only once that is so.
        client = docker.DockerClient(version=docker.constants.DEFAULT_DOCKER_API_VERSION, **kwargs)
        client.api.trust_env = False
        client.api._version = client.api._retrieve_server_version()
        return client

    try:
        client = make()
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise EnvironmentProblem(
            (f"host {name} unreachable: " if name else "")
            + f"no Docker engine answers at {_safe_url(where)}: {_why_no_engine(exc)}",
            hint="`make docker-up` (as root with apt: installs Debian's docker.io and starts dockerd), "
            "or start dockerd yourself (`sudo systemctl start docker`), or set DOCKER_HOST; "
            "then `harness doctor`" if name is None else
            "check the engine URL in [hosts], the network and the login (`docker -H URL info`)",
        ) from None
    except Exception as exc:  # noqa: BLE001 - paramiko's SSHException and kin are not OSError
        raise EnvironmentProblem(f"{label} unreachable: {_safe_url(where)}: {type(exc).__name__}: {exc}",
                                 hint="check the engine URL in [hosts] and `ssh` to it by hand") from None
    return Engine(client, url=where, name=name, reconnect=make)


def _safe_url(url: str) -> str:
    """An engine URL without a password (tcp://user:pw@host)."""
    return re.sub(r"//[^/@:]+:[^/@]+@", "//***@", url)
