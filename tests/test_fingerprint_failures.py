"""Table-style against real captured lines: generic failure reading, kernels per
model and per layer type, nested/foreign prefixes, signatures in context and their look-alikes,
speculative decoding. Sources are named per row (vLLM sdists or the upstream thread)."""

from __future__ import annotations

import json

import pytest

from harness.fingerprint.lines import parse_line
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.verdicts import verdicts

MOE = "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['MARLIN', 'EMULATION']."

# --- prefixes -----------------------------------------------------------------------------------
PREFIXED = [
    # 0.10-era multiprocess wrapper nested in EngineCore
    f"(EngineCore_0)(VllmWorker TP1 pid=1) INFO 05-12 10:00:00 [nvfp4.py:1] {MOE}",
    # compose + nested worker prefixes (a public compose log, vLLM 0.16)
    f"qwen3.5-122    | (Worker pid=312) (Worker_TP0 pid=312) INFO 03-01 11:11:32 [nvfp4.py:1] {MOE}",
    # Ray actor prefixes around vLLM's own, with Ray's de-duplication tail
    "(VllmAsyncGenerationWorker pid=1774805, ip=10.66.3.184) (EngineCore_DP0 pid=1775131) "
    f"(RayWorkerWrapper pid=1783305) INFO 06-14 20:17:56 [nvfp4.py:1] {MOE} [repeated 3x across cluster]",
    f"(RayWorkerWrapper pid=1880, ip=10.10.10.1) INFO 06-14 20:17:56 [nvfp4.py:1] {MOE}",
    # journald, short and ISO forms
    f"Dec 01 12:00:00 gpu1 vllm[1234]: (EngineCore pid=9) INFO 12-01 12:00:00 [nvfp4.py:1] {MOE}",
    f"2026-12-01T12:00:00+0000 gpu1 docker[77]: INFO 12-01 12:00:00 [nvfp4.py:1] {MOE}",
    # kubectl logs --prefix; Docker json-file record
    f"[pod/vllm-0/vllm] (EngineCore pid=9) INFO 12-01 12:00:00 [nvfp4.py:1] {MOE}",
    json.dumps(
        {"log": f"(EngineCore pid=9) INFO 12-01 12:00:00 [nvfp4.py:1] {MOE}\n", "stream": "stderr"}
    ),
    # a reporter who trimmed the date (corpus 018)
    f"INFO [nvfp4.py:1] {MOE}",
]


@pytest.mark.parametrize("line", PREFIXED)
def test_prefixes_reduce_to_the_message(line: str):
    assert parse_line(1, line).message == MOE
    assert fingerprint(line).moe_backend == "MARLIN"


def test_a_message_starting_with_a_parenthesis_keeps_it():
    assert parse_line(1, "(cached) prompt tokens").message == "(cached) prompt tokens"


# --- kernels per model and per layer type ----------------------------------------------------------
def test_drafter_moe_does_not_overwrite_the_main_model():
    # MARLIN main, TRITON drafter after `Loading drafter model...` (vLLM 0.2x).
    text = "\n".join(
        [
            "(EngineCore pid=1) INFO 07-02 21:58:00 [api_server.py:1] non-default args: {'moe_backend': 'marlin'}",
            f"(EngineCore pid=1) INFO 07-02 21:59:00 [nvfp4.py:285] {MOE}",
            "(EngineCore pid=1) INFO 07-02 22:01:01 [gpu_model_runner.py:5184] Loading drafter model...",
            "(EngineCore pid=1) INFO 07-02 22:01:05 [unquantized.py:262] Using TRITON Unquantized MoE backend out of potential backends: ['TRITON'].",
            "(EngineCore pid=1) INFO 07-02 22:01:13 [gpu_model_runner.py:1] Model loading took 20.4 GiB memory and 130.1 seconds",
        ]
    )
    fp = fingerprint(text)
    assert (fp.moe_backend, fp.drafter_moe_backend) == ("MARLIN", "TRITON")
    assert not fp.mismatches
    assert all(
        v.status == "pass"
        for v in verdicts(
            fp, requested_moe="marlin", requested_linear=None, requested_attention=None
        )
    )


