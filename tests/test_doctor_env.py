"""`harness doctor` and `harness env` on this host: each check says pass or how to fix it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.doctor import needs_for, run_checks
from harness.gpus import probe
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent


def test_env_json_has_the_host_fingerprint(capsys):
    assert main(["env", "--json"]) == 0
    fp = json.loads(capsys.readouterr().out)
    for key in ("gpus", "driver", "cuda_driver", "kernel", "os", "docker", "nvidia_container_toolkit"):
        assert key in fp
    assert fp["kernel"] and fp["os"]
    assert "environ" not in json.dumps(fp).lower()  # no environment dump, so no secrets


def test_a_failed_check_names_its_fix():
    checks = {c.name: c for c in run_checks(local_pythons=("/nonexistent/python3",))}
    assert {"docker engine", "gpus", "free disk", "cuobjdump", "local python /nonexistent/python3"} <= set(checks)
    missing = checks["local python /nonexistent/python3"]
    assert not missing.ok and "stacks.<name>.local.python" in missing.fix
    if not probe().ok:
        assert not checks["gpus"].ok and "NVIDIA driver" in checks["gpus"].fix


def test_needs_follow_the_matrix():
    local = needs_for(load_matrix(ROOT / "matrix" / "h200-local.toml"))
    assert local["need_docker"] is False and local["local_pythons"] == ("/opt/torch/.venv/bin/python3",)
    spark = needs_for(load_matrix(ROOT / "matrix" / "spark.toml"))
    assert spark["need_docker"] and spark["need_gpu_runtime"]


@pytest.mark.docker
def test_doctor_sees_the_engine_and_fails_without_a_gpu(capsys):
    checks = {c.name: c for c in run_checks()}
    assert checks["docker engine"].ok, checks["docker engine"].detail
    if probe().ok:
        pytest.skip("this host has a GPU: the failing path cannot be shown here")
    assert main(["doctor", "-m", str(ROOT / "matrix" / "spark.toml")]) == 3
    captured = capsys.readouterr()
    assert "cannot run the matrix" in captured.err and "gpus" in captured.err
