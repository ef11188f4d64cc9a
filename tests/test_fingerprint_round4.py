"""Round-4 failure classes, each written for the class, not one log: a traceback cut to its
frames (no header, ERROR-prefixed, interleaved workers), a bare exception line, C++-side errors
(TORCH_CHECK, CUDA, CUTLASS status), FlashInfer per-tactic autotuner lines attributed to the op,
a skip followed by an assertion, and MoE quant on the older prose wordings. Line formats: vLLM
multiproc_executor.py's ERROR lines, c10/util/Exception.h, cutlass.h cutlassGetStatusString,
flashinfer autotuner.py 0.5.3 / 0.6.18 / 0.7.4 (quoted where used)."""

from __future__ import annotations

import pytest

from harness.fingerprint.parse import fingerprint

W0 = "(Worker_TP0 pid=12) ERROR 12-01 10:00:00 [multiproc_executor.py:987] "
W1 = "(Worker_TP1 pid=13) ERROR 12-01 10:00:00 [multiproc_executor.py:987] "
HEAD = "(APIServer pid=1) INFO 12-01 09:59:00 [api_server.py:1] vLLM API server version 0.31.0\n"
FRAME_A = '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/kernel_warmup.py", line 133, in flashinfer_autotune'
FRAME_B = '  File "/usr/local/lib/python3.12/dist-packages/flashinfer/autotuner.py", line 420, in choose_one'


# two workers, each printing its own frames (a frame, its code line, carets), interleaved
A = [FRAME_A, "    self.model_runner.model(", FRAME_B, "    r(tensors, tactic=-1)", "    ^^^^^^^^^^^^^^^^^^^"]
B = [FRAME_A, "    self.model_runner.model("]


@pytest.mark.parametrize("rows", [
    [(W0, A[0]), (W1, B[0]), (W0, A[1]), (W0, A[2]), (W1, B[1]), (W0, A[3]), (W0, A[4])],
    [(W0, x) for x in A],
    [("", x) for x in A],
], ids=["interleaved", "one-worker", "bare"])
def test_a_log_that_ends_in_frames_without_a_header_is_traceback_cut(rows):
    fp = fingerprint(HEAD + "".join(f"{p}{line}\n" for p, line in rows))
    assert fp.fatal and fp.failure_signature == "traceback-cut"
    ctx = fp.signature_context["traceback-cut"]
    assert ctx.frames == ("kernel_warmup.py:133 in flashinfer_autotune", "autotuner.py:420 in choose_one")
    assert ctx.process == ("Worker_TP0" if rows[0][0] else None)
    assert "autotuner.py:420 in choose_one" in fp.root_cause


def test_frames_followed_by_the_process_going_on_are_not_cut():
    text = HEAD + f"{W0}{FRAME_A}\n{W0}    x()\n" + "(Worker_TP0 pid=12) INFO 12-01 10:00:01 [x.py:1] still here\n"
    assert not fingerprint(text).fatal


def test_frames_at_warning_level_are_a_report_not_a_death():
    w = "(Worker_TP0 pid=12) WARNING 12-01 10:00:00 [x.py:1] "
    assert not fingerprint(HEAD + f"{w}{FRAME_A}\n{w}    x()\n").fatal


@pytest.mark.parametrize("line, name", [
    # a CUTLASS GEMM caller's TORCH_CHECK(status == kSuccess, "... Error: ", cutlassGetStatusString)
    ("RuntimeError: Failed to run cutlass GEMM: Invalid status", "cutlass-status-error"),
    ("RuntimeError: [FP8 gemm Runner] Failed to initialize cutlass FP8 gemm. Error: Error Internal", "cutlass-status-error"),
    # TORCH_CHECK without a message (c10 "Expected {cond} to be true, but got false.")
    ("RuntimeError: Expected a.is_contiguous() to be true, but got false.  (Could this error message be improved?  If so, please report an enhancement request to PyTorch.)", "cpp-check-failed"),
    # C10_CUDA_CHECK
    ("RuntimeError: CUDA error: misaligned address", "cuda-error"),
    # TORCH_CHECK_NOT_IMPLEMENTED with a message of no known signature
    ("NotImplementedError: No compiled cutlass_scaled_mm for a compute capability less than CUDA device capability: 121", "exception:NotImplementedError"),
])
def test_a_bare_exception_line_is_a_named_failure(line, name):
    fp = fingerprint(HEAD + line + "\n")
    assert fp.fatal and fp.failure_signature == name, (fp.failure_signature, fp.signatures)
    assert fp.root_cause == line


