"""Every cubin form gets its right arch and a/f; relocatable code is reported apart; exit
codes follow the project table (0 ok, 1 a verdict failed, 2 bad input or an incomplete
audit); files a stack requires to hold kernels fail when they hold none."""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import pytest

from harness.audit.report import audit_path
from harness.audit.scan import audit_bytes
from harness.audit.verdict import Target
from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
CUBINS = ROOT / "tests" / "fixtures" / "cubins"
WHEELS = ROOT / "tests" / "fixtures" / "wheels"


# What `cuobjdump --list-elf` (13.5) prints for each real fixture, and what we report: the
# same, except that an f recorded by ptxas (.note.nv.tkinfo) is kept (cuobjdump drops it).
@pytest.mark.parametrize(
    ("fixture", "cuobjdump", "ours"),
    [
        ("fi_fmhaSm100a_noflags.cubin", "sm_100a", "sm_100a"),  # a only in e_flags bit 0x8
        ("fi_bmm_sm103a_noflags.cubin", "sm_103a", "sm_103a"),
        ("fi_fmhaSm103a_tkinfo.cubin", "sm_103a", "sm_103a"),
        ("fi_bmm_sm100_named_sm100f.cubin", "sm_100", "sm_100"),  # the name says f; the cubin does not
        ("fi_gemm_sm100f_tkinfo.cubin", "sm_100", "sm_100f"),
        ("sgl_common_ops_sm120a_fp4.fatbin", "sm_120a", "sm_120a"),
        ("vllm_C_sm120f_fp4_zstd.fatbin", "sm_120", "sm_120f"),  # f from the entry flags
    ],
)
def test_real_wheel_cubins(fixture: str, cuobjdump: str, ours: str) -> None:
    audit = audit_bytes(fixture, (WHEELS / fixture).read_bytes())
    assert [o.arch.name for o in audit.objects] == [ours]
    assert ours.rstrip("f") == cuobjdump or ours == cuobjdump


def test_real_fp4_kernels_found_in_zstd_and_plain_entries() -> None:
    vllm = audit_bytes("v", (WHEELS / "vllm_C_sm120f_fp4_zstd.fatbin").read_bytes()).objects[0]
    sgl = audit_bytes("s", (WHEELS / "sgl_common_ops_sm120a_fp4.fatbin").read_bytes()).objects[0]
    assert len(vllm.fp4_kernels) == 4 and vllm.families["nvfp4_gemm"] == 4
    assert len(sgl.fp4_kernels) == 3 and sum(sgl.families.values()) == 5


def test_relocatable_device_code_is_reported_apart(tmp_path: Path) -> None:
    # nvcc -rdc=true -shared: __nv_relfatbin holds the object's sm_120a cubin, .nv_fatbin the
    # device-linked one (cuobjdump lists 1 by default, 2 with -all).
    audit = audit_bytes("rdc.so", (CUBINS / "rdc_sm120a.so").read_bytes())
    assert [o.arch.name for o in audit.objects] == ["sm_120a"]
    assert dict(audit.relocatable_cubins) == {"sm_120a": 1}
    report = audit_path(CUBINS / "rdc_sm120a.so", [Target.from_cc("12.0")], sass_check=False)
    j = report.to_json()
    assert j["files"][0]["cubins"] == {"sm_120a": 1}
    assert j["files"][0]["relocatable"] == {"cubins": {"sm_120a": 1}, "ptx": []}
    assert report.totals() == {"sm_120a": 1}


def _wheel(tmp_path: Path, members: dict[str, bytes]) -> Path:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    path = tmp_path / "vllm-9.9.9-cp38-abi3-linux_x86_64.whl"
    path.write_bytes(buf.getvalue())
    return path


HOST_ONLY = Path(sys.executable).resolve().read_bytes()  # a real ELF with no CUDA code


def test_required_file_without_cuda_code_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whl = _wheel(
        tmp_path,
        {
            "vllm/_C_stable_libtorch.abi3.so": HOST_ONLY,
            "vllm/_moe_C_stable_libtorch.abi3.so": (CUBINS / "nvfp4_sm120f.so").read_bytes(),
            "vllm/cumem_allocator.abi3.so": HOST_ONLY,  # host code is allowed here
        },
    )
    assert main(["audit", str(whl), "--no-sass"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "vllm/_C_stable_libtorch.abi3.so: no CUDA code, yet vLLM's _C extension holds its custom CUDA kernels" in err
    assert "cumem_allocator" not in err


def test_no_cuda_code_at_all_is_not_a_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "libhost.so").write_bytes(HOST_ONLY)
    assert main(["audit", str(tmp_path / "libhost.so")]) == 1
    assert "no loadable CUDA code in 1 candidate files" in " ".join(capsys.readouterr().err.split())


def test_no_binaries_at_all_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    report = audit_path(tmp_path, [Target.from_cc("12.1")])
    assert report.status == "warn" and report.complete
    assert main(["audit", str(tmp_path), "--fail-on", "warn"]) == 1
    assert main(["audit", str(tmp_path)]) == 0


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        # A correct Blackwell-only build passes when nobody asks about Hopper.
        (["nvfp4_sm120a_sm121a.so"], 0, "no target chip given"),
        (["nvfp4_sm120a_sm121a.so", "--cc", "12.0", "--cc", "12.1"], 0, ""),
        # Asked about a chip it has no code for: exit 1 and a line saying why.
        (["nvfp4_sm120a_sm121a.so", "--cc", "9.0"], 1, "fail: SM_90 (9.0): SM_90: no loadable MoE kernel"),
        (["nvfp4_sm120a.so", "--cc", "12.1"], 1, "fail: SM_121 (12.1): SM_121: no loadable NVFP4 GEMM kernel"),
        (["nvfp4_sm120a.so", "--cc", "sm_121"], 2, "compute capability"),
    ],
)
def test_exit_codes(argv: list[str], code: int, needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(CUBINS / argv[0]), "--no-sass", *argv[1:]]) == code
    assert needle in " ".join(capsys.readouterr().err.split())


def test_incomplete_audit_exits_2_and_says_which_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = (CUBINS / "nvfp4_sm120a.so").read_bytes()
    (tmp_path / "good.so").write_bytes(data)
    (tmp_path / "half.so").write_bytes(data[: len(data) // 2])
    assert main(["audit", str(tmp_path), "--cc", "12.0", "--no-sass", "--json"]) == 2
    out = capsys.readouterr()
    j = json.loads(out.out)
    assert j["complete"] is False and j["status"] == "incomplete"
    assert [u["path"] for u in j["unreadable"]] == ["half.so"]
    assert "truncated" in j["unreadable"][0]["reason"]
    assert "unreadable: half.so: truncated" in " ".join(out.err.split())


def test_matrix_hardware_is_the_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matrix = ROOT / "matrix" / "spark.toml"
    if not matrix.exists():
        pytest.skip("matrix/spark.toml not in this checkout")
    rc = main(["audit", str(CUBINS / "nvfp4_sm120a.so"), "-m", str(matrix), "--no-sass", "--json"])
    j = json.loads(capsys.readouterr().out)
    assert [v["cc"] for v in j["verdicts"]] == ["12.1"]
    assert rc == 1  # sm_120a code does not load on the Spark's 12.1


def test_help_documents_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    text = capsys.readouterr().out
    for line in ("0  every verdict", "1  a verdict failed", "2  bad input", "3  this host cannot"):
        assert line in text
