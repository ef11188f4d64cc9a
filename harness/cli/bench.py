"""`harness bench`: measure a running OpenAI-compatible server, print a table and JSON."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from harness.bench.client import base_url, bench, run_sync
from harness.bench.result import BenchResult, ServerFigures
from harness.bench.settings import BenchSettings
from harness.bench.wire import HTTPError, Target, request
from harness.console import err, out, plain
from harness.errors import ConfigError, EnvironmentProblem
from harness.safety import numbers

MAX_CONCURRENCY = 4096
MAX_TOKENS = 1_000_000
MAX_REPEATS = 10_000
MAX_PROMPT_WORDS = 10_000_000


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
    p.add_argument("--max-tokens", type=numbers.arg("--max-tokens", int), default=256, help="output tokens per request")
    p.add_argument("--repeats", type=numbers.arg("--repeats", int), default=3, help="timed rounds per level")
    p.add_argument("--prompt-tokens", type=numbers.arg("--prompt-tokens", int), default=128, help="prompt length in words")
    p.add_argument(
        "--long-prompt-tokens", type=numbers.arg("--long-prompt-tokens", int), default=4000, help="prefill prompt length in words"
    )
    p.add_argument("--timeout", type=numbers.arg("--timeout", float), default=600, help="per-request read timeout, seconds")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument(
        "--no-prefill", action="store_true", help="skip the prefill / prefix-cache probe"
    )
    p.add_argument(
        "--no-warmup", action="store_true", help="time the first round too (not advised)"
    )
    p.add_argument(
        "--tokenizer",
        help="tokenizer.json to count output tokens with when the server sends no usage and "
        "has no /tokenize (needs the `tokenizers` package)",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON instead of the table (no live progress)"
    )
    p.add_argument("--out", type=Path, help="also write the JSON result to this file")
    p.set_defaults(func=main)


def parse_levels(text: str) -> tuple[int, ...]:
    got = [numbers.problem(x.strip(), int, lo=1, hi=MAX_CONCURRENCY) for x in text.split(",") if x.strip()]
    levels = tuple(v for v, why in got if v is not None)
    if not levels or len(levels) != len(got):
        raise ConfigError(
            f"--concurrency {text!r} is not a list of integers from 1 to {MAX_CONCURRENCY}",
            hint="write it like --concurrency 1,8,64",
        )
    return levels


def check_args(args: argparse.Namespace) -> tuple[int, ...]:
    """Every flag checked before anything is sent: one ConfigError naming the flag and the fix."""
    from harness.safety.grammar import http_url_problem
    from harness.safety.writes import STDOUT_NAMES, target_problem

    if getattr(args, "out", None) is not None and str(args.out) not in STDOUT_NAMES and \
            (why := target_problem(Path(args.out))) is not None:
        raise ConfigError(f"--out {args.out}: {why}", hint="give --out a new file or a regular file")

    if (why := http_url_problem(args.url)) is not None:
        raise ConfigError(f"--url {args.url!r} {why}", hint="give the server's base address, e.g. "
                          "--url http://127.0.0.1:8000")
    u = urlsplit(args.url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ConfigError(
            f"--url {args.url!r} is not an http(s) URL",
            hint="give the server's base address, e.g. --url http://127.0.0.1:8000",
        )
    try:
        u.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise ConfigError(f"--url {args.url!r}: {exc}", hint="use a port from 1 to 65535") from exc
    levels = parse_levels(args.concurrency)
    if not 2 <= args.max_tokens <= MAX_TOKENS:
        raise ConfigError(
            f"--max-tokens {args.max_tokens} is out of range",
            hint=f"use 2 to {MAX_TOKENS:,} (decode rate needs at least two tokens per stream)",
        )
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise ConfigError(
            f"--repeats {args.repeats} is out of range", hint=f"use 1 to {MAX_REPEATS:,}"
        )
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise ConfigError(
            f"--timeout {args.timeout:g} is not a positive number of seconds",
            hint="give the per-request read timeout in seconds, e.g. --timeout 600",
        )
    for flag, v in (
        ("--prompt-tokens", args.prompt_tokens),
        ("--long-prompt-tokens", args.long_prompt_tokens),
    ):
        if not 1 <= v <= MAX_PROMPT_WORDS:
            raise ConfigError(f"{flag} {v} is out of range", hint=f"use 1 to {MAX_PROMPT_WORDS:,}")
    if args.tokenizer and not Path(args.tokenizer).is_file():
        raise ConfigError(
            f"--tokenizer {args.tokenizer}: no such file",
            hint="give the path of the model's tokenizer.json, or leave the flag out",
        )
    return levels


def _preflight(url: str, timeout: float) -> None:
    """Fail fast, before anything is timed, when nothing answers at the URL."""
    target = Target.parse(base_url(url))
    try:
        status, _ = run_sync(request(target, "GET", "/v1/models", timeout_s=min(timeout, 10)))
    except (HTTPError, TimeoutError, OSError) as exc:
        status, why = 0, str(exc)
    else:
        why = f"HTTP {status}"
    if status != 200:
        raise EnvironmentProblem(
            f"no OpenAI-compatible server answers at {target.base}/v1/models ({why})",
            hint="start the server (or `harness serve`) and check --url",
        )


def _progress_bar() -> tuple[Progress, Callable[[int, int, int], None]]:
    """Requests done / total per level, on stderr."""
    bar = Progress(
        TextColumn("c={task.fields[c]:>4}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )
    tasks: dict[int, TaskID] = {}

    def update(c: int, done: int, total: int) -> None:
        if c not in tasks:
            tasks[c] = bar.add_task("", total=total, c=c)
        bar.update(tasks[c], completed=done, total=total)

    return bar, update


def main(args: argparse.Namespace) -> int:
    levels = check_args(args)
    _preflight(args.url, args.timeout)
    err.print(
        f"benchmarking {args.url} model={args.model} levels={list(levels)} "
        f"max_tokens={args.max_tokens} repeats={args.repeats}",
        markup=False,
    )
    settings = BenchSettings(
        concurrency=levels,
        max_tokens=args.max_tokens,
        repeats=args.repeats,
        warmup=not args.no_warmup,
        prompt_tokens=args.prompt_tokens,
        long_prompt_tokens=args.long_prompt_tokens,
        timeout_s=args.timeout,
        endpoint=args.endpoint,
        prefill=not args.no_prefill,
        tokenizer=args.tokenizer,
    )
    if args.json:
        result = bench(args.url, args.model, settings)
    else:
        bar, update = _progress_bar()
        with bar:
            result = bench(args.url, args.model, settings, progress=update)
    from harness.redact import redact_json_text
    from harness.safety.writes import is_stdout, write_text

    if is_stdout(args.out):  # `--out -` or /dev/stdout: the JSON goes to standard output
        out.print_json(result.to_json())
    elif args.out:
        # masked inside its strings like every output (a URL's credentials), and still JSON
        write_text(args.out, redact_json_text(result.to_json()) + "\n", make_parents=True,
                   flag="--out")  # never through a link
        err.print(f"wrote {args.out}", markup=False)
    if args.json:
        out.print_json(result.to_json())
        _warnings(result)  # on stderr too: a warning must not hide in a JSON field
    else:
        render(result)
    nothing = [lv.concurrency for lv in result.levels if lv.failed == lv.requests]
    if nothing:
        err.print(
            f"[red]every request failed at concurrency {nothing}[/red]; first error: "
            f"{plain(result.levels[0].errors[:1])}",
            markup=True,
        )
        return 1
    return 0


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"±{v * 50:.1f}%"  # half the range: ± around the median


def render(r: BenchResult) -> None:
    from harness.tables import Col, show

    rows = []
    names = (
        "conc",
        "per-stream tok/s",
        "aggregate tok/s",
        "TTFT p50/p99 ms",
        "server TTFT mean/p50",
        "ITL p50/p99 ms",
        "chunk gap p50/p99",
        "E2E p50 ms",
        "failed",
        "4-gram min",
    )
    for lv in r.levels:
        srv = lv.server or ServerFigures()
        rows.append([
            str(lv.concurrency),
            f"{_f(lv.per_stream_tok_s)} {_pct(lv.spread.per_stream_tok_s)}",
            f"{_f(lv.aggregate_tok_s)} {_pct(lv.spread.aggregate_tok_s)}",
            f"{_f(lv.ttft_ms_p50)} / {_f(lv.ttft_ms_p99)}",
            f"{_f(srv.ttft_ms_mean)} / {_f(srv.ttft_ms_p50)}",
            f"{_f(lv.itl_ms_p50, '{:.2f}')} / {_f(lv.itl_ms_p99, '{:.2f}')}",
            f"{_f(lv.chunk_gap_ms_p50, '{:.2f}')} / {_f(lv.chunk_gap_ms_p99, '{:.2f}')}",
            _f(lv.e2e_ms_p50, "{:.0f}"),
            f"{lv.failed}/{lv.requests}",
            _f(lv.diversity_min, "{:.2f}") + (" DEGENERATE" if lv.degenerate else ""),
        ])
    show(out, f"{r.model} @ {r.url} ({r.endpoint}, {r.max_tokens} tokens, median of {r.repeats})",
         [Col(n, whole=n == "conc", justify="right") for n in names], rows)
    if r.prefill_tok_s is not None or r.prefix_cache_hit_rate is not None:
        out.print(
            f"prefill: {_f(r.prefill_tok_s, '{:.0f}')} tok/s "
            f"({r.prefill_prompt_tokens} prompt tokens, cold TTFT {_f(r.cold_ttft_ms)} ms); "
            f"prefix cache: hit rate {_f(r.prefix_cache_hit_rate and r.prefix_cache_hit_rate * 100)} %, "
            f"warm TTFT {_f(r.warm_ttft_ms)} ms",
            markup=False,
        )
    for lv in r.levels:
        if (figures := lv.server) is None or not figures.model_fields_set:
            continue
        parts = [f"c={lv.concurrency} server /metrics:"]
        if figures.generation_tokens is not None:
            parts.append(f"{figures.generation_tokens:.0f} tokens generated")
        if figures.itl_ms_mean is not None:
            parts.append(f"ITL mean {figures.itl_ms_mean:.2f} ms")
        if figures.client_ttft_inflation_ms is not None:
            parts.append(f"client TTFT inflation {figures.client_ttft_inflation_ms:+.1f} ms (mean)")
        if figures.spec_acceptance_rate is not None:
            parts.append(
                f"spec acceptance {figures.spec_acceptance_rate * 100:.1f} %, "
                f"mean length {figures.spec_mean_acceptance_length or 0:.2f}"
            )
        out.print(" ".join(parts), markup=False)
    counted: str = r.token_count_source
    if not r.token_counts_reliable:
        counted = "chunks ([bold red]UNRELIABLE[/bold red]: SSE messages counted as tokens)"
    out.print(
        f"tokens counted from: {counted}; client CPU {r.client_cpu_s:.2f} s "
        f"for {r.tokens_streamed} tokens; event loop {r.event_loop}; round clock: "
        f"{r.round_clock}",
        markup=True,
    )
    _warnings(r)


def _warnings(r: BenchResult) -> None:
    for w in r.warnings:
        err.print("[yellow]warning:[/yellow] ", end="")
        err.print(w, markup=False)
    for lv in r.levels:
        for e in lv.errors:
            err.print(f"c={lv.concurrency} error: {e}", markup=False)
