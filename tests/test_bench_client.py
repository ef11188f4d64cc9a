"""The benchmark client against the real fake server, checked against the server's OWN record.

No figure here is compared with a rate or a time the test expects from the clock: the fake
server logs, per request, what it sent and when (GET /fake/stats, on time.monotonic(), the
same CLOCK_MONOTONIC as the client's time.perf_counter() on Linux). Token counts and request
identities must match that record exactly; times only by causality (a byte is received after
it was sent), which holds on any machine however busy. Accuracy against the truth, in
numbers, is benchmarks/bench_client_accuracy.py's job.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from support.local import fake_server

from harness.bench.client import bench
from harness.bench.settings import BenchSettings
from harness.bench.stats import percentile
from harness.bench.stream import SSEReader
from harness.cli import main as harness_main

FAST = ("--tokens-per-s", "2000")  # short runs; nothing below depends on the rate
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
    "ttft_ms_mean",
    "chunk_gap_ms_p50",
    "chunk_gap_ms_p99",
    "server",
)
ONCE = (
    "prefill_tok_s",
    "prefill_prompt_tokens",
    "prefix_cache_hit_rate",
    "warm_ttft_ms",
    "token_count_source",
    "token_counts_reliable",
    "warnings",
    "client_cpu_s",
    "event_loop",
    "round_clock",
)


def server_record(url: str, full: bool = False) -> dict[str, dict]:
    q = "?chunks=1" if full else ""
    with urllib.request.urlopen(url + "/fake/stats" + q, timeout=10) as r:
        return {rec["id"]: rec for rec in json.load(r)["records"]}


def timed(r) -> list[dict]:
    return r.extra["requests"]


def test_counts_match_the_servers_record_and_times_obey_causality():
    with fake_server(*FAST, "--tokens-per-chunk", "2", "--ttft-ms", "20") as url:
        r = bench(
            url,
            "fake-model",
            BenchSettings(
                concurrency=(1, 4),
                max_tokens=24,
                repeats=2,
                warmup=False,
                prefill=False,
                keep_requests=True,
            ),
        )
        sent = server_record(url)
    reqs = timed(r)
    assert {q["id"] for q in reqs} == set(sent)  # the same requests, each once
    for q in reqs:
        s = sent[q["id"]]
        assert q["ok"] and q["tokens"] == s["tokens"] == 24
        assert q["chunks"] == s["chunks"] == 12
        # Causality on the shared monotonic clock: written <= received <= sent <= arrived.
        assert q["start"] <= s["recv"] and s["first_sent"] <= q["first"]
        assert s["last_sent"] <= q["end"]
    for lv in r.levels:
        mine = [q for q in reqs if q["concurrency"] == lv.concurrency]
        assert lv.requests == len(mine) == 2 * lv.concurrency and lv.failed == 0
        assert lv.output_tokens == sum(sent[q["id"]]["tokens"] for q in mine)
        # Per request, client TTFT >= the server's own (recv -> first sent), so every
        # order statistic of the client's is >= the server's.
        server_ttft = [sent[q["id"]]["first_sent"] - sent[q["id"]]["recv"] for q in mine]
        for p, got in ((50, lv.ttft_ms_p50), (99, lv.ttft_ms_p99)):
            assert got >= percentile(server_ttft, p) * 1000
        # Per round, the client's span (first written -> last arrived) contains the server's
        # (first received -> last sent), so its aggregate is never above what was sent.
        for i, got in enumerate(lv.samples["aggregate_tok_s"]):
            rnd = [sent[q["id"]] for q in mine if q["round"] == i]
            truth = sum(s["tokens"] for s in rnd) / (
                max(s["last_sent"] for s in rnd) - min(s["recv"] for s in rnd)
            )
            assert got <= truth
        # ITL is per request, (last - first) / (tokens - 1), from the client's own stamps; a
        # request whose tokens all came in one network read (a busy machine) has none.
        itls = [(q["end"] - q["first"]) / (q["tokens"] - 1) for q in mine if q["end"] > q["first"]]
        assert lv.itl_ms_p50 == pytest.approx(percentile(itls, 50) * 1000, rel=1e-12)
        assert lv.per_stream_tok_s == pytest.approx(percentile([1 / x for x in itls], 50))
        # The server's /metrics deltas are its own record, level by level.
        srv = lv.server
        assert srv.generation_tokens == lv.output_tokens
        assert srv.ttft_observations == lv.requests
        assert srv.ttft_ms_mean == pytest.approx(
            sum(server_ttft) / len(server_ttft) * 1000, rel=1e-9
        )
        assert srv.client_ttft_inflation_ms == pytest.approx(
            lv.ttft_ms_mean - srv.ttft_ms_mean, rel=1e-9
        )
        assert srv.client_ttft_inflation_ms >= 0  # causality again, on means
        assert srv.spec_mean_acceptance_length == 2.0  # 2-token messages, all accepted
        assert lv.connects_in_timed_requests == 0
    assert r.token_count_source == "usage" and r.token_counts_reliable
    d = json.loads(r.to_json())
    for key in REQUIRED:
        assert key in d["levels"][0], key
    for key in ONCE:
        assert key in d, key


def test_a_server_that_closes_every_connection_is_reconnected_outside_the_timing():
    with fake_server(*FAST, "--close-connections") as url:
        r = bench(
            url,
            "fake-model",
            BenchSettings(
                concurrency=(4,),
                max_tokens=10,
                repeats=3,
                prefill=False,
                keep_requests=True,
            ),
        )
        sent = server_record(url)
    lv = r.level(4)
    assert lv.failed == 0 and lv.requests == 12
    # Every timed request found its connection already open (reopened between rounds).
    assert lv.connects_in_timed_requests == 0
    assert all(q["connect_s"] == 0 for q in timed(r))
    assert {q["id"] for q in timed(r)} <= set(sent)
    assert all(q["tokens"] == sent[q["id"]]["tokens"] for q in timed(r))


def test_multi_token_messages_without_usage_are_counted_by_the_servers_tokenize():
    with fake_server(*FAST, "--tokens-per-chunk", "4", "--no-usage") as url:
        r = bench(
            url,
            "fake-model",
            BenchSettings(
                concurrency=(2,),
                max_tokens=22,
                repeats=1,
                prefill=False,
                keep_requests=True,
            ),
        )
        sent = server_record(url)
    assert r.token_count_source == "tokenize" and r.token_counts_reliable
    assert all(q["tokens"] == sent[q["id"]]["tokens"] == 22 for q in timed(r))
    assert all(q["chunks"] == 6 for q in timed(r))  # 4+4+4+4+4+2: chunks are not tokens
    assert r.level(2).output_tokens == 44
    assert any("/tokenize" in w for w in r.warnings)


def test_without_usage_or_tokenize_a_tokenizer_file_counts_else_chunks_marked_unreliable(
    tmp_path,
):
    tokenizers = pytest.importorskip("tokenizers")
    from support.fakeserver import VOCAB

    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel(
            vocab={"[UNK]": 0, **{w: i + 1 for i, w in enumerate(VOCAB)}}, unk_token="[UNK]"
        )
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    flags = (*FAST, "--tokens-per-chunk", "3", "--no-usage", "--no-tokenize")
    with fake_server(*flags) as url:
        counted = bench(
            url,
            "fake-model",
            BenchSettings(
                concurrency=(2,),
                max_tokens=10,
                repeats=1,
                prefill=False,
                tokenizer=str(tmp_path / "tokenizer.json"),
                keep_requests=True,
            ),
        )
        chunked = bench(
            url, "fake-model", BenchSettings(concurrency=(2,), max_tokens=10, repeats=1, prefill=False)
        )
    assert counted.token_count_source == "tokenizer" and counted.token_counts_reliable
    assert counted.level(2).output_tokens == 20
    assert chunked.token_count_source == "chunks" and not chunked.token_counts_reliable
    assert chunked.level(2).token_count_source == "chunks"
    assert chunked.level(2).output_tokens == 2 * 4  # 3+3+3+1 counted as 4: hence the mark
    assert any(w.startswith("UNRELIABLE token counts") for w in chunked.warnings)


def test_server_errors_are_counted_and_the_rest_measured():
    with fake_server(*FAST, "--error-every", "3") as url:
        r = bench(url, "fake-model", BenchSettings(concurrency=(4,), max_tokens=20, repeats=2, prefill=False))
    lv = r.level(4)
    # 12 requests in all (4 warm-up, 8 timed): every third fails, 3, 6, 9 and 12.
    assert lv.requests == 8 and lv.failed == 3
    assert lv.errors and lv.errors[0].startswith("HTTP 500")
    assert lv.output_tokens == 5 * 20


def test_stalled_request_times_out_and_is_reported():
    with fake_server(*FAST, "--stall-every", "6") as url:
        r = bench(
            url,
            "fake-model",
            BenchSettings(
                concurrency=(4,),
                max_tokens=20,
                repeats=1,
                prefill=False,
                timeout_s=1.0,
                keep_requests=True,
            ),
        )
    lv = r.level(4)  # requests 1-4 warm up, 5-8 timed: request 6 stalls and never ends
    assert lv.failed == 1 and lv.errors[0].startswith("timeout: no byte for 1 s")
    assert lv.output_tokens == 3 * 20
    # The stalled stream's wait does not stretch the round: it ends at the last good token.
    good = [q for q in timed(r) if q["ok"]]
    span = max(q["end"] for q in good) - min(q["start"] for q in timed(r))
    assert lv.aggregate_tok_s == pytest.approx(60 / span, rel=1e-12)


@pytest.mark.parametrize("legacy", [False, True])
def test_prefill_rate_and_prefix_cache_hit_rate_from_metrics(legacy):
    flags = [*FAST, "--prefill-tok-s", "10000", *(["--legacy-metrics"] if legacy else [])]
    with fake_server(*flags) as url:
        r = bench(
            url, "fake-model", BenchSettings(concurrency=(1,), max_tokens=10, repeats=1, long_prompt_tokens=2000)
        )
    assert r.prefill_prompt_tokens == 2002  # the server's own count ("[run nonce]" + 2000)
    assert r.prefill_tok_s == pytest.approx(2002 / (r.cold_ttft_ms / 1000), rel=1e-9)
    assert r.prefix_cache_hit_rate == 1.0
    srv = r.level(1).server
    assert srv.itl_metric == (
        "vllm:time_per_output_token_seconds" if legacy else "vllm:inter_token_latency_seconds"
    )


def test_prefill_prompt_tokens_from_tokenize_without_usage():
    with fake_server(*FAST, "--no-usage") as url:
        r = bench(
            url, "fake-model", BenchSettings(concurrency=(1,), max_tokens=4, repeats=1, long_prompt_tokens=300)
        )
    assert r.prefill_prompt_tokens == 302


def test_degenerate_output_is_flagged():
    with fake_server(*FAST, "--degenerate") as url:
        r = bench(url, "fake-model", BenchSettings(concurrency=(2,), max_tokens=60, repeats=1, prefill=False))
    lv = r.level(2)
    assert lv.degenerate and lv.degenerate_count == 2 and lv.diversity_min < 0.1


def test_chat_endpoint():
    with fake_server(*FAST) as url:
        r = bench(
            url + "/v1",
            "fake-model",
            BenchSettings(
                concurrency=(2,),
                max_tokens=20,
                repeats=1,
                endpoint="chat",
                prefill=False,
                keep_requests=True,
            ),
        )
        sent = server_record(url, full=True)
    assert r.endpoint == "chat" and r.level(2).failed == 0
    assert all(q["text"] == sent[q["id"]]["text"] for q in timed(r))


def test_a_character_cut_across_two_network_reads_survives():
    # The server writes each event holding a multi-byte word in two writes 20 ms apart, cut
    # after the character's lead byte; the text must arrive exactly as the server sent it.
    with fake_server(*FAST, "--split-utf8") as url:
        r = bench(
            url,
            "fake-model",
            BenchSettings(
                concurrency=(2,),
                max_tokens=40,
                repeats=1,
                prefill=False,
                keep_requests=True,
            ),
        )
        sent = server_record(url, full=True)
    texts = [q["text"] for q in timed(r)]
    assert all(q["text"] == sent[q["id"]]["text"] for q in timed(r))
    assert any(ord(ch) > 127 for t in texts for ch in t) and not any("\ufffd" in t for t in texts)


def test_sse_reader_joins_split_characters_and_crlf_messages():
    ev = (
        'data: {"id":"x","choices":[{"text":" na\u00efve \U0001f600"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    )
    raw = ev.encode()
    for cut in range(1, len(raw)):  # every split point, inside characters included
        sse = SSEReader()
        sse.feed(raw[:cut], 1.0)
        sse.feed(raw[cut:], 2.0)
        assert sse.parts == [" na\u00efve \U0001f600"] and sse.done and sse.rid == "x"


@pytest.mark.parametrize(
    "message, parts, usage, error",
    [
        ('{"choices":[{"text":"a"}]}', ["a"], None, None),  # completions
        ('{"choices":[{"delta":{"role":"assistant"}}]}', [], None, None),  # role only: no token
        ('{"choices":[{"delta":{"content":"b","reasoning_content":"r"}}]}', ["br"], None, None),
        ('{"choices":[{"delta":{"reasoning":"t"}},{"text":"c"}]}', ["tc"], None, None),
        ('{"choices":[{"delta":{},"message":{"content":"m"}}]}', ["m"], None, None),  # {} gives way
        ('{"choices":[],"usage":{"completion_tokens":7,"prompt_tokens":3}}', [], (7, 3), None),
        ('{"choices":[],"usage":{}}', [], None, None),  # an empty usage says nothing
        ('{"error":{"message":"boom","code":500}}', [], None, "error event in stream: boom"),
        ('{"object":"error","message":"bad"}', [], None, "error event in stream: bad"),
        ('{"error":"plain"}', [], None, "error event in stream: plain"),
    ],
)
def test_sse_reader_reads_each_message_shape(message, parts, usage, error):
    sse = SSEReader()
    sse.feed(f"data: {message}\n\n".encode(), 1.0)
    assert sse.parts == parts and sse.error == error
    got = None if sse.usage is None else (sse.usage.completion_tokens, sse.usage.prompt_tokens)
    assert got == usage


def _cli(argv, capsys):
    rc = harness_main(["bench", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_cli_writes_json_shows_progress_and_fails_fast(tmp_path, capsys):
    out = tmp_path / "r.json"
    with fake_server(*FAST, "--no-usage", "--no-tokenize") as url:
        base = ["--url", url, "--model", "fake-model", "--max-tokens", "10", "--repeats", "1"]
        rc, stdout, stderr = _cli(
            [*base, "--concurrency", "1,2", "--no-prefill", "--out", str(out)], capsys
        )
        assert rc == 0
        assert [lv["concurrency"] for lv in json.loads(out.read_text())["levels"]] == [1, 2]
        assert "UNRELIABLE" in stdout and "2/2" in stderr  # progress: requests done / total
        rc, stdout, stderr = _cli([*base, "--concurrency", "2", "--no-prefill", "--json"], capsys)
        assert rc == 0 and json.loads(stdout)["token_counts_reliable"] is False
        assert "UNRELIABLE token counts" in stderr  # a warning is not only a JSON field
        assert "2/2" not in stderr  # no progress with --json
    rc, _, stderr = _cli(["--url", url, "--model", "m"], capsys)  # the server is gone now
    assert rc == 3 and "no OpenAI-compatible server" in stderr


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--url", "notaurl"], "--url 'notaurl' is not an http(s) URL"),
        (["--url", "http://127.0.0.1:99999"], "--url"),
        (["--timeout", "-1"], "--timeout -1 is not a positive number"),
        (["--timeout", "nan"], "--timeout nan"),
        (["--concurrency", "0"], "--concurrency '0'"),
        (["--concurrency", "-4,8"], "--concurrency '-4,8'"),
        (["--concurrency", "1,x"], "--concurrency '1,x'"),
        (["--max-tokens", "0"], "--max-tokens 0 is out of range"),
        (["--max-tokens", "100000000"], "--max-tokens 100000000 is out of range"),
        (["--repeats", "0"], "--repeats 0"),
        (["--tokenizer", "/nonexistent/tokenizer.json"], "--tokenizer"),
    ],
)
def test_cli_bad_input_is_one_clear_error_exit_2(argv, needle, capsys):
    base = {"--url": "http://127.0.0.1:9", "--model": "m"}
    for k, v in zip(argv[::2], argv[1::2], strict=True):
        base[k] = v
    rc, _, stderr = _cli([f"{k}={v}" for k, v in base.items()], capsys)  # "=": "-4,8" is a value
    assert rc == 2
    assert needle in stderr and "fix:" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("bad", [b"data: 5\n\n", b"data: {not json\n\n"])
def test_an_unreadable_message_is_a_failed_request_not_a_crash(bad):
    import asyncio

    from harness.bench.stream import stream_request
    from harness.bench.wire import Connection, Target

    async def serve(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        body = bad + b"data: [DONE]\n\n"
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    async def go():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = Connection(Target.parse(f"http://127.0.0.1:{port}"))
        try:
            return await stream_request(conn, "/v1/completions", b"{}", read_timeout_s=5)
        finally:
            conn.close()
            server.close()

    rec = asyncio.run(go())
    assert not rec.ok and rec.error.startswith("unreadable SSE message")
