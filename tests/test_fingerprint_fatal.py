"""Every fatal log gets a name: the signature that explains it, `traceback-cut` when the log ends
inside a traceback (read per process when workers interleave), `exception:<Type>` of the root
cause, or `engine-died` when only a death line shows it. Death lines are those of vLLM 0.8-0.33
(tests/fixtures/upstream/, read from the sdists); the corpus holds real logs of each kind."""

from __future__ import annotations

import pytest

from harness.fingerprint.parse import fingerprint

# Death lines as each release prints them (file named in tests/fixtures/upstream/vllm-*.json).
DEATH_LINES = [
    "ERROR 04-28 02:37:03 [core.py:398] EngineCore encountered a fatal error.",  # 0.9 v1/engine/core.py
    "(APIServer pid=1) ERROR 05-12 10:00:00 [core_client.py:564] Engine core proc EngineCore_DP0 died "
    "unexpectedly, shutting down client.",  # 0.11+ core_client.py
    "(EngineCore_0 pid=12) ERROR 05-12 10:00:00 [multiproc_executor.py:154] Worker proc VllmWorker-0 "
    "died unexpectedly, shutting down executor.",
    "(EngineCore_DP0 pid=12) ERROR 05-12 10:00:00 [ray_executor_v2.py:464] RayWorkerProc rank=3 died "
    "unexpectedly, shutting down executor.",  # 0.23
    "ERROR 05-12 10:00:00 [multiproc_worker_utils.py:116] Worker VllmWorkerProcess pid 77 died, exit "
    "code: -9",  # V0 (0.8-0.10)
    "ERROR 05-12 10:00:00 [worker_base.py:627] Error executing method 'determine_num_available_blocks'. "
    "This might cause deadlock in distributed execution.",  # V0 worker_base.py
]


@pytest.mark.parametrize("line", DEATH_LINES)
def test_a_death_line_alone_is_fatal_and_named_engine_died(line: str):
    fp = fingerprint(line)
    assert fp.fatal
    assert fp.failure_signature == "engine-died"
    assert fp.signatures == ("engine-died",)
    assert fp.root_cause == line.split("] ", 1)[1]


