"""One docker stack's build resolved once (harness.image.stackbuild): the lock applied in one
place, and what `harness plan` names is what `harness build` builds. The pins here are given in
the matrix (sdist sha256s) or by a stand-in for the engine's pull (the base digest); nothing is
fetched."""

from __future__ import annotations

import json
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from harness import lock, platforms
from harness.cli import main
from harness.image.builder import build_stacks, unpinned
from harness.image.dockerfile import render
from harness.image.identity import image_ref
from harness.image.stackbuild import resolve
from harness.matrix.load import load_matrix

DIGEST = "sha256:" + "ab" * 32
MATRIX = """
[matrix]
name = "sb"
hardware = "rtx"
[hardware.rtx]
cc = "9.0"
bandwidth_gbs = 1
memory_gib = 1
[stacks.a]
torch_cuda_arch_list = "9.0a;12.1a"  # runs on the rtx it would serve on (harness plan refuses a list that does not)
base_image = { repository = "example/cuda", tag = "13.0.1" }
torch = { version = "2.14.0" }
vllm = { pypi = "0.33.0", sdist_sha256 = "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112" }
flashinfer = { version = "0.7.2.post1", cubin = false, sdist_sha256 = "af60319898dcfd552ba12a34165b9dd46c0bbd83d48ce665b1df6bd6ae77e9f1" }
[stacks.here]
runner = "local"
local = { python = "/usr/bin/python3" }
[models.m]
checkpoint = "org/m"
quantization = "fp8"
active_params_b = 1
bytes_per_param = 1
[configs.c]
"""


class Puller:
    """The engine's pull, as `harness lock` uses it: the tag's digest."""

    def pull_digest(self, repository: str, tag: str) -> str:
        return DIGEST


@pytest.fixture
def locked(tmp_path: Path) -> Path:
    path = tmp_path / "sb.toml"
    path.write_text(MATRIX)
    lock.write_lock(lock.resolve(load_matrix(path), engine_factory=Puller), lock.lock_path(path))
    return path


def test_plan_names_the_tag_the_build_builds_once_a_lock_exists(locked: Path, capsys) -> None:
    matrix = load_matrix(locked)
    (build,) = resolve(matrix, ["a"], platform=platforms.host())
    assert build.stack.base_image.digest == DIGEST  # the lock applied
    built = render(build, requirements=False).image_ref
    assert main(["plan", "-m", str(locked), "--json"]) == 0
    rows = {r["stack"]: r["image"] for r in json.loads(capsys.readouterr().out)}
    assert rows == {"a": built, "here": "local:/usr/bin/python3"}
    # the matrix without its lock renders another image: plan used to name that one
    from harness.image.stackbuild import StackBuild

    unlocked = StackBuild("a", matrix.spec.stacks["a"], matrix, build.platform)
    assert image_ref(unlocked) != built


@pytest.mark.network
def test_the_lock_is_applied_once_and_the_build_reads_none(locked: Path, monkeypatch, default_sources) -> None:
    applied = []
    real = lock.apply_lock
    monkeypatch.setattr(lock, "apply_lock", lambda *a, **k: applied.append(1) or real(*a, **k))
    builds = resolve(load_matrix(locked), ["a"], platform=platforms.AMD64)
    assert applied == [1]
    assert unpinned(builds) == []

    def no_lock(*_a, **_k):
        raise AssertionError("the build read the lock again")

    monkeypatch.setattr(lock, "read_lock", no_lock)
    monkeypatch.setattr(lock, "apply_lock", no_lock)

    class Existing:
        """An engine that has every image already (reused, no audit): the build renders only."""

        def image_labels(self, ref):
            return {"harness.stack": "a"}

        def image_platform(self, ref):
            return None

        def image_id(self, ref):
            return "sha256:" + "cd" * 32

    out = build_stacks(builds, engine=Existing(), log_dir=locked.parent / "logs", audit=False)
    assert out["a"].status == "reused" and out["a"].image_ref == render(builds[0]).image_ref


def test_a_resolved_build_is_frozen_and_says_what_it_is_judged_for(tmp_path: Path) -> None:
    path = tmp_path / "sb.toml"
    path.write_text(MATRIX)
    (build,) = resolve(load_matrix(path), ["a"], platform=platforms.ARM64, template_values={"X": "1"})
    with pytest.raises(FrozenInstanceError):
        build.name = "b"  # type: ignore[misc]
    assert build.platform is platforms.ARM64 and dict(build.template_values) == {"X": "1"}
    assert build.audit_ccs == ("9.0", "12.1")  # the matrix's GPU and the chip the arch list builds for
    assert build.with_values({"Y": "2"}).template_values == {"X": "1", "Y": "2"}
    assert unpinned([build]) == ["stacks.a.base_image: example/cuda:13.0.1 has no digest"]  # no lock here
