"""The fingerprint is the union of its readers' sub-models: each fact family (kernels, drafter,
CUDA graphs, KV cache, load, autotuner, request, spec decode, failure) owns its fields, no field
belongs to two readers, and every Fingerprint field but the shared evidence has one owner."""

from __future__ import annotations

from harness.fingerprint import Fingerprint, fingerprint
from harness.fingerprint.failure import FailureFacts
from harness.fingerprint.parse import _LINE_READERS, _words
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
