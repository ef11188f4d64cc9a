"""What a benchmark run measured: frozen records, written out as JSON."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)


class _Figures(BaseModel):
    """Frozen; keeps keys it does not know (a newer writer's), and every field has a default, so
    a stored result of an older version still loads."""

    model_config = ConfigDict(frozen=True, extra="allow")

    @model_validator(mode="after")
    def _measured(self) -> _Figures:
        """Every figure is a finite number >= 0 (times, rates, counts, spreads): a negative latency
        or a NaN in a results file is a damaged or forged file, refused on read. The server's own
        counters and free-form extras are its figures, not ours, and are left as they came."""
        for name, v in self.__dict__.items():
            if name in ("server", "extra"):
                continue
            for x in (v.values() if isinstance(v, dict) else [v]):
                for y in (x if isinstance(x, list | tuple) else [x]):
                    if isinstance(y, int | float) and not isinstance(y, bool) and not (math.isfinite(y) and y >= 0):
                        raise ValueError(f"{name} is {y!r}: times, rates and counts are finite and >= 0")
        return self


class ServerFigures(BaseModel):
    """What the server's /metrics say happened over a level's timed rounds (its deltas, in the
    client's units), from harness.bench.metrics.server_figures. A figure the server did not
    give is absent, not null: written out, it holds the keys it was given, in this order, and
    keeps any it does not know."""

    model_config = ConfigDict(frozen=True, extra="allow")

    ttft_ms_mean: float | None = None
    ttft_ms_p50: float | None = None  # p50 / p99 from bucket bounds: as fine as vLLM's buckets
    ttft_ms_p99: float | None = None
    ttft_observations: int | None = None
    itl_ms_mean: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p99: float | None = None
    itl_observations: int | None = None
    e2e_ms_mean: float | None = None
    e2e_ms_p50: float | None = None
    e2e_ms_p99: float | None = None
    e2e_observations: int | None = None
    itl_metric: str | None = None  # the histogram read for ITL (its name changed in vLLM)
    generation_tokens: float | None = None  # counter deltas (metrics.COUNTERS)
    prompt_tokens: float | None = None
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    spec_acceptance_rate: float | None = None
    spec_mean_acceptance_length: float | None = None
    client_ttft_inflation_ms: float | None = None  # the client's mean TTFT - the server's

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        given = self.model_fields_set  # extras included
        return {k: v for k, v in handler(self).items() if k in given}


class Spread(_Figures):
    """Each figure's (max - min) / median over a level's rounds (harness.bench.stats.spread; None
    with fewer than two). Written out, it holds the keys it was given, in this order, and keeps
    any it does not know: a spread stored by another version reads and writes back as it was."""

    per_stream_tok_s: float | None = None
    aggregate_tok_s: float | None = None
    ttft_ms_p50: float | None = None
    ttft_ms_p99: float | None = None
    itl_ms_p50: float | None = None
    itl_ms_p99: float | None = None
    tpot_ms_p50: float | None = None
    e2e_ms_p50: float | None = None

    @model_validator(mode="after")
    def _measured_extra(self) -> Spread:
        """A spread of a figure this version does not name is held to the same rule."""
        for name, y in (self.model_extra or {}).items():
            if isinstance(y, int | float) and not isinstance(y, bool) and not (math.isfinite(y) and y >= 0):
                raise ValueError(f"{name} is {y!r}: times, rates and counts are finite and >= 0")
        return self

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        given = self.model_fields_set  # extras included
        return {k: v for k, v in handler(self).items() if k in given}


class LevelResult(_Figures):
    """One concurrency level. Latency figures (TTFT, ITL = TPOT, E2E) and per-stream decode
    are over every timed request of the level; the aggregate is the median over rounds.
    `samples` holds each figure per round and `spread` its (max - min) / median."""

    concurrency: int
    per_stream_tok_s: float | None = None  # median over requests of (tokens - 1) / (last - first)
    aggregate_tok_s: float | None = None  # round's output tokens / (first sent -> last received)
    ttft_ms_p50: float | None = None
    ttft_ms_p99: float | None = None
    itl_ms_p50: float | None = None  # per request: (last - first token) / (tokens - 1)
    itl_ms_p99: float | None = None
    tpot_ms_p50: float | None = None
    e2e_ms_p50: float | None = None
    requests: int = 0  # timed requests sent
    failed: int = 0
    errors: tuple[str, ...] = ()  # the first distinct errors, verbatim
    spread: Spread = Field(default_factory=Spread)
    samples: dict[str, tuple[float | None, ...]] = Field(default_factory=dict)
    diversity_min: float | None = None
    degenerate: bool = False
    degenerate_count: int = 0
    output_tokens: int = 0
    client_cpu_s: float = 0.0
    wall_s: float = 0.0
    ttft_ms_mean: float | None = None  # over every request of the level
    chunk_gap_ms_p50: float | None = None  # gaps between SSE message arrivals, not ITL
    chunk_gap_ms_p99: float | None = None
    connects_in_timed_requests: int = 0  # connections a timed request had to open itself
    token_count_source: str = "usage"  # usage | tokenize | tokenizer | chunks
    # /metrics deltas over the timed rounds: ttft/itl/e2e _ms_mean/_ms_p50/_ms_p99,
    # _observations, generation_tokens, prompt_tokens, spec_* and client_ttft_inflation_ms
    server: ServerFigures | None = None

    def values(self, key: str) -> list[float]:
        """Every repeat of a figure (the median alone when no samples were kept)."""
        got = [float(v) for v in self.samples.get(key) or () if v is not None]
        if got:
            return got
        one = getattr(self, key, None)
        if one is None and self.model_extra:
            one = self.model_extra.get(key)
        return [float(one)] if one is not None else []


class BenchResult(_Figures):
    """What `harness bench` measured; a cell stores it as it is (results.model `bench`)."""

    url: str = ""
    model: str = ""
    endpoint: str = ""
    max_tokens: int = 0
    prompt_tokens: int = 0
    repeats: int = 0
    levels: tuple[LevelResult, ...] = ()
    prefill_tok_s: float | None = None  # usage.prompt_tokens / TTFT of a cold long prompt
    prefill_prompt_tokens: int | None = None  # as the server counted them, never estimated
    cold_ttft_ms: float | None = None
    prefix_cache_hit_rate: float | None = None  # /metrics deltas around a replay of that prompt
    warm_ttft_ms: float | None = None
    token_count_source: Literal["usage", "tokenize", "tokenizer", "chunks"] = "usage"
    warnings: tuple[str, ...] = ()
    client_cpu_s: float = 0.0  # this process's CPU time for the whole run
    tokens_streamed: int = 0  # every output token received, warm-ups included
    wall_s: float = 0.0
    extra: dict[str, object] = Field(default_factory=dict)
    token_counts_reliable: bool = True  # False only when SSE messages were counted
    event_loop: str = "asyncio"  # uvloop where installed
    round_clock: str = ""  # what a timed round's span runs from and to

    def level(self, concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    def per_stream(self, concurrency: int) -> float | None:
        lv = self.level(concurrency)
        return lv.per_stream_tok_s if lv else None

    @property
    def top(self) -> LevelResult | None:
        return max(self.levels, key=lambda lv: lv.concurrency) if self.levels else None

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)
