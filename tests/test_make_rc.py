"""`make` and harness's exit codes: GNU make exits 2 for any failed recipe, so the Makefile's
harness recipes record harness's own code and `tools/make-rc` exits with it. Run on a copy of
the Makefile with a stand-in `harness` script (a real shell script, real make)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKE = """#!/bin/sh
if [ "$2" = "--pick-matrix" ]; then echo matrix/spark.toml; exit "${PICK_RC:-0}"; fi
echo "harness $*"; exit "${FAKE_RC:-0}"
"""

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "make-rc", tmp_path / "tools" / "make-rc")
    fake = tmp_path / "harness"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    return tmp_path


def run(tree: Path, cmd: list[str], **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([*cmd, "-s", "-o", "install", "-o", "docker-up", "HARNESS=" + str(tree / "harness")], cwd=tree,
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=60)


@pytest.mark.parametrize("target", ["doctor", "plan", "lock", "matrix"])
@pytest.mark.parametrize("code", [0, 1, 2, 3, 130])
def test_make_rc_exits_with_harness_code(tree, target, code):
    r = run(tree, ["tools/make-rc", target], FAKE_RC=str(code))
    assert r.returncode == code, r.stdout + r.stderr
    assert "harness " in r.stdout
    assert not (tree / ".make-rc").exists()  # make-rc cleans up after itself


def test_plain_make_shows_the_code_in_its_error_line_and_the_file(tree):
    r = run(tree, ["make", "doctor"], FAKE_RC="3")
    assert r.returncode == 2  # GNU make's own rule for any failed recipe
    assert "Error 3" in r.stderr
    assert (tree / ".make-rc").read_text().strip() == "3"


def test_a_failed_matrix_pick_keeps_its_code(tree):
    r = run(tree, ["tools/make-rc", "doctor"], PICK_RC="3")
    assert r.returncode == 3, r.stdout + r.stderr
