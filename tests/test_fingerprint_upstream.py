"""The fingerprint's tables against every message vLLM and FlashInfer can print.

tests/fixtures/upstream/*.json hold the logger calls of each release, read from its PyPI sdist
by tools/vllm_log_catalog.py (offline here: the files are committed). Each kept message is
rendered with sample values, put behind the prefixes of several vLLM eras, and must give the
fingerprint fact its category names; or be listed in tests/fixtures/upstream/ignored.toml with
the reason the fingerprint does not read it.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from support.upstream_render import VARIANTS, eras, render

from harness.fingerprint.model import Fingerprint
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.upstream import category, extract

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"


@dataclass(frozen=True)
class Entry:
    category: str
    level: str
    template: str
    fields: tuple[str, ...]
    at: str  # first release and location seen
    releases: tuple[str, ...]


@cache
def catalog() -> tuple[Entry, ...]:
    seen: dict[tuple, list] = {}
    for path in sorted(UPSTREAM.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        release = f"{doc['project']}-{doc['version']}"
        for m in doc["messages"]:
            key = (m["category"], m["level"], m["template"], tuple(m["fields"]))
            seen.setdefault(key, [f"{release} {m['at']}", []])[1].append(release)
    return tuple(Entry(*k, at, tuple(rels)) for k, (at, rels) in seen.items())


@cache
def ignored() -> tuple[dict, ...]:
    doc = tomllib.loads((UPSTREAM / "ignored.toml").read_text(encoding="utf-8"))
    rows = []
    for row in doc["ignore"]:
        assert set(row) <= {"match", "category", "level", "reason"}, row
        assert row.get("reason", "").strip(), f"ignore entry without a reason: {row}"
        rows.append({**row, "rx": re.compile(row.get("match", ""))})
    return tuple(rows)


def _named(fp: Fingerprint) -> bool:
    return any(s != "unclassified-failure" for s in fp.signatures)


# What the fingerprint must read from a line of each category.
FACTS = {
    "moe": lambda fp: fp.moe_backend is not None,
    "linear": lambda fp: bool(fp.linear_kernels),
    "attention": lambda fp: fp.attention_backend is not None,
    "kernel": lambda fp: bool(fp.moe_backend or fp.linear_kernels or fp.attention_backend),
    "quantization": lambda fp: bool(fp.moe_backend or fp.linear_kernels or _named(fp)),
    "cuda-graph": lambda fp: fp.cudagraph_mode is not None or fp.graph_capture_s is not None,
    "kv-cache": lambda fp: fp.kv_cache_tokens is not None or fp.max_concurrency is not None
    or _named(fp),
    "spec-decode": lambda fp: fp.spec_metrics_lines > 0 or "drafter" in fp.evidence,
    "autotuner": lambda fp: bool(fp.autotuner_skipped) or _named(fp),
    "fatal": lambda fp: fp.fatal and fp.failure_signature is not None and bool(fp.signatures),
    "refusal": lambda fp: fp.fatal and _named(fp),
}


# A FlashInfer per-tactic line ("Skipping tactic {runner} {tactic}, ...", "Failed when profiling
# ...") whose op no line names counts only from two failed tactics up: one such line alone is an
# excerpt's example, not a count (issue 42). Those are rendered as two tactics in one log.
_PER_TACTIC = re.compile(r"Skipping tactic|Failed when profiling")


@cache
def matches(e: Entry) -> bool:
    """True when some sample variant, rendered behind every era's prefix, gives the fact."""
    fact = FACTS[e.category]
    source = e.at.split()[-1]
    for variant in range(VARIANTS):
        message = render(e.template, list(e.fields), variant)
        texts = [text for _, text in eras(message, e.level, source)]
        if e.category == "autotuner" and _PER_TACTIC.search(e.template):
            # the same runner ({0}), a second tactic ({1})
            other = render(e.template.replace("{1}", "{1}2", 1), list(e.fields), variant)
            texts = [a + "\n" + b for a, (_, b) in zip(texts, eras(other, e.level, source), strict=True)]
        if all(fact(fingerprint(text)) for text in texts):
            return True
    return False


