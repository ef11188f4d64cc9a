"""Prefix-cache counters read from a server's Prometheus /metrics text.

Names: `vllm:prefix_cache_queries_total` / `vllm:prefix_cache_hits_total` in vLLM 0.25.1 and
0.33.0 (v1/metrics/loggers.py; prometheus_client appends `_total`), and
`vllm:gpu_prefix_cache_{queries,hits}_total` in older releases. Each engine has its own
label set, so values are summed over labels. `external_` counters (KV connector) are not
this cache and are left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
