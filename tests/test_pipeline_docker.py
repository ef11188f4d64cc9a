"""`harness run` with the DockerRunner on a real engine: a stand-in vLLM image, no GPU.

The image holds Debian's python3, tests/support/fakeserver.py and the fake `vllm` package, so
the container plays a vLLM server: ready, crashed or hung on request. Checks: results, exit
codes and log tails, hang detection, and that no labelled container outlives a run, including
one interrupted with SIGINT.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from harness.engine import connect
from harness.matrix.load import load_matrix
from harness.run.options import RunOptions
from harness.run.session import run_matrix

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent
FAKEVLLM = ROOT / "tests" / "fixtures" / "fakevllm"
BASE = "harness-test/debian-python:bookworm"


def _context() -> bytes:
    buf = io.BytesIO()
    dockerfile = (f"FROM {BASE}\nCOPY fakeserver.py /opt/fake/fakeserver.py\nCOPY vllm /opt/fake/vllm\n"
                  "ENV PYTHONPATH=/opt/fake HARNESS_FAKESERVER=/opt/fake/fakeserver.py\n"
                  "LABEL harness.test=fakevllm\n")
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add("Dockerfile", dockerfile.encode())
        add("fakeserver.py", (ROOT / "tests" / "support" / "fakeserver.py").read_bytes())
        for path in sorted((FAKEVLLM / "vllm").rglob("*.py")):
            add(str(path.relative_to(FAKEVLLM)), path.read_bytes())
    return buf.getvalue()


@pytest.fixture(scope="module")
def fake_image():
    engine = connect()
    tag = f"harness-test/fakevllm:{os.getpid()}"
    engine.build(_context(), tag, labels={"harness.role": "test-image"})
    yield tag
    engine.remove_image(tag)  # tests leave no image behind, tagged or dangling


def _matrix(tmp_path: Path, image: str, extra: str = "", quiet: int = 6, name: str = "fake-docker",
            startup: int = 60) -> Path:
    path = tmp_path / "docker.toml"
    path.write_text(f"""
[matrix]
name = "{name}"
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
family = "qwen3moe"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 1.0

[models.qwen-nvfp4]
checkpoint = "fake/qwen3moe-nvfp4"
quantization = "nvfp4"
family = "qwen3moe"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 0.5625

[configs.auto]

[configs."moe=flashinfer_cutlass"]
moe_backend = "flashinfer_cutlass"

[configs.crash]
env = {{ FAKE_VLLM_MODE = "crash" }}

[configs.hang]
env = {{ FAKE_VLLM_MODE = "hang" }}

[serve]
gpus = "none"
startup_timeout_s = {startup}
quiet_period_s = {quiet}

[bench]
concurrency = [1, 2]
max_tokens = 16
repeats = 1
prompt_tokens = 32
long_prompt_tokens = 200
{extra}
""")
    return path


def _labelled(run_id: str) -> list[str]:
    return connect().containers({"harness.run-id": run_id})


def _mine(engine, name: str, cell: str) -> list[str]:
    """Containers of `cell` started by runs of the matrix called `name` (run ids carry it): the
    engine is shared, other sessions' runs must not count."""
    listed = engine.client.api.containers(all=True, filters={"label": f"harness.cell={cell}"})  # one call: no race
    return [c["Names"][0].lstrip("/") for c in listed if f"-{name}-" in (c.get("Labels") or {}).get("harness.run-id", "")]


def test_docker_cells_pass_fail_crash_hang_and_clean_up(fake_image, tmp_path):
    matrix = load_matrix(_matrix(tmp_path, fake_image))
    store = run_matrix(matrix, k="(qwen-fp8 and (auto or crash or hang)) or (nvfp4 and flashinfer)",
                       opts=RunOptions(results_root=tmp_path / "results"))
    cells = {c.id: c for c in store.cells()}
    ok = cells["img/qwen-fp8/auto"]
    assert ok.status == "pass", ok.reasons
    assert ok.image.ref == fake_image and ok.image.labels["harness.test"] == "fakevllm"
    assert ok.image_fingerprint.vllm.version == "0.0.0+fake"
    lv = ok.bench.levels[0]
    assert lv.per_stream_tok_s > 0 and lv.failed == 0 and lv.requests > 0
    mismatch = cells["img/qwen-nvfp4/moe=flashinfer_cutlass"]
    assert mismatch.status == "fail"
    assert "asked flashinfer_cutlass, got MARLIN" in mismatch.reasons
    crash = cells["img/qwen-fp8/crash"]
    assert crash.status == "crashed" and crash.serve.exit_code == 3
    assert any("illegal memory access" in line for line in crash.serve.log_tail)
    hang = cells["img/qwen-fp8/hang"]
    assert hang.status == "hung"
    assert _labelled(store.run_id) == []
    assert json.loads((store.dir / "builds" / "img.json").read_text())["status"] == "reused"


