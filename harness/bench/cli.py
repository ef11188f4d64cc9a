"""`harness bench`: measure a running OpenAI-compatible server, print a table and JSON."""

from __future__ import annotations

import argparse
import asyncio
import urllib.error
import urllib.request
from pathlib import Path

from rich.table import Table

from harness.bench.client import run_bench
from harness.bench.result import BenchResult
from harness.console import err, out
from harness.errors import ConfigError, EnvironmentProblem


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="benchmark a running server (decode, prefill, prefix cache, output health)",
        description="Stream fixed work (temperature 0, ignore_eos, seeded prompts) to a running "
        "OpenAI-compatible server and report per-stream and aggregate decode, TTFT/ITL/TPOT, "
        "prefill rate, prefix-cache hit rate and output diversity.",
    )
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="served model name")
    p.add_argument("--concurrency", default="1,8", help="comma-separated levels (default 1,8)")
    p.add_argument("--max-tokens", type=int, default=256, help="output tokens per request")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds per level")
    p.add_argument("--prompt-tokens", type=int, default=128, help="prompt length in words")
    p.add_argument(
        "--long-prompt-tokens", type=int, default=4000, help="prefill prompt length in words"
    )
    p.add_argument("--timeout", type=float, default=600, help="per-request read timeout, seconds")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument(
        "--no-prefill", action="store_true", help="skip the prefill / prefix-cache probe"
    )
    p.add_argument(
        "--no-warmup", action="store_true", help="time the first round too (not advised)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--out", type=Path, help="also write the JSON result to this file")
    p.set_defaults(func=main)


def parse_levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        levels = ()
    if not levels or any(c < 1 for c in levels):
        raise ConfigError(
            f"--concurrency {text!r} is not a list of positive integers",
            hint="write it like --concurrency 1,8,64",
        )
    return levels


def _preflight(url: str, timeout: float) -> None:
    """Fail fast, before anything is timed, when nothing answers at the URL."""
    base = url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=min(timeout, 10)) as r:
            r.read()
    except (urllib.error.URLError, OSError) as exc:
        raise EnvironmentProblem(
            f"no OpenAI-compatible server answers at {base}/v1/models ({exc})",
            hint="start the server (or `harness serve`) and check --url",
        ) from exc


def main(args: argparse.Namespace) -> int:
    levels = parse_levels(args.concurrency)
    if args.max_tokens < 2 or args.repeats < 1:
        raise ConfigError(
            "--max-tokens must be >= 2 and --repeats >= 1",
            hint="decode rate needs at least two tokens per stream",
        )
    _preflight(args.url, args.timeout)
    err.print(
        f"benchmarking {args.url} model={args.model} levels={list(levels)} "
        f"max_tokens={args.max_tokens} repeats={args.repeats}"
    )
    result = asyncio.run(
        run_bench(
            args.url,
            args.model,
            concurrency=levels,
            max_tokens=args.max_tokens,
            repeats=args.repeats,
            warmup=not args.no_warmup,
            prompt_tokens=args.prompt_tokens,
            long_prompt_tokens=args.long_prompt_tokens,
            timeout_s=args.timeout,
            endpoint=args.endpoint,
            prefill=not args.no_prefill,
        )
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(result.to_json() + "\n")
        err.print(f"wrote {args.out}")
    if args.json:
        out.print(result.to_json(), markup=False)
    else:
        render(result)
    nothing = [lv.concurrency for lv in result.levels if lv.failed == lv.requests]
    if nothing:
        err.print(
            f"[red]every request failed at concurrency {nothing}[/red]; first error: "
            f"{result.levels[0].errors[:1]}",
            markup=True,
        )
        return 1
    return 0


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"±{v * 50:.1f}%"  # half the range: ± around the median


def render(r: BenchResult) -> None:
    t = Table(
        title=f"{r.model} @ {r.url} ({r.endpoint}, {r.max_tokens} tokens, median of {r.repeats})"
    )
    for col in (
        "conc",
        "per-stream tok/s",
        "aggregate tok/s",
        "TTFT p50/p99 ms",
        "ITL p50/p99 ms",
        "TPOT p50 ms",
        "E2E p50 ms",
        "failed",
        "4-gram min",
    ):
        t.add_column(col, justify="right")
    for lv in r.levels:
        t.add_row(
            str(lv.concurrency),
            f"{_f(lv.per_stream_tok_s)} {_pct(lv.spread.get('per_stream_tok_s'))}",
            f"{_f(lv.aggregate_tok_s)} {_pct(lv.spread.get('aggregate_tok_s'))}",
            f"{_f(lv.ttft_ms_p50)} / {_f(lv.ttft_ms_p99)}",
            f"{_f(lv.itl_ms_p50, '{:.2f}')} / {_f(lv.itl_ms_p99, '{:.2f}')}",
            _f(lv.tpot_ms_p50, "{:.2f}"),
            _f(lv.e2e_ms_p50, "{:.0f}"),
            f"{lv.failed}/{lv.requests}",
            _f(lv.diversity_min, "{:.2f}") + (" DEGENERATE" if lv.degenerate else ""),
        )
    out.print(t)
    if r.prefill_tok_s is not None or r.prefix_cache_hit_rate is not None:
        out.print(
            f"prefill: {_f(r.prefill_tok_s, '{:.0f}')} tok/s "
            f"({r.prefill_prompt_tokens} prompt tokens, cold TTFT {_f(r.cold_ttft_ms)} ms); "
            f"prefix cache: hit rate {_f(r.prefix_cache_hit_rate and r.prefix_cache_hit_rate * 100)} %, "
            f"warm TTFT {_f(r.warm_ttft_ms)} ms",
            markup=False,
        )
    out.print(
        f"tokens counted from: {r.token_count_source}; client CPU {r.client_cpu_s:.2f} s "
        f"for {r.tokens_streamed} tokens",
        markup=False,
    )
    for w in r.warnings:
        err.print(f"[yellow]warning:[/yellow] {w}")
    for lv in r.levels:
        for e in lv.errors:
            err.print(f"c={lv.concurrency} error: {e}", markup=False)