def test_a_bare_exception_followed_by_c10s_backtrace_is_still_the_last_output():
    text = HEAD + "RuntimeError: Failed to run cutlass GEMM: Invalid status\n" \
        "Exception raised from run_gemm at /workspace/csrc/quantization/cutlass.cu:210 (most recent call first):\n" \
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f in /usr/lib/libc10.so)\n"
    fp = fingerprint(text)
    assert fp.failure_signature == "cutlass-status-error"
    assert "cpp-check-failed" in fp.signatures


RUNNER = "<flashinfer.fused_moe.core.get_cutlass_fused_moe_module.<locals>.MoERunner object at 0x7c70ccce8350>"
FI = "(Worker_TP0 pid=12) 2025-11-11 06:41:27,319 - WARNING - autotuner.py:485 - flashinfer.jit: "


def test_per_tactic_lines_count_under_the_op_not_the_runner_class():
    text = "".join(f"{FI}[Autotuner]: Skipping tactic {RUNNER} {t}, due to failure while profiling: boom\n" for t in (3, 4, 4))
    assert dict(fingerprint(text).autotuner_skipped) == {"trtllm::fused_moe": 2}


def test_per_tactic_lines_take_the_op_the_log_names():
    tuning = "(Worker_TP0 pid=12) [AutoTuner]: Tuning trtllm::fused_moe::gemm2:  50%|#####     | 1/2\n"
    skip = f"{FI}[Autotuner]: Skipping tactic {RUNNER} 7, due to failure while profiling: boom\n"
    assert dict(fingerprint(tuning + skip).autotuner_skipped) == {"trtllm::fused_moe::gemm2": 1}
    summary = "(Worker_TP0 pid=12) INFO 12-01 10:00:00 [autotuner.py:1] [Autotuner]: Skipped 5 unsupported tactic(s) for trtllm::fused_moe::gemm1 (enable debug logs to see details)\n"
    assert dict(fingerprint(skip + summary).autotuner_skipped) == {"trtllm::fused_moe::gemm1": 5}
    # 0.6-0.7 ranking path: "Skipping tactic {runner} {tac} while ranking {custom_op}: {e}"
    ranking = f"{FI}[Autotuner]: Skipping tactic {RUNNER} 9 while ranking fp4_gemm: boom\n"
    assert dict(fingerprint(ranking).autotuner_skipped) == {"fp4_gemm": 1}


def test_a_skip_then_an_assertion_is_a_failure():
    text = f"{FI}[Autotuner]: Skipping tactic {RUNNER} 15, due to failure while profiling: [TensorRT-LLM][ERROR] Assertion failed: x\n" \
        + "".join(f"{W0}{x}\n" for x in ("Traceback (most recent call last):", FRAME_B, "    assert tactic >= 0", "AssertionError"))
    fp = fingerprint(text)
    assert fp.fatal and fp.failure_signature == "autotuner-skip-then-assert"
    assert fp.failure_class == "kernel-config-unsupported"  # no tactic of the op runs


def test_skips_alone_are_not_a_failure():
    text = f"{FI}[Autotuner]: Skipping tactic {RUNNER} 15, due to failure while profiling: [TensorRT-LLM][ERROR] Assertion failed: x\n"
    assert not fingerprint(text).fatal


@pytest.mark.parametrize("message, backend, quant", [
    # vLLM 0.11-0.13 quantization/fp8.py (the NGC 26.01-era wording)
    ("Using FlashInfer FP8 MoE TRTLLM backend for SM100", "FLASHINFER_TRTLLM", "fp8"),
    ("Using FlashInfer FP8 MoE CUTLASS backend for SM90/SM100", "FLASHINFER_CUTLASS", "fp8"),
    # vLLM 0.10-0.17 quantization/mxfp4.py
    ("Using FlashInfer MXFP4 MXFP8 TRTLLM backend for SM100", "FLASHINFER_TRTLLM", "mxfp4"),
    ("Using FlashInfer MXFP4 BF16 backend for SM100, For faster performance on SM100, consider setting VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1, though this may impact accuracy.", "FlashInfer MXFP4 BF16", "mxfp4"),
    # nvfp4_moe_support.py
    ("Falling back to Marlin FP4 MoE kernel.", "Marlin", "nvfp4"),
    # the modern oracle line keeps its own word
    ("Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends: ['FLASHINFER_CUTLASS']", "FLASHINFER_CUTLASS", "nvfp4"),
])
def test_moe_quant_on_older_wordings(message, backend, quant):
    fp = fingerprint(f"(EngineCore_DP0 pid=7) INFO 01-20 10:00:00 [fp8.py:138] {message}\n")
    assert (fp.moe_backend, fp.moe_quant) == (backend, quant)
