"""The benchmark client: fixed work against an OpenAI-compatible server, measured honestly.

Definitions follow `vllm bench serve` (vllm/benchmarks/serve.py and
lib/endpoint_request_func.py, 0.33.0) so that figures compare with it; where they differ the
reason is written here. Work is fixed (temperature 0, ignore_eos, seeded prompts), every
concurrency level is warmed up before it is timed, and nothing is retried inside a timed
round: a failure is counted and kept, and the other streams are still measured.

A level of concurrency c keeps c connections. They are opened, and warmed by the warm-up
round, before anything is timed; a server that closes a connection after each response gets
it reopened between rounds, outside the timing. A timed round sends c requests at once and
runs from the first request written to the last token received; its aggregate is the
round's output tokens over that span. Latency figures (TTFT, ITL, E2E) are percentiles over
every request of the level; ITL is per request, (last - first token time) / (tokens - 1);
gaps between arrivals of SSE messages are reported apart as chunk gaps.

Token counts come from usage.completion_tokens; a server that sends none has the returned
text counted by its own POST /tokenize (vLLM serves it), else by a local tokenizer file if
given; counting SSE messages is the last resort and is marked unreliable.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from pydantic import BaseModel, ConfigDict, Field

from harness.bench import health, prompts
from harness.bench.metrics import (
    PrefixCounters,
    Snapshot,
    hit_rate,
    parse_prefix_counters,
    parse_snapshot,
    server_figures,
)
from harness.bench.result import BenchResult, LevelResult, ServerFigures, Spread
from harness.bench.settings import BenchSettings
from harness.bench.stats import median, percentile, spread
from harness.bench.stream import RequestRecord, stream_raw, stream_request
from harness.bench.wire import Connection, HTTPError, Target, request

WARMUP_MAX_TOKENS = 16  # enough decode steps to trigger JIT / graph warm-up at that batch size
PREFILL_MAX_TOKENS = 4  # the prefill probe needs the first token only
MAX_ERRORS_KEPT = 5
COUNT_WORKERS = 8  # parallel /tokenize requests after the timed rounds
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
ROUND_CLOCK = "first request written -> last token received (connections opened beforehand)"

# progress(c, done, total): timed requests finished at level c, out of total.
Progress = Callable[[int, int, int], None]


class _Run:
    """Mutable bookkeeping of one run; only frozen results leave this module."""

    def __init__(
        self, target: Target, model: str, endpoint: str, timeout_s: float, progress
    ) -> None:
        self.target = target
        self.model = model
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.progress: Progress | None = progress
        self.warnings: list[str] = []
        self.tokens_streamed_records: list[RequestRecord] = []

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self.endpoint == "chat" else "/v1/completions"

    def payload(self, text: str, max_tokens: int) -> bytes:
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
        return json.dumps(body).encode()

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


async def _open_all(run: _Run, conns: list[Connection]) -> None:
    """Open every closed connection, outside any timing. A failure here is left for the
    request itself to meet (it is then recorded as that request's error)."""
    closed = [c for c in conns if c.closed]
    if closed:
        await asyncio.gather(*(c.open(run.timeout_s) for c in closed), return_exceptions=True)


async def _round(
    run: _Run,
    conns: list[Connection],
    max_tokens: int,
    words: int,
    seed: int,
    tag: str,
    on_done: Callable[[], None] | None = None,
) -> list[RequestRecord]:
    bodies = [
        run.payload(prompts.prompt(words, seed=seed, tag=f"{tag}-s{i}"), max_tokens)
        for i in range(len(conns))
    ]
    await _open_all(run, conns)

    async def one(conn: Connection, body: bytes):
        parse = await stream_raw(conn, run.path, body, read_timeout_s=run.timeout_s)
        if on_done is not None:
            on_done()
        return parse

    parsers = await asyncio.gather(*(one(c, b) for c, b in zip(conns, bodies, strict=True)))
    recs = [parse() for parse in parsers]  # after the round: no parsing inside the timing
    run.tokens_streamed_records.extend(recs)
    return recs


async def _scrape_text(run: _Run, what: str) -> str | None:
    try:
        status, body = await request(run.target, "GET", "/metrics", timeout_s=run.timeout_s)
    except (HTTPError, TimeoutError, OSError) as exc:
        run.warn(f"/metrics unreachable ({type(exc).__name__}): no {what}")
        return None
    if status != 200:
        run.warn(f"/metrics answered HTTP {status}: no {what}")
        return None
    return body.decode("utf-8", "replace")


async def _snapshot(run: _Run) -> Snapshot | None:
    text = await _scrape_text(run, "server-side TTFT/ITL beside the client's")
    return parse_snapshot(text) if text is not None else None


async def _level(
    run: _Run, c: int, *, max_tokens: int, repeats: int, warmup: bool, words: int, seed: int
) -> tuple[list[list[RequestRecord]], ServerFigures | None, float, float]:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    conns = [Connection(run.target) for _ in range(c)]
    try:
        await _open_all(run, conns)
        if warmup:
            await _round(run, conns, min(max_tokens, WARMUP_MAX_TOKENS), words, seed, f"warm-c{c}")
        before = await _snapshot(run)
        total, done = repeats * c, 0

        def tick() -> None:
            nonlocal done
            done += 1
            if run.progress is not None:
                run.progress(c, done, total)

        if run.progress is not None:
            run.progress(c, 0, total)
        rounds = [
            await _round(run, conns, max_tokens, words, seed, f"c{c}-r{i}", tick)
            for i in range(repeats)
        ]
        after = await _snapshot(run)
    finally:
        for conn in conns:
            conn.close()
    server = server_figures(before, after)
    return rounds, server, time.process_time() - cpu0, time.perf_counter() - wall0


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0


def _round_aggregate(recs: list[RequestRecord]) -> float | None:
    ok = [r for r in recs if r.ok]
    if not ok:
        return None
    # From the first request written to the last token received: a stalled request
    # waiting out its timeout does not dilute the aggregate of the streams that finished.
    span = max(e for r in ok if (e := r.end) is not None) - min(r.start for r in recs if r.start)
    return sum(r.tokens for r in ok) / span if span > 0 else None


def _figures(recs: list[RequestRecord]) -> dict[str, float | None]:
    ok = [r for r in recs if r.ok]
    itls = [v for r in ok if (v := r.itl)]
    ttfts = [t for r in ok if (t := r.ttft) is not None]  # every ok request has its first token
    return {
        "per_stream_tok_s": median([1.0 / v for v in itls]),
        "aggregate_tok_s": _round_aggregate(recs),
        "ttft_ms_p50": _ms(percentile(ttfts, 50)),
        "ttft_ms_p99": _ms(percentile(ttfts, 99)),
        "itl_ms_p50": _ms(percentile(itls, 50)),
        "itl_ms_p99": _ms(percentile(itls, 99)),
        # TPOT as vLLM defines it, (latency - ttft) / (tokens - 1), is the per-request ITL.
        "tpot_ms_p50": _ms(percentile(itls, 50)),
        "e2e_ms_p50": _ms(median([e - r.start for r in ok if (e := r.end) is not None])),
    }


def _level_result(
    c: int,
    rounds: list[list[RequestRecord]],
    server: ServerFigures | None,
    cpu: float,
    wall: float,
    source: str,
) -> LevelResult:
    per_round = [_figures(recs) for recs in rounds]
    samples = {k: tuple(r[k] for r in per_round) for k in FIGURES}
    all_recs = [r for recs in rounds for r in recs]
    ok = [r for r in all_recs if r.ok]
    # Latencies over every request of the level, not a median of per-round percentiles
    # (a p99 of one round of one request is that request).
    pooled = _figures(all_recs)
    pooled["aggregate_tok_s"] = median(samples["aggregate_tok_s"])
    gaps = [g for r in ok for g in r.chunk_gaps()]
    ttfts = [t for r in ok if (t := r.ttft) is not None]  # every ok request has its first token
    ttft_mean = _ms(sum(ttfts) / len(ttfts)) if ttfts else None
    if server is not None and ttft_mean is not None and server.ttft_ms_mean is not None:
        server = server.model_copy(update={"client_ttft_inflation_ms": ttft_mean - server.ttft_ms_mean})
    errors: list[str] = []
    for r in all_recs:
        if r.error and r.error not in errors and len(errors) < MAX_ERRORS_KEPT:
            errors.append(r.error)
    scores = [health.diversity(r.text) for r in ok]
    return LevelResult(
        concurrency=c,
        **pooled,
        requests=len(all_recs),
        failed=len(all_recs) - len(ok),
        errors=tuple(errors),
        spread=Spread.model_validate({k: spread(v) for k, v in samples.items()}),
        samples=samples,
        diversity_min=min(scores) if scores else None,
        degenerate=any(health.is_degenerate(s) for s in scores),
        degenerate_count=sum(health.is_degenerate(s) for s in scores),
        output_tokens=sum(r.tokens for r in ok),
        client_cpu_s=cpu,
        wall_s=wall,
        ttft_ms_mean=ttft_mean,
        chunk_gap_ms_p50=_ms(percentile(gaps, 50)),
        chunk_gap_ms_p99=_ms(percentile(gaps, 99)),
        connects_in_timed_requests=sum(1 for r in all_recs if r.connect_s > 0),
        token_count_source=source,
        server=server,
    )


@dataclass(frozen=True)
class Prefill:
    """What the long-prompt requests measured (BenchResult's fields of the same names)."""

    prefill_tok_s: float | None = None
    prefill_prompt_tokens: int | None = None
    cold_ttft_ms: float | None = None
    warm_ttft_ms: float | None = None
    prefix_cache_hit_rate: float | None = None


async def _prefill(run: _Run, words: int, seed: int) -> tuple[Prefill, list[RequestRecord]]:
    """Cold long prompt (prefill rate), then the same prompt again (prefix cache)."""
    text = prompts.long_prompt(words, seed=seed, nonce=os.urandom(6).hex())
    body = run.payload(text, PREFILL_MAX_TOKENS)
    conn = Connection(run.target)
    try:
        cold = await stream_request(conn, run.path, body, read_timeout_s=run.timeout_s)
        before = await _scrape_text(run, "prefix-cache hit rate")
        warm = await stream_request(conn, run.path, body, read_timeout_s=run.timeout_s)
        after = await _scrape_text(run, "prefix-cache hit rate")
    finally:
        conn.close()
    counters: list[PrefixCounters | None] = []
    for t in (before, after):
        counters.append(parse_prefix_counters(t) if t is not None else None)
    if before is not None and counters[0] is None:
        run.warn("/metrics has no vllm:prefix_cache_* counters: no prefix-cache hit rate")
    prompt_tokens = cold.usage_prompt_tokens
    if cold.ok and prompt_tokens is None:
        prompt_tokens = await _tokenize(run, text, add_special_tokens=True)
    rate = None
    if not cold.ok:
        run.warn(f"cold prefill request failed: {cold.error}")
    elif prompt_tokens is None:
        run.warn(
            "no usage.prompt_tokens and no /tokenize: prefill rate not reported (never estimated)"
        )
    elif (cold_ttft := cold.ttft) is not None:  # an ok request has its first token
        rate = prompt_tokens / cold_ttft
    if not warm.ok:
        run.warn(f"warm (replayed) prefill request failed: {warm.error}")
    out = Prefill(
        prefill_tok_s=rate,
        prefill_prompt_tokens=prompt_tokens if rate is not None else None,
        cold_ttft_ms=_ms(cold.ttft) if cold.ok else None,
        warm_ttft_ms=_ms(warm.ttft) if warm.ok else None,
        prefix_cache_hit_rate=hit_rate(counters[0], counters[1]),
    )
    return out, [cold, warm]


class TokenizeAnswer(BaseModel):
    """vLLM's `/tokenize` answer: the count is read, the rest kept."""
    model_config = ConfigDict(frozen=True, extra="allow")
    count: int = Field(strict=True, description="Tokens in the prompt, as the server counts them.")


async def _tokenize(run: _Run, text: str, *, add_special_tokens: bool) -> int | None:
    """The server's own token count of `text` (vLLM POST /tokenize,
    entrypoints/serve/tokenize/protocol.py, 0.33.0: {model, prompt, add_special_tokens} ->
    {count, max_model_len, tokens}); None when the server has no such endpoint."""
    body = {"model": run.model, "prompt": text, "add_special_tokens": add_special_tokens}
    try:
        status, raw = await request(run.target, "POST", "/tokenize", body, timeout_s=30)
        if status != 200:
            return None
        return TokenizeAnswer.model_validate_json(raw).count
    except (HTTPError, TimeoutError, OSError, ValueError):  # ValidationError: not a count
        return None


def _local_counter(path: str | None) -> Callable[[str], int] | None:
    if not path:
        return None
    try:
        from tokenizers import Tokenizer  # optional: only for servers without /tokenize
    except ImportError:
        return None
    tok = Tokenizer.from_file(path)
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)


