"""The benchmark client: fixed work against an OpenAI-compatible server, measured honestly.

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py and
lib/endpoint_request_func.py, 0.33.0) so that figures compare with it; where they differ the
reason is written here. Work is fixed (temperature 0, ignore_eos, seeded prompts), every
concurrency level is warmed up before it is timed, and nothing is retried inside a timed
round: a failure is counted and kept, and the other streams are still measured.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence

import aiohttp

from harness.bench import health, prompts
from harness.bench.metrics import PrefixCounters, hit_rate, parse_prefix_counters
from harness.bench.result import BenchResult, LevelResult
from harness.bench.stats import median, percentile, spread
from harness.bench.stream import RequestRecord, stream_request

WARMUP_MAX_TOKENS = 16  # enough decode steps to trigger JIT / graph warm-up at that batch size
PREFILL_MAX_TOKENS = 4  # the prefill probe needs the first token only
MAX_ERRORS_KEPT = 5
FIGURES = (
    "per_stream_tok_s",
    "aggregate_tok_s",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "itl_ms_p50",
    "itl_ms_p99",
    "tpot_ms_p50",
    "e2e_ms_p50",
)


class _Run:
    """Mutable bookkeeping of one run; only frozen results leave this module."""

    def __init__(self, base: str, model: str, endpoint: str, timeout_s: float) -> None:
        self.base = base
        self.model = model
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.warnings: list[str] = []
        self.tokens_streamed = 0
        self.records_with_usage = 0
        self.records_without_usage = 0
        self.multi_token_seen = 0.0

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"
        return self.base + path

    def payload(self, text: str, max_tokens: int) -> dict:
        body: dict = {
            "model": self.model,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.endpoint == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        return body

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def note(self, rec: RequestRecord) -> None:
        if not rec.ok:
            return
        if rec.usage_completion_tokens is None:
            self.records_without_usage += 1
        else:
            self.records_with_usage += 1
            per = rec.tokens_per_chunk(True)
            self.multi_token_seen = max(self.multi_token_seen, per)
        self.tokens_streamed += rec.tokens(True)

    @property
    def use_usage(self) -> bool:
        return self.records_without_usage == 0


async def _round(run: _Run, session, c: int, max_tokens: int, words: int, seed: int, tag: str):
    texts = [prompts.prompt(words, seed=seed, tag=f"{tag}-s{i}") for i in range(c)]
    t0 = time.perf_counter()
    recs = await asyncio.gather(
        *(
            stream_request(
                session, run.url, run.payload(t, max_tokens), read_timeout_s=run.timeout_s
            )
            for t in texts
        )
    )
    for r in recs:
        run.note(r)
    return t0, list(recs)


def _summarize_round(
    t0: float, recs: list[RequestRecord], use_usage: bool
) -> dict[str, float | None]:
    ok = [r for r in recs if r.ok]
    if not ok:
        return dict.fromkeys(FIGURES)
    # Wall ends at the last good token: a stalled request waiting out its timeout must not
    # dilute the aggregate of the streams that did finish.
    wall = max(r.end for r in ok) - t0
    decode = [d for r in ok if (d := r.decode_tok_s(use_usage))]
    itls = [g for r in ok for g in r.itls(use_usage)]
    ttfts = [r.ttft for r in ok]
    return {
        "per_stream_tok_s": median(decode),
        "aggregate_tok_s": sum(r.tokens(use_usage) for r in ok) / wall if wall > 0 else None,
        "ttft_ms_p50": _ms(percentile(ttfts, 50)),
        "ttft_ms_p99": _ms(percentile(ttfts, 99)),
        "itl_ms_p50": _ms(percentile(itls, 50)),
        "itl_ms_p99": _ms(percentile(itls, 99)),
        # TPOT as vLLM: (latency - ttft) / (tokens - 1), with multi-token chunks spread.
        "tpot_ms_p50": _ms(median([1.0 / d for d in decode])),
        "e2e_ms_p50": _ms(median([r.end - r.start for r in ok])),
    }


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


async def _level(
    run: _Run, c: int, *, max_tokens: int, repeats: int, warmup: bool, words: int, seed: int
) -> tuple[LevelResult, list[tuple[float, list[RequestRecord]]]]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    connector = aiohttp.TCPConnector(limit=c)
    async with aiohttp.ClientSession(connector=connector) as session:
        if warmup:
            await _round(
                run, session, c, min(max_tokens, WARMUP_MAX_TOKENS), words, seed, f"warm-c{c}"
            )
        rounds = [
            await _round(run, session, c, max_tokens, words, seed, f"c{c}-r{i}")
            for i in range(repeats)
        ]
    cpu = time.process_time() - cpu0
    return _level_result(c, rounds, run.use_usage, cpu, time.perf_counter() - wall0), rounds


def _level_result(c: int, rounds, use_usage: bool, cpu: float, wall: float) -> LevelResult:
    per_round = [_summarize_round(t0, recs, use_usage) for t0, recs in rounds]
    samples = {k: tuple(r[k] for r in per_round) for k in FIGURES}
    all_recs = [r for _, recs in rounds for r in recs]
    ok = [r for r in all_recs if r.ok]
    errors: list[str] = []
    for r in all_recs:
        if r.error and r.error not in errors and len(errors) < MAX_ERRORS_KEPT:
            errors.append(r.error)
    scores = [health.diversity(r.text) for r in ok]
    return LevelResult(
        concurrency=c,
        **{k: median(v) for k, v in samples.items()},
        requests=len(all_recs),
        failed=len(all_recs) - len(ok),
        errors=tuple(errors),
        spread={k: spread(v) for k, v in samples.items()},
        samples=samples,
        diversity_min=min(scores) if scores else None,
        degenerate=any(health.is_degenerate(s) for s in scores),
        degenerate_count=sum(health.is_degenerate(s) for s in scores),
        output_tokens=sum(r.tokens(use_usage) for r in ok),
        client_cpu_s=cpu,
        wall_s=wall,
    )


async def _scrape(run: _Run, session) -> PrefixCounters | None:
    try:
        timeout = aiohttp.ClientTimeout(total=run.timeout_s)
        async with session.get(run.base + "/metrics", timeout=timeout) as resp:
            if resp.status != 200:
                run.warn(f"/metrics answered HTTP {resp.status}: no prefix-cache hit rate")
                return None
            counters = parse_prefix_counters(await resp.text())
    except (aiohttp.ClientError, TimeoutError) as exc:
        run.warn(f"/metrics unreachable ({type(exc).__name__}): no prefix-cache hit rate")
        return None
    if counters is None:
        run.warn("/metrics has no vllm:prefix_cache_* counters: no prefix-cache hit rate")
    return counters


async def _prefill(run: _Run, words: int, seed: int) -> dict:
    """Cold long prompt (prefill rate), then the same prompt again (prefix cache)."""
    text = prompts.long_prompt(words, seed=seed, nonce=os.urandom(6).hex())
    out: dict = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
        cold = await stream_request(
            session, run.url, run.payload(text, PREFILL_MAX_TOKENS), read_timeout_s=run.timeout_s
        )
        run.note(cold)
        before = await _scrape(run, session)
        warm = await stream_request(
            session, run.url, run.payload(text, PREFILL_MAX_TOKENS), read_timeout_s=run.timeout_s
        )
        run.note(warm)
        after = await _scrape(run, session)
    if not cold.ok:
        run.warn(f"cold prefill request failed: {cold.error}")
    elif cold.usage_prompt_tokens is None:
        run.warn(
            "no usage.prompt_tokens from the server: prefill rate not reported (never estimated)"
        )
    else:
        out["prefill_prompt_tokens"] = cold.usage_prompt_tokens
        out["prefill_tok_s"] = cold.usage_prompt_tokens / cold.ttft
    out["cold_ttft_ms"] = _ms(cold.ttft) if cold.ok else None
    out["warm_ttft_ms"] = _ms(warm.ttft) if warm.ok else None
    if not warm.ok:
        run.warn(f"warm (replayed) prefill request failed: {warm.error}")
    out["prefix_cache_hit_rate"] = hit_rate(before, after)
    return out


def _base_url(url: str) -> str:
    base = url.rstrip("/")
    for tail in ("/v1/completions", "/v1/chat/completions", "/v1"):
        if base.endswith(tail):
            return base[: -len(tail)]
    return base


async def run_bench(
    url: str,
    model: str,
    *,
    concurrency: Sequence[int] = (1, 8),
    max_tokens: int = 256,
    repeats: int = 3,
    warmup: bool = True,
    prompt_tokens: int = 128,
    long_prompt_tokens: int = 4000,
    timeout_s: float = 600,
    endpoint: str = "completions",
    prefill: bool = True,
    seed: int = 0,
) -> BenchResult:
    """Measure decode at each concurrency, then prefill and prefix cache on a long prompt.

    `url` is the server's base address (a trailing /v1 is accepted). `timeout_s` is the
    per-request read timeout: a request that receives no byte for that long fails as stalled.
    `prompt_tokens` / `long_prompt_tokens` are in words; the server's own token counts are
    what the result reports.
    """
    if endpoint not in ("completions", "chat"):
        raise ValueError(f"endpoint must be 'completions' or 'chat', not {endpoint!r}")
    run = _Run(_base_url(url), model, endpoint, timeout_s)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    levels_rounds = []
    for c in concurrency:
        levels_rounds.append(
            (
                c,
                *await _level(
                    run,
                    c,
                    max_tokens=max_tokens,
                    repeats=repeats,
                    warmup=warmup,
                    words=prompt_tokens,
                    seed=seed,
                ),
            )
        )
    pre = await _prefill(run, long_prompt_tokens, seed) if prefill else {}
    use_usage = run.use_usage
    if not use_usage:
        run.warn(
            f"{run.records_without_usage} responses carried no usage.completion_tokens: "
            "tokens were counted as chunks, which undercounts multi-token chunks"
        )
        # Recompute with one rule for the whole run, so levels compare.
        levels = [
            _level_result(c, rounds, False, lv.client_cpu_s, lv.wall_s)
            for c, lv, rounds in levels_rounds
        ]
    else:
        levels = [lv for _, lv, _ in levels_rounds]
    if use_usage and run.multi_token_seen > 1.0001:
        run.warn(
            f"chunks carried up to {run.multi_token_seen:.2f} tokens on average: per-stream "
            "rate and ITL spread each chunk's tokens evenly"
        )
    return BenchResult(
        url=run.base,
        model=model,
        endpoint=endpoint,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        repeats=repeats,
        levels=tuple(levels),
        prefill_tok_s=pre.get("prefill_tok_s"),
        prefill_prompt_tokens=pre.get("prefill_prompt_tokens"),
        cold_ttft_ms=pre.get("cold_ttft_ms"),
        prefix_cache_hit_rate=pre.get("prefix_cache_hit_rate"),
        warm_ttft_ms=pre.get("warm_ttft_ms"),
        token_count_source="usage" if use_usage else "chunks",
        warnings=tuple(run.warnings),
        client_cpu_s=time.process_time() - cpu0,
        tokens_streamed=run.tokens_streamed,
        wall_s=time.perf_counter() - wall0,
    )


def bench(url: str, model: str, **kwargs) -> BenchResult:
    """Synchronous wrapper around `run_bench` (same arguments)."""
    return asyncio.run(run_bench(url, model, **kwargs))
