"""A real Ray cluster (the `ray` package, CPU-only, GPUs declared as resources) formed from
containers on two Docker engines: the main one and a second dockerd started here.

Needs the image harness-test/ray:2.60.0 (tools/ray-image.sh: ray 2.60.0 from PyPI on the
stand-in base image); skips with that reason when it is absent.
"""

from __future__ import annotations

import docker
import pytest
from engines import MAIN, copy_image, dockerd_problem, free_port, second_dockerd

from harness.engine import connect
from harness.errors import EngineError
from harness.multinode import PORTS_PER_NODE, Node, ray_cluster

pytestmark = [pytest.mark.docker, pytest.mark.slow]

RAY_IMAGE = "harness-test/ray:2.60.0"


@pytest.fixture
def engines():
    if (why := dockerd_problem()) is not None:
        pytest.skip(why)
    main = connect(MAIN, name="main")
    if main.image_id(RAY_IMAGE) is None:
        pytest.skip(f"no {RAY_IMAGE} on the main engine: run tools/ray-image.sh (needs PyPI)")
    with second_dockerd() as two:
        copy_image(RAY_IMAGE, MAIN, two.url)
        yield main, connect(two.url, name="two")


def _base_port() -> int:
    return min(free_port(), 65535 - 3 * PORTS_PER_NODE)


def _ours(engine, run_id: str) -> list[str]:
    return engine.containers({"harness.run-id": run_id})


def test_a_ray_cluster_over_two_engines_reports_every_declared_gpu(engines):
    main, two = engines
    run_id = f"ray-{free_port()}"
    nodes = [Node(main, "main", "127.0.0.1", 1), Node(two, "two", "127.0.0.1", 1)]
    with ray_cluster(nodes, RAY_IMAGE, base_port=_base_port(), labels={"harness.run-id": run_id}) as cluster:
        assert cluster.resources["GPU"] == 2.0 and cluster.resources["alive_nodes"] == 2
        again = cluster.cluster_resources()  # asked again, not remembered
        assert again["GPU"] == 2.0 and again["CPU"] == 2.0
        roles = {c.name: docker.DockerClient(base_url=n.engine.url).containers.get(c.name).labels["harness.role"]
                 for n, c in zip(cluster.nodes, cluster.containers, strict=True)}
        assert sorted(roles.values()) == ["ray-head", "ray-worker"]
        assert len(_ours(main, run_id)) == 1 and len(_ours(two, run_id)) == 1
        logs = cluster.logs()
        assert any("Ray runtime started" in text for text in logs.values()), logs
    assert _ours(main, run_id) == [] and _ours(two, run_id) == []


def test_a_worker_that_cannot_join_is_a_clear_error_and_nothing_is_left(engines):
    main, two = engines
    run_id = f"ray-{free_port()}"
    # a third node at an address no interface here has: it never joins, its 2 GPUs never show
    nodes = [Node(main, "main", "127.0.0.1", 1), Node(two, "two", "127.0.0.1", 1),
             Node(two, "ghost", "192.0.2.254", 2)]
    with pytest.raises(EngineError) as info:
        with ray_cluster(nodes, RAY_IMAGE, base_port=_base_port(),
                         labels={"harness.run-id": run_id}, ready_timeout_s=45):
            pass
    assert "expected 4 GPU" in info.value.message and "--- main:" in info.value.message
    assert _ours(main, run_id) == [] and _ours(two, run_id) == []