def test_sigint_leaves_no_container_and_an_interrupted_run(fake_image, tmp_path):
    name = f"sigint{os.getpid()}"
    path = _matrix(tmp_path, fake_image, quiet=900, startup=900, name=name)
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-m", str(path), "-k", "qwen-fp8/hang",
                             "--results", str(results), "--no-report"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    engine = connect()
    deadline = time.monotonic() + 180
    names: list[str] = []
    while time.monotonic() < deadline and not names:
        names = _mine(engine, name, "img/qwen-fp8/hang")
        time.sleep(0.3)
    assert names, "the run never started its container"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 130, output
    assert _mine(engine, name, "img/qwen-fp8/hang") == []
    run_dir = next(results.iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert not [p for p in (run_dir / "cells").glob("*.json") if not p.name.endswith(".partial.json")]


def test_sigkill_of_the_controller_leaves_a_container_the_next_run_reaps(fake_image, tmp_path):
    name = f"sigkill{os.getpid()}"
    path = _matrix(tmp_path, fake_image, quiet=900, startup=900, name=name)
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "-m", str(path), "-k", "qwen-fp8/hang",
                             "--results", str(results), "--no-report"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    engine = connect()
    deadline = time.monotonic() + 180
    names: list[str] = []
    while time.monotonic() < deadline and not names:
        names = _mine(engine, name, "img/qwen-fp8/hang")
        time.sleep(0.3)
    assert names, "the run never started its container"
    labels = engine.client.containers.get(names[0]).labels
    assert labels["harness.controller.pid"] == str(proc.pid)
    proc.kill()  # SIGKILL: no cleanup can run in the controller
    proc.wait(timeout=10)
    assert _mine(engine, name, "img/qwen-fp8/hang") == names  # left behind
    run_dir = next(results.iterdir())
    assert json.loads((run_dir / "run.json").read_text())["status"] == "running"
    # the next run reaps what the dead one left before it starts its own cells
    store = run_matrix(load_matrix(path), k="qwen-fp8/crash",
                       opts=RunOptions(results_root=results, bench=False))
    assert _mine(engine, name, "img/qwen-fp8/hang") == []
    assert json.loads((run_dir / "run.json").read_text())["status"] == "interrupted"
    assert store.cells()[0].status == "crashed"
    assert _labelled(store.run_id) == []



def test_built_stack_whose_build_log_shows_the_arch_trap_fails_its_cells(fake_image, tmp_path):
    # the whole path: build (content-addressed, from a template) -> serve -> verdicts, where the
    # image's vLLM build log says 12.1a was asked and 12.0f was built: every cell must FAIL on it
    path = tmp_path / "built.toml"
    path.write_text(_matrix(tmp_path, fake_image).read_text().replace(
        f'[stacks.img]\nimage = "{fake_image}"',
        '[stacks.built]\ntorch_cuda_arch_list = "12.1a"\n'
        f'base_image = {{ repository = "{fake_image.split(":")[0]}", tag = "{fake_image.split(":")[1]}" }}\n'
        'torch = { version = "0" }\nvllm = { pypi = "0.33.0" }\nflashinfer = { version = "0.7.2.post1" }\n'))
    run_id = f"pipe-{os.getpid()}-{time.monotonic_ns() % 100000}"
    store = run_matrix(load_matrix(path), k="qwen-fp8/auto", opts=RunOptions(
        results_root=tmp_path / "results", allow_unpinned=True, bench=False,
        build_template=ROOT / "tests" / "fixtures" / "build" / "Dockerfile.fakevllm.in",
        build_template_values={"RUN_ID": run_id}))
    try:
        cell = store.cells()[0]
        build = json.loads((store.dir / "builds" / "built.json").read_text())
        assert build["status"] == "built" and build["image_ref"].startswith("vllm-bw:built-")
        assert not Path(build["log_path"]).is_absolute()  # the run directory travels
        assert (store.dir / build["log_path"]).is_file()
        assert cell.image.labels["harness.test-run"] == run_id
        assert cell.fingerprint.moe_backend == "TRITON"  # it served: the log was read
        assert cell.status == "fail"
        trap = [v for v in cell.verdicts if v.check == "build.archs"]
        assert trap and all(v.failed for v in trap)
        assert any("12.0f" in v.message for v in trap), trap
        # the image's cubin, audited: once, in the build the cell points to
        assert cell.build_record == "builds/built.json" and "audit" not in json.loads(
            store.cell_path(cell.id).read_text())
        audit = store.build_of(cell).audit
        assert audit.cubins == {"sm_121a": 1}, audit
        # run again: the image is reused, and its build still records the audit of what its cells served
        again = run_matrix(load_matrix(path), k="qwen-fp8/auto", opts=RunOptions(
            results_root=tmp_path / "results2", allow_unpinned=True, bench=False,
            build_template=ROOT / "tests" / "fixtures" / "build" / "Dockerfile.fakevllm.in",
            build_template_values={"RUN_ID": run_id}))
        assert json.loads((again.dir / "builds" / "built.json").read_text())["status"] == "reused"
        assert again.build_of(again.cells()[0]).audit == audit
    finally:
        connect().remove_image(json.loads((store.dir / "builds" / "built.json").read_text())["image_ref"])


def test_a_base_image_that_cannot_be_pulled_is_named_in_one_line(fake_image, tmp_path):
    path = tmp_path / "nobase.toml"
    path.write_text(_matrix(tmp_path, fake_image).read_text().replace(
        f'[stacks.img]\nimage = "{fake_image}"',
        '[stacks.built]\ntorch_cuda_arch_list = "12.1a"\n'
        'base_image = { repository = "harness-test/no-such-base", tag = "never" }\n'
        'torch = { version = "0" }\nvllm = { pypi = "0.33.0" }\nflashinfer = { version = "0.7.2.post1" }\n'))
    store = run_matrix(load_matrix(path), k="qwen-fp8/auto", opts=RunOptions(
        results_root=tmp_path / "results", allow_unpinned=True, bench=False,
        build_template=ROOT / "tests" / "fixtures" / "build" / "Dockerfile.fakevllm.in",
        build_template_values={"RUN_ID": "nobase"}))
    cell = store.cells()[0]
    assert cell.status == "build-failed"
    (verdict,) = cell.verdicts
    assert verdict.check == "build.base"
    assert "harness-test/no-such-base:never" in verdict.message and "\n" not in verdict.message
