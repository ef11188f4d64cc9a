"""The fake vLLM server, driven over real sockets: its HTTP, its knobs, its vLLM-style logs."""

from __future__ import annotations

import http.client
import itertools
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.local import FAKESERVER, fake_server, free_port

# vLLM 0.33.0 vllm/logger.py _FORMAT with _DATE_FORMAT "%m-%d %H:%M:%S"
VLLM_LINE = re.compile(
    r"^\((APIServer|EngineCore) pid=\d+\) (INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] "
)


def post(url: str, path: str, body: dict) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def events(raw: bytes) -> list:
    out = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_startup_log_lines_are_vllm_shaped_and_written_to_log_file(tmp_path):
    log = tmp_path / "vllm.log"
    with fake_server("--log-file", str(log), log=tmp_path / "stdout.txt") as url:
        with urllib.request.urlopen(url + "/v1/models") as r:
            assert json.load(r)["data"][0]["id"] == "fake-model"
    stdout = (tmp_path / "stdout.txt").read_text().splitlines()
    assert stdout == log.read_text().splitlines()
    assert all(VLLM_LINE.match(ln) for ln in stdout), stdout
    text = "\n".join(stdout)
    for needle in (
        "vLLM server version 0.33.0, serving model fake-model",
        "non-default args: {",
        "Using 'MARLIN' NvFp4 MoE backend out of potential backends: ['FLASHINFER_TRTLLM',",
        "Using MarlinNvFp4LinearKernel for NVFP4 GEMM",
        "Using FLASH_ATTN attention backend out of potential backends:",
        "GPU KV cache size: 872,960 tokens, Maximum concurrency for",
        "Capturing CUDA graphs",
        "Graph capturing finished in",
    ):
        assert needle in text, needle


def test_fingerprint_lines_replace_the_builtin_log(tmp_path, fixtures):
    src = fixtures / "bench" / "fingerprint_lines.txt"
    with fake_server("--fingerprint-lines", str(src), log=tmp_path / "out.txt"):
        pass
    assert (tmp_path / "out.txt").read_text().splitlines() == src.read_text().splitlines()


