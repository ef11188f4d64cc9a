"""The cause vocabulary (harness/fingerprint/causes.py, issue 42): every fatal log gets the most
specific class its lines support, a secondary message never outranks a primary one, and the report,
`harness bug` and `harness fingerprint` say the cause in words with its evidence line, or "cause not
in this excerpt". Real logs are in tests/fixtures/logs/corpus3 (tests/test_fingerprint_corpus3.py);
the rows here are upstream strings where no public log was found, each row saying its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.fingerprint.causes import LEGACY, WORDS, FailureClass
from harness.fingerprint.failure import failure_tables
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.tables import signatures
from harness.fingerprint.verdicts import NOT_IN_EXCERPT_WORDS, cause_of, failure_summary

LOGS = Path(__file__).parent / "fixtures" / "logs"
CORPUS3 = LOGS / "corpus3"


# --- the vocabulary ----------------------------------------------------------------------------

def test_the_vocabulary_is_the_issue_list_each_class_with_words():
    assert set(WORDS) == set(FailureClass)
    assert [c.words for c in FailureClass] == [
        "out of memory", "KV cache too small", "illegal memory access", "illegal instruction",
        "no kernel image / arch", "CUDA-graph capture", "JIT compile failed",
        "kernel config unsupported", "backend unsupported", "distributed / NCCL", "timeout / stall",
        "config or argument", "import / install", "model load", "secondary engine death", "other",
    ]


def test_every_fatal_signature_and_every_rule_names_a_class_of_the_vocabulary():
    for sig in signatures():
        if sig.severity == "fatal":
            assert isinstance(sig.failure_class, FailureClass), sig.id
    assert {cls for cls, _ in failure_tables().causes} <= set(FailureClass)


@pytest.mark.parametrize(("stored", "read"), [
    *LEGACY.items(),
    ("oom", FailureClass.OOM),
    ("a-class-no-release-wrote", FailureClass.OTHER),
    (None, None),
])
def test_a_record_of_any_release_reads_its_class(stored, read):
    fp = Fingerprint.model_validate({"fatal": stored is not None, "failure_class": stored})
    assert fp.failure_class is read
    if read is not None:
        assert fp.to_json()["failure_class"] == read.value


def test_an_old_record_without_fatal_or_class_reads_its_cause_from_its_signature():
    # results format 1 (tests/fixtures/runs): only `signatures` was stored
    cause = cause_of(Fingerprint.model_validate({"signatures": ["illegal-memory-access"]}))
    assert cause is not None and cause.failure_class is FailureClass.ILLEGAL_MEMORY_ACCESS
    assert cause_of(Fingerprint.model_validate({"signatures": ["unknown-vllm-env"]})) is None


# --- patterns without a public log: upstream strings ------------------------------------------

# vLLM 0.33.0 sdist rust/src/cmd/src/cli/tests.rs frontend_args_json_rejects_unsupported_fields:
# the error text `vllm-rs frontend` prints (clap, no logger prefix); vllm/v1/utils.py
# wait_for_completion_or_failure: "Process {name} (PID: {pid}) died with exit code {code}" raised
# and logged by logger.exception("Exception occurred while running API servers: %s", e);
# vllm/platforms/interface.py: "Unknown vLLM environment variable detected: %s" (WARNING).
RUST_FRONTEND = "\n".join([
    "(APIServer pid=1) WARNING 06-01 08:17:00 [interface.py:1470] Unknown vLLM environment variable detected: VLLM_MY_TAG",
    "(APIServer pid=1) INFO 06-01 08:17:05 [utils.py:372] Launching Rust frontend: /usr/local/lib/python3.12/dist-packages/vllm/vllm-rs frontend --listen-fd 18 --args-json {\"model_tag\": \"Qwen/Qwen3-0.6B\", \"root_path\": \"/prefix\"}",
    "error: invalid value '{\"model_tag\":\"Qwen/Qwen3-0.6B\",\"root_path\":\"/prefix\"}' for '--args-json <JSON>': ",
    "The following arguments are not implemented in Rust frontend yet:",
    "- root_path",
    "",
    "Remove these arguments to continue.",
    "",
    "For more information, try '--help'.",
    "(APIServer pid=1) ERROR 06-01 08:17:06 [utils.py:599] Exception occurred while running API servers: Process RustFrontend (PID: 2502) died with exit code 2",
    "(APIServer pid=1) ERROR 06-01 08:17:06 [utils.py:599] Traceback (most recent call last):",
    '(APIServer pid=1) ERROR 06-01 08:17:06 [utils.py:599]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/utils.py", line 586, in wait_for_completion_or_failure',
    "(APIServer pid=1) ERROR 06-01 08:17:06 [utils.py:599]     raise RuntimeError(",
    "(APIServer pid=1) ERROR 06-01 08:17:06 [utils.py:599] RuntimeError: Process RustFrontend (PID: 2502) died with exit code 2",
])


def test_an_argument_the_rust_front_end_does_not_take_is_the_cause_not_the_env_warning():
    fp = fingerprint(RUST_FRONTEND)
    assert fp.fatal
    assert fp.failure_signature == "rust-frontend-unsupported-arg"
    assert fp.failure_class is FailureClass.CONFIG
    # the warning still shows, but as a warning: it names no death
    assert "unknown-vllm-env" in fp.signatures
    cause = cause_of(fp)
    assert cause is not None and cause.in_excerpt
    assert "not implemented in Rust frontend yet" in (cause.line or "")
    assert failure_summary(fp).startswith("engine died: config or argument [rust-frontend-unsupported-arg]")


# CUTLASS cute/atom/copy_traits_sm90_tma.hpp (3rdparty of the FlashInfer 0.7.2.post1 sdist, lines
# 1073-1086): after "Error: Failed to initialize the TMA descriptor {CUresult}" it calls
# `assert(false)` on the host; glibc prints "prog: file:line: function: Assertion `expr' failed."
# (backquote, then an apostrophe). A CUDA device assert prints "file:line: function: block:
# [x,y,z], thread: [x,y,z] Assertion `expr` failed." (CUDA's device printf format).
TMA_HOST_ASSERT = "\n".join([
    "Error: Failed to initialize the TMA descriptor 999",
    "python3: /app/3rdparty/cutlass/include/cute/atom/copy_traits_sm90_tma.hpp:1086: auto "
    "cute::detail::make_tma_copy_desc(...) [with TmaInternalType = cutlass::half_t]: Assertion `false' failed.",
])
DEVICE_ASSERT = (
    "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1308: indexSelectLargeIndex: block: [47,0,0], "
    "thread: [64,0,0] Assertion `srcIndex < srcSelectDimSize` failed."
)


def test_a_host_side_assert_after_a_tma_descriptor_failure_is_not_a_device_side_assert():
    fp = fingerprint(TMA_HOST_ASSERT)
    assert "cuda-device-assert" not in fp.signatures
    assert "tma-descriptor-init-failed" in fp.signatures
    assert "cuda-device-assert" in fingerprint(DEVICE_ASSERT).signatures
    # FlashMLA's form of the same CUresult check, from a real log (vllm#49922, vLLM 0.26.0)
    real = fingerprint((CORPUS3 / "017-vllm49922-v0260-flashmla-tma-curesult-host-assert.log").read_text())
    assert "cuda-device-assert" not in real.signatures
    assert real.failure_class is FailureClass.KERNEL_CONFIG


# PyTorch c10/cuda/CUDAException.cpp: "CUDA error: {cudaGetErrorString}" then the hint lines, the
# last one "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions." (PyTorch >= 2.1);
# the hint must not hide the error (it holds the words "device-side assert").
@pytest.mark.parametrize("error", ["unspecified launch failure", "invalid argument", "misaligned address"])
def test_cuda_error_fires_when_the_dsa_hint_is_present(error):
    log = "\n".join([
        f"(EngineCore pid=9) ERROR 06-28 08:50:03 [core.py:1197] torch.AcceleratorError: CUDA error: {error}",
        "(EngineCore pid=9) ERROR 06-28 08:50:03 [core.py:1197] CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "(EngineCore pid=9) ERROR 06-28 08:50:03 [core.py:1197] For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "(EngineCore pid=9) ERROR 06-28 08:50:03 [core.py:1197] Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ])
    fp = fingerprint(log)
    named = {"misaligned address": "illegal-memory-access"}.get(error, "other")
    assert fp.fatal and fp.failure_class == named
    assert "cuda-error" in fp.signatures and "cuda-error-async" not in fp.signatures
    # only the hint (the error line cut from a paste): the async signature, cause not in the excerpt
    hint = fingerprint("\n".join(log.splitlines()[1:]))
    assert hint.failure_signature == "cuda-error-async" and "cuda-error" not in hint.signatures
    assert cause_of(hint) is not None and not cause_of(hint).in_excerpt  # type: ignore[union-attr]


# --- stalls --------------------------------------------------------------------------------------

STALL = ("(EngineCore_DP0 pid=7) INFO 01-20 03:0{m}:37 [shm_broadcast.py:501] No available shared "
         "memory broadcast block found in 60 seconds. This typically happens when some processes "
         "are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).")
SERVING = ("(APIServer pid=1) INFO 01-20 03:01:52 [loggers.py:236] Engine 000: Avg prompt throughput: "
           "{p} tokens/s, Avg generation throughput: {g} tokens/s, Running: 48 reqs, Waiting: 0 reqs")


def test_one_stall_report_is_no_stall_two_with_no_progress_after_are():
    one = fingerprint("\n".join([SERVING.format(p=10.0, g=300.0), STALL.format(m=2)]))
    assert not one.fatal and "engine-stalled" not in one.signatures
    two = fingerprint("\n".join([SERVING.format(p=10.0, g=300.0), STALL.format(m=2), STALL.format(m=3)]))
    assert two.fatal and two.failure_signature == "engine-stalled" and two.failure_class == "timeout"
    recovered = fingerprint("\n".join([STALL.format(m=2), STALL.format(m=3), SERVING.format(p=0.0, g=212.5)]))
    assert not recovered.fatal


def test_a_stall_during_compilation_at_start_up_is_what_vllm_says_it_may_be():
    log = "\n".join([
        "(EngineCore pid=7) INFO 01-20 03:00:00 [backends.py:1] Dynamo bytecode transform time: 9.1 s",
        STALL.format(m=2), STALL.format(m=3),
    ])
    assert not fingerprint(log).fatal


def test_an_rpc_timeout_names_a_timeout():
    # vLLM 0.33.0 v1/executor/multiproc_executor.py:509 raise TimeoutError(f"RPC call to {method} timed out.")
    fp = fingerprint("(EngineCore pid=3) ERROR 07-12 10:00:00 [core.py:1] TimeoutError: RPC call to sample_tokens timed out.")
    assert fp.failure_signature == "rpc-timeout" and fp.failure_class == "timeout"


# --- secondary messages never outrank a primary one ---------------------------------------------

def test_a_secondary_death_after_a_primary_exception_names_the_primary():
    fp = fingerprint((CORPUS3 / "007-vllm40821-rtxpro6000-dsv4-auto-functionalized-then-died-cut.log").read_text())
    assert fp.failure_class is FailureClass.JIT_COMPILE
    assert "traceback-cut" not in fp.signatures and "engine-died" not in fp.signatures


def test_only_secondary_messages_say_the_cause_is_not_in_the_excerpt():
    log = "\n".join([
        "(EngineCore_DP0 pid=2) ERROR 11-02 13:17:04 [core.py:1] EngineCore encountered a fatal error.",
        "(APIServer pid=1) ERROR 11-02 13:17:04 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    ])
    fp = fingerprint(log)
    assert fp.failure_class is FailureClass.SECONDARY
    cause = cause_of(fp)
    assert cause is not None and not cause.in_excerpt
    assert cause.words.startswith(NOT_IN_EXCERPT_WORDS)
    assert NOT_IN_EXCERPT_WORDS in failure_summary(fp)


# --- CUDA-graph mode from what the log shows ------------------------------------------------------

@pytest.mark.parametrize(("bars", "mode"), [
    (["mixed prefill-decode, PIECEWISE", "decode, FULL"], "FULL_AND_PIECEWISE"),
    (["mixed prefill-decode, PIECEWISE"], "PIECEWISE"),
    (["decode, FULL"], "FULL_DECODE_ONLY"),
    (["mixed prefill-decode, FULL", "decode, FULL"], "FULL"),
])
def test_the_capture_bars_name_the_mode_when_nothing_else_does(bars, mode):
    # gpu_model_runner.py _capture_cudagraphs (0.10-0.33): tqdm desc "Capturing CUDA graphs ({kind}, {mode})"
    log = "\n".join(f"Capturing CUDA graphs ({b}): 100%|██████████| 67/67 [00:05<00:00, 11.74it/s]" for b in bars)
    fp = fingerprint(log)
    assert fp.cudagraph_mode == mode
    assert "ends-during-capture" not in fp.signatures


def test_a_log_that_stops_inside_a_capture_bar_still_ends_during_capture():
    log = "\n".join([
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| 67/67 [00:05<00:00, 11.74it/s]",
        "Capturing CUDA graphs (decode, FULL):  40%|████      | 14/35 [00:01<00:02, 9.10it/s]",
    ])
    assert "ends-during-capture" in fingerprint(log).signatures


# --- the cause on every surface --------------------------------------------------------------------

def test_harness_fingerprint_shows_the_cause_with_its_line(capsys):
    log = CORPUS3 / "006-vllm28363-a100-v011-marlin-invalid-thread-config-wrapper.log"
    assert main(["fingerprint", str(log)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "kernel config unsupported" in out and "Invalid thread config" in out
    cut = CORPUS3 / "010-vllm9341-v062-h200-capture-frames-cut.log"
    main(["fingerprint", str(cut)])
    out = " ".join(capsys.readouterr().out.split())
    assert NOT_IN_EXCERPT_WORDS in out and "Process SpawnProcess-1:" in out


def test_the_json_of_harness_fingerprint_stores_the_class_value(capsys):
    log = CORPUS3 / "009-vllm40677-sm120-gemma4-flashinfer-attention-refused.log"
    main(["fingerprint", "--json", str(log)])
    data = json.loads(capsys.readouterr().out)
    assert data["fingerprint"]["failure_class"] == "backend-refused"
    failure = next(v for v in data["verdicts"] if v["check"] == "failure")
    assert failure["message"].startswith("engine died: backend unsupported [attention-backend-refused]")
    assert any("is not valid for this configuration" in line for line in failure["lines"])


def test_the_report_and_bug_say_the_cause(tmp_path):
    from conftest import FIXTURES

    from harness.report.data import load
    from harness.report.sections import sections
    from harness.results.bug import bug_report, symptom
    from harness.results.store import RunStore

    (run,) = (FIXTURES / "runs").glob("*-spark-candidate-*")
    report = load(run)
    died = [c for c in report.cells if c.cause]
    assert [c.cause for c in died] == ["illegal memory access"]
    assert "an illegal memory access was encountered" in (died[0].cause_line or "")
    causes = next(s for s in sections(report) if s.key == "causes")
    assert causes.rows and "illegal memory access" in causes.rows[0][1].text
    store = RunStore.open(run)
    cell = next(c for c in store.cells() if c.fingerprint and c.fingerprint.signatures)
    assert symptom(cell).startswith("illegal memory access [illegal-memory-access]")
    text = bug_report(store, cell.id)
    assert "## Cause" in text and "**illegal memory access**" in text


# vLLM 0.25.1 v1/attention/backends/mla/sparse_swa.py:433, an attention backend's assertion that a
# path exists for one model family / mode only (no public log of it was found; the issue's own
# sample is of this kind): `assert self.is_dspark, "Non-causal DeepseekV4 SWA is only supported
# for the DSpark speculation mode, but causal=False was set without DSpark."`
def test_a_backend_assertion_that_a_path_is_for_one_family_only_is_backend_unsupported():
    log = "\n".join([
        "(Worker_TP0 pid=77) ERROR 07-02 11:00:00 [multiproc_executor.py:1] WorkerProc hit an exception.",
        "(Worker_TP0 pid=77) ERROR 07-02 11:00:00 [multiproc_executor.py:1] Traceback (most recent call last):",
        '(Worker_TP0 pid=77) ERROR 07-02 11:00:00 [multiproc_executor.py:1]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/attention/backends/mla/sparse_swa.py", line 433, in build',
        "(Worker_TP0 pid=77) ERROR 07-02 11:00:00 [multiproc_executor.py:1]     assert self.is_dspark, (",
        "(Worker_TP0 pid=77) ERROR 07-02 11:00:00 [multiproc_executor.py:1] AssertionError: Non-causal DeepseekV4 SWA is only supported for the DSpark speculation mode, but causal=False was set without DSpark.",
    ])
    fp = fingerprint(log)
    assert fp.fatal and fp.failure_class is FailureClass.BACKEND
    assert fp.failure_signature == "exception:AssertionError"
    assert cause_of(fp) is not None and cause_of(fp).in_excerpt  # type: ignore[union-attr]
