"""Our reader and verdicts against NVIDIA's own tools: cuobjdump on every fixture, and fresh
nvcc builds of the block-scaled FP4 MMA for each 12.x target (marker `nvcc`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from harness import proc
from harness.audit import crosscheck, tools
from harness.audit.report import audit_path
from harness.audit.sass import scan_cubin

CUBINS = Path(__file__).parent / "fixtures" / "cubins"
KERNELS = CUBINS / "kernels.cu"
MMA_KERNEL = "_Z21nvfp4_gemm_mma_kernelPKjPf"


def need(tool: str) -> None:
    if tools.find(tool) is None:
        if os.environ.get("HARNESS_REQUIRE_NVCC") == "1":
            pytest.fail(f"HARNESS_REQUIRE_NVCC=1 but {tool} is missing", pytrace=False)
        pytest.skip(f"{tool} not found (pip install -e '.[audit]')")


def test_every_fixture_matches_cuobjdump() -> None:
    need("cuobjdump")
    report = audit_path(CUBINS, sass_check=False)
    checks = crosscheck.check_all(report.files, CUBINS)
    assert len(checks) == 8  # every fatbin host; the two bare cubins have no fatbin header
    for c in checks:
        assert c.agrees, (c.path, c.ours, c.cuobjdump)


def test_parse_cuobjdump_headers() -> None:
    text = "Fatbin elf code:\n================\narch = sm_120f\ncode version = [1,8]\n\nFatbin ptx code:\n================\narch = sm_80\n"
    assert crosscheck.parse_cuobjdump(text) == ["sm_120f", "compute_80"]


def _nvcc(tmp: Path, arch: str) -> proc.Result:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    # -DFORCE_MMA: the probe below takes the MMA path on every target, so plain sm_120 must fail.
    src = tmp / "probe.cu"
    src.write_text(
        KERNELS.read_text().replace(
            "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200", "#if 1 //", 1
        )
    )
    return proc.run(
        [nvcc, "-cubin", f"-arch=sm_{arch}", "-o", str(tmp / f"p_{arch}.cubin"), str(src)],
        timeout=120,
    )


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("arch", "compiles"),
    [("120a", True), ("121a", True), ("120f", True), ("120", False), ("121", False)],
)
def test_block_scaled_fp4_mma_per_target(tmp_path: Path, arch: str, compiles: bool) -> None:
    """ptxas emits OMMA.SF for a- and f-targets of 12.x and refuses plain sm_120/sm_121."""
    result = _nvcc(tmp_path, arch)
    if not compiles:
        assert not result.ok
        assert "not supported on .target 'sm_12" in result.stderr
        return
    assert result.ok, result.stderr
    cubin = (tmp_path / f"p_{arch}.cubin").read_bytes()
    report = audit_path(tmp_path / f"p_{arch}.cubin", sass_check=False)
    assert dict(report.files[0].cubins) == {f"sm_{arch}": 1}
    need("nvdisasm")
    assert (
        scan_cubin(cubin, 12)
        .native_fp4[MMA_KERNEL]
        .startswith("OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X")
    )


@pytest.mark.nvcc
@pytest.mark.parametrize("arch", ["100a", "103a", "120a", "121a", "120f", "100f", "120", "90a"])
def test_bare_cubin_arch_per_target(tmp_path: Path, arch: str) -> None:
    """A standalone cubin for each Blackwell target: our name is cuobjdump's, plus the f
    that only ptxas' recorded command line keeps."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    out = tmp_path / f"k_{arch}.cubin"
    result = proc.run([nvcc, "-cubin", f"-arch=sm_{arch}", "-o", str(out), str(KERNELS)], timeout=300)
    assert result.ok, result.stderr
    report = audit_path(out, sass_check=False)
    assert report.complete
    assert dict(report.files[0].cubins) == {f"sm_{arch}": 1}
    need("cuobjdump")
    listed = tools.run("cuobjdump", "--list-elf", out).strip()
    assert listed.endswith(f".sm_{arch.rstrip('f')}.cubin"), listed


def test_sass_for_named_kernels_only() -> None:
    """Asked for the FP4 kernel only, nvdisasm disassembles that function (`-fun` by its
    symbol index) and the answer is the full run's; a kernel without the MMA reads ""."""
    need("nvdisasm")
    from harness.audit import elf
    from harness.audit.source import BytesReader

    cubin = (CUBINS / "nvfp4_sm121a.cubin").read_bytes()
    full = scan_cubin(cubin, 12).native_fp4
    assert len(full) == 7 and full[MMA_KERNEL].startswith("OMMA.SF.")
    symbols = elf.function_symbols(BytesReader(cubin), elf.header(cubin[:64]))
    assert set(symbols) == set(full)  # every kernel has its function symbol
    only = scan_cubin([bytearray(cubin)], 12, (MMA_KERNEL,)).native_fp4
    assert only == {MMA_KERNEL: full[MMA_KERNEL]}
    other = "_Z22cvt_fp16_to_fp4_kernelPKfPh"
    both = scan_cubin(cubin, 12, (MMA_KERNEL, other)).native_fp4
    assert both == {MMA_KERNEL: full[MMA_KERNEL], other: ""}


def test_sass_without_fun_when_the_list_is_too_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past what one argument may hold, the whole cubin is disassembled: same answer."""
    need("nvdisasm")
    from harness.audit import sass

    monkeypatch.setattr(sass, "_MAX_FUN_ARG", 1)
    cubin = (CUBINS / "nvfp4_sm121a.cubin").read_bytes()
    assert scan_cubin(cubin, 12, (MMA_KERNEL,)).native_fp4[MMA_KERNEL].startswith("OMMA.SF.")
    assert len(scan_cubin(cubin, 12, ("_Z22cvt_fp16_to_fp4_kernelPKfPh",)).native_fp4) == 7  # all kernels read
