"""How accurate is `harness bench`? This client, GuideLLM and AIPerf against a known truth.

The reference server is the fake vLLM server (tests/support/fakeserver.py) on a known
schedule: 2 tokens per SSE message every 5 ms (400 tok/s per stream), TTFT 50 ms, 256
tokens per request. On a busy 2-core machine it can fall behind that schedule, so each
client is held to what the server itself recorded during that client's run (GET
/fake/stats: per request, when it received it, when it sent each message; its own
monotonic clock):
- TTFT truth      = first message sent - request received, p50 / p99 over requests;
- ITL truth       = (last sent - first sent) / (tokens - 1) per request, p50 / p99;
- per-stream      = median over requests of (tokens - 1) / (last sent - first sent);
- aggregate truth = tokens / (last sent - first received): per round for this client
  (c requests at once, median over rounds), over the whole window for GuideLLM and AIPerf
  (they keep c streams busy continuously).
The nominal schedule (TTFT 50, ITL 2.5, 400 per stream) is printed too.

Each level sends 30 x c requests (this client: 30 rounds of c after one warm-up round),
`--runs` times; every figure is the median over runs. Client CPU is each client's own CPU
time (ours: this process's `time.process_time()` around the run; the anchors:
RUSAGE_CHILDREN around their process, net of their start-up cost measured once on a
1-request run), per million output tokens received.

The anchors run from their own venv (never this project's), offline, with a local WordLevel
tokenizer (the published anchors):
    python3 -m venv /work/.venv-anchors
    /work/.venv-anchors/bin/pip install guidellm==0.8.1 aiperf==0.13.0
A missing anchor is skipped and the script says so.

Run:  python benchmarks/bench_client_accuracy.py [--levels 1,8,64] [--runs 3]
          [--anchors /work/.venv-anchors/bin] [--json-out FILE] [--md-out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from support.fakeserver import VOCAB  # noqa: E402
from support.local import fake_server  # noqa: E402

from harness.bench.client import bench  # noqa: E402
from harness.bench.prompts import WORDS  # noqa: E402
from harness.bench.settings import BenchSettings  # noqa: E402
from harness.bench.stats import percentile  # noqa: E402

MODEL = "fake-model"
RATE, PER_CHUNK, TTFT_MS, MAX_TOKENS, PER_C = 400.0, 2, 50.0, 256, 30
SERVER_FLAGS = (
    "--tokens-per-s",
    str(RATE),
    "--tokens-per-chunk",
    str(PER_CHUNK),
    "--ttft-ms",
    str(TTFT_MS),
)
FIGS = ("ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "per_stream", "aggregate")


# ---- the server's record ------------------------------------------------------------------
def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def server_reset(url: str) -> None:
    req = urllib.request.Request(url + "/fake/reset", data=b"{}")
    urllib.request.urlopen(req, timeout=10).read()


def truth(records: list[dict], rounds: list[list[dict]] | None) -> dict:
    ttft = [r["first_sent"] - r["recv"] for r in records]
    itl = [
        (r["last_sent"] - r["first_sent"]) / (r["tokens"] - 1)
        for r in records
        if r["tokens"] > 1 and r["last_sent"] > r["first_sent"]
    ]

    def agg(group: list[dict]) -> float:
        span = max(r["last_sent"] for r in group) - min(r["recv"] for r in group)
        return sum(r["tokens"] for r in group) / span

    return {
        "ttft_p50": percentile(ttft, 50) * 1000,
        "ttft_p99": percentile(ttft, 99) * 1000,
        "itl_p50": percentile(itl, 50) * 1000,
        "itl_p99": percentile(itl, 99) * 1000,
        "per_stream": statistics.median([1 / x for x in itl]),
        "aggregate": statistics.median([agg(g) for g in rounds]) if rounds else agg(records),
        "requests": len(records),
    }


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# ---- this client --------------------------------------------------------------------------
def run_ours(url: str, c: int) -> dict:
    server_reset(url)
    cpu0 = time.process_time()
    r = bench(
        url,
        MODEL,
        BenchSettings(
            concurrency=(c,),
            max_tokens=MAX_TOKENS,
            repeats=PER_C,
            warmup=True,
            prefill=False,
            keep_requests=True,
        ),
    )
    cpu = time.process_time() - cpu0
    lv = r.level(c)
    sent = {x["id"]: x for x in _get(url + "/fake/stats")["records"]}
    mine = r.extra["requests"]
    rounds = [[sent[q["id"]] for q in mine if q["round"] == i] for i in range(PER_C)]
    return {
        "ttft_p50": lv.ttft_ms_p50,
        "ttft_p99": lv.ttft_ms_p99,
        "itl_p50": lv.itl_ms_p50,
        "itl_p99": lv.itl_ms_p99,
        "per_stream": lv.per_stream_tok_s,
        "aggregate": lv.aggregate_tok_s,
        "chunk_gap_p50": lv.chunk_gap_ms_p50,
        "server_ttft_mean": lv.server.ttft_ms_mean if lv.server else None,
        "client_ttft_mean": lv.ttft_ms_mean,
        "failed": lv.failed,
        "requests": lv.requests,
        "tokens": r.tokens_streamed,
        "cpu_s": cpu,
        "cpu_s_per_mtok": cpu / r.tokens_streamed * 1e6,
        "connects_in_timed_requests": lv.connects_in_timed_requests,
        "event_loop": r.event_loop,
        "truth": truth([sent[q["id"]] for q in mine], rounds),
        # where a round's client span and the server's differ (both on CLOCK_MONOTONIC): the
        # server reading the round's first request after it was written, and the client's last
        # token stamped after the server sent it
        "server_read_lag_ms": statistics.median(
            (min(s["recv"] for s in g) - min(q["start"] for q in mine if q["round"] == i)) * 1000
            for i, g in enumerate(rounds)),
        "client_end_lag_ms": statistics.median(
            (max(q["end"] for q in mine if q["round"] == i) - max(s["last_sent"] for s in g)) * 1000
            for i, g in enumerate(rounds)),
    }


# ---- anchors ------------------------------------------------------------------------------
def make_tokenizer(work: Path) -> tuple[Path, Path]:
    """A WordLevel tokenizer over the words the prompts and the fake server use, as a folder
    (GuideLLM) and as a fake HF cache entry `local/tok` (AIPerf, HF_HUB_OFFLINE=1)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0}
    for w in [*VOCAB, *WORDS]:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    folder = work / "tok"
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
        "model_max_length": 1_000_000,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    hf = work / "hf"
    rev = "0" * 40
    entry = hf / "hub" / "models--local--tok"
    snap = entry / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        shutil.copy(f, snap / f.name)
    (snap / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(rev)
    return folder, hf


def _run_child(argv: list[str], env: dict) -> tuple[float, float]:
    cpu0, t0 = children_cpu(), time.perf_counter()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1800)
    cpu, wall = children_cpu() - cpu0, time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(
            f"{argv[0]} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
        )
    return cpu, wall


