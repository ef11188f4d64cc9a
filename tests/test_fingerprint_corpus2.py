"""The round-4 corpus (tests/fixtures/logs/corpus2: 100+ real log excerpts from public threads,
each cited, expectations written by hand) is scored in CI: the test fails when fewer facts are
right than recorded in score.toml, or when a fact that is not a recorded known miss is missed."""

from __future__ import annotations

import tomllib
from pathlib import Path

from harness.fingerprint.corpus import load, score

CORPUS = Path(__file__).parent / "fixtures" / "logs" / "corpus2"


def test_the_corpus_has_at_least_100_cited_logs():
    cases = load(CORPUS)
    assert len(cases) >= 100
    for name, side, _ in cases:
        assert side.source.startswith("https://github.com/"), name
        assert side.expect.model_dump(exclude_none=True), f"{name}: no fact asserted"


def test_the_score_does_not_drop():
    recorded = tomllib.loads((CORPUS / "score.toml").read_text(encoding="utf-8"))
    facts = score(CORPUS)
    right = sum(f.ok for f in facts)
    new_misses = [f"{f.log} {f.key}: expected {f.expected!r}, got {f.got!r}" for f in facts
                  if not f.ok and f"{f.log} {f.key}" not in recorded["known_misses"]]
    assert not new_misses, "\n".join(new_misses)
    assert right >= recorded["right"], f"{right}/{len(facts)} right, {recorded['right']} recorded"