def test_drafter_state_is_per_process():
    text = "\n".join(
        [
            "(Worker_TP0 pid=1) INFO 07-02 22:01:01 [gpu_model_runner.py:1] Loading drafter model...",
            "(Worker_TP1 pid=2) INFO 07-02 22:01:01 [nvfp4.py:1] " + MOE,
            "(Worker_TP0 pid=1) INFO 07-02 22:01:02 [unquantized.py:1] Using TRITON Unquantized MoE backend out of potential backends: [].",
        ]
    )
    fp = fingerprint(text)
    assert (fp.moe_backend, fp.drafter_moe_backend) == ("MARLIN", "TRITON")


KERNEL_LINES = [
    # users' logs, vLLM 0.19-0.27 (read 2026-12-01)
    (
        "Using FlashInferCutlassMxfp8LinearKernel for MXFP8 GEMM",
        {"MXFP8": ["FlashInferCutlassMxfp8LinearKernel"]},
    ),
    ("Using NvFp4LinearBackend.MARLIN for NVFP4 GEMM", {"NVFP4": ["NvFp4LinearBackend.MARLIN"]}),
    (
        "Using MacheteLinearKernel for GPTQMarlinLinearMethod",
        {"GPTQMarlinLinearMethod": ["MacheteLinearKernel"]},
    ),
    # compose log, vLLM 0.16 compressed_tensors_wNa16.py
    (
        "Using MarlinLinearKernel for CompressedTensorsWNA16",
        {"CompressedTensorsWNA16": ["MarlinLinearKernel"]},
    ),
    # 0.11-0.13 modelopt.py printed the env value
    ("Using flashinfer-cutlass for NVFP4 GEMM", {"NVFP4": ["flashinfer-cutlass"]}),
    (
        "Selected CutlassFP8ScaledMMLinearKernel for Fp8LinearMethod",
        {"Fp8LinearMethod": ["CutlassFP8ScaledMMLinearKernel"]},
    ),
    # look-alikes that are not kernels
    ("Using KV cache scaling factor 1.0 for fp8_e4m3.", {}),
    ("Using max model len 8192", {}),
    ("Using MoEPrepareAndFinalizeNoDPEPModular", {}),
]


@pytest.mark.parametrize(("line", "by_layer"), KERNEL_LINES)
def test_linear_kernels_per_layer_type(line: str, by_layer: dict):
    fp = fingerprint(f"(EngineCore pid=1) INFO 11-30 08:00:00 [x.py:1] {line}")
    assert fp.to_json()["linear_by_layer"] == by_layer


LEGACY_MOE = [
    ("Using FlashInfer CUTLASS kernels for ModelOptNvFp4FusedMoE.", "FLASHINFER_CUTLASS"),  # <=0.13
    ("Using FlashInfer TensorRT-LLM kernels for ModelOptNvFp4FusedMoE.", "FLASHINFER_TRTLLM"),
    ("Using FlashInfer kernels for ModelOptNvFp4FusedMoE.", None),  # names no backend
    ("Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)", "MARLIN"),
    ("Using Marlin backend for FP8 MoE", "MARLIN"),
    ("Using 'MARLIN' WNA16 MoE backend.", "MARLIN"),  # 0.25.1 int_wna16.py
    (
        "Using FlashInfer CUTLASS Unquantized MoE backend out of potential backends: ['TRITON'].",
        "FlashInfer CUTLASS",
    ),
]


@pytest.mark.parametrize(("line", "backend"), LEGACY_MOE)
def test_older_moe_wordings(line: str, backend: str | None):
    assert fingerprint(f"INFO 02-02 13:17:33 [modelopt.py:1191] {line}").moe_backend == backend


# --- speculative decoding ------------------------------------------------------------------------
SPEC_LINES = [
    # 0.10+ v1/spec_decode/metrics.py (seed article's DFlash figures)
    (
        "SpecDecoding metrics: Mean acceptance length: 3.67, Accepted throughput: 40.1 tokens/s, "
        "Drafted throughput: 225.3 tokens/s, Accepted: 401 tokens, Drafted: 2253 tokens, "
        "Per-position acceptance rate: 0.780, 0.610, 0.450, Avg Draft acceptance rate: 17.8%",
        0.178,
        [0.78, 0.61, 0.45],
    ),
    # 0.9: rate first, per-position last
    (
        "SpecDecoding metrics: Draft acceptance rate: 59.4%, Mean acceptance length: 2.78, "
        "Accepted: 1200 tokens, Drafted: 2020 tokens, Per-position acceptance rate: 0.800, 0.594, 0.389",
        0.594,
        [0.8, 0.594, 0.389],
    ),
    # 0.8: counts only
    (
        "SpecDecoding metrics: Draft acceptance rate: 25.0%, Accepted: 5 tokens, Drafted: 20 tokens",
        0.25,
        [],
    ),
    # nan rate with zero drafts: no rate, not 0
    (
        "SpecDecoding metrics: Draft acceptance rate: nan%, Accepted: 0 tokens, Drafted: 0 tokens",
        None,
        [],
    ),
]


