"""The `flashinfer-jit-at-startup` signature: FlashInfer compiled a kernel module at start-up.
One row per form FlashInfer has printed it in, each naming where the line comes from (the verbatim
log of flashinfer#876 is a fixture: tests/fixtures/logs/flashinfer876_jit_loading_v09.log)."""

from __future__ import annotations

import pytest

from harness.fingerprint.parse import fingerprint

ID = "flashinfer-jit-at-startup"
# FlashInfer 0.7.2.post1 flashinfer/jit/core.py: the logger's format (lines 66-69) around the message
# of a cold build (line 594-598), as a served process prints it to stderr
V072 = ("2026-12-06 10:15:02,113 - INFO - core.py:594 - flashinfer.jit: Building JIT module fp4_quantization_120f; "
        "this can take several minutes on first use.")


@pytest.mark.parametrize(("line", "fires"), [
    (V072, True),
    # verbatim, flashinfer#876 (FlashInfer 0.2.5, vLLM 0.9)
    ("2025-05-28 17:01:20,390 - INFO - flashinfer.jit: Loading JIT ops: sampling", True),
    # verbatim as the reporter pasted it, flashinfer#972 (FlashInfer 0.2.3, SGLang)
    ("flashinfer.jit:Loading JIT ops:batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_dtype_o_bf16_dtype_idx_i32"
     "_head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False_f16qk_False", True),
    # verbatim, llm-d#410 (vLLM 2025-10, a FlashInfer of 0.3-0.6 that compiles silently): a failed JIT build
    ('(APIServer pid=1) (EngineCore_DP6 pid=2454) (Worker_DP6_EP6 pid=2516) ERROR 10-30 17:32:00 '
     '[v1/executor/multiproc_executor.py:671]   File "/opt/vllm/lib64/python3.12/site-packages/flashinfer/jit/'
     'cpp_ext.py", line 258, in run_ninja', True),
    # FlashInfer 0.7.2.post1 flashinfer/jit/bgmv_moe.py:134: generating a spec is not compiling it
    ("2026-12-06 10:15:00,001 - INFO - bgmv_moe.py:134 - flashinfer.jit: Generated BGMV MoE JIT spec: bgmv_moe", False),
    # vLLM 0.33.0 warns that a JIT may come (qwen_gdn_linear_attn.py:308): a warning, not a compile
    ("(EngineCore pid=1) INFO 12-06 10:15:00 [qwen_gdn_linear_attn.py:308] FlashInfer GDN prefill is JIT-compiled; "
     "first run may take a while", False),
])
def test_each_form_of_a_flashinfer_jit_compile(line: str, fires: bool):
    fp = fingerprint(line)
    assert (ID in fp.to_json()["signatures"]) is fires


def test_it_warns_and_names_the_module():
    fp = fingerprint("\n".join([
        "(EngineCore pid=80) INFO 12-06 10:15:00 [gpu_model_runner.py:2000] Model loading took 20.1 GiB and 30.2 seconds",
        V072]))
    j = fp.to_json()
    assert j["signatures"] == [ID]
    assert not j.get("failure_signature")  # a finding, not a failure
    assert j["evidence"][f"signature:{ID}"].startswith("Building JIT module fp4_quantization_120f;")
    assert j["signature_context"][ID]["line"] == 2
