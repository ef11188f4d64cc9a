"""The image probe in an image with no /tmp and no shell, through `harness run` on a real engine.

A base imported from a VM's root filesystem can lack /tmp, and distroless-style images lack a
shell: the probe (versions and env from inside the image) must still run there. The image is
the stand-in vLLM image with /tmp and every shell removed by an exec-form RUN (no shell used),
checked from inside before the run.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from harness.engine import connect
from harness.matrix.load import load_matrix
from harness.run.options import RunOptions
from harness.run.session import run_matrix
from tests.engines import fake_vllm_context

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def bare_image():
    engine = connect()
    fake = f"harness-test/fakevllm-for-bare:{os.getpid()}"
    tag = f"harness-test/bare-probe:{os.getpid()}"
    engine.build(fake_vllm_context(), fake, labels={"harness.role": "test-image"})
    dockerfile = (f"FROM {fake}\n"
                  'RUN ["/usr/bin/rm", "-rf", "/tmp", "/var/tmp", "/usr/bin/sh", "/usr/bin/dash",'
                  ' "/usr/bin/bash", "/usr/bin/rbash"]\n')
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    try:
        engine.build(buf.getvalue(), tag, labels={"harness.role": "test-image"})
        yield tag
    finally:
        engine.remove_image(tag)
        engine.remove_image(fake)


def test_the_image_really_has_no_tmp_and_no_shell(bare_image):
    out = connect().client.containers.run(
        bare_image, ["python3", "-c", "import os,shutil;print(os.path.exists('/tmp'),"
                     "[s for s in ('sh','bash','dash') if shutil.which(s)])"],
        remove=True, labels={"harness.role": "test-container"})
    assert out.decode().strip() == "False []"


def test_probe_runs_in_an_image_without_tmp_or_shell(bare_image, tmp_path: Path):
    path = tmp_path / "bare.toml"
    path.write_text(f"""
[matrix]
name = "bare-probe"
hardware = "gpu"

[hardware.gpu]
cc = "9.0"
bandwidth_gbs = 4800
memory_gib = 141

[stacks.bare]
image = "{bare_image}"

[models.qwen-fp8]
checkpoint = "fake/qwen3moe-fp8"
quantization = "fp8"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 1.0

[configs.auto]

[serve]
gpus = "none"
startup_timeout_s = 60
quiet_period_s = 6
""")
    store = run_matrix(load_matrix(path), k=None, opts=RunOptions(results_root=tmp_path / "results", bench=False))
    (cell,) = store.cells()
    assert cell.status == "pass", (cell.reasons, cell.serve.log_tail if cell.serve else None)
    fp = cell.image_fingerprint
    assert fp is not None, "the probe gave nothing"
    assert fp.vllm.version == "0.0.0+fake"
    assert fp.python and fp.python.startswith("3.") and fp.executable and fp.executable.startswith("/usr/bin/python3")