@pytest.mark.parametrize(("line", "rate", "per_pos"), SPEC_LINES)
def test_spec_decoding_metrics(line: str, rate, per_pos):
    fp = fingerprint(f"(APIServer pid=1) INFO 08-01 21:34:29 [metrics.py:120] {line}")
    assert fp.spec_acceptance_rate == rate
    assert list(fp.spec_acceptance_per_position) == per_pos


def test_spec_config_from_args_and_config_dump():
    args = "non-default args: {'model': 'm', 'speculative_config': {'method': 'eagle3', 'model': 'd', 'num_speculative_tokens': 3}}"
    assert (fingerprint(args).spec_method, fingerprint(args).num_speculative_tokens) == (
        "eagle3",
        3,
    )
    dump = "Initializing a V1 LLM engine (v0.25.1) with config: model='m', speculative_config=SpeculativeConfig(method='mtp', model='m', num_spec_tokens=2), tokenizer='m'"
    fp = fingerprint(dump)
    assert (fp.spec_method, fp.num_speculative_tokens) == ("mtp", 2)


def test_last_metrics_line_wins_and_overall_is_summed():
    lines = [
        "SpecDecoding metrics: Draft acceptance rate: 50.0%, Accepted: 10 tokens, Drafted: 20 tokens",
        "SpecDecoding metrics: Draft acceptance rate: 10.0%, Accepted: 2 tokens, Drafted: 20 tokens",
    ]
    fp = fingerprint("\n".join(lines))
    assert (fp.spec_acceptance_rate, fp.spec_acceptance_rate_all, fp.spec_metrics_lines) == (
        0.1,
        0.3,
        2,
    )


# --- failures ------------------------------------------------------------------------------------
FAILURES = [
    # (log, fatal, class, root-cause substring, asked)
    (  # --linear-backend flashinfer_cutlass on Hopper
        "(APIServer pid=1) INFO 11-30 08:44:59 [api_utils.py:273] non-default args: {'linear_backend': 'flashinfer_cutlass'}\n"
        "(EngineCore pid=2) ERROR 11-30 08:45:18 [core.py:1] EngineCore failed to start.\n"
        "(EngineCore pid=2) ERROR 11-30 08:45:18 [core.py:1] Traceback (most recent call last):\n"
        "(EngineCore pid=2) ERROR 11-30 08:45:18 [core.py:1] ValueError: Failed to find a kernel that can implement the NVFP4 linear layer. Reasons: \n"
        "(APIServer pid=1) ERROR 11-30 08:45:19 [x.py:1] RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        True,
        "backend-refused",
        "Failed to find a kernel that can implement the NVFP4 linear layer",
        "flashinfer_cutlass",
    ),
    (  # HUMMING refused (no request in the excerpt: the name in the message is used)
        "ERROR 11-30 08:45:18 [core.py:1] ValueError: NvFp4 MoE backend 'HUMMING' does not support the deployment configuration since kernel does not support current device.",
        True,
        "backend-refused",
        "NvFp4 MoE backend 'HUMMING'",
        "humming",
    ),
    (  # OOM spelled by the CUDA runtime, behind wrappers
        "(Worker pid=3) ERROR 07-15 21:01:01 [multiproc_executor.py:1] WorkerProc failed to start.\n"
        "(Worker pid=3) ERROR 07-15 21:01:01 [multiproc_executor.py:1] torch.AcceleratorError: CUDA error: out of memory\n"
        "(EngineCore pid=2) ERROR 07-15 21:01:01 [core.py:1] Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
        True,
        "oom",
        "CUDA error: out of memory",
        None,
    ),
    (  # no signature knows it; a KeyError naming a parameter is load_weights': model load
        "ERROR 05-26 07:50:26 [core.py:396] EngineCore failed to start.\n"
        "ERROR 05-26 07:50:26 [core.py:396] Traceback (most recent call last):\n"
        "ERROR 05-26 07:50:26 [core.py:396] KeyError: 'model.layers.0.mlp.experts.w13_weight'",
        True,
        "model-load",
        "KeyError: 'model.layers.0.mlp.experts.w13_weight'",
        None,
    ),
    (  # vLLM as a library: an uncaught traceback ends the script
        "INFO 05-12 10:00:00 [llm_engine.py:1] Initializing an LLM engine\n"
        "Traceback (most recent call last):\n"
        '  File "run.py", line 3, in <module>\n'
        "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory",
        True,
        "import-error",
        "libcudart.so.13",
        None,
    ),
]


