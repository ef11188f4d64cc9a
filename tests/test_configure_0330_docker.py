"""vLLM 0.33.0's CMake configure on the stand-in for the registry base (tools/cuda13-devel-base.sh:
Debian trixie, GCC 13, torch 2.14.0, nvcc 13.0 from PyPI's wheels), no GPU, no network: the arch
decisions of the default stacks, stock and with patches/vllm/0001-cmake-sm121a-on-cuda13.patch,
so that a release whose arch decisions change is caught here first.

Each configure runs to the end (build.ninja written), which the GCC 12 of the older toolchain
image cannot do (0.33.0 stops at `GCC >= 13 required`). The sources vLLM's CMake fetches: the
QuTLASS pin and the CUTLASS v4.7.0 stand-in shipped in tests/fixtures/offline (content sha256
checked on the way in); patches/vllm/vllm-0.33.0-probe-offline.patch leaves out the projects no
snapshot held (their decisions come after the ones asserted here). Needs the image: `make
test-toolchain` builds it; CI (HARNESS_REQUIRE_TOOLCHAIN=1) fails without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from harness.image import offline

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
IMAGE = "harness-test/cuda13-devel:trixie"
ARCH = ROOT / "patches" / "vllm" / "0001-cmake-sm121a-on-cuda13.patch"
CUT = ROOT / "patches" / "vllm" / "vllm-0.33.0-probe-offline.patch"
# the kernels the verdict reads (CMakeLists.txt's own "Building X for archs:" lines)
VERDICT = ("SM12x NVFP4", "scaled_mm_c3x_sm120", "moe_data")
# SM12x kernels 0001 leaves at 12.0f on purpose (its header says why)
LEFT = ("dsv3_fused_a_gemm", "fp32_router_gemm", "fused KDA decode", "fused GDN decode")
# every list 0001 sets, printed by it beside the stock list
# "CUDA supported target architectures:" (CUDA 13.0 lists 12.0, no 12.1)
SUPPORTED = {"12.1a": "12.0", "12.0a": "12.0a"}
PATCHED_LISTS = ("MARLIN_ARCHS", "MARLIN_BF16_ARCHS", "MARLIN_FP8_ARCHS", "SCALED_MM_ARCHS", "CUTLASS_MOE_DATA_ARCHS",
                 "FP4_SM120_ARCHS", "MARLIN_MOE_ARCHS", "MARLIN_MOE_FP8_ARCHS")


@pytest.fixture(scope="module")
def trees(tmp_path_factory) -> dict[str, str]:
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, check=False).returncode:
        why = (f"{IMAGE} is missing: `make test-toolchain` builds it (tools/cuda13-devel-base.sh: 3.1 GB of "
               "wheels, a 6.7 GB image, ~9 min on 2 cores)")
        if os.environ.get("HARNESS_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(why)
        pytest.skip(why)
    base = tmp_path_factory.mktemp("trees")
    table = offline.load_table("0.33.0")
    env = {}
    for pin, var in ((next(p for p in table.pins if p.name == "qutlass"), "QUTLASS"), (table.stand_ins[0], "CUTLASS")):
        archive = offline.fetch(pin, from_dir=ROOT / "tests" / "fixtures" / "offline", cache=base / "cache")
        with tarfile.open(archive) as tar:
            tar.extractall(base / var, filter="data")
        env[f"{var}_SRC"] = str(base / var)
        env[f"{var}_PIN"] = f"{pin.name}@{pin.commit[:12]}" + (f" (stand-in for {pin.stands_in_for})"
                                                                if pin.stands_in_for else "")
    return env


@pytest.fixture(scope="module")
def sdist(pinned_sources) -> Path:
    return pinned_sources.sdist("vllm", "0.33.0")


def _configure(sdist: Path, trees: dict, arch_list: str, out: Path, *patches: Path) -> dict:
    res = subprocess.run([str(ROOT / "tools" / "configure-targets.sh"), str(sdist), arch_list, str(out),
                          *map(str, patches)], env={**os.environ, **trees, "IMAGE": IMAGE}, capture_output=True,
                         text=True, timeout=1200, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    rec = json.loads((out / "record.json").read_text())
    log = (out / "configure.log").read_text()
    assert rec["returncode"] == 0, (rec["stopped_at"], log[-3000:])  # GCC 13: the configure runs to the end
    assert rec["cuda_objects_total"] > 0 and rec["supported_archs"] == SUPPORTED[arch_list]
    tc = rec["toolchain"]
    assert "13.3" in tc["gcc"] and "release 13.0" in tc["nvcc"] and tc["torch"].startswith("2.14.0")
    # the stand-in base says what it stands in for, in the record itself
    assert tc["base_labels"]["harness.base.stand-in-for"] == "nvidia/cuda:13.0.1-devel-ubuntu24.04"
    assert {"harness.base.os", "harness.base.gcc", "harness.base.python", "harness.base.cuda",
            "harness.base.torch"} <= set(tc["base_labels"])
    assert rec["sources"]["cutlass"]["pin"] == "cutlass@dcf215af68a2 (stand-in for v4.7.1)"
    return rec


def test_stock_0330_builds_the_sm12x_kernels_for_12_0f_and_0001_for_12_1a(sdist, trees, tmp_path):
    stock = _configure(sdist, trees, "12.1a", tmp_path / "stock", CUT)
    patched = _configure(sdist, trees, "12.1a", tmp_path / "patched", ARCH, CUT)
    assert {k: stock["decisions"][k] for k in VERDICT} == dict.fromkeys(VERDICT, "12.0f")  # the trap
    assert {k: patched["decisions"][k] for k in VERDICT} == dict.fromkeys(VERDICT, "12.1a")
    # the configure log alone shows every list 0001 changed, Marlin's template lists included
    assert {k: patched["decisions"][f"SM12x arch list {k}"] for k in PATCHED_LISTS} == dict.fromkeys(
        PATCHED_LISTS, "12.1a (stock: 12.0f)")
    assert not any(k.startswith("SM12x arch list") for k in stock["decisions"])
    # Marlin's own line names only its generic files, the same either way
    assert stock["decisions"]["Marlin kernels"] == patched["decisions"]["Marlin kernels"] == "8.0+PTX"
    for rec in (stock, patched):
        assert {k: rec["decisions"][k] for k in LEFT} == dict.fromkeys(LEFT, "12.0f")


def test_the_rtx_list_builds_12_0a_without_a_patch(sdist, trees, tmp_path):
    rec = _configure(sdist, trees, "12.0a", tmp_path / "rtx", CUT)
    assert {k: rec["decisions"][k] for k in VERDICT + LEFT} == dict.fromkeys(VERDICT + LEFT, "12.0a")