async def _count_tokens(
    run: _Run, records: list[RequestRecord], tokenizer: str | None
) -> tuple[dict[int, int], str]:
    """Token counts for the good records that carried no usage, keyed by id(record)."""
    todo = [r for r in records if r.ok and r.usage_completion_tokens is None]
    if not todo:
        return {}, "usage"
    # Output text is counted without special tokens: nothing was added to it.
    first = await _tokenize(run, todo[0].text, add_special_tokens=False)
    if first is not None:
        counts = {id(todo[0]): first}
        queue = list(todo[1:])

        async def worker() -> None:
            while queue:
                r = queue.pop()
                n = await _tokenize(run, r.text, add_special_tokens=False)
                if n is not None:
                    counts[id(r)] = n

        await asyncio.gather(*(worker() for _ in range(COUNT_WORKERS)))
        if len(counts) == len(todo):
            return counts, "tokenize"
        run.warn(f"/tokenize failed for {len(todo) - len(counts)} responses")
    counter = _local_counter(tokenizer)
    if counter is not None:
        return {id(r): counter(r.text) for r in todo}, "tokenizer"
    return {}, "chunks"


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
    tokenizer: str | None = None,
    progress: Progress | None = None,
    keep_requests: bool = False,
) -> BenchResult:
    """Measure decode at each concurrency, then prefill and prefix cache on a long prompt.

    `url` is the server's base address (a trailing /v1 is accepted). `timeout_s` is the
    per-request read timeout: a request that receives no byte for that long fails as stalled.
    `prompt_tokens` / `long_prompt_tokens` are in words; the server's own token counts are
    what the result reports. `tokenizer`: a tokenizer.json to count output tokens with when
    the server sends no usage and has no /tokenize. `progress(c, done, total)` is called as
    timed requests finish. `keep_requests` puts every timed request's record in
    `extra["requests"]` (for tests and the accuracy benchmark).
    """
    if endpoint not in ("completions", "chat"):
        raise ValueError(f"endpoint must be 'completions' or 'chat', not {endpoint!r}")
    target = Target.parse(base_url(url))
    run = _Run(target, model, endpoint, timeout_s, progress)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    measured = []
    for c in concurrency:
        rounds, server, cpu, wall = await _level(
            run,
            c,
            max_tokens=max_tokens,
            repeats=repeats,
            warmup=warmup,
            words=prompt_tokens,
            seed=seed,
        )
        measured.append((c, rounds, server, cpu, wall))
    pre, pre_recs = await _prefill(run, long_prompt_tokens, seed) if prefill else (Prefill(), [])
    timed = [r for _, rounds, *_ in measured for recs in rounds for r in recs]
    counts, source = await _count_tokens(run, timed, tokenizer)
    if counts:
        fixed = {id(r): r for r in timed}  # every timed record by id, a counted one as counted
        fixed.update({id(r): replace(r, counted_tokens=counts[id(r)]) for r in timed if id(r) in counts})
        measured = [
            (c, [[fixed[id(r)] for r in recs] for recs in rounds], server, cpu, wall)
            for c, rounds, server, cpu, wall in measured
        ]
    reliable = source != "chunks"
    if source == "tokenize":
        run.warn(
            "responses carried no usage.completion_tokens: output tokens were counted by the "
            "server's /tokenize on the returned text"
        )
    elif source == "tokenizer":
        run.warn(
            f"responses carried no usage.completion_tokens and the server has no /tokenize: "
            f"output tokens were counted with {tokenizer}"
        )
    elif source == "chunks":
        run.warn(
            "UNRELIABLE token counts: responses carried no usage.completion_tokens, the server "
            "has no /tokenize and no --tokenizer was given, so SSE messages were counted as "
            "tokens (wrong when a message carries several tokens)"
        )
    levels = [
        _level_result(c, rounds, server, cpu, wall, source)
        for c, rounds, server, cpu, wall in measured
    ]
    multi = [
        r.tokens / r.chunks
        for _, rounds, *_ in measured
        for recs in rounds
        for r in recs
        if r.ok and r.chunks and source != "chunks"
    ]
    if multi and max(multi) > 1.0001:
        run.warn(
            f"messages carried up to {max(multi):.2f} tokens on average: ITL is per request "
            "((last - first token) / (tokens - 1)); chunk gaps are per message"
        )
    streamed = run.tokens_streamed_records + pre_recs
    streamed_tokens = {id(r): r.tokens for r in streamed} | counts  # by id; a counted one as counted
    extra: dict[str, object] = {}
    if keep_requests:
        extra["requests"] = [
            _record_dict(c, i, r)
            for c, rounds, *_ in measured
            for i, recs in enumerate(rounds)
            for r in recs
        ]
    return BenchResult(
        url=target.base,
        model=model,
        endpoint=endpoint,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        repeats=repeats,
        levels=tuple(levels),
        prefill_tok_s=pre.prefill_tok_s,
        prefill_prompt_tokens=pre.prefill_prompt_tokens,
        cold_ttft_ms=pre.cold_ttft_ms,
        prefix_cache_hit_rate=pre.prefix_cache_hit_rate,
        warm_ttft_ms=pre.warm_ttft_ms,
        token_count_source=source,
        warnings=tuple(run.warnings),
        client_cpu_s=time.process_time() - cpu0,
        tokens_streamed=sum(streamed_tokens[id(r)] for r in streamed if r.ok),
        wall_s=time.perf_counter() - wall0,
        extra=extra,
        token_counts_reliable=reliable,
        event_loop=_loop_name(),
        round_clock=ROUND_CLOCK,
    )