def guidellm(exe: Path, url: str, tok: Path, c: int, count: int, tokens: int, out: Path):
    argv = [
        str(exe),
        "run",
        "--backend",
        f"kind=openai_http,target={url},model={MODEL},request_format=/v1/completions",
        "--profile",
        f"kind=concurrent,streams={c}",
        "--constraint",
        f"kind=max_requests,count={count}",
        "--tokenizer",
        f"kind=huggingface_auto,model={tok}",
        "--data",
        f"kind=synthetic_text,prompt_tokens=128,output_tokens={tokens}",
        "--output",
        f"kind=json,path={out}",
        "--disable-progress",
    ]
    cpu, wall = _run_child(argv, dict(os.environ, HF_HUB_OFFLINE="1"))
    return json.loads(out.read_text()), cpu, wall


def aiperf(exe: Path, url: str, hf: Path, c: int, count: int, tokens: int, out: Path):
    argv = [
        str(exe),
        "profile",
        "--url",
        url,
        "--model",
        MODEL,
        "--tokenizer",
        "local/tok",
        "--endpoint-type",
        "completions",
        "--streaming",
        "--concurrency",
        str(c),
        "--request-count",
        str(count),
        "--synthetic-input-tokens-mean",
        "128",
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(tokens),
        "--output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--ui",
        "none",
        "--artifact-dir",
        str(out),
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(hf))
    cpu, wall = _run_child(argv, env)
    return json.loads((out / "profile_export_aiperf.json").read_text()), cpu, wall