def test_crash_after_prints_engine_failure_and_exits_3():
    p = subprocess.run(
        [
            sys.executable,
            str(FAKESERVER),
            "--port",
            str(free_port()),
            "--startup-delay",
            "5",
            "--crash-after",
            "0.2",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.returncode == 3
    assert "EngineCore failed to start." in p.stdout
    assert "Traceback (most recent call last):" in p.stdout
    assert "RuntimeError: Engine core initialization failed." in p.stdout


def test_hang_stops_at_graph_capture_and_never_listens():
    port = free_port()
    p = subprocess.Popen(
        [sys.executable, str(FAKESERVER), "--port", str(port), "--hang"],
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    try:
        # Read until the log reaches graph capture (where --hang stops), however slow the
        # machine: no sleep that a busy box could outrun.
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if "Capturing CUDA graphs" in line:
                break
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=30)
    lines += out.splitlines()
    assert lines[-1].split("] ", 1)[1].startswith("Capturing CUDA graphs")


def test_keep_alive_serves_several_requests_on_one_connection():
    with fake_server("--tokens-per-s", "2000") as url:
        conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=5)
        for _ in range(3):
            body = json.dumps(
                {
                    "prompt": "a b c",
                    "max_tokens": 3,
                    "ignore_eos": True,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
            )
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200 and r.getheader("transfer-encoding") == "chunked"
            ev = events(r.read())
            assert ev[-1] == "[DONE]" and ev[-2]["usage"]["completion_tokens"] == 3
        conn.request("GET", "/health")
        assert conn.getresponse().status == 200
        conn.close()


def test_max_tokens_ignore_eos_and_usage_option():
    with fake_server("--tokens-per-s", "2000") as url:
        st, raw = post(
            url, "/v1/completions", {"prompt": "x y", "max_tokens": 7, "ignore_eos": True}
        )
        d = json.loads(raw)
        assert (
            st == 200
            and d["usage"]["completion_tokens"] == 7
            and len(d["choices"][0]["text"].split()) == 7
        )
        # Without ignore_eos the fake model stops at a prompt-fixed length, never past max_tokens.
        lens = {
            json.loads(post(url, "/v1/completions", {"prompt": f"p{i}", "max_tokens": 50})[1])[
                "usage"
            ]["completion_tokens"]
            for i in range(20)
        }
        assert max(lens) <= 50 and min(lens) < 50
        st, raw = post(
            url,
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 5,
                "ignore_eos": True,
                "stream": True,
            },
        )
        ev = events(raw)
        assert ev[0]["choices"][0]["delta"]["role"] == "assistant"
        assert not any(isinstance(e, dict) and e.get("usage") for e in ev)  # not asked for
        assert sum(len(e["choices"][0]["delta"]["content"].split()) for e in ev[:-1]) == 5


def test_multi_token_chunks_and_no_usage_flag():
    with fake_server("--tokens-per-s", "2000", "--tokens-per-chunk", "4", "--no-usage") as url:
        _, raw = post(
            url,
            "/v1/completions",
            {
                "prompt": "a",
                "max_tokens": 10,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        ev = [e for e in events(raw) if e != "[DONE]"]
        assert [len(e["choices"][0]["text"].split()) for e in ev] == [4, 4, 2]
        assert not any(e.get("usage") for e in ev)


def test_error_every_and_metrics_counters():
    with fake_server("--tokens-per-s", "2000", "--error-every", "2") as url:
        body = {"prompt": "one two three four", "max_tokens": 2, "ignore_eos": True}
        codes = [post(url, "/v1/completions", body)[0] for _ in range(4)]
        assert codes == [200, 500, 200, 500]
        with urllib.request.urlopen(url + "/metrics") as r:
            text = r.read().decode()
    # Two served requests of 4 prompt tokens each, the second a repeat: 8 queried, 4 hit.
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="fake-model"} 8.0' in text
    assert 'vllm:prefix_cache_hits_total{engine="0",model_name="fake-model"} 4.0' in text


def _old_python() -> str | None:
    # The fake server is copied into small images whose python may be old: prove 3.8 works.
    # (A pyenv shim named python3.8 may exist and still fail, so ask each one its version.)
    for cand in (
        str(Path.home() / ".pyenv/versions/3.8.18/bin/python3.8"),
        shutil.which("python3.8"),
    ):
        if cand and Path(cand).exists():
            p = subprocess.run(
                [cand, "-c", "import sys; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
            )
            if p.returncode == 0 and p.stdout.strip() == "(3, 8)":
                return cand
    return None


@pytest.mark.skipif(_old_python() is None, reason="no python3.8 on this host")
def test_runs_on_python_3_8():
    with fake_server(
        "--tokens-per-s", "2000", "--tokens-per-chunk", "2", python=_old_python()
    ) as url:
        _, raw = post(
            url,
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "a b"}],
                "max_tokens": 5,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        ev = events(raw)
        assert ev[-1] == "[DONE]" and ev[-2]["usage"]["completion_tokens"] == 5
        with urllib.request.urlopen(url + "/metrics") as r:
            assert b"vllm:prefix_cache_queries_total" in r.read()


def test_tokenize_has_vllms_shape_and_counts_words():
    # vLLM 0.33.0 entrypoints/serve/tokenize/protocol.py: TokenizeResponse{count,
    # max_model_len, tokens, token_strs}
    with fake_server() as url:
        st, raw = post(url, "/tokenize", {"model": "fake-model", "prompt": " the cache is warm"})
        d = json.loads(raw)
        assert st == 200 and d["count"] == 4 == len(d["tokens"]) and d["max_model_len"] > 0
        st, raw = post(
            url,
            "/tokenize",
            {"model": "fake-model", "messages": [{"role": "user", "content": "a b"}]},
        )
        assert st == 200 and json.loads(raw)["count"] == 2
        assert post(url, "/tokenize", {"model": "fake-model"})[0] == 400
    with fake_server("--no-tokenize") as url:
        assert post(url, "/tokenize", {"model": "fake-model", "prompt": "x"})[0] == 404


def test_close_connections_says_so_and_closes():
    with fake_server("--tokens-per-s", "2000", "--close-connections") as url:
        conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=5)
        body = json.dumps({"prompt": "a", "max_tokens": 2, "ignore_eos": True, "stream": True})
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        assert r.getheader("connection") == "close" and events(r.read())[-1] == "[DONE]"
        conn.close()
        with urllib.request.urlopen(url + "/fake/stats") as s:
            assert json.load(s)["connections"] >= 1


def test_metrics_histograms_are_the_servers_own_record():
    from harness.bench.metrics import parse_snapshot

    flags = ("--tokens-per-s", "2000", "--tokens-per-chunk", "3", "--ttft-ms", "30")
    with fake_server(*flags) as url:
        for i in range(3):
            post(
                url,
                "/v1/completions",
                {"prompt": f"p{i}", "max_tokens": 7, "ignore_eos": True, "stream": True},
            )
        with urllib.request.urlopen(url + "/metrics") as r:
            snap = parse_snapshot(r.read().decode())
        with urllib.request.urlopen(url + "/fake/stats?chunks=1") as r:
            recs = json.load(r)["records"]
    ttft = snap.ttft
    assert ttft.count == 3
    assert ttft.sum == pytest.approx(sum(x["first_sent"] - x["recv"] for x in recs), rel=1e-9)
    gaps = [b - a for x in recs for a, b in itertools.pairwise(x["chunk_sends"])]
    assert snap.itl.count == len(gaps) == 3 * 2  # 3+3+1: two gaps per request
    assert snap.itl.sum == pytest.approx(sum(gaps), rel=1e-9)
    assert snap.counters["generation_tokens"] == 21
    assert snap.counters["spec_accepted_tokens"] == 3 * (2 + 0)  # (3-1) + (1-1) per request
    assert snap.counters["spec_draft_tokens"] == 3 * 2 * 2
    assert snap.itl_name == "vllm:inter_token_latency_seconds"
