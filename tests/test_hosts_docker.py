"""`harness run` over several Docker engines, for real: a second dockerd started here (own socket,
data root, bridge), the main engine reached over ssh:// (Debian's sshd on localhost, paramiko),
and the stand-in vLLM image (tests/test_pipeline_docker.py) with no GPU.

Checks: cells of one run at the same time on two engines (overlap read from the run's
schedule.json), every cell recorded with its host and each host fingerprinted; an engine stopped
mid-run errors its cells with `host X unreachable` while the other host's results stay; Ctrl-C
removes the run's containers on every host.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
from conftest import skip_or_fail_under_ci
from engines import (
    MAIN,
    copy_image,
    dockerd_problem,
    fake_vllm_context,
    free_port,
    second_dockerd,
    ssh_engine,
    ssh_problem,
)

from harness.engine import connect
from harness.matrix.load import load_matrix
from harness.results.schedule import ScheduleEntry
from harness.run.options import RunOptions
from harness.run.session import run_matrix

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def fake_image():
    engine = connect()
    tag = f"harness-test/fakevllm-hosts:{os.getpid()}"
    engine.build(fake_vllm_context(), tag, labels={"harness.role": "test-image"})
    yield tag
    engine.remove_image(tag)


def _engine_two(fake_image):
    if (why := dockerd_problem()) is not None:
        skip_or_fail_under_ci(why)
    with second_dockerd() as d:
        copy_image(fake_image, MAIN, d.url)
        yield d


# A second dockerd costs 10 to 30 s to start, load and stop: the tests that leave it running
# share one; the test that stops it mid-run gets its own.
shared_engine_two = pytest.fixture(scope="module", name="shared_engine_two")(_engine_two)
engine_two = pytest.fixture(_engine_two)


def _matrix(tmp_path: Path, image: str, hosts: str, *, configs: str = "", stacks=("img",),
            startup: int = 90, quiet: int = 60) -> Path:
    path = tmp_path / "hosts.toml"
    stack_tables = "\n".join(f'[stacks.{s}]\nimage = "{image}"\n' for s in stacks)
    path.write_text(f"""
[matrix]
name = "fake-hosts"
hardware = "gpu"

[hardware.gpu]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128

{stack_tables}

[models.qwen-fp8]
checkpoint = "fake/qwen3moe-fp8"
quantization = "fp8"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 1.0

{configs or '''
[configs.a]
env = { FAKE_VLLM_STARTUP_S = "3" }
[configs.b]
env = { FAKE_VLLM_STARTUP_S = "3" }
[configs.c]
env = { FAKE_VLLM_STARTUP_S = "3" }
[configs.d]
env = { FAKE_VLLM_STARTUP_S = "3" }
'''}

[serve]
gpus = "none"
startup_timeout_s = {startup}
quiet_period_s = {quiet}

[bench]
concurrency = [1]
max_tokens = 16
repeats = 1
prompt_tokens = 32
prefill = false

{hosts}
""")
    return path


def _labelled(url: str, **labels: str) -> list[str]:
    """Names of the containers with these labels, from one list call (docker-py's
    containers.list() inspects each afterwards and raises when one is removed meanwhile)."""
    client = docker.DockerClient(base_url=url, timeout=30)
    filters = {"label": [f"{k.replace('_', '.')}={v}" for k, v in labels.items()]}
    return [c["Names"][0].lstrip("/") for c in client.api.containers(all=True, filters=filters)]


def _overlaps(entries: tuple[ScheduleEntry, ...], a: str, b: str) -> list[tuple[str, str]]:
    return [(x.cell, y.cell) for x in entries if x.host == a for y in entries
            if y.host == b and x.start < y.end and y.start < x.end]


def test_cells_run_at_once_on_an_ssh_engine_and_a_second_engine(fake_image, shared_engine_two, tmp_path,
                                                                  monkeypatch):
    engine_two = shared_engine_two
    if (why := ssh_problem()) is not None:
        skip_or_fail_under_ci(why)
    port = free_port()
    with ssh_engine() as (ssh_url, home):
        monkeypatch.setenv("HOME", str(home))  # its ~/.ssh/config and known_hosts, not the user's
        path = _matrix(tmp_path, fake_image, f"""
