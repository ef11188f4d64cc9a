"""Fingerprint of real vLLM logs (tests/fixtures/logs, sources in its README) and of the exact
message formats in the vLLM sdists. Adding a case is one file pair: NAME.log + NAME.expected.json
(a partial dict of Fingerprint.to_json() keys that must match)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.fingerprint.lines import parse_line, split_lines
from harness.fingerprint.parse import fingerprint

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
CASES = sorted(p.name[: -len(".log")] for p in LOGS.glob("*.log"))


def test_every_log_has_expectations():
    missing = [c for c in CASES if not (LOGS / f"{c}.expected.json").exists()]
    assert CASES and not missing, f"add {missing} .expected.json next to the log"


@pytest.mark.parametrize("case", CASES)
def test_fixture_log(case: str):
    expected = json.loads((LOGS / f"{case}.expected.json").read_text())
    got = fingerprint((LOGS / f"{case}.log").read_text(encoding="utf-8")).to_json()
    unknown = set(expected) - set(got)
    assert not unknown, f"{case}: expected.json names keys the fingerprint lacks: {unknown}"
    diff = {k: {"expected": v, "got": got[k]} for k, v in expected.items() if got[k] != v}
    assert not diff, f"{case}: {json.dumps(diff, indent=1)}"


def test_evidence_quotes_the_proving_line():
    fp = fingerprint((LOGS / "seeds000_humming_asked_marlin_linear.log").read_text())
    assert (
        fp.evidence["linear:MarlinNvFp4LinearKernel"]
        == "Using MarlinNvFp4LinearKernel for NVFP4 GEMM"
    )
    assert fp.evidence["moe_backend"].startswith("Using 'HUMMING' NvFp4 MoE backend")
    assert fp.evidence["requested"].startswith("non-default args: {")


# Line wrappers: every form must yield the same message.
MSG = "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN', 'EMULATION']."
WRAPPED = [
    # 0.33.0 logger.py _FORMAT
    f"(EngineCore pid=812) INFO 11-30 08:01:02 [nvfp4.py:270] {MSG}",
    f"(EngineCore_DP0 pid=812) INFO 11-30 08:01:02 [nvfp4.py:270] {MSG}",
    f"(Worker_TP0_EP0 pid=2709390) INFO 09-29 09:51:29 [nvfp4.py:270] {MSG}",
    # 0.11.0: no process prefix, old date
    f"INFO 05-12 10:00:00 [nvfp4.py:141] {MSG}",
    # ColoredFormatter (0.33.0 logging_utils/formatter.py) codes
    f"\x1b[0;36m(EngineCore pid=812)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-30 08:01:02 [nvfp4.py:270]\x1b[0m {MSG}",
    # --logging-config.formatter json: JSON_FORMAT keys
    json.dumps(
        {
            "asctime": "2026-11-30 08:01:02,123",
            "levelname": "INFO",
            "name": "vllm.model_executor",
            "processName": "EngineCore",
            "process": 812,
            "message": MSG,
        }
    ),
    # docker logs -t, compose
    f"2026-07-08T22:40:03.166647879Z (EngineCore pid=542) INFO 07-08 22:40:03 [nvfp4.py:270] {MSG}",
    f"vllm  | (EngineCore pid=81) INFO 06-29 11:56:38 [nvfp4.py:270] {MSG}",
    # a log viewer's export (fixture gb10_fp4_gemm_tma_descriptor)
    f"2026-05-01 18:52:10.981 | (EngineCore pid=256) INFO 05-01 16:52:10 [nvfp4.py:270] {MSG}",
    # JSON record behind the 0.11-era multiprocess prefix
    "(EngineCore_DP0 pid=9) " + json.dumps({"levelname": "INFO", "message": MSG}),
]


@pytest.mark.parametrize("line", WRAPPED)
def test_wrappers_reduce_to_message(line: str):
    assert parse_line(1, line).message == MSG
    assert fingerprint(line).moe_backend == "MARLIN"


def test_json_line_keeps_level_and_process():
    ln = parse_line(1, WRAPPED[5])
    assert (ln.level, ln.process) == ("INFO", "EngineCore")


def test_carriage_return_progress_bars_split():
    text = "Capturing CUDA graphs (decode, FULL):  10%|#\rCapturing CUDA graphs (decode, FULL): 100%|#\n"
    assert len(split_lines(text)) == 2


# One message per format string, from the sdists; (message, key, expected).
FORMATS = [
    (
        "Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: ['AITER', 'TRITON'].",
        "moe_backend",
        "FLASHINFER_CUTLASS",
    ),
    (
        "Using FLASHINFER_CUTLASS Fp8 MoE backend out of potential backends: ['AITER', 'TRITON'].",
        "moe_quant",
        "fp8",
    ),
    (
        "Using NvFp4LinearBackend.MARLIN for NVFP4 GEMM",
        "linear_kernels",
        ["NvFp4LinearBackend.MARLIN"],
    ),  # 0.16.0
    (
        "Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod",
        "linear_kernels",
        ["CutlassFP8ScaledMMLinearKernel"],
    ),
    (
        "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN'].",
        "attention_backend",
        "FLASHINFER",
    ),
    ("Using AttentionBackendEnum.TRITON_ATTN backend.", "attention_backend", "TRITON_ATTN"),
    ("Using FlashInfer backend on V1 engine.", "attention_backend", "FLASHINFER"),  # 0.11.0
    ("Using Transformers modeling backend.", "attention_backend", None),
    (
        "GPU KV cache size: 872,960 tokens, Maximum concurrency for 2,048 tokens per request: 426.25x",
        "kv_cache_tokens",
        872960,
    ),
    (
        "GPU KV cache size: 872,960 tokens, Maximum concurrency for 2,048 tokens per request: 426.25x",
        "max_concurrency",
        426.25,
    ),
    (
        "GPU + host KV cache size: 1,024 tokens, Maximum concurrency for 512 tokens per request: 2.00x",
        "kv_cache_tokens",
        1024,
    ),
    ("Model loading took 15.38 GiB memory and 21.405311 seconds", "model_load_gib", 15.38),
    ("Model loading took 15.3800 GiB and 21.405311 seconds", "model_load_s", 21.405311),  # 0.11.0
    ("Graph capturing finished in 12 secs, took 0.56 GiB", "graph_capture_s", 12.0),
    ("Graph capturing finished in 12 secs, took 0.56 GiB", "graph_capture_gib", 0.56),
    (
        "Initializing a V1 LLM engine (v0.33.0) with config: model='x', kernel_config=KernelConfig(moe_backend='auto')",
        "vllm_version",
        "0.33.0",
    ),
    (
        "vLLM API server version 0.11.1rc2.dev200+g250fb1b8e.d20251021",
        "vllm_version",
        "0.11.1rc2.dev200+g250fb1b8e.d20251021",
    ),
    (
        "compilation_config={'cudagraph_mode': <CUDAGraphMode.PIECEWISE: 1>, 'x': 1}",
        "cudagraph_mode",
        "PIECEWISE",
    ),
    (
        'compilation_config={"level":3,"cudagraph_mode":[2,1],"use_cudagraph":true}',
        "cudagraph_mode",
        "FULL_AND_PIECEWISE",
    ),
    ("compilation_config={'cudagraph_mode': [2, 0]}", "cudagraph_mode", "FULL_DECODE_ONLY"),
    ("compilation_config={'cudagraph_mode': 0}", "cudagraph_mode", "NONE"),
    (
        "[AutoTuner]: Skipped 10 unsupported tactic(s) for trtllm::fused_moe::gemm2",
        "autotuner_skipped",
        [{"op": "trtllm::fused_moe::gemm2", "count": 10}],
    ),
]


@pytest.mark.parametrize(("message", "key", "expected"), FORMATS)
def test_format_strings(message: str, key: str, expected):
    assert (
        fingerprint(f"(EngineCore pid=1) INFO 11-30 08:00:00 [x.py:1] {message}").to_json()[key]
        == expected
    )


def test_downgrade_wins_over_config_dump():
    text = "\n".join(
        [
            "(EngineCore pid=1) INFO 11-30 08:00:00 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: "
            "compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}",
            # compilation.py 0.33.0: msg += "; setting cudagraph_mode=PIECEWISE"
            "(EngineCore pid=1) WARNING 11-30 08:00:09 [compilation.py:1461] CUDAGraphMode.FULL_AND_PIECEWISE is not "
            "supported with spec-decode for attention backend FlashInferBackend (support: UNIFORM_SINGLE_TOKEN_DECODE); "
            "setting cudagraph_mode=PIECEWISE",
        ]
    )
    fp = fingerprint(text)
    assert fp.cudagraph_mode == "PIECEWISE"
    assert "setting cudagraph_mode=PIECEWISE" in fp.evidence["cudagraph_mode"]


def test_autotuner_one_entry_per_op_largest_count():
    text = "\n".join(
        f"[Autotuner]: Skipped {n} unsupported tactic(s) for {op} (enable debug logs to see details)"
        for n, op in [(4, "a::gemm1"), (9, "a::gemm1"), (2, "a::gemm1"), (10, "a::gemm2")]
    )
    assert fingerprint(text).to_json()["autotuner_skipped"] == [
        {"op": "a::gemm1", "count": 9},
        {"op": "a::gemm2", "count": 10},
    ]


def test_a_log_that_stops_during_capture_is_a_hang_only_when_the_run_timer_says_so():
    text = (LOGS / "dynamo4087_log_ends_in_capture.log").read_text()
    alone = fingerprint(text)
    assert "cudagraph-capture-hang" not in alone.signatures and not alone.fatal
    assert "ends-during-capture" in alone.signatures
    hung = fingerprint(text, hung=True)
    assert "cudagraph-capture-hang" in hung.signatures and "ends-during-capture" not in hung.signatures
    assert hung.failure_class == "cuda-graph-capture"
    assert not fingerprint(text, process_ended=False).signatures
    finished = (
        text
        + "(EngineCore pid=1) INFO 11-04 12:25:50 [gpu_model_runner.py:6517] Graph capturing finished in 9 secs, took 0.40 GiB\n"
    )
    assert not {"cudagraph-capture-hang", "ends-during-capture"} & set(fingerprint(finished, hung=True).signatures)


SIGNATURES = [
    # triton#10442 quoting the 595.71.05 release notes, next to a real vLLM IMA line
    (
        "Applications using cuTensorMapEncodeTiled() or cuTensorMapEncodeIm2col*() on Blackwell GPUs may encounter "
        "sporadic illegal memory accesses (IMA) or MMU faults (like XID 13)\n"
        "(Worker_PP0 pid=23220) ERROR 07-15 21:01:01 [multiproc_executor.py:1007] torch.AcceleratorError: CUDA error: "
        "an illegal memory access was encountered",
        ["cutensormap-illegal-access", "illegal-memory-access"],
    ),
    ("cuTensorMapEncodeTiled returned 1", []),  # no illegal access: not that bug
    # kv_cache_planning.py 0.33.0
    (
        "(EngineCore pid=1) ERROR 11-30 08:00:00 [core.py:1] ValueError: No available memory for the cache blocks. "
        "Try increasing `gpu_memory_utilization` when initializing the engine",
        ["kv-cache-oom"],
    ),
    (
        "ValueError: To serve at least one request with the model's max seq len (262144), (24.0 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (10.2 GiB).",
        ["kv-cache-oom"],
    ),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", ["cuda-oom"]),
    # kernels/linear/__init__.py 0.33.0
    (
        "NVFP4 linear falling back to the slow and unoptimized emulation backend as no optimized backend is "
        "available (unavailable reasons:",
        ["nvfp4-emulation-fallback"],
    ),
    # vllm#30163 (GB10, vllm 0.11.2 nightly)
    (
        "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
        ["ptxas-unknown-arch"],
    ),
    (
        "NotImplementedError: No NvFp4 MoE backend supports the deployment configuration.",
        ["no-nvfp4-moe-backend"],
    ),
    (
        "Capturing CUDA graphs (decode, FULL): 100%|##| 5/5\nTraceback (most recent call last):\n"
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        ["illegal-memory-access"],
    ),
    (
        "(EngineCore_DP0 pid=3) INFO 11-04 12:25:41 [kv_cache_utils.py:1087] GPU KV cache size: 132,752 tokens",
        [],
    ),
]


@pytest.mark.parametrize(("text", "ids"), SIGNATURES)
def test_signatures(text: str, ids: list[str]):
    assert list(fingerprint(text).signatures) == ids


# Where the version comes from, newest first (vLLM sdists named in each row).
VERSIONS = [
    # 0.33.0 v1/engine/core.py "Initializing a V1 LLM engine (v%s) with config: %s"
    (
        "(EngineCore pid=1) INFO 11-30 08:00:00 [core.py:140] Initializing a V1 LLM engine (v0.33.0) with config: model='m'",
        "0.33.0",
    ),
    # 0.33.0 entrypoints/common/startup.py, logo disabled
    (
        "(APIServer pid=1) INFO 11-30 08:00:00 [startup.py:24] vLLM server version 0.33.0, serving model m",
        "0.33.0",
    ),
    # the logo form, verbatim from the GB10 fixture (0.20.0)
    (
        "(APIServer pid=1) INFO 05-03 18:36:06 [utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.20.0",
        "0.20.0",
    ),
    # 0.11.0 entrypoints/openai/api_server.py
    (
        "INFO 09-03 16:28:10 [api_server.py:1882] vLLM API server version 0.10.2.dev378+g4d7fe40fc.d20250829",
        "0.10.2.dev378+g4d7fe40fc.d20250829",
    ),
]


@pytest.mark.parametrize(("line", "version"), VERSIONS)
def test_version_sources(line: str, version: str):
    assert fingerprint(line).vllm_version == version


def test_env_flag_zero_is_not_a_request():
    # envs.py (0.16.0) reads VLLM_USE_FLASHINFER_MOE_FP4 as bool(int(value)).
    off = fingerprint("VLLM_USE_FLASHINFER_MOE_FP4=0\nVLLM_USE_FLASHINFER_MOE_FP8=1\n")
    assert off.requested["moe_backend"] == "flashinfer"
    none = fingerprint("VLLM_USE_FLASHINFER_MOE_FP4=0\n")
    assert none.requested["moe_backend"] is None and none.requested_source is None


def test_kernel_table_check_reports_a_new_flag(tmp_path):
    # A minimal tree with the shape of vLLM 0.33.0's oracle and linear modules (not their code).
    from harness.fingerprint.kernel_table import _FP8, _LINEAR, _NVFP4, main, missing

    for rel, body in (
        (
            _NVFP4,
            'def map_nvfp4_backend(b):\n    mapping = {"marlin": E.MARLIN, "newflag": E.NEW}\n',
        ),
        (_FP8, 'def map_fp8_backend(b):\n    mapping = {"triton": E.TRITON}\n'),
        (
            _LINEAR,
            '_LINEAR_BACKEND_KERNEL_MAP: dict = {"marlin": {MarlinNvFp4LinearKernel, NewMarlinKernel}}\n',
        ),
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(body)
    assert missing(tmp_path) == ["moe.nvfp4 newflag: NEW", "linear.kernels marlin: NewMarlinKernel"]
    assert main([str(tmp_path)]) == 1
    assert main([str(tmp_path / "nope")]) == 2
