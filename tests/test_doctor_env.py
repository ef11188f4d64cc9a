"""`harness doctor` and `harness env` on this host: each check says pass or how to fix it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.doctor import needs_for, run_checks
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
    assert main(["doctor"]) == 3  # alone, doctor asks for Docker and a GPU
    captured = capsys.readouterr()
    assert "cannot run the matrix" in captured.err and "gpus" in captured.err
    # for a docker matrix, a host without a GPU still builds and audits: warnings, exit 0
    assert main(["doctor", "-m", str(ROOT / "matrix" / "spark.toml")]) == 0
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in capsys.readouterr().out.splitlines() if line.count("│") >= 4 and line.split("│")[2].strip()}
    assert rows["gpus"] == "warn" and "FAIL" not in rows.values()


def test_a_local_python_fix_names_its_stack(tmp_path):
    text = (ROOT / "matrix" / "h200-local.toml").read_text()
    (tmp_path / "m.toml").write_text(text.replace("/opt/torch/.venv/bin/python3", "/nonexistent/python3"))
    checks = run_checks(**needs_for(load_matrix(tmp_path / "m.toml")))
    (local,) = [c for c in checks if c.name.startswith("local python")]
    assert not local.ok
    assert local.fix.startswith("fix stacks.vllm-0251.local.python in the matrix")
