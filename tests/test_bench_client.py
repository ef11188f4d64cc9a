"""The benchmark client against the real fake server, at known rates. Rates are high and
outputs short so the file runs in seconds; tolerances are 10 %, never tighter."""

from __future__ import annotations

import argparse
import json

import pytest
from support.local import fake_server

from harness.bench import bench
from harness.bench import cli as bench_cli
from harness.errors import ConfigError, EnvironmentProblem

RATE = 200.0  # tokens/s per stream: high enough to be quick, low enough for a busy 2-core box
REQUIRED = (
    "concurrency",
    "per_stream_tok_s",
    "aggregate_tok_s",
    "ttft_ms_p50",
    "ttft_ms_p99",
    "itl_ms_p50",
    "itl_ms_p99",
    "tpot_ms_p50",
    "e2e_ms_p50",
    "failed",
    "spread",
    "diversity_min",
    "degenerate",
)
ONCE = (
    "prefill_tok_s",
    "prefill_prompt_tokens",
    "prefix_cache_hit_rate",
    "warm_ttft_ms",
    "token_count_source",
    "warnings",
    "client_cpu_s",
)


def near(value, truth, tol=0.10):
    return value is not None and abs(value - truth) <= tol * truth


def test_per_stream_and_aggregate_rates_and_json_shape():
    with fake_server("--tokens-per-s", str(RATE)) as url:
        r = bench(
            url, "fake-model", concurrency=(1, 8), max_tokens=40, repeats=2, long_prompt_tokens=200
        )
    for lv in r.levels:
        assert lv.failed == 0 and lv.requests == 2 * lv.concurrency
        assert near(lv.per_stream_tok_s, RATE), lv
        # First token after one decode step, then one every 1/RATE: each stream takes 40/RATE.
        assert near(lv.aggregate_tok_s, lv.concurrency * RATE), lv
        assert near(lv.tpot_ms_p50, 1000 / RATE)
        assert near(lv.itl_ms_p50, 1000 / RATE, 0.25)  # single gaps jitter with the scheduler
        assert len(lv.samples["per_stream_tok_s"]) == 2
        assert not lv.degenerate and lv.diversity_min > 0.9
    assert r.token_count_source == "usage" and r.warnings == ()
    d = json.loads(r.to_json())
    for key in REQUIRED:
        assert key in d["levels"][0], key
    for key in ONCE:
        assert key in d, key


def test_multi_token_chunks_are_counted_as_tokens():
    with fake_server("--tokens-per-s", str(RATE), "--tokens-per-chunk", "4") as url:
        r = bench(url, "fake-model", concurrency=(2,), max_tokens=40, repeats=1, prefill=False)
    lv = r.level(2)
    assert near(lv.per_stream_tok_s, RATE), lv  # not RATE/4: chunks are not tokens
    assert near(lv.aggregate_tok_s, 2 * RATE), lv
    assert near(lv.itl_ms_p50, 1000 / RATE, 0.25)
    assert lv.output_tokens == 2 * 40
    assert r.token_count_source == "usage"
    assert any("4.00 tokens" in w for w in r.warnings), r.warnings


def test_missing_usage_falls_back_to_chunks_with_warning():
    with fake_server("--tokens-per-s", str(RATE), "--no-usage") as url:
        r = bench(
            url, "fake-model", concurrency=(1,), max_tokens=20, repeats=1, long_prompt_tokens=100
        )
    assert r.token_count_source == "chunks"
    assert any("no usage.completion_tokens" in w for w in r.warnings)
    assert any("prefill rate not reported" in w for w in r.warnings)
    assert r.prefill_tok_s is None  # never estimated
    assert near(r.level(1).per_stream_tok_s, RATE)


def test_server_errors_are_counted_and_the_rest_measured():
    with fake_server("--tokens-per-s", str(RATE), "--error-every", "3") as url:
        r = bench(url, "fake-model", concurrency=(4,), max_tokens=20, repeats=2, prefill=False)
    lv = r.level(4)
    assert lv.requests == 8 and 0 < lv.failed < 8
    assert lv.errors and lv.errors[0].startswith("HTTP 500")
    assert near(lv.per_stream_tok_s, RATE)


def test_stalled_request_times_out_and_is_reported():
    with fake_server("--tokens-per-s", str(RATE), "--stall-every", "6") as url:
        r = bench(
            url,
            "fake-model",
            concurrency=(4,),
            max_tokens=20,
            repeats=1,
            prefill=False,
            timeout_s=1.0,
        )
    lv = r.level(4)  # requests 1-4 warm up, 5-8 timed: request 6 stalls
    assert lv.failed == 1 and lv.errors[0].startswith("timeout: no byte for 1 s")
    assert near(lv.per_stream_tok_s, RATE)
    # The stalled stream's wait does not dilute the others' aggregate.
    assert near(lv.aggregate_tok_s, 3 * RATE)


@pytest.mark.parametrize("legacy", [False, True])
def test_prefill_rate_and_prefix_cache_hit_rate_from_metrics(legacy):
    flags = ["--tokens-per-s", str(RATE), "--prefill-tok-s", "10000"]
    with fake_server(*flags, *(["--legacy-metrics"] if legacy else [])) as url:
        r = bench(
            url, "fake-model", concurrency=(1,), max_tokens=10, repeats=1, long_prompt_tokens=2000
        )
    assert r.prefill_prompt_tokens == 2002  # the server's own count ("[run nonce]" + 2000)
    assert near(r.prefill_tok_s, 10000)
    assert r.prefix_cache_hit_rate == 1.0
    assert r.warm_ttft_ms < r.cold_ttft_ms / 4  # one decode step vs 200 ms of prefill


def test_degenerate_output_is_flagged():
    with fake_server("--tokens-per-s", "2000", "--degenerate") as url:
        r = bench(url, "fake-model", concurrency=(2,), max_tokens=60, repeats=1, prefill=False)
    lv = r.level(2)
    assert lv.degenerate and lv.degenerate_count == 2 and lv.diversity_min < 0.1


def test_chat_endpoint():
    with fake_server("--tokens-per-s", str(RATE)) as url:
        r = bench(
            url + "/v1",
            "fake-model",
            concurrency=(2,),
            max_tokens=20,
            repeats=1,
            endpoint="chat",
            prefill=False,
        )
    assert r.endpoint == "chat" and r.level(2).failed == 0
    assert near(r.level(2).per_stream_tok_s, RATE)


def _cli(argv):
    parser = argparse.ArgumentParser()
    bench_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_writes_json_and_fails_fast(tmp_path, capsys):
    out = tmp_path / "r.json"
    with fake_server("--tokens-per-s", "2000") as url:
        rc = _cli(
            [
                "bench",
                "--url",
                url,
                "--model",
                "fake-model",
                "--concurrency",
                "1,2",
                "--max-tokens",
                "10",
                "--repeats",
                "1",
                "--no-prefill",
                "--out",
                str(out),
            ]
        )
    assert rc == 0
    d = json.loads(out.read_text())
    assert [lv["concurrency"] for lv in d["levels"]] == [1, 2]
    assert "tokens counted from: usage" in capsys.readouterr().out
    with pytest.raises(ConfigError):
        _cli(["bench", "--url", url, "--model", "m", "--concurrency", "0"])
    with pytest.raises(EnvironmentProblem, match="no OpenAI-compatible server"):
        _cli(["bench", "--url", url, "--model", "m"])  # the server is gone now
