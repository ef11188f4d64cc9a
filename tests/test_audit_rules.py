"""Arch naming, and the kernel family table (real vLLM 0.25.1 names); the loading rule is
tests/test_archs.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.archs import CudaArch
from harness.audit.families import FAMILIES, family_of

NAMES = Path(__file__).parent / "fixtures" / "cubins" / "vllm-0.25.1-kernel-names.tsv"


@pytest.mark.parametrize("name", ["sm_120f", "sm_90a", "compute_120f", "sm_75", "compute_100"])
def test_arch_names_round_trip(name: str) -> None:
    assert CudaArch.parse(name).name == name


@pytest.mark.parametrize("bad", ["sm120", "sm_120x", "compute_", "12.1"])
def test_bad_arch_names_raise(bad: str) -> None:
    with pytest.raises(ValueError, match="not a CUDA arch"):
        CudaArch.parse(bad)


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in NAMES.read_text().splitlines():
        if line and not line.startswith("#"):
            fam, name = line.split("\t")
            rows.append((fam, name))
    return rows


@pytest.mark.parametrize(("family", "name"), _rows(), ids=lambda v: v[:48])
def test_real_vllm_kernel_families(family: str, name: str) -> None:
    assert family in FAMILIES
    assert family_of(name) == family


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("_Z21nvfp4_gemm_mma_kernelPKjPf", "nvfp4_gemm"),
        ("_Z21cvt_fp16_to_fp4_kernelPKfPh", "fp4_quant"),
        ("_Z27moe_align_block_size_kernelPKiPi", "moe"),
        ("_Z24cutlass_scaled_mm_kernelPKfS0_Pf", "scaled_mm"),
        ("_Z18marlin_gemm_kernelPKiPf", "marlin"),
        ("_Z22paged_attention_kernelPKfS0_Pf", "attention"),
        ("_Z15rms_norm_kernelPf", "other"),
        # Marlin MoE is Marlin; grouped-GEMM pointer setup is MoE, not an FP4 GEMM.
        ("_ZN16marlin_moe_wna166MarlinILi256EEEvv", "marlin"),
        ("_Z29__get_group_gemm_startsIN7cutlass12float_e2m1_tEEvv", "moe"),
    ],
)
def test_fixture_and_edge_families(name: str, family: str) -> None:
    assert family_of(name) == family