def _record_dict(c: int, round_index: int, r: RequestRecord) -> dict:
    return {
        "concurrency": c,
        "round": round_index,
        "id": r.response_id,
        "ok": r.ok,
        "error": r.error,
        "start": r.start,
        "first": r.first,
        "end": r.end,
        "tokens": r.tokens if r.ok else None,
        "chunks": r.chunks,
        "usage_completion_tokens": r.usage_completion_tokens,
        "connect_s": r.connect_s,
        "text": r.text,
    }


def _loop_name() -> str:
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def base_url(url: str) -> str:
    base = url.rstrip("/")
    for tail in ("/v1/completions", "/v1/chat/completions", "/v1"):
        if base.endswith(tail):
            return base[: -len(tail)]
    return base


def run_sync(coro):
    """Run a coroutine on uvloop where it is installed (a leaner event loop: less client
    time between a byte's arrival and its timestamp), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def bench(url: str, model: str, settings: BenchSettings | None = None, *,
          progress: Progress | None = None) -> BenchResult:
    """The benchmark's entry point: `settings` (default: BenchSettings()) against the server at
    `url` serving `model`, run to the end; `progress(c, done, total)` is told as timed requests
    finish."""
    s = settings or BenchSettings()
    return run_sync(run_bench(
        url, model, concurrency=s.concurrency, max_tokens=s.max_tokens, repeats=s.repeats,
        warmup=s.warmup, prompt_tokens=s.prompt_tokens, long_prompt_tokens=s.long_prompt_tokens,
        timeout_s=s.timeout_s, endpoint=s.endpoint, prefill=s.prefill, seed=s.seed,
        tokenizer=s.tokenizer, progress=progress, keep_requests=s.keep_requests))
