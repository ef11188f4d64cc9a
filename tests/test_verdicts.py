"""Verdicts on real logs, and the requested -> log-name table (harness/data/kernel_names.toml)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from harness.fingerprint.parse import fingerprint
from harness.fingerprint.tables import kernel_names, signatures
from harness.fingerprint.verdicts import verdicts

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
ROOT = Path(__file__).resolve().parent.parent


def fp_of(case: str, **kw):
    return fingerprint((LOGS / f"{case}.log").read_text(encoding="utf-8"), **kw)


def by_check(vs):
    return {v.check: v for v in vs}


def test_asked_marlin_linear_got_cutlass_is_a_fail_quoting_the_line():
    # vllm#43507: --moe-backend marlin honoured, the dense path ran CUTLASS.
    vs = by_check(
        verdicts(
            fp_of("vllm43507_marlin_moe_cutlass_linear"),
            requested_moe="marlin",
            requested_linear="marlin",
            requested_attention=None,
        )
    )
    assert vs["moe_backend"].status == "pass"
    assert vs["linear_backend"].status == "fail"
    assert vs["linear_backend"].message == "asked marlin, got CutlassNvFp4LinearKernel"
    assert vs["linear_backend"].lines == ("Using CutlassNvFp4LinearKernel for NVFP4 GEMM",)
    assert vs["signature:marlin-fp4-weight-only"].status == "warn"


def test_seeds000_story_from_the_log_alone():
    # The cell did not say what it asked; the log's non-default args did.
    vs = by_check(
        verdicts(
            fp_of("seeds000_humming_asked_marlin_linear"),
            requested_moe=None,
            requested_linear=None,
            requested_attention=None,
        )
    )
    assert vs["log:linear_backend"].status == "fail"
    assert vs["log:linear_backend"].message == "asked flashinfer_b12x, got MarlinNvFp4LinearKernel"
    assert any(line.startswith("non-default args:") for line in vs["log:linear_backend"].lines)


def test_seeds000_story_from_the_cell():
    vs = by_check(
        verdicts(
            fp_of("seeds000_humming_asked_marlin_linear"),
            requested_moe="humming",
            requested_linear="flashinfer_b12x",
            requested_attention=None,
        )
    )
    assert vs["moe_backend"].status == "pass"
    assert vs["linear_backend"].message == "asked flashinfer_b12x, got MarlinNvFp4LinearKernel"
    assert "log:linear_backend" not in vs  # not reported twice


def test_missing_selection_line_fails_when_something_was_asked():
    vs = by_check(
        verdicts(
            fp_of("pr30515_kv_two_line_v018"),
            requested_moe="flashinfer_cutlass",
            requested_linear=None,
            requested_attention="FLASHINFER",
        )
    )
    assert vs["moe_backend"].status == "fail"
    assert "no MoE backend selection line" in vs["moe_backend"].message
    assert vs["attention_backend"].status == "fail"
    relaxed = by_check(
        verdicts(
            fp_of("pr30515_kv_two_line_v018"),
            requested_moe="flashinfer_cutlass",
            requested_linear=None,
            requested_attention=None,
            require_selection=False,
        )
    )
    assert relaxed["moe_backend"].status == "warn"


def test_auto_is_not_a_request():
    vs = by_check(
        verdicts(
            fp_of("vllm43507_marlin_moe_cutlass_linear"),
            requested_moe="auto",
            requested_linear="auto",
            requested_attention=None,
        )
    )
    assert vs["moe_backend"].status == "pass" and vs["moe_backend"].message == "auto: got MARLIN"


def test_spark_autotuner_skips_fail_above_the_limit():
    fp = fp_of("article_spark_gemm2")
    vs = by_check(verdicts(fp, requested_moe=None, requested_linear=None, requested_attention=None))
    v = vs["autotuner:trtllm::fused_moe::gemm2"]
    assert v.status == "fail" and "skipped 10" in v.message
    assert v.lines == (
        "[AutoTuner]: Skipped 10 unsupported tactic(s) for trtllm::fused_moe::gemm2",
    )
    ok = by_check(
        verdicts(
            fp,
            requested_moe=None,
            requested_linear=None,
            requested_attention=None,
            max_autotuner_skips=10,
        )
    )
    assert ok["autotuner:trtllm::fused_moe::gemm2"].status == "pass"


def test_fatal_signature_fails_unless_allowed():
    fp = fp_of("vllm_windows72_illegal_memory_v025")
    vs = by_check(verdicts(fp, requested_moe=None, requested_linear=None, requested_attention=None))
    assert vs["signature:illegal-memory-access"].status == "fail"
    assert "illegal memory access" in vs["signature:illegal-memory-access"].lines[0]
    allowed = by_check(
        verdicts(
            fp,
            requested_moe=None,
            requested_linear=None,
            requested_attention=None,
            allowed_signatures=["illegal-memory-access"],
        )
    )
    assert allowed["signature:illegal-memory-access"].status == "warn"


def test_hang_and_env_story_fail():
    vs = verdicts(
        fp_of("dynamo4087_log_ends_in_capture", hung=True),
        requested_moe=None,
        requested_linear=None,
        requested_attention=None,
    )
    assert [v.status for v in vs if v.check == "signature:cudagraph-capture-hang"] == ["fail"]
    env = [
        v
        for v in verdicts(
            fp_of("minefield19_unknown_env_v026"),
            requested_moe=None,
            requested_linear=None,
            requested_attention=None,
        )
        if v.check == "log:moe_backend"
    ]
    assert any(
        "VLLM_FLASHINFER_MOE_BACKEND=latency" in v.message and "ignored" in v.message for v in env
    )


def test_verdict_json_shape():
    v = verdicts(
        fp_of("article_spark_gemm2"),
        requested_moe=None,
        requested_linear=None,
        requested_attention=None,
    )[0]
    assert set(v.to_json()) == {"check", "status", "message", "lines"}
    assert isinstance(v.to_json()["lines"], list)


# The mapping table is data; these rows were read in the vLLM 0.33.0 / 0.25.1 sources.
MOE_ROWS = [
    ("cutlass", "nvfp4", "VLLM_CUTLASS", True),  # map_nvfp4_backend: "cutlass" -> VLLM_CUTLASS
    ("marlin", "nvfp4", "MARLIN", True),
    ("humming", "nvfp4", "HUMMING", True),
    ("flashinfer_cutedsl", "nvfp4", "FLASHINFER_CUTEDSL_BATCHED", True),
    ("flashinfer_cutlass", "fp8", "FLASHINFER_CUTLASS", True),
    ("deep_gemm", "fp8", "DEEPGEMM", True),
    ("marlin", "nvfp4", "FLASHINFER_CUTLASS", False),
    ("cutlass", "fp8", "MARLIN", False),
    ("flashinfer", "nvfp4", "FLASHINFER_TRTLLM", True),  # VLLM_USE_FLASHINFER_MOE_FP4=1 alone
    ("flashinfer", "nvfp4", "MARLIN", False),
]


@pytest.mark.parametrize(("asked", "quant", "logged", "honoured"), MOE_ROWS)
def test_moe_table(asked, quant, logged, honoured):
    assert (logged in kernel_names().moe_expected(asked, quant)) is honoured


LINEAR_ROWS = [
    ("marlin", "MarlinNvFp4LinearKernel", True),
    ("marlin", "NvFp4LinearBackend.MARLIN", True),  # 0.16.0 Enum print
    ("cutlass", "CutlassNvFp4LinearKernel", True),
    ("flashinfer-cutlass", "FlashInferCutlassNvFp4LinearKernel", True),
    ("flashinfer_b12x", "MarlinNvFp4LinearKernel", False),
    ("humming", "MarlinNvFp4LinearKernel", False),
]


@pytest.mark.parametrize(("asked", "logged", "honoured"), LINEAR_ROWS)
def test_linear_table(asked, logged, honoured):
    assert (logged in kernel_names().linear_expected(asked)) is honoured


def test_table_covers_every_flag_value_of_vllm_0_33():
    # vllm/config/kernel.py 0.33.0 LinearBackend literal, minus "auto".
    linear_033 = {
        "cutlass",
        "flashinfer_cutlass",
        "flashinfer_cutedsl",
        "flashinfer_trtllm",
        "flashinfer_cudnn",
        "flashinfer_b12x",
        "b12x",
        "marlin",
        "humming",
        "triton",
        "deep_gemm",
        "torch",
        "aiter",
        "machete",
        "fbgemm",
        "conch",
        "exllama",
        "emulation",
        "xpu",
        "xpu_woq",
    }
    assert linear_033 <= set(kernel_names().linear)
    # oracle/nvfp4.py 0.33.0 map_nvfp4_backend keys
    nvfp4_033 = {
        "b12x",
        "cutlass",
        "flashinfer_trtllm",
        "flashinfer_cutlass",
        "flashinfer_cutedsl",
        "flashinfer_moe_ep_cutedsl",
        "flashinfer_b12x",
        "marlin",
        "humming",
        "emulation",
    }
    assert nvfp4_033 == set(kernel_names().moe_nvfp4)


def test_data_files_are_valid_and_ids_unique():
    ids = [s.id for s in signatures()]
    assert len(ids) == len(set(ids))
    assert {s.severity for s in signatures()} == {"fatal", "warn"}
    raw = tomllib.loads((ROOT / "harness" / "data" / "signatures.toml").read_text())
    assert len(raw["signature"]) == len(ids)


def test_real_gb10_log_judged_end_to_end():
    # Verbatim GB10 log, vLLM 0.20.0 (fixtures/logs/README.md): the MoE request is honoured,
    # the article's gemm2 fingerprint (10 skipped tactics) fails, a linear request would fail.
    fp = fp_of("gb10_v020_fi_cutlass_autotuner")
    vs = by_check(
        verdicts(
            fp,
            requested_moe="flashinfer_cutlass",
            requested_linear="marlin",
            requested_attention="FLASHINFER",
            max_autotuner_skips=4,
        )
    )
    assert vs["moe_backend"].status == "pass"
    assert vs["attention_backend"].status == "pass"
    lin = vs["linear_backend"]
    assert (lin.status, lin.message) == (
        "fail",
        "asked marlin, got FlashInferCutlassNvFp4LinearKernel",
    )
    assert lin.lines == ("Using FlashInferCutlassNvFp4LinearKernel for NVFP4 GEMM",)
    assert vs["autotuner:trtllm::fused_moe::gemm1"].status == "pass"
    gemm2 = vs["autotuner:trtllm::fused_moe::gemm2"]
    assert gemm2.status == "fail"
    assert gemm2.lines[0].startswith(
        "[Autotuner]: Skipped 10 unsupported tactic(s) for trtllm::fused_moe::gemm2"
    )


def test_load_signatures_by_id():
    from harness.fingerprint.tables import load_signatures

    table = load_signatures()
    assert list(table) == [s.id for s in signatures()]
    sig = table["cutensormap-illegal-access"]
    assert (sig.tracker, sig.severity) == ("driver", "fatal")
    assert sig.link.endswith("triton-lang/triton/issues/10442")