def _costs(url: str, c: int, tokens: float, cpu: float, wall: float, fixed: float) -> dict:
    """What every external client's row ends with: its cost per token (net of its fixed
    start-up cost, and gross) and the server's own record of what it sent."""
    return {
        "requests": PER_C * c,
        "tokens": tokens,
        "cpu_s": cpu,
        "cpu_s_per_mtok": (cpu - fixed) / tokens * 1e6 if tokens else None,
        "cpu_s_per_mtok_gross": cpu / tokens * 1e6 if tokens else None,
        "wall_s": wall,
        "truth": truth(_get(url + "/fake/stats")["records"], None),
    }


def run_guidellm(exe: Path, url: str, tok: Path, c: int, work: Path, fixed: float) -> dict:
    server_reset(url)
    d, cpu, wall = guidellm(exe, url, tok, c, PER_C * c, MAX_TOKENS, work / f"gl_c{c}.json")
    b = d["benchmarks"][0]
    m = b["metrics"]
    reqs = b["requests"]["successful"]
    tokens = sum((q["output_metrics"]["text_tokens"] or 0) for q in reqs)
    rates = []
    for q in reqs:
        t, n = q["info"]["timings"], q["output_metrics"]["text_tokens"] or 0
        span = t["last_token_iteration"] - t["first_token_iteration"]
        if n > 1 and span > 0:
            rates.append((n - 1) / span)
    first = min(q["info"]["timings"]["request_start"] for q in reqs)
    last = max(q["info"]["timings"]["last_token_iteration"] for q in reqs)

    def s(name):
        return m[name]["successful"]

    return {
        "ttft_p50": s("time_to_first_token_ms")["percentiles"]["p50"],
        "ttft_p99": s("time_to_first_token_ms")["percentiles"]["p99"],
        "itl_p50": s("inter_token_latency_ms")["percentiles"]["p50"],
        "itl_p99": s("inter_token_latency_ms")["percentiles"]["p99"],
        # Same definitions as ours, applied to its own per-request timestamps:
        "per_stream": statistics.median(rates) if rates else None,
        "aggregate": tokens / (last - first),
        "aggregate_reported": s("output_tokens_per_second")["mean"],
        "failed": len(b["requests"]["errored"]) + len(b["requests"]["incomplete"]),
        **_costs(url, c, tokens, cpu, wall, fixed),
    }


def run_aiperf(exe: Path, url: str, hf: Path, c: int, work: Path, fixed: float) -> dict:
    server_reset(url)
    d, cpu, wall = aiperf(exe, url, hf, c, PER_C * c, MAX_TOKENS, work / f"ap_c{c}")
    tokens = d["total_output_tokens"]["avg"]
    return {
        "ttft_p50": d["time_to_first_token"]["p50"],
        "ttft_p99": d["time_to_first_token"]["p99"],
        "itl_p50": d["inter_token_latency"]["p50"],
        "itl_p99": d["inter_token_latency"]["p99"],
        "per_stream": d["output_token_throughput_per_user"]["p50"],
        "aggregate": d["output_token_throughput"]["avg"],
        "failed": PER_C * c - int(d["completed_request_count"]["avg"]),
        **_costs(url, c, tokens, cpu, wall, fixed),
    }


