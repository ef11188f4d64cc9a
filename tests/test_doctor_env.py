"""`harness doctor` and `harness env` on this host: each check says pass or how to fix it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cli.doctor import HOST_ONLY, needs_for, run_checks
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
def test_doctor_alone_checks_the_host_as_make_doctor_does(capsys):
    """Without -m, doctor judges the host by what every shipped (docker) matrix needs of it:
    the same verdict per host check as `make doctor` (doctor -m <the picked matrix>)."""
    alone = {c.name: (c.ok, c.required) for c in run_checks(**HOST_ONLY)}
    assert alone["docker engine"] == (True, True), alone
    spark = {c.name: (c.ok, c.required) for c in run_checks(**needs_for(load_matrix(ROOT / "matrix" / "spark.toml")))}
    assert {k: v for k, v in spark.items() if k in alone} == alone
    assert set(spark) - set(alone) <= {"pins", "matrix fits this host"}
    code_alone = main(["doctor"])
    assert code_alone == main(["doctor", "-m", str(ROOT / "matrix" / "spark.toml")])
    # exit 3 exactly when a required host check fails (disk space, say), else 0
    assert code_alone == (3 if any(req and not ok for ok, req in alone.values()) else 0)
    if not probe().ok:  # no GPU: images are still built and audited here, so only a warning
        assert alone["gpus"] == (False, False)
    assert "host checks only" in capsys.readouterr().err


def test_doctor_alone_fails_without_an_engine(monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    assert main(["doctor"]) == 3
    assert "docker engine" in capsys.readouterr().err


def test_a_local_python_fix_names_its_stack(tmp_path):
    text = (ROOT / "matrix" / "h200-local.toml").read_text()
    (tmp_path / "m.toml").write_text(text.replace("/opt/torch/.venv/bin/python3", "/nonexistent/python3"))
    checks = run_checks(**needs_for(load_matrix(tmp_path / "m.toml")))
    (local,) = [c for c in checks if c.name.startswith("local python")]
    assert not local.ok
    assert local.fix.startswith("fix stacks.vllm-0251.local.python in the matrix")