@pytest.mark.parametrize(("text", "fatal", "cls", "cause", "asked"), FAILURES)
def test_failures_are_read_generically(text, fatal, cls, cause, asked):
    fp = fingerprint(text)
    assert (fp.fatal, fp.failure_class, fp.asked) == (fatal, cls, asked)
    assert cause in fp.root_cause
    assert fp.signatures, "no fatal log ends with empty signatures"
    failure = [
        v
        for v in verdicts(fp, requested_moe=None, requested_linear=None, requested_attention=None)
        if v.check == "failure"
    ]
    assert failure and failure[0].status == "fail" and cause in failure[0].message


# --- look-alikes: signatures must NOT fire ---------------------------------------------------------
GB10 = "(EngineCore pid=1) INFO 05-03 18:36:06 [cuda.py:1] Device: NVIDIA GB10, compute capability 12.1\n"
AUTOTUNE_ILLEGAL = (
    GB10
    + "(EngineCore pid=1) 2026-05-03 18:41:37,368 - INFO - autotuner.py:651 - flashinfer.jit: [Autotuner]: Autotuning process starts ...\n"
    + "(EngineCore pid=1) ERROR 05-03 18:41:40 [core.py:1] Traceback (most recent call last):\n"
    + '(EngineCore pid=1) ERROR 05-03 18:41:40 [core.py:1]   File "/usr/lib/python3/flashinfer/fused_moe/core.py", line 900, in trtllm_fp4_block_scale_moe\n'
    + "(EngineCore pid=1) ERROR 05-03 18:41:40 [core.py:1] torch.AcceleratorError: CUDA error: an illegal instruction was encountered"
)


def test_illegal_instruction_in_fused_moe_autotuning_is_not_the_sm121_attention_bug():
    fp = fingerprint(AUTOTUNE_ILLEGAL)
    assert "flashinfer-fp8-attn-illegal-sync-sm121" not in fp.signatures
    assert "illegal-instruction" in fp.signatures
    assert (fp.failure_class, fp.failure_phase, fp.failure_op) == (
        "illegal-instruction",
        "autotune",
        "fused-moe",
    )
    ctx = fp.signature_context["illegal-instruction"]
    assert (ctx.phase, ctx.op) == ("autotune", "fused-moe")


def test_illegal_instruction_in_attention_on_gb10_is_the_sm121_bug():
    text = (
        GB10
        + "(APIServer pid=2) INFO 05-03 18:45:00 [launcher.py:1] Application startup complete.\n"
        + "(EngineCore pid=1) ERROR 05-03 18:46:00 [core.py:1] Traceback (most recent call last):\n"
        + '(EngineCore pid=1) ERROR 05-03 18:46:00 [core.py:1]   File "/usr/lib/python3/flashinfer/prefill.py", line 2, in run\n'
        + "(EngineCore pid=1) ERROR 05-03 18:46:00 [core.py:1] RuntimeError: CUDA error: an illegal instruction was encountered"
    )
    fp = fingerprint(text)
    assert "flashinfer-fp8-attn-illegal-sync-sm121" in fp.signatures
    assert fp.signature_context["flashinfer-fp8-attn-illegal-sync-sm121"].op == "attention"


def test_illegal_instruction_in_attention_on_hopper_is_not_the_sm121_bug():
    text = AUTOTUNE_ILLEGAL.replace(
        "NVIDIA GB10, compute capability 12.1", "NVIDIA H200, compute capability 9.0"
    )
    text = text.replace("fused_moe/core.py", "prefill.py").replace(
        "Autotuning process starts", "Autotuning process ends"
    )
    assert "flashinfer-fp8-attn-illegal-sync-sm121" not in fingerprint(text).signatures