# ---- report -------------------------------------------------------------------------------
def med(runs: list[dict], key: str, sub: str | None = None) -> float | None:
    vals = [(r[sub] if sub else r).get(key) for r in runs]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def f(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def markdown(results: dict) -> str:
    lines = [
        "| c | client | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | per-stream tok/s "
        "| aggregate tok/s | aggregate err | client CPU s / 1M tok | failed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c, row in results["levels"].items():
        lines.append(
            f"| {c} | nominal schedule | {TTFT_MS:.1f} | {TTFT_MS:.1f} | {1000 / RATE:.2f} "
            f"| {1000 / RATE:.2f} | {RATE:.1f} | - | - | - | - |"
        )
        for name, label in (
            ("ours", "this client"),
            ("ours_close", "this client, server closes every connection"),
            ("guidellm", "GuideLLM 0.8.1"),
            ("aiperf", "AIPerf 0.13.0"),
        ):
            runs = row.get(name)
            if not runs:
                continue
            t = {k: med(runs, k, "truth") for k in FIGS}
            v = {k: med(runs, k) for k in FIGS}
            err = None if v["aggregate"] is None else (v["aggregate"] / t["aggregate"] - 1) * 100
            failed = sum(r["failed"] for r in runs)
            lines.append(
                f"| {c} | {label} | {f(v['ttft_p50'])} | {f(v['ttft_p99'])} "
                f"| {f(v['itl_p50'], '.2f')} | {f(v['itl_p99'], '.2f')} | {f(v['per_stream'])} "
                f"| {f(v['aggregate'])} | {f(err, '+.2f')} % | {f(med(runs, 'cpu_s_per_mtok'))} "
                f"| {failed}/{sum(r['requests'] for r in runs)} |"
            )
            lines.append(
                f"| {c} | truth (server record of those runs) | {f(t['ttft_p50'])} "
                f"| {f(t['ttft_p99'])} | {f(t['itl_p50'], '.2f')} | {f(t['itl_p99'], '.2f')} "
                f"| {f(t['per_stream'])} | {f(t['aggregate'])} | | | |"
            )
    for c, row in results["levels"].items():
        if row.get("ours"):
            lines.append(
                f"\nc={c}, this client, median over runs of each run's median round: the server read the "
                f"round's first request {f(med(row['ours'], 'server_read_lag_ms'), '.2f')} ms after it was "
                f"written; the last token was stamped {f(med(row['ours'], 'client_end_lag_ms'), '.2f')} ms "
                "after the server sent it"
            )
    return "\n".join(lines)


def main() -> int:
    global PER_C, MAX_TOKENS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,8,64")
    ap.add_argument("--runs", type=int, default=3, help="runs per client and level (median)")
    ap.add_argument(
        "--anchors",
        type=Path,
        default=Path("/work/.venv-anchors/bin"),
        help="bin/ of the venv holding guidellm and aiperf",
    )
    ap.add_argument("--no-anchors", action="store_true")
    ap.add_argument(
        "--no-close",
        action="store_true",
        help="skip this client's runs against a server that closes connections",
    )
    ap.add_argument("--per-c", type=int, default=PER_C, help="requests per level / c")
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--md-out", type=Path)
    a = ap.parse_args()
    PER_C, MAX_TOKENS = a.per_c, a.max_tokens
    levels = [int(x) for x in a.levels.split(",")]
    exes = {}
    if not a.no_anchors:
        for name in ("guidellm", "aiperf"):
            exe = a.anchors / name
            if exe.exists():
                exes[name] = exe
            else:
                print(f"{name}: skipped, {exe} not found (see this script's docstring)")
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    results: dict = {
        "started": started,
        "machine": {
            "node": platform.node(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": load0,
        },
        "schedule": {
            "tok_s_per_stream": RATE,
            "tokens_per_message": PER_CHUNK,
            "ttft_ms": TTFT_MS,
            "max_tokens": MAX_TOKENS,
            "requests_per_level": f"{PER_C} x c",
        },
        "levels": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tok, hf = make_tokenizer(work)
        with fake_server(*SERVER_FLAGS) as url:
            fixed = {}
            if "guidellm" in exes:
                _, fixed["guidellm"], _ = guidellm(
                    exes["guidellm"], url, tok, 1, 1, 2, work / "gl0.json"
                )
            if "aiperf" in exes:
                _, fixed["aiperf"], _ = aiperf(exes["aiperf"], url, hf, 1, 1, 2, work / "ap0")
            results["anchor_startup_cpu_s"] = fixed
            for c in levels:
                row = results["levels"].setdefault(c, {})
                for i in range(a.runs):
                    print(f"c={c} run {i + 1}/{a.runs}", flush=True)
                    row.setdefault("ours", []).append(run_ours(url, c))
                    if "guidellm" in exes:
                        row.setdefault("guidellm", []).append(
                            run_guidellm(exes["guidellm"], url, tok, c, work, fixed["guidellm"])
                        )
                    if "aiperf" in exes:
                        row.setdefault("aiperf", []).append(
                            run_aiperf(exes["aiperf"], url, hf, c, work, fixed["aiperf"])
                        )
        if not a.no_close:
            with fake_server(*SERVER_FLAGS, "--close-connections") as url:
                for c in levels:
                    for i in range(a.runs):
                        print(f"c={c} closing server, run {i + 1}/{a.runs}", flush=True)
                        results["levels"][c].setdefault("ours_close", []).append(run_ours(url, c))
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    md = markdown(results)
    print()
    print(md)
    print()
    print(
        f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, at end "
        + " ".join(f"{x:.2f}" for x in results["machine"]["loadavg_end"])
        + f"; anchors' start-up CPU (subtracted): {fixed}"
    )
    if a.md_out:
        a.md_out.write_text(md + "\n")
    if a.json_out:
        a.json_out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