[hosts.spark]
engine = "{ssh_url}"

[hosts.rtx]
engine = "{engine_two.url}"
network = "host"
ports = [{port}, {port}]
""")
        store = run_matrix(load_matrix(path), k=None, opts=RunOptions(results_root=tmp_path / "results"))
        cells = {c.id: c for c in store.cells()}
        assert sorted(cells) == [f"img/qwen-fp8/{x}" for x in "abcd"]
        assert all(c.status == "pass" for c in cells.values()), {c.id: c.reasons for c in cells.values()}
        assert {c.host for c in cells.values()} == {"spark", "rtx"}
        for c in cells.values():  # the host-network slot listens on its own port
            assert (c.serve.url.endswith(f":{port}")) == (c.host == "rtx"), c.serve.url
        schedule = store.schedule()  # schedule.json, read back through its record
        assert sorted(e.cell for e in schedule) == sorted(cells)
        assert _overlaps(schedule, "spark", "rtx"), schedule  # both engines busy at the same time
        run = json.loads((store.dir / "run.json").read_text())
        assert run["status"] == "finished"
        assert set(run["hosts"]) == {"spark", "rtx"}
        assert all(h["version"] and not h.get("unreachable") for h in run["hosts"].values())
        assert json.loads((store.dir / "builds" / "img@rtx.json").read_text())["status"] == "reused"
        assert _labelled(engine_two.url, **{"harness.run-id": store.run_id}) == []
        assert _labelled(MAIN, **{"harness.run-id": store.run_id}) == []


def test_an_engine_stopped_mid_run_errors_its_cells_and_the_other_host_carries_on(fake_image, engine_two,
                                                                                  tmp_path):
    path = _matrix(tmp_path, fake_image, f"""
[hosts.main]
engine = "{MAIN}"
stacks = ["one"]

[hosts.two]
engine = "{engine_two.url}"
stacks = ["two"]
""", stacks=("one", "two"), configs='''
[configs.slow]
env = { FAKE_VLLM_STARTUP_S = "40" }
[configs.a]
env = { FAKE_VLLM_STARTUP_S = "2" }
[configs.b]
env = { FAKE_VLLM_STARTUP_S = "2" }
''')
    stopper_done: list[str] = []

    def stop_two_when_busy() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if _labelled(engine_two.url, **{"harness.cell": "two/qwen-fp8/slow"}):
                stopper_done.append("seen")
                engine_two.stop()  # dockerd stops its containers first: may take many seconds
                stopper_done.append("stopped")
                return
            time.sleep(0.3)

    import threading

    stopper = threading.Thread(target=stop_two_when_busy, daemon=True)
    stopper.start()
    store = run_matrix(load_matrix(path), k="one/qwen-fp8/a or one/qwen-fp8/b or two",
                       opts=RunOptions(results_root=tmp_path / "results"))
    # The run may end (its cells on two erroring) while dockerd is still shutting down: wait
    # for the stopper itself, which always ends (it stopped the engine, or its deadline passed).
    stopper.join(150)
    assert stopper_done == ["seen", "stopped"], "engine two never ran its slow cell"
    cells = {c.id: c for c in store.cells()}
    for cid in ("one/qwen-fp8/a", "one/qwen-fp8/b"):
        assert cells[cid].status == "pass", cells[cid].reasons
        assert cells[cid].host == "main"
    for cid in ("two/qwen-fp8/slow", "two/qwen-fp8/a", "two/qwen-fp8/b"):
        cell = cells[cid]
        assert cell.status == "error" and cell.host == "two"
        assert cell.verdicts[0].message.startswith("host two unreachable: "), cell.verdicts
        assert cell.error.type == "HostUnreachable"
    assert _labelled(MAIN, **{"harness.run-id": store.run_id}) == []
    assert json.loads((store.dir / "run.json").read_text())["status"] == "finished"
    # the host is back (a new engine here): --resume runs its cells again, and only those
    with second_dockerd() as again:
        copy_image(fake_image, MAIN, again.url)
        path.write_text(path.read_text().replace(engine_two.url, again.url)
                        .replace('FAKE_VLLM_STARTUP_S = "40"', 'FAKE_VLLM_STARTUP_S = "1"'))
        resumed = run_matrix(load_matrix(path), k="one/qwen-fp8/a or one/qwen-fp8/b or two",
                             opts=RunOptions(results_root=tmp_path / "results"), resume_dir=store.dir)
        after = {c.id: c for c in resumed.cells()}
        assert {cid: c.status for cid, c in after.items() if c.host == "two"} == {
            "two/qwen-fp8/slow": "pass", "two/qwen-fp8/a": "pass", "two/qwen-fp8/b": "pass"}
        for cid in ("one/qwen-fp8/a", "one/qwen-fp8/b"):
            assert after[cid] == cells[cid]  # not run again


def test_ctrl_c_removes_the_runs_containers_on_every_host(fake_image, shared_engine_two, tmp_path):
    engine_two = shared_engine_two
    path = _matrix(tmp_path, fake_image, f"""
