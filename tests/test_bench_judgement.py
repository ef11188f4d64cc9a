"""Pure parts of the benchmark, table-style: noise bands, roofline verdicts, /metrics parsing,
4-gram diversity, percentiles."""

from __future__ import annotations

import json

import pytest

from harness.bench.health import diversity, is_degenerate
from harness.bench.metrics import PrefixCounters, hit_rate, parse_prefix_counters
from harness.bench.noise import classify
from harness.bench.roofline import fp8_vs_nvfp4, roofline_efficiency, roofline_tok_s
from harness.bench.stats import percentile, spread
from harness.matrix.model import NOISE_FLOOR


@pytest.mark.parametrize(
    "baseline, candidate, kwargs, kind",
    [
        ([100, 101, 100.5], [101.5, 102, 101], {}, "noise"),  # +1 % under the 2 % floor
        ([100, 100, 100], [105, 105.5, 104.5], {}, "gain"),
        ([100, 100, 100], [95, 95, 95], {}, "loss"),
        ([90, 100, 110], [106, 107, 108], {}, "noise"),  # +7 % but the baseline spreads 20 %
        ([10.0, 10.0], [12.0, 12.0], {"higher_is_better": False}, "loss"),  # latency went up
        ([10.0, 10.0], [8.0, 8.0], {"higher_is_better": False}, "gain"),
        ([100], [103], {"floor": 0.05}, "noise"),
    ],
)
def test_classify(baseline, candidate, kwargs, kind):
    assert classify(baseline, candidate, **{"floor": NOISE_FLOOR, **kwargs}).kind == kind


def test_classify_reports_delta_and_band():
    c = classify([90, 100, 110], [106, 107, 108], floor=NOISE_FLOOR)
    assert c.delta == pytest.approx(0.07) and c.band == pytest.approx(0.20)
    with pytest.raises(ValueError):
        classify([], [1.0], floor=NOISE_FLOOR)


def test_spark_article_nvfp4_slower_than_fp8_fails_the_rule():
    # a published DGX Spark measurement: 35B-A3B on GB10 (273 GB/s); NVFP4 40.9 vs FP8 51.2 tok/s single stream.
    rows = fp8_vs_nvfp4(
        fp8_per_stream=51.2,
        nvfp4_per_stream=40.9,
        active_params=3e9,
        bandwidth_gbs=273,
        min_ratio=1.0,
    )
    (row,) = rows
    assert row.verdict == "FAIL" and not row.passed
    assert row.ratio == pytest.approx(40.9 / 51.2)
    assert row.fp8_efficiency == pytest.approx(51.2 / 91.0, rel=1e-3)  # ceiling 273/3 = 91 tok/s
    assert row.nvfp4_efficiency == pytest.approx(40.9 / (273 / (3 * 0.5625)), rel=1e-3)
    assert row.nvfp4_efficiency < row.fp8_efficiency / 2  # NVFP4 wastes its byte advantage


def test_fp8_vs_nvfp4_pass_and_aggregate_row():
    rows = fp8_vs_nvfp4(
        fp8_per_stream=50,
        nvfp4_per_stream=80,
        fp8_aggregate=300,
        nvfp4_aggregate=420,
        aggregate_concurrency=8,
        active_params=3e9,
        bandwidth_gbs=273,
        min_ratio=1.3,
    )
    assert [r.metric for r in rows] == ["decode per stream", "aggregate @8"]
    assert [r.verdict for r in rows] == ["PASS", "PASS"]
    assert rows[1].fp8_efficiency == pytest.approx(300 / 8 / 91.0, rel=1e-3)


def test_roofline():
    assert roofline_tok_s(3e9, 1.0, 273) == pytest.approx(91.0)
    assert roofline_efficiency(45.5, 3e9, 1.0, 273) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "fixture, queries, hits",
    [
        (
            "metrics_v033_two_engines.txt",
            4096 + 8192,
            4080,
        ),  # summed over engines, external_ excluded
        ("metrics_legacy_gpu_prefix.txt", 4112, 4096),
    ],
)
def test_prefix_counters_from_prometheus_text(fixtures, fixture, queries, hits):
    c = parse_prefix_counters((fixtures / "bench" / fixture).read_text())
    assert c == PrefixCounters(queries, hits)


def test_prefix_counters_absent_and_hit_rate():
    assert parse_prefix_counters("# nothing\nvllm:num_requests_running 0.0\n") is None
    assert hit_rate(PrefixCounters(100, 10), PrefixCounters(300, 160)) == 0.75
    assert hit_rate(PrefixCounters(100, 10), PrefixCounters(100, 10)) is None
    assert hit_rate(None, PrefixCounters(1, 1)) is None


