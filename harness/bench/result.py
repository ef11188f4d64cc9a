"""What a benchmark run measured: frozen records, written out as JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class LevelResult:
    """One concurrency level. Each figure is the median over the timed repeats; `spread`
    gives (max - min) / median of that figure over the repeats, `samples` the raw values."""

    concurrency: int
    per_stream_tok_s: float | None  # median over streams of decode tok/s, then over repeats
    aggregate_tok_s: float | None  # output tokens of good requests / wall of the round
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    itl_ms_p50: float | None
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
    token_count_source: Literal["usage", "chunks"]
    warnings: tuple[str, ...]
    client_cpu_s: float  # this process's CPU time for the whole run
    tokens_streamed: int  # every output token received, warm-ups included
    wall_s: float
    extra: dict[str, object] = field(default_factory=dict)

    def level(self, concurrency: int) -> LevelResult:
        return next(lv for lv in self.levels if lv.concurrency == concurrency)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)
