"""`harness doctor`'s free-disk check asks what the matrix's stacks need (harness/cli/doctor.py
DISK_GIB, from the images built on the H200 machine): it fails only below that, warns below the
advised size, and the H200 machine's own 47 GiB (its stored doctor output) is enough for the cut
source stack it built and served there."""

from __future__ import annotations

import re
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from harness.cli import doctor
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
Usage = namedtuple("Usage", "total used free")


def _with_free(monkeypatch, gib: float) -> None:
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda _path: Usage(0, 0, int(gib * 2**30)))


def _check(monkeypatch, matrix, gib: float) -> doctor.Check:
    _with_free(monkeypatch, gib)
    (check,) = doctor.disk_checks(".", matrix, need_docker=True)
    return check


def test_the_h200_machines_47_gib_are_enough_for_the_source_stack_it_built_there(monkeypatch):
    stored = (ROOT / "examples" / "h200-source" / "device" / "doctor.txt").read_text()
    free = int(re.search(r"detail: (\d+) GiB free at", stored).group(1))
    assert free == 47
    check = _check(monkeypatch, load_matrix(ROOT / "matrix" / "h200-source.toml"), free)
    assert not check.ok and not check.required  # a warning: the build and two cells ran there
    assert "enough for source stacks (22 GiB, measured)" in check.detail


@pytest.mark.parametrize(("matrix", "fails", "warns", "passes"), [
    ("h200-source.toml", 21.5, 40, 60),  # source
    ("h200-docker.toml", 18.5, 25, 30),  # wheel and local stacks: the wheel one sets the need
    (None, 21.5, 59, 61),  # no matrix: the shipped defaults build from source
])
def test_fail_below_the_need_warn_below_the_advised_size(monkeypatch, matrix, fails, warns, passes):
    m = load_matrix(ROOT / "matrix" / matrix) if matrix else None
    low = _check(monkeypatch, m, fails)
    assert not low.ok and low.required and "free at least" in low.fix
    mid = _check(monkeypatch, m, warns)
    assert not mid.ok and not mid.required
    assert _check(monkeypatch, m, passes).ok


def test_a_local_only_matrix_asks_for_no_build_disk(monkeypatch):
    m = load_matrix(ROOT / "matrix" / "h200-local.toml")
    assert {doctor.stack_kind(s) for s in m.spec.stacks.values()} == {None}
    _with_free(monkeypatch, 1)
    assert doctor.disk_checks(".", m, need_docker=False) == []


def test_the_real_disk_is_read(tmp_path):
    (check,) = doctor.disk_checks(str(tmp_path), None, need_docker=True)
    assert f"{shutil.disk_usage(tmp_path).free / 2**30:.0f} GiB free at {tmp_path}" in check.detail
