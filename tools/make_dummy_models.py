"""Model folders for `vllm serve --load-format dummy`: config.json + a tokenizer, no weights.

Qwen3-30B-A3B-shaped (48 layers, 128 experts, 8 active, hidden 2048: the published config of
Qwen/Qwen3-30B-A3B) in two flavours:
  qwen3moe_bf16   served with `--quantization fp8` for FP8 (online quantization of dummy weights)
  qwen3moe_nvfp4  a ModelOpt NVFP4 `quantization_config` (vLLM's modelopt NVFP4 path)
Random weights: real kernels and real speed, meaningless text. The tokenizer is word-level,
built with `tokenizers` from the words of any text file (e.g. vLLM's own sources), padded to the
model's 151,936 ids with Qwen's three special tokens at their real ids.

usage: python tools/make_dummy_models.py OUTDIR TEXTFILE
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

VOCAB = 151936
SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645}

CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
    "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": True, "use_sliding_window": False, "vocab_size": VOCAB,
}
NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_scheme": None,
         "ignore": ["lm_head", "model.layers.*.mlp.gate"], "producer": {"name": "modelopt", "version": "0.39.0"}}
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOKENIZER_CONFIG = {
    "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 40960, "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>", "unk_token": "[UNK]", "bos_token": None, "add_bos_token": False,
    "clean_up_tokenization_spaces": False, "chat_template": CHAT,
}
GENERATION = {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": False}


def vocabulary(text: str) -> dict[str, int]:
    words = [w for w, _ in collections.Counter(re.findall(r"[a-z]+", text.lower())).most_common(30000)]
    vocab = {"[UNK]": 0}
    for tok in [*words, *".,;:!?()[]{}'\"-_/=+*<>#@$%&^~`|\\", *"0123456789"]:
        vocab.setdefault(tok, len(vocab))
    by_id = {v: k for k, v in SPECIAL.items()}
    filler = 0
    while len(vocab) < VOCAB:
        nid = len(vocab)
        if nid in by_id:
            vocab[by_id[nid]] = nid
        else:
            vocab[f"tok{filler}"] = nid
            filler += 1
    assert len(vocab) == VOCAB and all(vocab[k] == v for k, v in SPECIAL.items())
    return vocab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("textfile", help="any text: its most common words become the vocabulary")
    a = ap.parse_args()
    from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

    vocab = vocabulary(Path(a.textfile).read_text(encoding="utf-8", errors="ignore"))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(k, special=True, normalized=False) for k in SPECIAL])
    for name, qc in (("qwen3moe_bf16", None), ("qwen3moe_nvfp4", NVFP4)):
        d = Path(a.outdir) / name
        d.mkdir(parents=True, exist_ok=True)
        cfg = dict(CONFIG, **({"quantization_config": qc} if qc else {}))
        (d / "config.json").write_text(json.dumps(cfg, indent=2))
        (d / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2))
        (d / "generation_config.json").write_text(json.dumps(GENERATION, indent=2))
        tok.save(str(d / "tokenizer.json"))
    print(f"models in {a.outdir}: qwen3moe_bf16, qwen3moe_nvfp4 (vocab {len(vocab)})")


if __name__ == "__main__":
    main()
