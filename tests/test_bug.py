"""`harness bug` on real run directories: every section, the right tracker, no secret."""

from __future__ import annotations

import pytest
from conftest import make_runs_module

from harness.cli import main as cli_main
from harness.errors import ConfigError
from harness.results.bug import bug_report

SECTIONS = (
    "## Environment",
    "### Host",
    "### Image",
    "### Patches (from the image labels, with sha256)",
    "### Archs actually compiled",
    "## Rebuild the exact image",
    "## Serve command and environment",
    "## Expected vs actual",
    "## Evidence from the server log",
    "## Reproduce",
    "Likely tracker:",
)


@pytest.fixture(scope="session")
def mr():
    return make_runs_module()


@pytest.fixture(scope="session")
def cand(tmp_path_factory, mr):
    return mr.build_all(tmp_path_factory.getbasetemp() / "runs")["candidate"]


def test_mismatch_cell_report(cand, mr):
    text = bug_report(cand, mr.MARLIN)
    for section in SECTIONS:
        assert section in text, section
    title = text.splitlines()[0]
    assert title.startswith("# [NVIDIA GB10 (SM_121, cc 12.1)]")
    assert "--moe-backend not honoured: asked marlin, got HUMMING" in title
    assert "vLLM 0.25.1" in title and "590.48.01" in title
    assert "Likely tracker: **vLLM**" in text
    assert "| MoE backend | marlin | HUMMING |" in text
    # Evidence: the selection lines quoted from the log, not the whole log.
    assert "Using 'HUMMING' NvFp4 MoE backend" in text
    assert "Using MarlinNvFp4LinearKernel for NVFP4 GEMM" in text
    assert "Last " not in text  # a served cell gets its evidence, not a log tail
    assert f"harness run -m matrix/spark.toml -k '{mr.MARLIN}'" in text
    assert f"harness build -m matrix/spark.toml -k '{mr.MARLIN}'" in text
    assert "harness.patch.vllm.0001-cmake-sm121a.patch" in text and "sha256:" in text
    assert "audit.nvfp4_gemm" in text
    assert "580.142" not in text  # the candidate's host, not the baseline's


def test_crashed_cell_report(cand, mr):
    text = bug_report(cand, mr.CRASH)
    for section in SECTIONS:
        assert section in text, section
    assert "illegal-memory-access: server crashes at start-up" in text.splitlines()[0]
    assert "an illegal memory access was encountered" in text
    assert "Last " in text and "EngineCore failed to start" in text
    assert "Cell status: **crashed**" in text


def test_driver_signature_points_at_the_driver(mr):
    from harness.results.bug import trackers

    cell = {"status": "crashed", "fingerprint": {"signatures": ["nv-err-no-memory"]}}
    assert trackers(cell)[0].key == "driver"
    cell = {
        "status": "fail",
        "verdicts": [
            {
                "check": "autotuner:trtllm::fused_moe::gemm2",
                "status": "fail",
                "message": "skipped 10",
            }
        ],
    }
    assert trackers(cell)[0].key == "flashinfer"


def test_no_secret_in_any_report(cand, mr):
    for cid in mr.PLAN:
        text = bug_report(cand, cid)
        for secret in mr.SECRETS:
            assert secret not in text, (cid, secret)
        assert "HF_TOKEN='***'" in text and "--api-key ***" in text


def test_unknown_cell_names_the_finished_ones(cand):
    with pytest.raises(ConfigError, match="no finished cell") as exc:
        bug_report(cand, "nope/nope/nope")
    assert "vllm-0251/qwen3moe-fp8/auto" in exc.value.hint


def test_cli_writes_the_report(cand, mr, tmp_path, capsys):
    out = tmp_path / "bug.md"
    assert cli_main(["bug", str(cand.dir), mr.CRASH, "--out", str(out)]) == 0
    assert out.read_text().startswith("# [NVIDIA GB10")
    assert cli_main(["bug", str(cand.dir), mr.MARLIN]) == 0
    assert "## Reproduce" in capsys.readouterr().out
