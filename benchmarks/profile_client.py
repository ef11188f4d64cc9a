"""Where does the benchmark client spend its time at 64 streams? cProfile around one run.

The server is the fake vLLM server on the reference schedule (2 tokens per message every
5 ms, TTFT 50 ms); the client runs 3 timed rounds of 64 requests of 256 tokens after a
warm-up. CODE_ROOT chooses which client is measured, so an older commit can be profiled
the same way: `git archive <commit> harness | tar -x -C /tmp/old` then CODE_ROOT=/tmp/old.

Run:  python benchmarks/profile_client.py [--code-root DIR] [--profile] [--top 18]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--code-root", type=Path, default=ROOT, help="folder holding harness/")
    ap.add_argument("--profile", action="store_true", help="print a cProfile table too")
    ap.add_argument("--top", type=int, default=18)
    a = ap.parse_args()
    sys.path.insert(0, str(a.code_root))
    sys.path.insert(0, str(ROOT / "tests"))
    from support.local import fake_server

    import harness.bench.client as client

    try:
        from harness.bench.settings import BenchSettings

        def run(url: str, **kw):
            return client.bench(url, "fake-model", BenchSettings(**kw))
    except ImportError:  # a --code-root from before the typed entry point took keywords

        def run(url: str, **kw):
            return client.bench(url, "fake-model", **kw)

    flags = ("--tokens-per-s", "400", "--tokens-per-chunk", "2", "--ttft-ms", "50")
    print(f"client code: {client.__file__}")
    with fake_server(*flags) as url:
        run(url, concurrency=(64,), max_tokens=16, repeats=1, prefill=False)
        prof = cProfile.Profile()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if a.profile:
            prof.enable()
        r = run(url, concurrency=(64,), max_tokens=256, repeats=3, prefill=False)
        if a.profile:
            prof.disable()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    lv = r.level(64)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"load {load}; client CPU {cpu:.2f} s, wall {wall:.2f} s, {r.tokens_streamed} tokens, "
        f"{cpu / r.tokens_streamed * 1e6:.1f} CPU s per 1M tokens"
    )
    for k in ("aggregate_tok_s", "per_stream_tok_s", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50"):
        print(f"  {k} = {getattr(lv, k):.2f}")
    if a.profile:
        pstats.Stats(prof).sort_stats("tottime").print_stats(a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
