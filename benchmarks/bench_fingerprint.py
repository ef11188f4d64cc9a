"""Time `fingerprint()` on a 1 MB log, in process (the aim: under 0.2 s).

    python benchmarks/bench_fingerprint.py [--size-mb 1] [--repeats 7] [--all-corpora] [LOG ...]

The log is built from real vLLM logs only: by default the 0.25.1 H200 server logs
(examples/h200/run/logs) and the upstream corpus (tests/fixtures/logs/corpus), concatenated in
order and repeated until the size is reached (so it holds start-up dumps, kernel lines, request
lines, tracebacks and a death, like a long real log). `--all-corpora` adds the round-4 and cause
corpora (tests/fixtures/logs/corpus2, corpus3: table-cell and flattened pastes, stalls, capture
bars, wrapped causes), so every reading the fingerprint has is on the timed path. Prints the first (cold: data tables loaded)
and the median / best of the warm runs, wall clock and the process's CPU time. Exit 1 when the
warm CPU-time median is over the target (on a shared machine the wall clock also measures other
jobs). A benchmark, not a test: a busy machine makes it slower, never wrong.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.fingerprint import failure, tables  # noqa: E402
from harness.fingerprint.parse import fingerprint  # noqa: E402

TARGET_S = 0.2


def build_log(paths: list[Path], size: int) -> str:
    parts = [p.read_text(encoding="utf-8", errors="replace") for p in paths]
    text, i = "", 0
    while len(text.encode()) < size:
        text += parts[i % len(parts)]
        if not text.endswith("\n"):
            text += "\n"
        i += 1
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*", type=Path)
    ap.add_argument("--size-mb", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--all-corpora", action="store_true",
                    help="also tests/fixtures/logs/corpus2 and corpus3")
    args = ap.parse_args()
    # the short excerpts of corpus2/3 first: the H200 logs and corpus alone fill 1 MB
    extra = ["corpus3", "corpus2"] if args.all_corpora else []
    paths = args.logs or [
        p for c in extra for p in sorted((ROOT / "tests/fixtures/logs" / c).glob("*.log"))
    ] + sorted((ROOT / "examples/h200/run/logs").glob("*.log")) + sorted(
        (ROOT / "tests/fixtures/logs/corpus").glob("*.log")
    )
    text = build_log(paths, int(args.size_mb * 1024 * 1024))
    n_lines = text.count("\n")

    # cold: the TOML tables are parsed and validated on first use
    tables.signatures.cache_clear()
    tables.kernel_names.cache_clear()
    failure.failure_tables.cache_clear()
    t0 = time.perf_counter()
    fp = fingerprint(text)
    cold = time.perf_counter() - t0

    warm, cpu = [], []
    for _ in range(args.repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fingerprint(text)
        warm.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    med = statistics.median(warm)

    print(f"python {platform.python_version()} on {platform.machine()}, {len(paths)} source logs")
    print(f"log: {len(text.encode()) / 1e6:.2f} MB, {n_lines} lines")
    print(f"cold (tables loaded): {cold * 1000:.1f} ms")
    print(
        f"warm x{args.repeats}: median {med * 1000:.1f} ms, best {min(warm) * 1000:.1f} ms, "
        f"worst {max(warm) * 1000:.1f} ms ({n_lines / med / 1000:.0f} k lines/s)"
    )
    # CPU time of this process: what a busy shared machine does not inflate as much
    print(f"warm CPU time: median {statistics.median(cpu) * 1000:.1f} ms")
    if hasattr(os, "getloadavg"):
        print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"fingerprint: fatal={fp.fatal} class={fp.failure_class} signatures={len(fp.signatures)}")
    cpu_med = statistics.median(cpu)
    wall_ok, cpu_ok = med <= TARGET_S, cpu_med <= TARGET_S
    print(f"target {TARGET_S * 1000:.0f} ms, wall median: {'MET' if wall_ok else 'NOT MET'}")
    print(f"target {TARGET_S * 1000:.0f} ms, CPU median:  {'MET' if cpu_ok else 'NOT MET'}")
    # On a shared machine the wall clock measures the scheduler too; the exit code follows the
    # process's own CPU time, and both are printed.
    return 0 if cpu_ok else 1


if __name__ == "__main__":
    sys.exit(main())