@pytest.mark.parametrize(
    "text, expected",
    [
        ("too short to judge", 1.0),
        (" ".join(f"w{i}" for i in range(100)), 1.0),
        (" ".join(["the cache is warm"] * 25), 4 / 97),
    ],
)
def test_diversity(text, expected):
    assert diversity(text) == pytest.approx(expected)
    assert is_degenerate(diversity(text)) == (expected < 0.6)


def test_percentile_matches_numpy_linear_and_spread():
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(xs, 50) == 3.0
    assert percentile(xs, 99) == pytest.approx(9.76)  # numpy.percentile(xs, 99)
    assert percentile([], 50) is None
    assert spread([98.0, 100.0, 102.0]) == pytest.approx(0.04)
    assert spread([5.0]) == 0.0


def test_histogram_quantile_and_deltas_as_prometheus():
    from harness.bench.metrics import parse_snapshot, server_figures

    def text(b1, b2, inf, s):
        return (
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.04"}} {b1}\n'
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.06"}} {b2}\n'
            f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf"}} {inf}\n'
            f'vllm:time_to_first_token_seconds_count{{engine="0"}} {inf}\n'
            f'vllm:time_to_first_token_seconds_sum{{engine="0"}} {s}\n'
            f'vllm:generation_tokens_total{{engine="0"}} {inf * 10}\n'
        )

    before = parse_snapshot(text(1, 1, 1, 0.03))
    after = parse_snapshot(text(1, 11, 11, 0.53))  # ten more, all in (40, 60] ms
    f = server_figures(before, after)
    assert f is not None and f.ttft_observations == 10 and f.ttft_ms_mean == pytest.approx(50.0)
    assert f.ttft_ms_p50 == pytest.approx(40 + 20 * 0.5)  # linear inside the bucket
    assert f.ttft_ms_p99 == pytest.approx(40 + 20 * 0.99)
    assert f.generation_tokens == 100
    # written out, it holds what the server gave and nothing else (no null for a missing ITL)
    assert "itl_ms_mean" not in f.model_dump(mode="json")
    assert server_figures(None, after) is None


def test_counters_sum_over_engines_and_a_counter_first_seen_later_starts_at_zero():
    from harness.bench.metrics import parse_snapshot, server_figures

    before = parse_snapshot('vllm:time_per_output_token_seconds_count{engine="0"} 2\n'
                            'vllm:time_per_output_token_seconds_sum{engine="0"} 0.02\n'
                            'vllm:spec_decode_num_drafts_total{engine="0"} 4\n')
    after = parse_snapshot('vllm:time_per_output_token_seconds_count{engine="0"} 4\n'
                           'vllm:time_per_output_token_seconds_count{engine="1"} 2\n'
                           'vllm:time_per_output_token_seconds_sum{engine="0"} 0.04\n'
                           'vllm:time_per_output_token_seconds_sum{engine="1"} 0.02\n'
                           'vllm:spec_decode_num_drafts_total{engine="0"} 14\n'
                           'vllm:spec_decode_num_draft_tokens_total{engine="0"} 30\n'
                           'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 15\n')
    assert before.ttft is None and before.itl is not None and after.itl_name == "vllm:time_per_output_token_seconds"
    f = server_figures(before, after)
    assert f is not None and f.itl_observations == 4 and f.itl_ms_mean == pytest.approx(10.0)
    assert f.itl_metric == "vllm:time_per_output_token_seconds"
    assert (f.spec_drafts, f.spec_draft_tokens, f.spec_accepted_tokens) == (10, 30, 15)
    assert f.spec_acceptance_rate == pytest.approx(0.5) and f.spec_mean_acceptance_length == pytest.approx(2.5)
    assert "ttft_ms_mean" not in f.model_dump(mode="json") and "spec_acceptance_rate" in f.model_dump(mode="json")
    assert server_figures(parse_snapshot(""), parse_snapshot("")) is None  # nothing exposed: no figures


def test_a_stored_spread_is_read_by_field_and_written_back_as_it_was():
    from harness.bench.result import LevelResult

    spread = {"per_stream_tok_s": 0.01, "aggregate_tok_s": 0.032, "ttft_ms_p50": None, "newer_figure": 0.5}
    lv = LevelResult.model_validate({"concurrency": 8, "spread": spread})
    assert (lv.spread.per_stream_tok_s, lv.spread.aggregate_tok_s, lv.spread.itl_ms_p50) == (0.01, 0.032, None)
    assert json.dumps(lv.model_dump(mode="json")["spread"]) == json.dumps(spread)
    assert LevelResult(concurrency=1).model_dump(mode="json")["spread"] == {}
    with pytest.raises(ValueError, match="newer_figure is -0.5"):
        LevelResult.model_validate({"concurrency": 8, "spread": {"newer_figure": -0.5}})
