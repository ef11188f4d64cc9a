"""Prefix-cache counters read from a server's Prometheus /metrics text.

Names: `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total` in vLLM 0.25.1 and
0.33.0 (v1/metrics/loggers.py; prometheus_client appends `_total`), and
`vllm:gpu_prefix_cache_{queries,hits}_total` in older releases. Each engine has its own
label set, so values are summed over labels. `external_` counters (KV connector) are not
this cache and are left out.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from harness.bench.result import ServerFigures

_COUNTER = re.compile(
    r"^vllm:(?:gpu_)?prefix_cache_(?P<kind>queries|hits)_total(?:\{[^}]*\})?\s+(?P<value>\S+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class PrefixCounters:
    queries: float
    hits: float


def parse_prefix_counters(text: str) -> PrefixCounters | None:
    """Summed counters, or None when the server exposes neither name."""
    found = {"queries": 0.0, "hits": 0.0}
    seen = False
    for m in _COUNTER.finditer(text):
        try:
            found[m["kind"]] += float(m["value"])
        except ValueError:
            continue
        seen = True
    return PrefixCounters(found["queries"], found["hits"]) if seen else None


def hit_rate(before: PrefixCounters | None, after: PrefixCounters | None) -> float | None:
    """Share of queried prompt tokens that hit the cache between two scrapes."""
    if before is None or after is None:
        return None
    dq = after.queries - before.queries
    return (after.hits - before.hits) / dq if dq > 0 else None


# --- server-side latency and token figures ------------------------------------------------
# Names as vLLM 0.33.0 declares them (v1/metrics/loggers.py): histograms
# vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds (older releases:
# vllm:time_per_output_token_seconds, observed the same way), vllm:e2e_request_latency_seconds;
# counters vllm:generation_tokens_total and vllm:spec_decode_num_{drafts,draft_tokens,
# accepted_tokens}_total. vLLM observes inter-token latency once per engine step that
# produced output, so with speculative decoding one observation covers several tokens.
_SAMPLE = re.compile(
    r"^(?P<name>vllm:[A-Za-z0-9_:]+?)(?P<suffix>_bucket|_sum|_count|_total)?"
    r"(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)",
    re.MULTILINE,
)
_LE = re.compile(r'le="([^"]+)"')
HISTOGRAMS = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "itl": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds",),
}
COUNTERS = {
    "generation_tokens": "vllm:generation_tokens",
    "prompt_tokens": "vllm:prompt_tokens",
    "spec_drafts": "vllm:spec_decode_num_drafts",
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
}


@dataclass(frozen=True)
class Hist:
    """One histogram summed over label sets (engines): cumulative buckets, sum, count."""

    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), sorted
    sum: float
    count: float

    def minus(self, before: Hist | None) -> Hist:
        if before is None:
            return self
        prev: defaultdict[float, float] = defaultdict(float, before.buckets)  # a bound it lacked: 0
        return Hist(
            tuple((le, n - prev[le]) for le, n in self.buckets),
            self.sum - before.sum,
            self.count - before.count,
        )

    def quantile(self, q: float) -> float | None:
        """As Prometheus `histogram_quantile`: linear inside the bucket that holds rank q."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lo, below = 0.0, 0.0
        for le, cum in self.buckets:
            if cum >= rank:
                if le == float("inf"):
                    return lo  # beyond the last finite bound: its lower edge, as Prometheus
                inside = cum - below
                return lo + (le - lo) * ((rank - below) / inside if inside > 0 else 0.0)
            lo, below = le, cum
        return lo

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


@dataclass(frozen=True)
class Snapshot:
    """The figures of one /metrics scrape that the benchmark sets beside its own: each histogram
    of HISTOGRAMS (None when the server has none), and the counters of COUNTERS it exposes (by
    key; what a server exposes varies with its release and options)."""

    ttft: Hist | None
    itl: Hist | None
    e2e: Hist | None
    counters: dict[str, float]
    itl_name: str | None


def parse_snapshot(text: str) -> Snapshot:
    # summed over label sets (engines): a name first seen starts at 0
    buckets: defaultdict[str, defaultdict[float, float]] = defaultdict(lambda: defaultdict(float))
    sums: defaultdict[str, float] = defaultdict(float)
    counts: defaultdict[str, float] = defaultdict(float)
    totals: defaultdict[str, float] = defaultdict(float)
    for m in _SAMPLE.finditer(text):
        name, suffix = m["name"], m["suffix"]
        try:
            value = float(m["value"])
        except ValueError:
            continue
        if suffix == "_bucket":
            le = _LE.search(m["labels"] or "")
            if le:
                bound = float(le.group(1).replace("+Inf", "inf"))
                buckets[name][bound] += value
        elif suffix == "_sum":
            sums[name] += value
        elif suffix == "_count":
            counts[name] += value
        elif suffix == "_total":
            totals[name] += value

    def hist(key: str) -> tuple[Hist | None, str | None]:
        """The first of the key's names the server has (with its name), or none."""
        for name in HISTOGRAMS[key]:
            if name in counts:
                return Hist(tuple(sorted(buckets[name].items())), sums[name], counts[name]), name
        return None, None

    (ttft, _), (itl, itl_name), (e2e, _) = hist("ttft"), hist("itl"), hist("e2e")
    found = {k: totals[n] for k, n in COUNTERS.items() if n in totals}
    return Snapshot(ttft, itl, e2e, found, itl_name)


def server_figures(before: Snapshot | None, after: Snapshot | None) -> ServerFigures | None:
    """What the server says happened between two scrapes, in the client's units (ms).

    Means are exact (sum / count); p50 / p99 are read from bucket bounds, so they are only
    as fine as vLLM's buckets (TTFT: ..., 40, 60, 80, 100 ms; ITL: 10 ms and up, so a
    sub-10 ms ITL has no useful percentile, only its mean)."""
    if before is None or after is None:
        return None
    out: dict[str, float | int | str | None] = {}
    for key, h, was in (("ttft", after.ttft, before.ttft), ("itl", after.itl, before.itl),
                        ("e2e", after.e2e, before.e2e)):
        if h is None:
            continue
        d = h.minus(was)
        out[f"{key}_ms_mean"] = _ms(d.mean)
        out[f"{key}_ms_p50"] = _ms(d.quantile(0.5))
        out[f"{key}_ms_p99"] = _ms(d.quantile(0.99))
        out[f"{key}_observations"] = int(d.count)
    if after.itl_name:
        out["itl_metric"] = after.itl_name
    # a counter the earlier scrape lacked started at 0 (the server exposes it once it counts)
    grown = dict(after.counters)
    for key, earlier in before.counters.items():
        if key in grown:
            grown[key] -= earlier
    out.update(grown)
    if not out:
        return None
    deltas = ServerFigures.model_validate(out)
    drafts, draft_tokens, accepted = deltas.spec_drafts, deltas.spec_draft_tokens, deltas.spec_accepted_tokens
    if accepted is not None and draft_tokens:
        out["spec_acceptance_rate"] = accepted / draft_tokens
    if accepted is not None and drafts:
        out["spec_mean_acceptance_length"] = 1 + accepted / drafts
    return ServerFigures.model_validate(out)


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000.0