[hosts.main]
engine = "{MAIN}"
stacks = ["one"]

[hosts.two]
engine = "{engine_two.url}"
stacks = ["two"]
""", stacks=("one", "two"), startup=900, quiet=900, configs='''
[configs.hang]
env = { FAKE_VLLM_MODE = "hang" }
''')  # the cells must never end by themselves, however slow the machine: only Ctrl-C ends them
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-m", str(path), "--results", str(results),
                             "--no-report"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    seen: tuple[list[str], list[str]] = ([], [])
    while time.monotonic() < deadline and not all(seen):
        seen = (_labelled(MAIN, **{"harness.cell": "one/qwen-fp8/hang"}),
                _labelled(engine_two.url, **{"harness.cell": "two/qwen-fp8/hang"}))
        time.sleep(0.3)
    assert all(seen), f"the run never had a container on both hosts: {seen}"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=90)[0].decode()
    assert proc.returncode == 130, output
    assert _labelled(MAIN, **{"harness.cell": "one/qwen-fp8/hang"}) == []
    assert _labelled(engine_two.url, **{"harness.cell": "two/qwen-fp8/hang"}) == []
    run_dir = next(results.iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert not [p for p in (run_dir / "cells").glob("*.json") if not p.name.endswith(".partial.json")]


def test_a_tls_engine_runs_its_cells_and_a_host_refused_at_connect_errors_only_its_own(fake_image, tmp_path):
    if (why := dockerd_problem()) is not None:
        skip_or_fail_under_ci(why)
    with second_dockerd(tls=True) as secure:
        copy_image(fake_image, MAIN, secure)
        tls = secure.tls
        path = _matrix(tmp_path, fake_image, f"""
[hosts.secure]
engine = "{secure.url}"
stacks = ["one"]
tls = {{ ca_cert = "{tls.ca_cert}", client_cert = "{tls.client_cert}", client_key = "{tls.client_key}" }}

[hosts.plain]
engine = "{secure.url}"
stacks = ["two"]
""", stacks=("one", "two"), configs='''
[configs.a]
env = { FAKE_VLLM_STARTUP_S = "1" }
''')
        store = run_matrix(load_matrix(path), k=None, opts=RunOptions(results_root=tmp_path / "results"))
        cells = {c.id: c for c in store.cells()}
        ok = cells["one/qwen-fp8/a"]
        assert ok.status == "pass" and ok.host == "secure", ok.reasons
        refused = cells["two/qwen-fp8/a"]
        assert refused.status == "error" and refused.host == "plain"
        assert refused.verdicts[0].message.startswith(f"host plain unreachable: no Docker engine answers at {secure.url}")
        hosts = json.loads((store.dir / "run.json").read_text())["hosts"]
        assert hosts["secure"]["version"] and hosts["plain"].get("unreachable")
        assert secure.client().containers.list(all=True, filters={"label": f"harness.run-id={store.run_id}"}) == []
