"""Cells that span nodes: a Ray cluster formed from containers on several hosts' engines.

vLLM's own multi-node executor is Ray (`--distributed-executor-backend ray`): a head node and
workers, each `ray start`ed in a container of the stack's image on the host network of its own
machine, each declaring the GPUs it lends (`--num-gpus`). The cluster is ready when Ray itself
reports every expected GPU (`ray.cluster_resources()` run on the head); only then is it used.
Every container of the cluster, on every engine, is removed on the way out, whatever happened.

Ray's ports (from ray 2.60 `ray start --help`): the GCS port on the head, and per node the node
manager, object manager, dashboard agent (HTTP and gRPC), metrics, runtime-env agent and worker
ports. Nodes of one cluster may share a machine (tests do), so each node gets its own block
of ports from `base_port` instead of Ray's fixed defaults (52365 for the dashboard agent).
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.engine import ContainerSpec, Engine, RunningContainer
from harness.errors import EngineError
from harness.labels import RAY_NODE, ROLE, Role
from harness.results.partial import ServerRecord
from harness.serve.base import DRAIN_S, LogBuffer, ProcessState

RAY = ("python3", "-m", "ray.scripts.scripts")  # the `ray` CLI, whatever the image's PATH holds
PORTS_PER_NODE = 110  # 10 service ports + 100 worker ports
_RESOURCES = ("import json, ray; ray.init(address='auto', logging_level='ERROR', log_to_driver=False); "
              "r = dict(ray.cluster_resources()); r['alive_nodes'] = sum(n['Alive'] for n in ray.nodes()); "
              "r['alive'] = [[n['NodeManagerAddress'], n['NodeManagerPort']] for n in ray.nodes() if n['Alive']]; "
              "print('HARNESS-RAY ' + json.dumps(r)); ray.shutdown()")


class RayResources(BaseModel):
    """What `_RESOURCES` prints on the head: `ray.cluster_resources()` (every resource kept) and
    the alive nodes, each as [address, node-manager port]."""
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)
    gpu: float = Field(0.0, alias="GPU", description="GPUs the cluster holds.")
    alive_nodes: int | None = Field(None, description="How many nodes Ray reports alive.")
    alive: list[Any] = Field(default_factory=list, description="[address, node-manager port] per alive node.")


@dataclass(frozen=True)
class Node:
    engine: Engine
    host: str  # the host's name in [hosts]
    address: str  # the node's IP as the other nodes reach it
    gpus: int


def node_ports(base_port: int, index: int) -> dict[str, int]:
    """`ray start` port options for node `index` (0 = head), from its own block."""
    b = base_port + index * PORTS_PER_NODE
    ports = {"--node-manager-port": b + 1, "--object-manager-port": b + 2,
             "--dashboard-agent-listen-port": b + 3, "--dashboard-agent-grpc-port": b + 4,
             "--metrics-export-port": b + 5, "--runtime-env-agent-port": b + 6,
             "--min-worker-port": b + 10, "--max-worker-port": b + PORTS_PER_NODE - 1}
    if index == 0:
        ports["--port"] = b  # no Ray Client server: it needs ray[client]
    return ports


def start_command(index: int, node: Node, head: Node, base_port: int, *, cpus: int = 1,
                  object_store_bytes: int = 100 * 1024 * 1024) -> tuple[str, ...]:
    """`ray start --block` for one node: the head (index 0) or a worker joining it."""
    args = [*RAY, "start", "--block", "--disable-usage-stats", "--node-ip-address", node.address,
            "--num-gpus", str(node.gpus), "--num-cpus", str(cpus),
            "--object-store-memory", str(object_store_bytes)]
    if index == 0:
        args += ["--head", "--include-dashboard=false"]
    else:
        args += ["--address", f"{head.address}:{base_port}"]
    for flag, port in node_ports(base_port, index).items():
        args += [flag, str(port)]
    return tuple(args)


@dataclass
class RayCluster:
    nodes: tuple[Node, ...]
    containers: list[RunningContainer] = field(default_factory=list)
    base_port: int = 0
    resources: RayResources = field(default_factory=RayResources)

    @property
    def head(self) -> RunningContainer:
        return self.containers[0]

    @property
    def address(self) -> str:
        return f"{self.nodes[0].address}:{self.base_port}"

    @property
    def expected_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def cluster_resources(self, timeout_s: float = 120) -> RayResources:
        """What Ray says the cluster holds, asked on the head node."""
        code, out = self.head.exec(["python3", "-c", _RESOURCES], timeout_s=timeout_s)
        for line in out.splitlines():
            if line.startswith("HARNESS-RAY "):
                said = line.removeprefix("HARNESS-RAY ")
                try:
                    return RayResources.model_validate_json(said)
                except ValidationError as exc:
                    raise EngineError(f"ray on {self.head.name}: cannot read its cluster resources "
                                      f"({exc.errors()[0]['msg']}): {said[:500]}") from None
        raise EngineError(f"ray on {self.head.name}: no cluster resources (exit {code}): {out.strip()[-500:]}")

    def logs(self) -> dict[str, str]:
        """Each node's container log (its `ray start` output), head first: for the fingerprint."""
        out = {}
        for node, c in zip(self.nodes, self.containers, strict=False):
            try:
                out[f"{node.host}:{c.name}"] = c.logs()
            except Exception as exc:  # noqa: BLE001 - a gone engine: say so in place of the log
                out[f"{node.host}:{c.name}"] = f"(log unavailable: {exc})"
        return out


