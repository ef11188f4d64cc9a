"""Verdicts per target chip, from real fixture builds; SASS read with nvdisasm when present."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness.audit import tools
from harness.audit.report import audit_path
from harness.audit.sass import parse_disassembly
from harness.audit.verdict import Target
from harness.cli import main

CUBINS = Path(__file__).parent / "fixtures" / "cubins"
T120, T121, T90 = Target.from_cc("12.0"), Target.from_cc("12.1"), Target.from_cc("9.0")


def need(tool: str) -> None:
    if tools.find(tool) is None:
        if os.environ.get("HARNESS_REQUIRE_NVCC") == "1":
            pytest.fail(f"HARNESS_REQUIRE_NVCC=1 but {tool} is missing", pytrace=False)
        pytest.skip(f"{tool} not found (pip install -e '.[audit]')")


# (fixture, target, status, words the message must hold), SASS checked.
CASES = [
    # The 12.0a;12.1a-on-CUDA-13 trap in small: arch-specific 12.0 code only.
    ("nvfp4_sm120a.so", T120, "pass", ["only as sm_120a", "1 of 1", "OMMA.SF"]),
    ("nvfp4_sm120a.so", T121, "fail", ["no loadable NVFP4 GEMM kernel", "only as sm_120a"]),
    (
        "nvfp4_sm120a_sm121a.so",
        T121,
        "pass",
        ["12.1 loads sm_121a (arch-specific SASS)", "OMMA.SF"],
    ),
    # A family build holds the native MMA and loads on GB10 (per NVIDIA's family rule).
    ("nvfp4_sm120f.so", T121, "pass", ["only as sm_120f", "family SASS", "1 of 1", "OMMA.SF"]),
    # Plain sm_120: ptxas cannot emit the block-scaled MMA, so the kernel is software FP4.
    ("nvfp4_sm120_ptx.so", T121, "warn", ["sm_120 (same-major SASS)", "none of 1", "software"]),
    ("nvfp4_sm121a.cubin", T120, "fail", ["no loadable NVFP4 GEMM kernel", "only as sm_121a"]),
    ("nvfp4_sm120f.so", T90, "fail", ["no loadable MoE kernel"]),
    ("mixed.so", T90, "pass", ["MoE kernels load natively"]),
    ("mixed.so", T121, "pass", ["sm_120f (family SASS)", "sm_121a (arch-specific SASS)", "2 of 3"]),
]


@pytest.mark.parametrize(
    ("fixture", "target", "status", "words"), CASES, ids=lambda v: getattr(v, "name", str(v))
)
def test_verdicts_with_sass(fixture: str, target: Target, status: str, words: list[str]) -> None:
    need("nvdisasm")
    (verdict,) = audit_path(CUBINS / fixture, [target]).verdicts
    assert verdict.status == status, verdict.message
    for w in words:
        assert w in verdict.message


def test_without_sass_the_verdict_says_so() -> None:
    report = audit_path(CUBINS / "nvfp4_sm120_ptx.so", [T121], sass_check=False)
    assert report.verdicts[0].status == "pass"
    assert "SASS not checked" in report.verdicts[0].message
    assert report.stats.sass_cubins == 0


def test_hopper_skips_fp4_families() -> None:
    (v,) = audit_path(CUBINS / "mixed.so", [T90], sass_check=False).verdicts
    by_family = {c.family: c.status for c in v.checks}
    assert by_family["nvfp4_gemm"] == "skip" and by_family["fp4_quant"] == "skip"
    assert by_family["moe"] == "pass"


def test_json_and_summary_shapes() -> None:
    report = audit_path(CUBINS, [T120, T121], sass_check=False)
    j = report.to_json()
    assert {"files", "totals", "verdicts", "elapsed_s"} <= j.keys()
    by_path = {f["path"]: f for f in j["files"]}
    assert by_path["nvfp4_sm120a_sm121a.so"]["cubins"] == {"sm_120a": 2, "sm_121a": 2}
    assert by_path["mixed.so"]["ptx"] == ["compute_80", "compute_120f"]
    assert by_path["mixed.so"]["families"]["nvfp4_gemm"] == {
        "compute_80": 1,
        "sm_90": 1,
        "sm_90a": 1,
        "sm_100f": 1,
        "sm_120": 1,
        "compute_120f": 1,
        "sm_120f": 1,
        "sm_121a": 1,
    }
    # kernels.fatbin, mixed.so, nvfp4_sm120f.cubin, nvfp4_sm120f.so x2 (one is the dlink stub)
    assert j["totals"]["sm_120f"] == 5
    assert [v["target"] for v in j["verdicts"]] == ["SM_120", "SM_121"]
    json.dumps(j)  # serialisable as is
    s = report.summary()
    assert s["audit.sass_checked"] == "no"
    assert all(isinstance(v, str) and len(v) <= 240 for v in s.values())
    assert s["audit.nvfp4_gemm"].startswith("compute_80=1,compute_90=1,sm_90=2,")


SASS_SNIPPET = """
	.section	.text._Z21nvfp4_gemm_mma_kernelPKjPf,"ax",@progbits
.text._Z21nvfp4_gemm_mma_kernelPKjPf:
        /*0090*/                   LDG.E R4, desc[UR4][R2.64] ;
        /*00a0*/               @P0 OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X R8, R4, R8, RZ, R0, R0, URZ ;
.text._Z8softwarePf:
        /*0010*/                   FFMA R1, R2, R3, R4 ;
        /*0020*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
"""


def test_parse_disassembly_per_kernel() -> None:
    scan = parse_disassembly(SASS_SNIPPET, 12)
    assert scan.native_fp4 == {
        "_Z21nvfp4_gemm_mma_kernelPKjPf": "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X",
        "_Z8softwarePf": "",
    }
    assert parse_disassembly(SASS_SNIPPET, 10).native_fp4["_Z21nvfp4_gemm_mma_kernelPKjPf"] == ""


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (
            ["nvfp4_sm120a.so", "--target-cc", "12.1", "--no-sass"],
            1,
            "no loadable NVFP4 GEMM kernel",
        ),
        (["nvfp4_sm120a.so", "--target-cc", "12.0", "--no-sass"], 0, "sm_120a"),
        (
            ["nvfp4_sm120_ptx.so", "--target-cc", "12.0", "--no-sass", "--fail-on", "warn"],
            0,
            "SASS not checked",
        ),
    ],
)
def test_cli(argv: list[str], code: int, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["audit", str(CUBINS / argv[0]), *argv[1:]])
    text = capsys.readouterr().out
    assert rc == code
    assert needle in " ".join(text.split())


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["audit", str(CUBINS / "kernels.o"), "--json", "--no-sass", "--target-cc", "12.1"])
        == 0
    )
    j = json.loads(capsys.readouterr().out)
    assert j["files"][0]["cubins"] == {"sm_90": 1, "sm_121a": 1}
    assert j["verdicts"][0]["status"] == "pass"


def test_cli_bad_target_cc(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(CUBINS), "--target-cc", "sm_121"]) == 2
    assert "compute capability" in capsys.readouterr().err


def test_cli_missing_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "/nonexistent/site-packages"]) == 2
    assert "no such file" in capsys.readouterr().err
