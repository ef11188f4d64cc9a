"""Arch naming and loading rules, and the kernel family table (real vLLM 0.25.1 names)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.audit.archs import CC, CudaArch, Load
from harness.audit.families import FAMILIES, family_of

NAMES = Path(__file__).parent / "fixtures" / "cubins" / "vllm-0.25.1-kernel-names.tsv"


@pytest.mark.parametrize(
    ("arch", "cc", "load"),
    [
        ("sm_120", "12.0", Load.NATIVE),
        ("sm_120", "12.1", Load.NATIVE),  # plain SASS: same major, minor >= 0
        ("sm_121", "12.0", Load.NO),
        ("sm_120a", "12.0", Load.NATIVE),
        ("sm_120a", "12.1", Load.NO),  # arch-specific: exactly 12.0
        ("sm_121a", "12.1", Load.NATIVE),
        ("sm_121a", "12.0", Load.NO),
        ("sm_120f", "12.1", Load.NATIVE),  # family: the 12.x members at minor >= 0
        ("sm_121f", "12.0", Load.NO),
        ("sm_100f", "10.3", Load.NATIVE),
        ("sm_100f", "12.0", Load.NO),
        ("sm_80", "9.0", Load.NO),  # SASS never crosses a major
        ("sm_90a", "9.0", Load.NATIVE),
        ("compute_80", "9.0", Load.JIT),
        ("compute_80", "12.1", Load.JIT),
        ("compute_120", "9.0", Load.NO),
        ("compute_120f", "12.1", Load.JIT),
        ("compute_120f", "13.0", Load.NO),
        ("compute_120a", "12.1", Load.NO),
    ],
)
def test_load_rules(arch: str, cc: str, load: Load) -> None:
    assert CudaArch.parse(arch).load_on(CC.parse(cc)) is load


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