def ignore_row(e: Entry) -> dict | None:
    for row in ignored():
        if row.get("category") not in (None, e.category) or row.get("level") not in (None, e.level):
            continue
        if row["rx"].search(e.template):
            return row
    return None


def test_the_catalog_covers_every_minor_release():
    versions = {p.stem for p in UPSTREAM.glob("vllm-*.json")}
    minors = {".".join(v.split("-")[1].split(".")[:2]) for v in versions}
    assert {f"0.{n}" for n in range(8, 34) if n != 15} <= minors  # 0.15 has no sdist on PyPI
    assert any(p.stem.startswith("flashinfer-python-") for p in UPSTREAM.glob("*.json"))
    assert len(catalog()) > 300


def test_every_upstream_message_matches_or_is_ignored_with_a_reason():
    missing = [e for e in catalog() if not matches(e) and ignore_row(e) is None]
    assert not missing, "\n".join(
        f"{e.category} {e.level} {e.template!r} ({e.at})" for e in missing[:60]
    ) + f"\n... {len(missing)} in all"


def test_no_ignore_entry_is_stale():
    """An entry that no longer covers an unmatched message hides nothing: delete it."""
    used = {id(ignore_row(e)) for e in catalog() if not matches(e)}
    stale = [r["match"] for r in ignored() if id(r) not in used]
    assert not stale, stale


# --- the extractor itself, on source written for the test --------------------------------------
SOURCE = '''
from vllm.logger import init_logger
lg = init_logger(__name__)

def pick(backend, n, kernel):
    lg.info("Using %s for %s GEMM", kernel.__name__, "NVFP4")
    lg.info_once(f"Using {backend.value!r} NvFp4 MoE backend out of potential backends: {n:,}")
    msg = "GPU KV cache size: {} tokens".format(n)
    lg.info(msg)
    if n < 0:
        raise RuntimeError(f"Engine core proc {n} died unexpectedly.")
    print("not a logger call %s" % n)
'''


def test_extract_renders_percent_fstring_format_and_variables():
    got = extract(SOURCE, "vllm/v1/engine/x.py")
    assert [(m.template, m.fields, m.level, m.line) for m in got] == [
        ("Using {0} for {1} GEMM", ("s:kernel.__name__", "s:'NVFP4'"), "INFO", 6),
        ("Using {0} NvFp4 MoE backend out of potential backends: {1}",
         ("r:backend.value", ",:n"), "INFO", 7),
        ("GPU KV cache size: {0} tokens", ("s:n",), "INFO", 9),
        ("Engine core proc {0} died unexpectedly.", ("s:n",), "RAISE", 11),
    ]
    assert [category(m) for m in got] == ["linear", "moe", "kv-cache", "fatal"]


@pytest.mark.parametrize("template", ["Using {0} for MXFP4 MoE", "Using {0} for NVFP4 GEMM"])
def test_a_rendered_line_behind_every_era_prefix_reaches_the_fingerprint(template):
    e = Entry("kernel", "INFO", template, ("s:kernel",), "vllm-0.23.0 vllm/x.py:1", ("vllm-0.23.0",))
    assert matches(e)


# Lines a verdict stands on: each must be in the catalog and be READ (an over-broad ignore row
# once hid FlashInfer's "Skipped N unsupported tactic(s)" line).
MUST_READ = [
    "Using CutlassExpertsMxfp4 for MXFP4 MoE",
    "Using {0} attention backend out of potential backends: {1}.",
    "Using {0} for NVFP4 GEMM",
    "Selected {0} for {1}",
    "GPU KV cache size: {0} tokens",
    "Maximum concurrency for {0} tokens per request: {1}x",
    "Graph capturing finished in {0} secs, took {1} GiB",
    "EngineCore encountered a fatal error.",
    "Worker proc {0} died unexpectedly, shutting down executor.",
    "[Autotuner]: Skipped {0} unsupported tactic(s) for {1} (enable debug logs to see details)",
]


@pytest.mark.parametrize("template", MUST_READ)
def test_the_lines_verdicts_stand_on_are_read_not_ignored(template: str):
    found = [e for e in catalog() if e.template == template and e.level != "DEBUG"]
    assert found, f"not in the catalog: {template!r}"
    assert all(matches(e) for e in found), [e.at for e in found if not matches(e)]
