"""On a GPU host: the host half of the fingerprint and doctor read the real GPU through NVML.

CI has no GPU, so these skip there with the reason; on a GPU machine they check what
`harness env` and `harness doctor` report against `nvidia-smi`'s own answer.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.cli.doctor import run_checks
from harness.gpus import probe
from harness.hostenv import host_fingerprint

pytestmark = pytest.mark.gpu


def test_nvml_probe_matches_nvidia_smi():
    p = probe()
    assert p.ok and p.source in ("nvml", "nvidia-smi")
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, check=True)
        first = [x.strip() for x in smi.stdout.splitlines()[0].split(",")]
        assert p.gpus[0].name == first[0]
        assert p.gpus[0].cc == first[1]
        assert p.gpus[0].driver == first[2]


def test_host_fingerprint_and_doctor_see_the_gpu():
    fp = host_fingerprint()
    assert fp.gpus and fp.driver and fp.gpus[0].cc and fp.gpus[0].cc.count(".") == 1
    gpu_check = next(c for c in run_checks(need_docker=False, need_gpu_runtime=False) if c.name == "gpus")
    assert gpu_check.ok, gpu_check.detail