@pytest.mark.parametrize(
    "var", ["VLLM_BUILD_URL", "VLLM_IMAGE_TAG", "VLLM_BUILD_PIPELINE", "VLLM_BUILD_COMMIT"]
)
def test_vllm_image_build_variables_are_not_unknown_env(var: str):
    # vLLM 0.22 envs.py, as pasted in the corpus (018)
    line = f"(APIServer pid=1) WARNING 06-01 10:00:00 [envs.py:2057] Unknown vLLM environment variable detected: {var}"
    assert "unknown-vllm-env" not in fingerprint(line).signatures


def test_a_user_typo_is_still_unknown_env():
    line = "WARNING [envs.py:2057] Unknown vLLM environment variable detected: VLLM_USE_FLASHINFER_MOE_FP4"
    assert "unknown-vllm-env" in fingerprint(line).signatures


def test_backend_skipped_by_auto_selection_at_debug_is_not_a_refusal():
    line = (
        "(EngineCore pid=1) DEBUG 08-02 09:20:11 [nvfp4.py:250] NvFp4 MoE backend 'FLASHINFER_TRTLLM' does not "
        f"support the deployment configuration since kernel does not support current device.\n(EngineCore pid=1) INFO 08-02 09:20:11 [nvfp4.py:285] {MOE}"
    )
    fp = fingerprint(line)
    assert (
        not fp.fatal and "moe-backend-refused" not in fp.signatures and fp.moe_backend == "MARLIN"
    )


def test_engine_dead_during_an_orderly_shutdown_is_not_a_death():
    # vLLM 0.25.1 on the H200 test machine (tests/fixtures/logs/h200_v0251_fp8_auto.log)
    text = "\n".join(
        [
            "(APIServer pid=569) INFO 11-30 08:39:50 [launcher.py:1] Application startup complete.",
            "(EngineCore pid=694) INFO 11-30 08:42:03 [core.py:1214] [shutdown] EngineCore: trigger received signal=SIGTERM",
            "(APIServer pid=569) ERROR 11-30 08:42:03 [async_llm.py:704] AsyncLLM output_handler failed.",
            "(APIServer pid=569) ERROR 11-30 08:42:03 [async_llm.py:704] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
        ]
    )
    fp = fingerprint(text)
    assert not fp.fatal and fp.signatures == () and fp.root_cause is None


def test_a_request_error_after_start_up_is_not_a_death():
    text = "\n".join(
        [
            "(APIServer pid=1) INFO 11-30 08:39:50 [launcher.py:1] Application startup complete.",
            "(APIServer pid=1) ERROR 11-30 08:40:00 [serving.py:1] ValueError: This model's maximum context length is 8192 tokens.",
        ]
    )
    assert not fingerprint(text).fatal


OLDER_LINES = [
    # V0 llm_engine.py (vLLM 0.6-0.10) and V0 attention selector
    (
        "INFO 10-17 12:00:00 llm_engine.py:237] Initializing an LLM engine (v0.6.3) with config: model='m'",
        "vllm_version",
        "0.6.3",
    ),
    (
        "INFO 10-17 12:00:01 [selector.py:1] Using Flash Attention backend.",
        "attention_backend",
        "FLASH_ATTN",
    ),
    (
        "INFO 10-17 12:00:01 [selector.py:1] Using XFormers backend.",
        "attention_backend",
        "XFORMERS",
    ),
    (
        "INFO 10-17 12:00:01 [x.py:1] Using Transformers modeling backend.",
        "attention_backend",
        None,
    ),
]


@pytest.mark.parametrize(("line", "key", "value"), OLDER_LINES)
def test_older_engine_lines(line: str, key: str, value):
    assert fingerprint(line).to_json()[key] == value


MORE_CLASSES = [
    ("ERROR 01-01 00:00:00 [core.py:1] RuntimeError: CUDA driver error: out of memory", "oom"),
    ("[12345.6] Out of memory: Killed process 4242 (python3) total-vm:1234kB", "oom"),
    (
        "UserWarning: NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
        "ERROR 01-01 00:00:00 [core.py:1] RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "unsupported-arch",
    ),
    (
        "Traceback (most recent call last):\nOSError: libcudart.so.12: cannot open shared object file: No such file or directory",
        "import-error",
    ),
]


@pytest.mark.parametrize(("text", "cls"), MORE_CLASSES)
def test_more_failure_spellings(text: str, cls: str):
    fp = fingerprint(text)
    assert fp.fatal and fp.failure_class == cls
