from __future__ import annotations

import pytest

from harness.redact import MASK, redact_args, redact_env, redact_text

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345"


def test_env():
    got = redact_env(
        {
            "HF_TOKEN": "x",
            "VLLM_API_KEY": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "DB_PASSWORD": "p",
            "PATH": "/usr/bin",
            "NOTE": f"token {HF}",
            "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE": "163840",
        }
    )
    assert got == {
        "HF_TOKEN": MASK,
        "VLLM_API_KEY": MASK,
        "AWS_SECRET_ACCESS_KEY": MASK,
        "DB_PASSWORD": MASK,
        "PATH": "/usr/bin",
        "NOTE": f"token {MASK}",
        "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE": "163840",
    }


ARGS = [
    (["vllm", "serve", "m", "--api-key", "abc"], ["vllm", "serve", "m", "--api-key", MASK]),
    (["--hf-token=xyz", "--port", "8000"], [f"--hf-token={MASK}", "--port", "8000"]),
    (
        ["docker", "run", "-e", "HF_TOKEN=abc", "-e", "VLLM_LOGGING_LEVEL=DEBUG"],
        ["docker", "run", "-e", f"HF_TOKEN={MASK}", "-e", "VLLM_LOGGING_LEVEL=DEBUG"],
    ),
    # sizes and tokenizers are not secrets
    (
        ["--max-num-batched-tokens", "65536", "--tokenizer", "/tok", "--tokenizer-mode", "auto"],
        ["--max-num-batched-tokens", "65536", "--tokenizer", "/tok", "--tokenizer-mode", "auto"],
    ),
    (["--model", HF], ["--model", MASK]),
]


@pytest.mark.parametrize(("argv", "expected"), ARGS)
def test_args(argv, expected):
    assert redact_args(argv) == expected


TEXT = [
    (f"export HF_TOKEN={HF}", f"export HF_TOKEN={MASK}"),
    ("OPENAI_API_KEY: sk-123 and MAX_JOBS=4", f"OPENAI_API_KEY: {MASK} and MAX_JOBS=4"),
    ("vllm serve m --api-key s3cret --port 8000", f"vllm serve m --api-key {MASK} --port 8000"),
    (f"logged in with {HF}.", f"logged in with {MASK}."),
    ("'hf_token': 'abc'", f"'hf_token': '{MASK}'"),
    ("GPU KV cache size: 872,960 tokens", "GPU KV cache size: 872,960 tokens"),
]


@pytest.mark.parametrize(("text", "expected"), TEXT)
def test_text(text, expected):
    assert redact_text(text) == expected
