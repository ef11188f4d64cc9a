"""The committed H200 runs of examples/h200-source (vLLM 0.25.1 compiled from the sdist in
Docker) and of the wheel examples re-run at main, read back through the typed path: the report,
the fingerprint of the real server logs, `bug` from the image labels. Real data, made on an H200.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.fingerprint.parse import fingerprint
from harness.report.data import load

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "h200-source" / "run"
RERUNS = [ROOT / "examples" / "h200-docker" / "rerun-at-main" / "during-compile",
          ROOT / "examples" / "h200-docker" / "rerun-at-main" / "visit-3-during-compile",
          ROOT / "examples" / "h200-docker" / "rerun-at-main" / "alone",
          ROOT / "examples" / "h200" / "rerun-at-main" / "during-compile"]


def test_the_source_run_reads_back_with_what_its_logs_prove():
    r = load(SOURCE)
    by_id = {c.id: c for c in r.cells}
    assert set(by_id) == {"src-0251/qwen3moe-fp8/moe=triton", "src-0251/qwen3moe-nvfp4/moe=marlin"}
    assert all(c.status == "pass" for c in r.cells)
    logs = {p.name.split("__")[1]: p.read_text() for p in (SOURCE / "logs").glob("*.server.log")}
    fp8, nvfp4 = fingerprint(logs["qwen3moe-fp8"]), fingerprint(logs["qwen3moe-nvfp4"])
    assert fp8.moe_backend == "TRITON" and "CutlassFP8ScaledMMLinearKernel" in fp8.linear_kernels
    assert nvfp4.moe_backend == "MARLIN" and "MarlinNvFp4LinearKernel" in nvfp4.linear_kernels
    assert fp8.attention_backend == nvfp4.attention_backend == "TRITON_ATTN"
    (build,) = r.builds
    # audited for the chip the 12.1a build targets as well as the GPU it ran on: SM_121 pass with
    # the native FP4 MMA, SM_90 warn (Marlin by PTX JIT)
    assert build.audit_status == "warn"
    lines = " | ".join(build.audit_lines)
    assert "sm_121: pass" in lines and "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X" in lines
    assert "sm_90: warn" in lines


def test_the_visit_before_recorded_why_it_was_not_audited():
    (build,) = load(ROOT / "examples" / "h200-source" / "visit-2-run").builds
    # that run's own audit of the reused source image looked under /opt/venv: recorded, with why
    assert build.audit_status == "not-audited"
    assert any(line.startswith("not audited: ") and "/opt/venv/lib" in line for line in build.audit_lines)


def test_the_source_image_labels_name_every_pin():
    labels = json.loads((SOURCE / "builds" / "src-0251.json").read_text())["labels"]
    assert labels["harness.vllm.source"].startswith("pypi:vllm==0.25.1 sdist_sha256:ddbdec3f")
    assert labels["harness.flashinfer.prs"] == "#3668@95cb94741878c816742265515d20fdca01b5f923"
    assert labels["harness.offline"] == "true" and labels["harness.torch-cuda-arch-list"] == "9.0a;12.1a"
    assert "flash-attention" in labels["harness.vllm.left-out"].split(",")
    assert sum(k.startswith("harness.vllm.patch.") for k in labels) == 3


@pytest.mark.parametrize("run_dir", RERUNS, ids=lambda p: "/".join(p.parts[-3:]))
def test_the_reruns_at_main_read_back(run_dir):
    r = load(run_dir)
    (cell,) = r.cells
    assert cell.status == "pass" and cell.id.endswith("/qwen3moe-fp8/auto")
    # the wheel audited again (a reused image's audit was stored in a shape the report of that
    # day showed as '?'): SM_90 warn, Marlin by PTX JIT from compute_80
    (build,) = r.builds
    assert build.audit_status == "warn", (build.stack, build.audit_status)
