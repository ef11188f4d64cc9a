"""What one benchmark does, as one frozen value: the work is fixed before any request is sent,
and the same value measures every server it is run against.

`bench(url, model, settings)` (harness.bench.client) takes it and returns a `BenchResult`; the
matrix's `[bench]` table becomes one in the measure stage, `harness bench`'s flags in the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Endpoint = Literal["completions", "chat"]


@dataclass(frozen=True)
class BenchSettings:
    concurrency: tuple[int, ...] = (1, 8)  # levels, each timed apart
    max_tokens: int = 256  # output tokens per request (ignore_eos makes it exact)
    repeats: int = 3  # timed rounds per level; the spread comes from these
    warmup: bool = True  # an untimed round per level first (JIT, graphs, connections)
    prompt_tokens: int = 128  # decode prompts, in words
    long_prompt_tokens: int = 4000  # the prefill prompt, in words
    timeout_s: float = 600  # per request: no byte for this long fails it as stalled
    endpoint: Endpoint = "completions"
    prefill: bool = True  # measure cold prefill and the prefix-cache replay
    seed: int = 0  # the prompts' seed
    tokenizer: str | None = None  # a tokenizer.json to count tokens with when the server cannot
    keep_requests: bool = False  # every timed request's record in extra["requests"]

    def __post_init__(self) -> None:
        object.__setattr__(self, "concurrency", tuple(self.concurrency))  # a list reads as its tuple
        problems = []
        if not self.concurrency or any(not isinstance(c, int) or c < 1 for c in self.concurrency):
            problems.append(f"concurrency {self.concurrency!r}: one or more levels, each >= 1")
        for name in ("max_tokens", "repeats", "prompt_tokens", "long_prompt_tokens"):
            if getattr(self, name) < 1:
                problems.append(f"{name} {getattr(self, name)}: at least 1")
        if not self.timeout_s > 0:
            problems.append(f"timeout_s {self.timeout_s}: more than 0")
        if self.endpoint not in ("completions", "chat"):
            problems.append(f"endpoint {self.endpoint!r}: 'completions' or 'chat'")
        if problems:
            raise ValueError("bench settings: " + "; ".join(problems))
