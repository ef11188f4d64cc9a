"""The benchmark's typed entry point: a frozen `BenchSettings` in, a `BenchResult` out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.bench.client import bench
from harness.bench.settings import BenchSettings
from harness.matrix.load import load_matrix
from harness.stages.measure import SOAK, settings_of

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("kw", "problem"), [
    (dict(concurrency=()), "concurrency ()"),
    (dict(concurrency=(1, 0)), "each >= 1"),
    (dict(max_tokens=0), "max_tokens 0"),
    (dict(timeout_s=0), "timeout_s 0"),
    (dict(endpoint="responses"), "endpoint 'responses'"),
])
def test_settings_refuse_work_that_cannot_be_measured(kw, problem):
    with pytest.raises(ValueError, match="bench settings: .*" + problem.replace("(", r"\(").replace(")", r"\)")):
        BenchSettings(**kw)


def test_settings_are_frozen_and_a_list_of_levels_reads_as_its_tuple():
    s = BenchSettings(concurrency=[1, 8])  # type: ignore[arg-type]
    assert s.concurrency == (1, 8) and hash(s) == hash(BenchSettings())
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_tokens = 3  # type: ignore[misc]


def test_the_entry_point_takes_settings_not_loose_keywords():
    with pytest.raises(TypeError):
        bench("http://127.0.0.1:9", "m", concurrency=(1,))  # type: ignore[call-arg]


def test_the_matrix_bench_table_becomes_the_settings():
    m = load_matrix(ROOT / "matrix" / "spark.toml")
    cfg = m.spec.bench
    s = settings_of(cfg)
    assert (s.concurrency, s.max_tokens, s.repeats, s.prompt_tokens, s.prefill, s.long_prompt_tokens) == (
        cfg.concurrency, cfg.max_tokens, cfg.repeats, cfg.prompt_tokens, cfg.prefill, cfg.long_prompt_tokens)
    assert SOAK.concurrency == (8,) and not SOAK.prefill and not SOAK.warmup
