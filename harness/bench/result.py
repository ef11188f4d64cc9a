"""What a benchmark run measured: frozen records, written out as JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class LevelResult:
    """One concurrency level. Latency figures (TTFT, ITL = TPOT, E2E) and per-stream decode
    are over every timed request of the level; the aggregate is the median over rounds.
    `samples` holds each figure per round and `spread` its (max - min) / median."""

    concurrency: int
    per_stream_tok_s: float | None  # median over requests of (tokens - 1) / (last - first)
    aggregate_tok_s: float | None  # round's output tokens / (first sent -> last received)
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    itl_ms_p50: float | None  # per request: (last - first token) / (tokens - 1)
    itl_ms_p99: float | None
    tpot_ms_p50: float | None
    e2e_ms_p50: float | None
    requests: int  # timed requests sent
    failed: int
    errors: tuple[str, ...]  # the first distinct errors, verbatim
    spread: dict[str, float | None]
    samples: dict[str, tuple[float | None, ...]]
    diversity_min: float | None
    degenerate: bool
    degenerate_count: int
    output_tokens: int
    client_cpu_s: float
    wall_s: float
    # Added later (defaults keep older stored results loadable):
    ttft_ms_mean: float | None = None  # over every request of the level
    chunk_gap_ms_p50: float | None = None  # gaps between SSE message arrivals, not ITL
    chunk_gap_ms_p99: float | None = None
    connects_in_timed_requests: int = 0  # connections a timed request had to open itself
    token_count_source: str = "usage"  # usage | tokenize | tokenizer | chunks
    # /metrics deltas over the timed rounds: ttft/itl/e2e _ms_mean/_ms_p50/_ms_p99,
    # _observations, generation_tokens, prompt_tokens, spec_* and client_ttft_inflation_ms
    server: dict[str, object] | None = None


@dataclass(frozen=True)
class BenchResult:
    url: str
    model: str
    endpoint: str
    max_tokens: int
    prompt_tokens: int
    repeats: int
    levels: tuple[LevelResult, ...]
    prefill_tok_s: float | None  # usage.prompt_tokens / TTFT of a cold long prompt
    prefill_prompt_tokens: int | None  # as the server counted them, never estimated
    cold_ttft_ms: float | None
    prefix_cache_hit_rate: float | None  # /metrics deltas around a replay of that prompt
    warm_ttft_ms: float | None
    token_count_source: Literal["usage", "tokenize", "tokenizer", "chunks"]
    warnings: tuple[str, ...]
    client_cpu_s: float  # this process's CPU time for the whole run
    tokens_streamed: int  # every output token received, warm-ups included
    wall_s: float
    extra: dict[str, object] = field(default_factory=dict)
    token_counts_reliable: bool = True  # False only when SSE messages were counted
    event_loop: str = "asyncio"  # uvloop where installed
    round_clock: str = ""  # what a timed round's span runs from and to

    def level(self, concurrency: int) -> LevelResult:
        return next(lv for lv in self.levels if lv.concurrency == concurrency)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)
