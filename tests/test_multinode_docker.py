"""A real Ray cluster (the `ray` package, CPU-only, GPUs declared as resources) formed from
containers on two Docker engines: the main one and a second dockerd started here.

Needs the image harness-test/ray:2.60.0 (tools/ray-image.sh: ray 2.60.0 from PyPI on the
stand-in base image); skips with that reason when it is absent.
"""

from __future__ import annotations

import docker
import pytest
from conftest import skip_or_fail_under_ci
from engines import MAIN, copy_image, dockerd_problem, free_port, second_dockerd

from harness.engine import connect
from harness.errors import EngineError
from harness.serve.multinode import PORTS_PER_NODE, Node, ray_cluster

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RAY_IMAGE = "harness-test/ray:2.60.0"


def _engines():
    if (why := dockerd_problem()) is not None:
        skip_or_fail_under_ci(why)
    main = connect(MAIN, name="main")
    if main.image_id(RAY_IMAGE) is None:
        skip_or_fail_under_ci(f"no {RAY_IMAGE} on the main engine: run tools/ray-image.sh (needs PyPI)")
    with second_dockerd() as two:
        copy_image(RAY_IMAGE, MAIN, two.url)
        yield main, connect(two.url, name="two")


# One second dockerd for the module: starting it, copying the 415 MB Ray image in and stopping it
# costs 30 to 60 s on 2 cores. Every test checks that its own containers are gone on both engines.
# The node that cannot join keeps an engine of its own: on an engine that had run a cluster, a
# count of alive nodes once made up the number declared without it (2 of 7 runs), and the
# cluster was taken as ready. ray_cluster now counts our nodes by their node-manager ports
# (missing_nodes, tested below); with that, the shared-engine arrangement passed twice in a row.
engines = pytest.fixture(scope="module", name="engines")(_engines)
own_engines = pytest.fixture(_engines)


@pytest.fixture(scope="module")
def fake_ray_image(engines):
    """The stand-in vLLM on the Ray image, on both engines (the second engine's copy goes with it)."""
    from engines import fake_vllm_context

    main, two = engines
    tag = f"harness-test/fakevllm-ray:{free_port()}"
    main.build(fake_vllm_context(RAY_IMAGE, "/opt/fake:/opt/ray-site"), tag, labels={"harness.role": "test-image"})
    try:
        copy_image(tag, MAIN, two.url)
        yield tag
    finally:
        main.remove_image(tag)


def _base_port() -> int:
    return min(free_port(), 65535 - 3 * PORTS_PER_NODE)


def _ours(engine, run_id: str) -> list[str]:
    return engine.containers({"harness.run-id": run_id})


def test_a_ray_cluster_over_two_engines_reports_every_declared_gpu(engines):
    main, two = engines
    run_id = f"ray-{free_port()}"
    nodes = [Node(main, "main", "127.0.0.1", 1), Node(two, "two", "127.0.0.1", 1)]
    with ray_cluster(nodes, RAY_IMAGE, base_port=_base_port(), labels={"harness.run-id": run_id}) as cluster:
        assert cluster.resources.gpu == 2.0 and cluster.resources.alive_nodes == 2
        again = cluster.cluster_resources()  # asked again, not remembered
        assert again.gpu == 2.0 and (again.model_extra or {})["CPU"] == 2.0  # every resource kept
        roles = {c.name: docker.DockerClient(base_url=n.engine.url).containers.get(c.name).labels["harness.role"]
                 for n, c in zip(cluster.nodes, cluster.containers, strict=True)}
        assert sorted(roles.values()) == ["ray-head", "ray-worker"]
        assert len(_ours(main, run_id)) == 1 and len(_ours(two, run_id)) == 1
        logs = cluster.logs()
        assert any("Ray runtime started" in text for text in logs.values()), logs
    assert _ours(main, run_id) == [] and _ours(two, run_id) == []


def test_a_worker_that_cannot_join_is_a_clear_error_and_nothing_is_left(own_engines):
    main, two = own_engines
    run_id = f"ray-{free_port()}"
    # a third node whose address is not an address at all: it never joins, its 2 GPUs never show
    # (never a routable address: tests send traffic to loopback only)
    nodes = [Node(main, "main", "127.0.0.1", 1), Node(two, "two", "127.0.0.1", 1),
             Node(two, "ghost", "256.0.0.1", 2)]
    with pytest.raises(EngineError) as info:
        with ray_cluster(nodes, RAY_IMAGE, base_port=_base_port(),
                         labels={"harness.run-id": run_id}, ready_timeout_s=45):
            pass
    assert "expected 4 GPU" in info.value.message and "--- main:" in info.value.message
    assert _ours(main, run_id) == [] and _ours(two, run_id) == []


