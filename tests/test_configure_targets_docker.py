"""tools/configure-targets.sh on the real vLLM sdists in the toolchain image (nvcc 13.0, no GPU):
with no 9.0 in the arch list, vllm-flash-attn's FA3 intersection is empty yet `_vllm_fa3_C` is in
the build graph with no arch flag; patches/vllm/fa3-only-when-asked.patch leaves the configure
as it is and takes the target out of what setup.py asks `cmake --build` for.

Needs the toolchain image (tools/toolchain-base.sh) and the two sdists (in the user cache, or
downloaded from PyPI). The source trees are the fixtures: CUTLASS and FlashMLA from
tests/fixtures/offline, vllm-flash-attn and QuTLASS from tests/fixtures/configure.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
IMAGE = "harness-test/toolchain:cu130"
PATCH = ROOT / "patches" / "vllm" / "fa3-only-when-asked.patch"
SDISTS = {"0.25.1": "ddbdec3f1c0f21afa70b7eb6ddf3faa29d26b1302ee4b5d5e00ec3af41b0c2e4",
          "0.33.0": "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"}
TREES = {"CUTLASS": "offline/cutlass-da5e086dab31.tar.xz", "FLASHMLA": "offline/flashmla-a6ec2ba7bd0a.tar.xz",
         "FA": "configure/flash-attention-2c839c337423.tar.xz", "QUTLASS": "configure/qutlass-830d2c4537c7.tar.xz"}

pytestmark = [pytest.mark.docker, pytest.mark.network]


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, str]:
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False).returncode:
        pytest.skip(f"no {IMAGE} image here: make it with tools/toolchain-base.sh")
    base = tmp_path_factory.mktemp("trees")
    env = {}
    for name, archive in TREES.items():
        with tarfile.open(FIXTURES / archive) as tar:
            tar.extractall(base / name, filter="data")
        env[f"{name}_SRC"] = str(base / name)
        env[f"{name}_PIN"] = Path(archive).name
    return env


def _configure(trees: dict, version: str, arch_list: str, out: Path, *patches: Path, pinned) -> dict:
    sdist = pinned.sdist("vllm", version)  # SDISTS' sha256, checked
    res = subprocess.run([str(ROOT / "tools" / "configure-targets.sh"), str(sdist), arch_list, str(out), *map(str, patches)],
                         env={**os.environ, **trees}, capture_output=True, text=True, timeout=1200, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads((out / "record.json").read_text())


def test_fa3_is_in_the_graph_without_an_arch_and_the_patch_takes_it_out_of_the_build(trees, tmp_path, pinned_sources):
    stock = _configure(trees, "0.25.1", "12.1a", tmp_path / "stock", pinned=pinned_sources)
    patched = _configure(trees, "0.25.1", "12.1a", tmp_path / "patched", PATCH, pinned=pinned_sources)
    for rec in (stock, patched):
        assert rec["returncode"] == 0 and rec["supported_archs"] == "12.0"
        assert rec["decisions"]["FA3_ARCHS"] == "" and rec["decisions"]["FA2_ARCHS"] == "8.0+PTX"
        assert rec["fa3"]["cuda_objects"] == 192 and rec["fa3"]["arch_flags_of_one_object"] == []
        assert rec["toolchain"]["nvcc_default_arch"] == "compute_75, sm_75"
    # the configure is the same; only what setup.py asks to build changes
    assert stock["targets"] == patched["targets"]
    assert (tmp_path / "stock" / "fa3-targets.txt").read_text() == (tmp_path / "patched" / "fa3-targets.txt").read_text()
    assert stock["fa3"]["asked_by_setup_py"] is True and patched["fa3"]["asked_by_setup_py"] is False
    assert stock["cuda_objects_setup_py_builds"] == stock["cuda_objects_total"]
    assert patched["cuda_objects_setup_py_builds"] == patched["cuda_objects_total"] - 192
    assert patched["patches"] == [{"file": PATCH.name, "sha256": patched["patches"][0]["sha256"], "applied": True}]


def test_with_a_9_0_entry_the_patched_build_keeps_fa3_for_9_0a(trees, tmp_path, pinned_sources):
    rec = _configure(trees, "0.25.1", "9.0a;12.1a", tmp_path / "hopper", PATCH, pinned=pinned_sources)
    assert rec["decisions"]["FA3_ARCHS"] == "9.0a"
    assert rec["fa3"]["arch_flags_of_one_object"] == ["-gencode arch=compute_90a,code=sm_90a"]
    assert rec["fa3"]["asked_by_setup_py"] is True
    assert rec["cuda_objects_setup_py_builds"] == rec["cuda_objects_total"]


def test_the_patch_applies_to_0_33_0_and_says_no_fa3_for_12_1a(trees, tmp_path, pinned_sources):
    rec = _configure(trees, "0.33.0", "12.1a", tmp_path / "v033", PATCH, pinned=pinned_sources)
    assert rec["patches"][0]["applied"] is True and rec["fa3"]["asked_by_setup_py"] is False
    assert rec["supported_archs"] == "12.0"
    # with GCC < 13 (Debian 12) 0.33.0 stops at its compiler check, before vllm-flash-attn
    assert rec["returncode"] == 0 or "GCC >= 13 required" in (rec["stopped_at"] or "")
