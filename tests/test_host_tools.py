"""A missing host tool is a host problem (exit 3) named as such, never a verdict on the input:
without git, the patch preflight once said a good patch "does NOT apply" and advised a refresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import proc
from harness.cli.doctor import run_checks
from harness.errors import EnvironmentProblem, PatchError
from harness.image.preflight import apply_series

PATCH = Path(__file__).resolve().parent.parent / "patches" / "vllm" / "0001-cmake-sm121a-on-cuda13.patch"


@pytest.fixture
def no_git(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no git, no anything
    assert proc.which("git") is None


def test_preflight_without_git_is_a_host_problem_not_a_stale_patch(no_git, tmp_path):
    tree = tmp_path / "src"
    tree.mkdir()
    with pytest.raises(EnvironmentProblem) as exc:
        apply_series(tree, [(PATCH.name, PATCH)], project="vllm")
    assert not isinstance(exc.value, PatchError)
    assert exc.value.exit_code == 3
    assert exc.value.message.startswith("git is not installed on this host")
    assert "apt-get install git" in exc.value.hint and "refresh" not in exc.value.message


def test_doctor_names_every_missing_host_tool(no_git):
    checks = {c.name: c for c in run_checks(need_docker=True, need_gpu=False)}
    assert checks["git"].ok is False and checks["git"].required
    assert "patch preflight" in checks["git"].detail and "apt-get install git" in checks["git"].fix