def test_a_two_node_cell_serves_on_a_ray_cluster_over_two_engines(engines, fake_ray_image, tmp_path):
    from harness.matrix.load import load_matrix
    from harness.run.options import RunOptions
    from harness.run.session import run_matrix

    main, two = engines
    head_port = _base_port()
    path = _ray_matrix(tmp_path, fake_ray_image, two.url, head_port)
    store = run_matrix(load_matrix(path), k="pp2 and not hang", opts=RunOptions(results_root=tmp_path / "results"))
    (cell,) = store.cells()
    assert cell.status == "pass", (cell.reasons, cell.serve.log_tail if cell.serve else None)
    assert cell.host == "head+worker"
    assert cell.serve.url.endswith(f":{head_port}")
    command = list(cell.serve.command)
    assert command[command.index("--distributed-executor-backend") + 1] == "ray"
    log = (store.dir / cell.serve.log).read_text()
    assert "Ray cluster ready" in log and "2 GPU on 2 nodes" in log
    assert "fake: Ray executor on 2 GPU over 2 nodes" in log  # the server used both nodes
    assert "(ray-head head) " in log and "(ray-worker worker) " in log  # every node's log read
    assert cell.fingerprint.moe_backend == "TRITON"
    assert _ours(main, store.run_id) == [] and _ours(two, store.run_id) == []


def _ray_matrix(tmp_path, image: str, worker_url: str, head_port: int):
    worker_port = free_port()
    path = tmp_path / "ray.toml"
    path.write_text(f"""
[matrix]
name = "fake-ray"
hardware = "gpu"

[hardware.gpu]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128

[stacks.img]
image = "{image}"

[models.qwen-fp8]
checkpoint = "fake/qwen3moe-fp8"
quantization = "fp8"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 1.0

[configs.pp2]
nodes = 2
args = ["--pipeline-parallel-size", "2"]

[configs.pp2-hang]
nodes = 2
args = ["--pipeline-parallel-size", "2"]
env = {{ FAKE_VLLM_MODE = "hang" }}

[serve]
gpus = "none"
startup_timeout_s = 900  # a busy 2-core machine: the hang cell must end by Ctrl-C only
quiet_period_s = 900

[bench]
concurrency = [1]
max_tokens = 16
repeats = 1
prompt_tokens = 32
prefill = false

[hosts.head]
engine = "{MAIN}"
ports = [{head_port}, {head_port}]

[hosts.worker]
engine = "{worker_url}"
ports = [{worker_port}, {worker_port}]
""")
    return path


def test_ctrl_c_during_a_two_node_cell_removes_every_node(engines, fake_ray_image, tmp_path):
    import json
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    main, two = engines
    path = _ray_matrix(tmp_path, fake_ray_image, two.url, _base_port())
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-m", str(path), "-k", "pp2-hang",
                             "--results", str(results), "--no-report"], cwd=Path(__file__).parent.parent,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    cell = {"harness.cell": "img/qwen-fp8/pp2-hang"}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (main.containers(cell) and two.containers(cell)):
            time.sleep(0.5)
        assert main.containers(cell) and two.containers(cell), "the cell never had a node on both engines"
        time.sleep(5)  # into the serve on the head
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=300)[0].decode()
    finally:
        if proc.poll() is None:  # the test failed before its Ctrl-C: the run must not outlive it
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=300)
    assert proc.returncode == 130, output
    assert main.containers(cell) == [] and two.containers(cell) == []
    run_dir = next(results.iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"


def test_readiness_counts_our_nodes_by_their_ports_not_by_number():
    from harness.serve.multinode import RayResources, missing_nodes, node_ports

    def alive(*entries):
        return RayResources.model_validate({"alive": list(entries)})

    nodes = [Node(None, "main", "127.0.0.1", 1), Node(None, "two", "127.0.0.1", 1),
             Node(None, "ghost", "10.9.9.9", 2)]
    port = [node_ports(20000, i)["--node-manager-port"] for i in range(3)]
    # Ray reports another address of the machine than the 127.0.0.1 it was started with
    ours = [["192.0.2.2", port[0]], ["192.0.2.2", port[1]]]
    stranger = ["192.0.2.2", node_ports(30000, 2)["--node-manager-port"]]  # another cluster's node
    # three alive, as many as declared: still not ready, the ghost is not among them
    assert missing_nodes(alive(*ours, stranger), nodes, 20000) == [
        f"ghost (10.9.9.9, node manager port {port[2]})"]
    assert missing_nodes(alive(*ours, ["10.9.9.9", port[2]]), nodes, 20000) == []
    # one node of ours reported once cannot stand for two; malformed entries count for nothing
    assert missing_nodes(alive(ours[0], ours[0], ["a", port[2]], ["x"], [1, "y"], "z"),
                         nodes, 20000) == [f"two (127.0.0.1, node manager port {port[1]})"]
    assert len(missing_nodes(RayResources(), nodes, 20000)) == 3
