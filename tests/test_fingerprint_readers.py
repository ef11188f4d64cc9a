"""The fingerprint is the union of its readers' sub-models: each fact family (kernels, drafter,
CUDA graphs, KV cache, load, autotuner, request, spec decode, failure) owns its fields, no field
belongs to two readers, and every Fingerprint field but the shared evidence has one owner."""

from __future__ import annotations

import json

from harness.fingerprint.failure import FailureFacts
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.parse import _LINE_READERS, _words, fingerprint
from harness.fingerprint.readers import (
    AutotunerFacts,
    DrafterFacts,
    GraphFacts,
    KernelFacts,
    KVCacheFacts,
    LoadFacts,
    RequestFacts,
    SpecDecodeFacts,
)

SUB_MODELS = (KernelFacts, DrafterFacts, GraphFacts, KVCacheFacts, LoadFacts, AutotunerFacts,
              RequestFacts, SpecDecodeFacts, FailureFacts)


def test_every_fingerprint_field_has_exactly_one_reader():
    owners: dict[str, list[str]] = {}
    for model in SUB_MODELS:
        for name in model.model_fields:
            owners.setdefault(name, []).append(model.__name__)
    assert {k: v for k, v in owners.items() if len(v) > 1} == {}
    assert set(owners) == set(Fingerprint.model_fields) - {"evidence"}


def test_the_word_filter_is_the_readers_words():
    rx, starts = _words()
    for reader in _LINE_READERS:
        for word in reader.words.split("|"):
            assert word in rx.pattern.split("|"), (reader.__name__, word)
    assert "VLLM_" in starts


def test_a_drafter_line_goes_to_the_drafter_only():
    text = "\n".join([
        "(EngineCore pid=1) INFO 01-01 00:00:00 [gpu_model_runner.py:1] Loading drafter model...",
        "(EngineCore pid=1) INFO 01-01 00:00:01 [cuda.py:1] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN']",
        "(EngineCore pid=1) INFO 01-01 00:00:02 [gpu_model_runner.py:2] Model loading took 1.5 GiB memory and 2.0 seconds",
        "(EngineCore pid=1) INFO 01-01 00:00:03 [cuda.py:1] Using FLASHINFER attention backend out of potential backends: ['FLASHINFER']",
    ])
    fp = fingerprint(text)
    assert (fp.drafter_attention_backend, fp.attention_backend) == ("FLASH_ATTN", "FLASHINFER")
    assert fp.model_load_gib == 1.5


_API = "INFO 01-01 00:00:00 [api_server.py:1] "


def test_non_default_args_speculative_forms() -> None:
    """NonDefaultArgs / SpeculativeArgs: the flattened 0.26 keys, a JSON speculative_config, and
    the first-present name of the draft length."""
    flat = fingerprint(_API + "non-default args: {'model': 'm', 'spec_method': 'dspark', 'spec_tokens': 7}")
    assert (flat.spec_method, flat.num_speculative_tokens) == ("dspark", 7)
    as_json = fingerprint(
        _API + """non-default args: {'speculative_config': '{"method": "eagle3", "num_speculative_tokens": 3}'}"""
    )
    assert (as_json.spec_method, as_json.num_speculative_tokens) == ("eagle3", 3)
    # num_speculative_tokens is read first when present, even when it says nothing
    first = fingerprint(
        _API + "non-default args: {'speculative_config': "
        "{'method': 'mtp', 'num_speculative_tokens': None, 'num_spec_tokens': 4}}"
    )
    assert (first.spec_method, first.num_speculative_tokens) == ("mtp", None)
    other = fingerprint(_API + "non-default args: {'speculative_config': {'method': 'mtp', 'num_spec_tokens': 4}}")
    assert (other.spec_method, other.num_speculative_tokens) == ("mtp", 4)


def test_requested_from_args_kernel_config_and_env() -> None:
    nested = fingerprint(
        _API + "non-default args: {'kernel_config': {'moe_backend': 'marlin', 'linear_backend': 'auto'}, "
        "'attention_backend': 'FLASHINFER'}"
    )
    assert nested.requested == {"moe_backend": "marlin", "linear_backend": None, "attention_backend": "FLASHINFER"}
    assert nested.requested_source == "args"
    env = fingerprint("VLLM_USE_FLASHINFER_MOE_FP4=1\nVLLM_FLASHINFER_MOE_BACKEND=latency\n")
    assert env.requested["moe_backend"] == "flashinfer_trtllm" and env.requested_source == "env"
    # "0" is an explicit no; an unknown GEMM backend is kept as printed
    off = fingerprint("VLLM_USE_FLASHINFER_MOE_FP4=0\nVLLM_NVFP4_GEMM_BACKEND=newgemm\n")
    assert off.requested == {"moe_backend": None, "linear_backend": "newgemm", "attention_backend": None}


def test_json_log_records() -> None:
    """_JsonRecord: vLLM's formatter (`message`, `levelname`, `processName`) and a wrapper's raw
    line (`log`), read as a plain line."""
    text = "\n".join((
        json.dumps({"message": "Using 'MARLIN' NvFp4 MoE backend out of potential backends: [x]",
                    "levelname": "info", "processName": "EngineCore_0"}),
        json.dumps({"log": _API + "Using FLASHINFER attention backend out of potential backends: [x]"}),
    ))
    fp = fingerprint(text)
    assert (fp.moe_backend, fp.attention_backend) == ("MARLIN", "FLASHINFER")