def test_a_log_ending_inside_an_apiserver_traceback_is_traceback_cut_with_frames():
    log = "\n".join([
        "(APIServer pid=1) INFO 05-12 10:00:00 [api_server.py:1] vLLM API server version 0.11.0",
        "(APIServer pid=1) Traceback (most recent call last):",
        '(APIServer pid=1)   File "/usr/local/bin/vllm", line 10, in <module>',
        "(APIServer pid=1)     sys.exit(main())",
        '(APIServer pid=1)   File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/serve.py", '
        "line 59, in cmd",
        "(APIServer pid=1)     uvloop.run(run_server(args))",
        "(APIServer pid=1)     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ])
    fp = fingerprint(log)
    assert fp.fatal and fp.failure_signature == "traceback-cut"
    ctx = fp.signature_context["traceback-cut"]
    assert ctx.process == "APIServer"
    assert ctx.frames == ("vllm:10 in <module>", "serve.py:59 in cmd")
    assert fp.root_cause == "traceback cut off after serve.py:59 in cmd (APIServer)"


def test_interleaved_tracebacks_are_read_per_process():
    # The worker's traceback ends with its exception; EngineCore's, printed between the worker's
    # lines, never does: the log ends inside EngineCore's traceback. The worker's ValueError is the
    # root cause and names the failure: `traceback-cut` is only for a log with no exception line.
    log = "\n".join([
        "(EngineCore_0 pid=1) Traceback (most recent call last):",
        "(VllmWorker rank=1 pid=3) Traceback (most recent call last):",
        '(EngineCore_0 pid=1)   File "/x/vllm/v1/engine/core.py", line 703, in run_engine_core',
        '(VllmWorker rank=1 pid=3)   File "/x/vllm/v1/worker/gpu_worker.py", line 1, in load_model',
        "(EngineCore_0 pid=1)     engine_core = EngineCoreProc(*args, **kwargs)",
        "(VllmWorker rank=1 pid=3)     raise ValueError('head size 72 is not a multiple of 8')",
        "(VllmWorker rank=1 pid=3) ValueError: head size 72 is not a multiple of 8",
        '(EngineCore_0 pid=1)   File "/x/vllm/v1/engine/core.py", line 499, in __init__',
    ])
    fp = fingerprint(log)
    assert fp.fatal
    assert fp.failure_signature == "exception:ValueError"
    assert fp.failure_class == "kernel-config-unsupported"
    assert "ValueError: head size 72" in (fp.root_cause or "")
    # the EngineCore traceback alone (the worker's lines dropped) is cut, with its frames
    alone = fingerprint("\n".join(x for x in log.splitlines() if "VllmWorker" not in x))
    assert alone.failure_signature == "traceback-cut"
    ctx = alone.signature_context["traceback-cut"]
    assert ctx.process == "EngineCore_0"
    assert ctx.frames == ("core.py:703 in run_engine_core", "core.py:499 in __init__")


def test_a_finished_traceback_names_its_exception():
    log = "\n".join([
        "Traceback (most recent call last):",
        '  File "/x/serve.py", line 3, in main',
        "    run()",
        "RuntimeError: something nobody has a signature for",
    ])
    fp = fingerprint(log)
    assert fp.fatal
    assert fp.failure_signature == "exception:RuntimeError"
    assert "traceback-cut" not in fp.signatures


def test_a_cut_traceback_after_start_up_complete_is_not_a_death():
    log = "\n".join([
        "(APIServer pid=1) INFO 05-12 10:00:00 [launcher.py:1] Application startup complete.",
        "(APIServer pid=1) INFO 05-12 10:00:01 [x.py:1] Traceback (most recent call last):",
        '(APIServer pid=1) INFO 05-12 10:00:01 [x.py:1]   File "/x/a.py", line 1, in f',
    ])
    fp = fingerprint(log)
    assert not fp.fatal and fp.failure_signature is None


def test_device_side_assert_is_named_and_the_hint_is_not_a_second_failure():
    log = "\n".join([
        "(EngineCore pid=9) ERROR 06-28 08:50:03 [core.py:1197] torch.AcceleratorError: CUDA error: "
        "device-side assert triggered",
        "(EngineCore pid=9) ERROR 06-28 08:50:03 [core.py:1197] CUDA kernel errors might be "
        "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "(EngineCore pid=9) ERROR 06-28 08:50:03 [core.py:1197] Compile with `TORCH_USE_CUDA_DSA` to "
        "enable device-side assertions.",
    ])
    fp = fingerprint(log)
    assert fp.failure_class == "other"  # the signature id names it; the class cannot say why
    assert fp.failure_signature == "cuda-device-assert"
    assert "cuda-error-async" not in fp.signatures


def test_the_cuda_hint_alone_still_says_a_cuda_kernel_failed():
    # a paste that lost the error line but kept torch's hint
    log = "\n".join([
        "ERROR 06-28 08:50:03 [core.py:1197] CUDA kernel errors might be asynchronously reported at "
        "some other API call, so the stacktrace below might be incorrect.",
        "ERROR 06-28 08:50:03 [core.py:1197] For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    ])
    fp = fingerprint(log)
    assert fp.fatal and fp.failure_signature == "cuda-error-async"


@pytest.mark.parametrize(
    "line, backend",
    [
        ("Using CutlassExpertsMxfp4 for MXFP4 MoE", "CutlassExpertsMxfp4"),  # 0.23 modular kernels
        ("Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)", "MARLIN"),
        ("Falling back to MARLIN for NvFp4 MoE", "MARLIN"),
        ("Using Nvfp4QuantizationEmulationTritonExperts MOE backend. This will dequantize weights",
         "Nvfp4QuantizationEmulationTritonExperts"),
        ("Using FlashInfer MXFP4 MXFP8 TRTLLM backend for SM100", "FLASHINFER_TRTLLM"),
    ],
)
def test_newer_and_older_moe_selection_wording(line: str, backend: str):
    fp = fingerprint(f"(EngineCore_0 pid=1) INFO 05-12 10:00:00 [layer.py:1] {line}")
    assert fp.moe_backend == backend


@pytest.mark.parametrize(
    "line, mode",
    [
        ("Cudagraph mode FULL is not compatible with compilation mode 0.Overriding to NONE.", "NONE"),
        ("Hybrid or mamba-based model detected: setting cudagraph mode to FULL_AND_PIECEWISE in order "
         "to optimize performance.", "FULL_AND_PIECEWISE"),
        ("Enforce eager set, disabling torch.compile and CUDAGraphs. This is equivalent to setting "
         "-cc.mode=none -cc.cudagraph_mode=none", "NONE"),
        ("Pooling models do not support full cudagraphs. Overriding cudagraph_mode to PIECEWISE.",
         "PIECEWISE"),
    ],
)
def test_cudagraph_mode_changes_in_every_wording(line: str, mode: str):
    assert fingerprint(f"WARNING 05-12 10:00:00 [vllm.py:1] {line}").cudagraph_mode == mode
