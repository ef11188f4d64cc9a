"""The cause corpus (tests/fixtures/logs/corpus3, issue 42): real logs from public threads, each
fatal one read by hand first with its cause written down in the sidecar (`cause`), scored on the
cause class, on whether the log holds the cause, on the line the cause is shown with, and on the
fatal ids: a fatal signature that fires and that the sidecar does not list contradicts the log and
fails the corpus. Every fact must hold (no recorded misses)."""

from __future__ import annotations

from pathlib import Path

from harness.fingerprint.corpus import load, score
from harness.fingerprint.tables import load_signatures

CORPUS = Path(__file__).parent / "fixtures" / "logs" / "corpus3"


def test_every_log_is_cited_and_every_fatal_one_has_its_cause_written_down():
    cases = load(CORPUS)
    assert len(cases) >= 15
    for name, side, _ in cases:
        assert side.source.startswith("https://github.com/"), name
        assert side.vllm_version, f"{name}: say the release, as far as the thread does"
        want = side.expect
        if want.fatal:
            assert side.cause.strip(), f"{name}: a fatal log needs its cause in words (sidecar `cause`)"
            assert want.failure_class is not None, f"{name}: the class the cause belongs to"
            assert want.cause_in_excerpt is not None, f"{name}: does the log hold the cause?"
            assert want.fatal_ids is not None, f"{name}: the fatal ids the log supports"


def test_every_fact_holds():
    facts = score(CORPUS)
    misses = [f"{f.log} {f.key}: expected {f.expected!r}, got {f.got!r}" for f in facts if not f.ok]
    assert not misses, "\n".join(misses)


def test_the_corpus_scores_causes_not_only_detection():
    facts = score(CORPUS)
    keys = {f.key for f in facts}
    assert {"failure_class", "cause_in_excerpt", "fatal_ids"} <= keys
    # the classes the patterns belong to are all represented
    classes = {f.expected for f in facts if f.key == "failure_class"}
    assert {"cuda-graph-capture", "timeout", "kernel-config-unsupported", "unsupported-arch",
            "jit-compile", "backend-refused", "secondary", "other"} <= classes


def test_a_contradicting_specific_id_fails_the_corpus(tmp_path):
    name = "006-vllm28363-a100-v011-marlin-invalid-thread-config-wrapper"
    for ext in (".log", ".toml"):
        (tmp_path / f"{name}{ext}").write_bytes((CORPUS / f"{name}{ext}").read_bytes())
    side = tmp_path / f"{name}.toml"
    # the sidecar says the log supports only an OOM: the Marlin id that fires then contradicts it
    side.write_text(side.read_text().replace('fatal_ids = ["marlin-invalid-thread-config"]',
                                             'fatal_ids = ["cuda-oom"]'))
    (fact,) = [f for f in score(tmp_path) if f.key == "fatal_ids"]
    assert not fact.ok and "marlin-invalid-thread-config" in fact.got
    assert "cuda-oom" in load_signatures()
