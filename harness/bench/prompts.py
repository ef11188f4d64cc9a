"""Deterministic, varied prompts: the same seed gives the same work on every run.

Prompts differ per stream and per round so that one request never hits another's prefix
cache; the long prompt starts with a per-run nonce so that it is cold even on a server that
already saw an earlier run (prefix caching matches from the first token).
"""

from __future__ import annotations

import random

WORDS = (
    "the of to a in is and for that this be with as on if not it by from are an or return "
    "tensor shape model layer config value none self type list int str dict kernel backend "
    "cache block size weight batch token request output input graph stream queue buffer "
    "thread lock event loop socket header chunk frame scale bias norm head rank shard"
).split()


def prompt(words: int, *, seed: int, tag: str) -> str:
    """`words` whitespace-separated words, fixed by (seed, tag)."""
    rng = random.Random(f"{seed}:{tag}")
    return " ".join(rng.choice(WORDS) for _ in range(words))


def long_prompt(words: int, *, seed: int, nonce: str) -> str:
    return f"[run {nonce}] " + prompt(words, seed=seed, tag="long")