READY_SETTLE_S = 6.0  # how long every node must stay up and counted before the cluster is ready


def missing_nodes(reported: RayResources, nodes: Sequence[Node], base_port: int) -> list[str]:
    """The declared nodes Ray does not report alive, each known by the node-manager port it was
    started with (unique in a cluster: node_ports): a count of alive nodes can be made up by a
    node that is not one of ours while one of ours never joined. Not by address: Ray may report
    another address of the machine than the one it was started with (127.0.0.1 is replaced)."""
    alive = Counter(e[1] for e in reported.alive
                    if isinstance(e, list) and len(e) == 2 and isinstance(e[1], int))
    missing = []
    for i, node in enumerate(nodes):
        port = node_ports(base_port, i)["--node-manager-port"]
        if alive[port] > 0:
            alive[port] -= 1
        else:
            missing.append(f"{node.host} ({node.address}, node manager port {port})")
    return missing


@contextmanager
def ray_cluster(nodes: Sequence[Node], image: str, *, base_port: int, labels: dict[str, str],
                ready_timeout_s: float = 180, keep: bool = False, env: dict[str, str] | None = None,
                gpus: str | None = None, mounts: tuple = ()) -> Iterator[RayCluster]:
    """Start a head on nodes[0] and a worker on each other node, wait until Ray reports every
    expected GPU and every node alive, for READY_SETTLE_S on end, with every container
    running; yield the cluster; every container is removed on the way out."""
    if not nodes:
        raise ValueError("a Ray cluster needs at least one node")
    cluster = RayCluster(tuple(nodes), base_port=base_port)
    with ExitStack() as stack:
        for i, node in enumerate(nodes):
            role = Role.RAY_HEAD if i == 0 else Role.RAY_WORKER
            spec = ContainerSpec(image=image, entrypoint=(), command=start_command(i, node, nodes[0], base_port),
                                 labels=tuple({**labels, ROLE: role.value, RAY_NODE: node.host}.items()),
                                 env=tuple((env or {}).items()), gpus=gpus, volumes=tuple(mounts),
                                 network_mode="host", shm_size="512m", ipc_host=False)
            cluster.containers.append(stack.enter_context(node.engine.container(spec, keep=keep)))
        deadline = time.monotonic() + ready_timeout_s
        last: RayResources | str = RayResources()
        ready_since: float | None = None
        while True:
            try:
                last = cluster.cluster_resources(timeout_s=max(10.0, deadline - time.monotonic()))
            except EngineError as exc:
                last = str(exc)
            dead = [c.name for c in cluster.containers if c.state().status != "running"]
            if not dead and isinstance(last, RayResources) and int(last.gpu) >= cluster.expected_gpus \
                    and not missing_nodes(last, nodes, base_port):
                # Ready only when it stays so: a node that registers with the head and then
                # fails (an address it cannot bind) shows alive, with its GPUs, for a few seconds.
                ready_since = time.monotonic() if ready_since is None else ready_since
                if time.monotonic() - ready_since >= READY_SETTLE_S:
                    break
            else:
                ready_since = None
            if dead or time.monotonic() > deadline:
                tails = {k: "\n".join(v.splitlines()[-15:]) for k, v in cluster.logs().items()}
                why = f"containers ended: {', '.join(dead)}" if dead else f"not ready in {ready_timeout_s:.0f} s"
                if isinstance(last, RayResources) and (absent := missing_nodes(last, nodes, base_port)):
                    why += f"; not alive in Ray: {', '.join(absent)}"
                raise EngineError(
                    f"Ray cluster of {len(nodes)} nodes: {why}; Ray reports "
                    f"{last.model_dump(by_alias=True) if isinstance(last, RayResources) else last!r}, expected "
                    f"{cluster.expected_gpus} GPU\n" + "\n".join(f"--- {k}\n{v}" for k, v in tails.items()),
                    hint="the nodes must reach each other's addresses and ports (host network); "
                    "see each node's log above")
            time.sleep(2)
        cluster.resources = last
        yield cluster


# --- serving a cell on the cluster -------------------------------------------------------------

EXECUTOR_FLAG = "--distributed-executor-backend"


def ray_argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The serve command with Ray as vLLM's executor (unless the config already names one)."""
    if any(a == EXECUTOR_FLAG or a.startswith(EXECUTOR_FLAG + "=") for a in argv):
        return argv
    return (*argv, EXECUTOR_FLAG, "ray")


class RayServer:
    """`vllm serve` run on the head node of a ready cluster (vLLM's driver must share the head's
    Ray session). Its log is the server's output plus every node's container log as it comes,
    each line prefixed with its node, so the fingerprint reads the head's and the workers' logs."""

    def __init__(self, cluster: RayCluster, spec, log) -> None:
        self.cluster = cluster
        self.log = log
        self.base_url = f"http://{cluster.nodes[0].address}:{spec.port}"
        self.process = cluster.head.exec_stream(list(ray_argv(spec.argv)), env=spec.env, sink=log.add,
                                                on_end=log.end)

    def state(self):

        running, code = self.process.state()
        if running:
            dead = [c.name for c in self.cluster.containers if c.state().status != "running"]
            if dead:
                return ProcessState(False, None, f"Ray node container ended: {', '.join(dead)}")
        return ProcessState(running, None if running else code)

    def stop(self) -> None:
        # the server runs in the head's container, its engine workers in every node's: stopping
        # them ends its output (the cluster's exit removes them)
        for c in self.cluster.containers:
            c.stop(timeout=10)

    def mark_failed(self) -> None:
        pass  # the node logs are in the cell's log; the containers always go

    def record(self) -> ServerRecord:
        return ServerRecord(kind="ray", containers=tuple(c.name for c in self.cluster.containers),
                            hosts=tuple(n.host for n in self.cluster.nodes))

    def run_python(self, source: bytes, *, timeout_s: float = 120) -> tuple[int, str]:
        # on the command line, as the Docker runner does: no /tmp or shell assumed in the image
        return self.cluster.head.exec(["python3", "-c", source.decode()], timeout_s=timeout_s)


class RayRunner:
    """A Runner for cells with `nodes > 1`: form the cluster on `nodes`, then serve on its head."""

    name = "ray"

    def __init__(self, nodes: Sequence[Node], *, base_port: int, ready_timeout_s: float = 300) -> None:
        self.nodes = tuple(nodes)
        self.base_port = base_port
        self.ready_timeout_s = ready_timeout_s

    @contextmanager
    def serve(self, spec) -> Iterator[RayServer]:
        import threading


        if spec.image is None:
            raise ValueError("RayRunner needs spec.image")
        log = LogBuffer(spec.log_path, spec.header)
        stop = threading.Event()
        pumps: list[threading.Thread] = []
        try:
            with ray_cluster(self.nodes, spec.image, base_port=self.base_port, labels=spec.labels,
                             ready_timeout_s=self.ready_timeout_s, env=spec.env, gpus=spec.gpus,
                             mounts=spec.mounts) as cluster:
                log.add(f"# harness: Ray cluster ready at {cluster.address}: "
                        f"{cluster.resources.gpu:g} GPU on {cluster.resources.alive_nodes} nodes")
                for node, c in zip(cluster.nodes, cluster.containers, strict=True):
                    role = Role.RAY_HEAD if c is cluster.head else Role.RAY_WORKER
                    pumps.append(c.follow_logs(functools.partial(_add_prefixed, log, f"({role} {node.host}) "), stop))
                server = RayServer(cluster, spec, log)
                try:
                    yield server
                finally:
                    try:
                        server.stop()
                    finally:
                        log.drain(DRAIN_S)  # the server's output, to its end
                        stop.set()
            # the containers are gone: their log pumps end
            for p in (*pumps, server.process.pump):
                p.join(timeout=5)
        finally:
            log.close()


def _add_prefixed(log: LogBuffer, prefix: str, line: str) -> None:
    log.add(prefix + line)
