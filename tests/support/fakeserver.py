"""A stand-in for `vllm serve`: an OpenAI-compatible streaming server at a known, exact rate.

Standard library only, and Python 3.8+, because it is also copied alone into small Docker
images where it plays vLLM's part: it prints vLLM-style start-up lines, can crash or hang the
way vLLM does, and serves /health, /v1/models, /v1/completions, /v1/chat/completions,
/tokenize and /metrics. Because its decode rate is set by a flag, the benchmark client can be
checked against a known truth (benchmarks/bench_client_accuracy.py), and because it keeps its
own record of what it sent and when (GET /fake/stats, on time.monotonic(), the same
CLOCK_MONOTONIC as the client's time.perf_counter() on Linux), tests compare the client's
figures with that record instead of with the wall clock.

Pacing: chunk k of a request goes out at t_first + k * dt on the event loop's monotonic
clock, so a late wake-up never pushes later chunks back (no drift accumulation).

Run: python3 fakeserver.py --port 8000 --model fake --tokens-per-s 50
"""

# ruff: noqa: UP031  (%-formatting on purpose: this file must also run on old Python 3)

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import sys
import time

# Log format strings below are copied from vLLM 0.33.0 (PyPI sdist): vllm/logger.py
# _FORMAT / _DATE_FORMAT, entrypoints/common/startup.py, platforms/cuda.py,
# fused_moe/oracle/nvfp4.py, kernels/linear/__init__.py, v1/core/kv_cache_utils.py,
# v1/worker/gpu_model_runner.py, v1/engine/core.py.
NVFP4_MOE_BACKENDS = [
    "FLASHINFER_TRTLLM",
    "FLASHINFER_CUTEDSL",
    "FLASHINFER_CUTEDSL_BATCHED",
    "FLASHINFER_CUTLASS",
    "VLLM_CUTLASS",
    "MARLIN",
    "HUMMING",
    "EMULATION",
]

# Words the fake "model" emits; one word is one token, as with a WordLevel tokenizer.
VOCAB = (
    "the of to a in is and for that this be with as on if not it by from are an or return "
    "tensor shape model layer config value none self type list int str dict kernel backend "
    "cache block size weight batch token request output input graph stream queue buffer "
    "thread lock event loop socket header chunk frame scale bias norm head rank shard slice "
    "index offset stride warp lane tile mask sum max min mean var step epoch seed state"
).split()
DEGENERATE_4GRAM = ["the", "cache", "is", "warm"]
# --split-utf8: words whose UTF-8 bytes are cut in two across separate writes.
MULTIBYTE = ["na\u00efve", "\u00e9t\u00e9", "\u2192", "\u6f22\u5b57", "\U0001f600"]

# Histogram buckets as vLLM 0.33.0 declares them (v1/metrics/loggers.py).
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0]
E2E_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]


class Histogram:
    """A Prometheus histogram: cumulative buckets, sum and count (the observed values are
    the server's own send times, so /metrics tells the truth about what it did)."""

    def __init__(self, buckets):
        self.bounds = list(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, v):
        i = 0
        while i < len(self.bounds) and v > self.bounds[i]:
            i += 1
        self.counts[i] += 1
        self.sum += v
        self.count += 1

    def lines(self, name, lab_inner):
        out = []
        cum = 0
        for b, n in zip(self.bounds + [float("inf")], self.counts):  # noqa: B905 (py3.8)
            cum += n
            le = "+Inf" if b == float("inf") else repr(float(b))
            out.append('%s_bucket{%s,le="%s"} %s' % (name, lab_inner, le, float(cum)))
        out.append("%s_count{%s} %s" % (name, lab_inner, float(self.count)))
        out.append("%s_sum{%s} %r" % (name, lab_inner, self.sum))
        return out

SERVER_VERSION = "0.33.0"


class Logger:
    """Writes vLLM-formatted lines to stdout and, if asked, to a log file."""

    def __init__(self, path: str | None) -> None:
        self.file = open(path, "a", buffering=1) if path else None  # noqa: SIM115
        self.api_pid = os.getpid()
        self.core_pid = os.getpid() + 1  # vLLM's engine core is another process

    def raw(self, line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        if self.file:
            self.file.write(line + "\n")

    def log(
        self,
        msg: str,
        *,
        proc: str = "APIServer",
        level: str = "INFO",
        src: str = "api_server.py:1",
    ) -> None:
        pid = self.api_pid if proc == "APIServer" else self.core_pid
        stamp = time.strftime("%m-%d %H:%M:%S")
        self.raw("(%s pid=%d) %s %s [%s] %s" % (proc, pid, level, stamp, src, msg))


def startup_lines(args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """(process, level, file:line, message) in the order vLLM 0.33.0 prints them."""
    core = "EngineCore"
    non_default = {"model_tag": args.model, "port": args.port, "model": args.model}
    return [
        (
            "APIServer",
            "INFO",
            "startup.py:25",
            "vLLM server version %s, serving model %s" % (SERVER_VERSION, args.model),
        ),
        ("APIServer", "INFO", "startup.py:96", "non-default args: %s" % non_default),
        (
            core,
            "INFO",
            "core.py:140",
            "Initializing a V1 LLM engine (v%s) with config: model='%s', "
            "compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>}"
            % (SERVER_VERSION, args.model),
        ),
        (
            core,
            "INFO",
            "cuda.py:509",
            "Using FLASH_ATTN attention backend out of potential backends: [FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION].",
        ),
        (
            core,
            "INFO",
            "nvfp4.py:242",
            "Using 'MARLIN' NvFp4 MoE backend out of potential backends: %s." % NVFP4_MOE_BACKENDS,
        ),
        (core, "INFO", "__init__.py:1303", "Using MarlinNvFp4LinearKernel for NVFP4 GEMM"),
        (
            core,
            "INFO",
            "gpu_model_runner.py:5089",
            "Model loading took 17.42 GiB memory and 21.384310 seconds",
        ),
        (
            core,
            "INFO",
            "kv_cache_utils.py:1149",
            "GPU KV cache size: 872,960 tokens, Maximum concurrency for 8,192 tokens per request: 106.56x",
        ),
        (
            core,
            "INFO",
            "gpu_model_runner.py:6592",
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%",
        ),
        (core, "INFO", "gpu_model_runner.py:6592", "Capturing CUDA graphs (decode, FULL): 100%"),
        (
            core,
            "INFO",
            "gpu_model_runner.py:6517",
            "Graph capturing finished in 7 secs, took 0.52 GiB",
        ),
        ("APIServer", "INFO", "entry.py:135", "Supported tasks: ['generate']"),
        (
            "APIServer",
            "INFO",
            "entry.py:139",
            "Starting vLLM server on http://%s:%d" % (args.host, args.port),
        ),
    ]


CRASH_TRACEBACK = """ERROR [core.py:1584] EngineCore failed to start.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1560, in run_engine_core
    engine_core = EngineCoreProc(*args, **kwargs)
  File "/usr/local/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 312, in determine_available_memory
    self.model_runner.profile_run()
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore': 1}"""


class State:
    """Counters shared by all connections (one event loop, so no locks)."""

    def __init__(self) -> None:
        self.requests = 0  # generation requests, for --error-every / --stall-every
        self.seen_prompts: set[str] = set()
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.running = 0
        # Ground truth for the accuracy benchmark: what the server itself sent, and when.
        self.tokens_sent = 0
        self.first_recv: float | None = None
        self.last_send: float | None = None
        self.sent_log = []  # [recv, first chunk sent, last chunk sent, tokens, chunks]
        # Per request, keyed by response id: what was sent and when (see record()).
        self.records = []
        self.healthy = False
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.spec_drafts = 0
        self.spec_draft_tokens = 0
        self.spec_accepted = 0
        self.connections = 0


def count_tokens(text: str) -> int:
    return max(1, len(text.split()))


def token_ids(text: str) -> list:
    """The fake tokenizer: one whitespace-separated word is one token (a WordLevel tokenizer
    over VOCAB; other words get a stable id past it)."""
    ids = []
    for w in text.split():
        if w in VOCAB:
            ids.append(VOCAB.index(w))
        else:
            ids.append(len(VOCAB) + int(hashlib.md5(w.encode()).hexdigest()[:6], 16))
    return ids


def prompt_of(body: dict, chat: bool) -> str:
    if chat:
        parts = []
        for m in body.get("messages") or []:
            c = m.get("content")
            if isinstance(c, list):  # content parts
                c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
            parts.append(c or "")
        return "\n".join(parts)
    p = body.get("prompt", "")
    if isinstance(p, list):
        p = " ".join(str(x) for x in p)
    return str(p)


class Server:
    def __init__(self, args: argparse.Namespace, logger: Logger) -> None:
        self.a = args
        self.log = logger
        self.st = State()

    # ---- HTTP/1.1 plumbing -------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.st.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, version = lines[0].split(" ", 2)
                headers = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = b""
                if headers.get("transfer-encoding", "").lower() == "chunked":
                    body = await read_chunked(reader)
                elif "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                keep = headers.get("connection", "").lower() != "close" and version == "HTTP/1.1"
                keep = keep and not self.a.close_connections
                path, _, query = target.partition("?")
                keep = await self.route(method, path, body, writer, reader, query) and keep
                if self.a.access_log:
                    self.log.raw(
                        '(APIServer pid=%d) INFO:     127.0.0.1 - "%s %s %s"'
                        % (self.log.api_pid, method, path, version)
                    )
                if not keep:
                    break
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            asyncio.LimitOverrunError,
            ValueError,
        ):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def send(self, writer, status: int, body: bytes, ctype: str = "application/json") -> bool:
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            500: "Internal Server Error",
            503: "Service Unavailable",
        }.get(status, "OK")
        head = "HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n%s\r\n" % (
            status,
            reason,
            ctype,
            len(body),
            "connection: close\r\n" if self.a.close_connections else "",
        )
        writer.write(head.encode() + body)
        await writer.drain()
        return True

    async def route(self, method: str, path: str, raw: bytes, writer, reader, query="") -> bool:
        if method == "GET" and path == "/health":
            return await self.send(writer, 200, b"")
        if method == "GET" and path == "/v1/models":
            cards = [
                {
                    "id": name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": self.a.model,
                    "parent": None,
                    "max_model_len": 262144,
                }
                for name in [self.a.model, *self.a.alias]
            ]
            return await self.send(
                writer, 200, json.dumps({"object": "list", "data": cards}).encode()
            )
        if method == "GET" and path == "/metrics":
            return await self.send(
                writer, 200, self.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8"
            )
        if method == "GET" and path == "/fake/stats":
            s = self.st
            span = (
                (s.last_send - s.first_recv)
                if (s.first_recv is not None and s.last_send is not None)
                else None
            )
            full = "chunks=1" in query
            d = {
                "requests": s.requests,
                "tokens_sent": s.tokens_sent,
                "span_s": span,
                "tokens_per_s": self.a.tokens_per_s,
                "tokens_per_chunk": self.a.tokens_per_chunk,
                "connections": s.connections,
                "log": s.sent_log[-100000:],
                "records": [
                    r if full else {k: v for k, v in r.items() if k not in ("chunk_sends", "text")}
                    for r in s.records[-100000:]
                ],
            }
            return await self.send(writer, 200, json.dumps(d).encode())
        if method == "POST" and path == "/fake/reset":
            self.st.tokens_sent = 0
            self.st.first_recv = self.st.last_send = None
            self.st.sent_log = []
            self.st.records = []
            return await self.send(writer, 200, b"{}")
        if method == "POST" and path == "/tokenize" and not self.a.no_tokenize:
            return await self.tokenize(raw, writer)
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            try:
                body = json.loads(raw.decode() or "{}")
            except ValueError:
                return await self.send(
                    writer, 400, json.dumps({"error": {"message": "invalid JSON body"}}).encode()
                )
            return await self.generate(body, path.endswith("chat/completions"), writer, reader)
        return await self.send(writer, 404, json.dumps({"detail": "Not Found"}).encode())

    async def tokenize(self, raw: bytes, writer) -> bool:
        """vLLM's POST /tokenize (entrypoints/serve/tokenize/protocol.py, 0.33.0): a
        TokenizeCompletionRequest {model, prompt, add_special_tokens} or a
        TokenizeChatRequest {model, messages, ...} -> {count, max_model_len, tokens}."""
        try:
            body = json.loads(raw.decode() or "{}")
        except ValueError:
            body = None
        if not isinstance(body, dict) or ("prompt" not in body and "messages" not in body):
            err = {"error": {"message": "prompt or messages is required", "code": 400}}
            return await self.send(writer, 400, json.dumps(err).encode())
        text = prompt_of(body, "messages" in body)
        ids = token_ids(text)
        d = {"count": len(ids), "max_model_len": 262144, "tokens": ids, "token_strs": None}
        return await self.send(writer, 200, json.dumps(d).encode())

    # ---- generation ------------------------------------------------------------------
    def words_for(self, prompt: str, n: int) -> list[str]:
        if self.a.degenerate:
            return [DEGENERATE_4GRAM[i % 4] for i in range(n)]
        seed = int(hashlib.sha256(prompt.encode()).hexdigest()[:12], 16)
        rng = random.Random(seed)  # temperature 0: same prompt, same text
        vocab = VOCAB + MULTIBYTE if self.a.split_utf8 else VOCAB
        return [rng.choice(vocab) for _ in range(n)]

    async def generate(self, body: dict, chat: bool, writer, reader) -> bool:
        loop = asyncio.get_running_loop()
        t_recv = loop.time()
        st = self.st
        st.requests += 1
        nth = st.requests
        if st.first_recv is None:
            st.first_recv = t_recv
        if self.a.error_every and nth % self.a.error_every == 0:
            err = {
                "object": "error",
                "message": "fake server: injected error on request %d" % nth,
                "type": "InternalServerError",
                "param": None,
                "code": 500,
            }
            return await self.send(writer, 500, json.dumps(err).encode())

        prompt = prompt_of(body, chat)
        n_prompt = count_tokens(prompt)
        cached = prompt in st.seen_prompts
        st.seen_prompts.add(prompt)
        st.prefix_queries += n_prompt
        st.prefix_hits += n_prompt if cached else 0
        st.prompt_tokens_total += n_prompt

        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        n_out = max_tokens
        if not body.get("ignore_eos"):
            # Without ignore_eos the fake model "meets EOS" at a length fixed by the prompt.
            eos_at = 1 + int(hashlib.md5(prompt.encode()).hexdigest()[:6], 16) % max(
                1, max_tokens * 2
            )
            n_out = min(max_tokens, eos_at)
        finish = "length" if n_out == max_tokens else "stop"
        words = self.words_for(prompt, n_out)
        dt = 1.0 / self.a.tokens_per_s
        k = max(1, self.a.tokens_per_chunk)
        # TTFT: prefill of the uncached prompt (if modelled), else one decode step.
        if self.a.prefill_tok_s and not cached:
            ttft = n_prompt / self.a.prefill_tok_s
        elif self.a.ttft_ms:
            ttft = self.a.ttft_ms / 1000.0
        else:
            ttft = dt * k
        t_first = t_recv + ttft
        rid = "%s-%d" % ("chatcmpl" if chat else "cmpl", nth)
        created = int(time.time())
        usage = {
            "prompt_tokens": n_prompt,
            "total_tokens": n_prompt + n_out,
            "completion_tokens": n_out,
            "prompt_tokens_details": None,
        }
        stream = bool(body.get("stream"))
        opts = body.get("stream_options") or {}
        with_usage = bool(opts.get("include_usage")) and not self.a.no_usage
        stall = bool(self.a.stall_every) and nth % self.a.stall_every == 0

        if not stream:
            await asyncio.sleep(max(0.0, t_first + dt * (n_out - 1) - loop.time()))
            text = " " + " ".join(words)
            if chat:
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                }
                obj = "chat.completion"
            else:
                choice = {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": finish,
                    "stop_reason": None,
                }
                obj = "text_completion"
            resp = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": self.a.model,
                "choices": [choice],
            }
            if not self.a.no_usage:
                resp["usage"] = usage
            self.account(n_out, loop.time())
            return await self.send(writer, 200, json.dumps(resp).encode())

        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            + (b"connection: close\r\n" if self.a.close_connections else b"")
            + b"transfer-encoding: chunked\r\n\r\n"
        )
        st.running += 1
        try:
            chunks = [words[i : i + k] for i in range(0, n_out, k)]
            t_sent0 = now = t_recv
            sends = []
            for ci, piece in enumerate(chunks):
                if stall and ci == len(chunks) // 2:
                    await writer.drain()
                    await reader.read()  # send nothing more; wait until the client gives up
                    return False
                # A chunk leaves when its last token is "decoded": one token every dt.
                last_tok = min(n_out, (ci + 1) * k) - 1
                delay = t_first + (last_tok - (len(chunks[0]) - 1)) * dt - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                text = " " + " ".join(piece)
                last = ci == len(chunks) - 1
                fr = finish if last else None
                if chat:
                    delta = {"content": text}
                    if ci == 0:
                        delta = {"role": "assistant", "content": text}
                    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": fr}
                    obj = "chat.completion.chunk"
                else:
                    choice = {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": fr,
                        "stop_reason": None,
                    }
                    obj = "text_completion"
                ev = {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": self.a.model,
                    "choices": [choice],
                }
                # Stamped before the write: a recorded send time never follows the byte's
                # arrival at the client, even if this process is preempted right after it.
                now = loop.time()
                if self.a.split_utf8 and any(w in MULTIBYTE for w in piece):
                    await write_split(writer, json.dumps(ev, ensure_ascii=False))
                else:
                    write_event(writer, json.dumps(ev))
                await writer.drain()
                self.account(len(piece), now)
                if ci == 0:
                    t_sent0 = now
                    st.ttft.observe(now - t_recv)
                else:
                    st.itl.observe(now - sends[-1])
                    if k > 1:  # modelled as speculative decoding: k-1 drafted, all accepted
                        st.spec_drafts += 1
                        st.spec_draft_tokens += k - 1
                        st.spec_accepted += len(piece) - 1
                sends.append(now)
            st.sent_log.append([t_recv, t_sent0, now, n_out, len(chunks)])
            st.e2e.observe(now - t_recv)
            st.records.append(
                {
                    "id": rid,
                    "recv": t_recv,
                    "first_sent": t_sent0,
                    "last_sent": now,
                    "tokens": n_out,
                    "chunks": len(chunks),
                    "usage_sent": with_usage,
                    "chunk_sends": sends,
                    "chunk_tokens": [len(c) for c in chunks],
                    "text": "".join(" " + " ".join(c) for c in chunks),
                }
            )
            if with_usage:
                ev = {
                    "id": rid,
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": created,
                    "model": self.a.model,
                    "choices": [],
                    "usage": usage,
                }
                write_event(writer, json.dumps(ev))
            write_event(writer, "[DONE]")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            st.running -= 1

    def account(self, n: int, t: float) -> None:
        self.st.tokens_sent += n
        self.st.generation_tokens_total += n
        self.st.last_send = t

    def metrics(self) -> str:
        """Prometheus text, named as vLLM 0.25.1 / 0.33.0 name them (v1/metrics/loggers.py);
        --legacy-metrics uses the older `vllm:gpu_prefix_cache_*` names."""
        lab = '{engine="0",model_name="%s"}' % self.a.model
        pc = "vllm:gpu_prefix_cache" if self.a.legacy_metrics else "vllm:prefix_cache"
        created = "%.9e" % time.time()
        out = []
        for name, help_, val in (
            (
                pc + "_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                self.st.prefix_queries,
            ),
            (
                pc + "_hits",
                "Prefix cache hits, in terms of number of cached tokens.",
                self.st.prefix_hits,
            ),
            (
                "vllm:prompt_tokens",
                "Number of prefill tokens processed.",
                self.st.prompt_tokens_total,
            ),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                self.st.generation_tokens_total,
            ),
        ):
            out += [
                "# HELP %s_total %s" % (name, help_),
                "# TYPE %s_total counter" % name,
                "%s_total%s %s" % (name, lab, float(val)),
                "%s_created%s %s" % (name, lab, created),
            ]
        if self.a.tokens_per_chunk > 1:
            for name, help_, val in (
                ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", self.st.spec_drafts),
                (
                    "vllm:spec_decode_num_draft_tokens",
                    "Number of draft tokens.",
                    self.st.spec_draft_tokens,
                ),
                (
                    "vllm:spec_decode_num_accepted_tokens",
                    "Number of accepted tokens.",
                    self.st.spec_accepted,
                ),
            ):
                out += [
                    "# HELP %s_total %s" % (name, help_),
                    "# TYPE %s_total counter" % name,
                    "%s_total%s %s" % (name, lab, float(val)),
                ]
        inner = lab[1:-1]
        itl_name = (
            "vllm:time_per_output_token_seconds"
            if self.a.legacy_metrics
            else "vllm:inter_token_latency_seconds"
        )
        for name, help_, h in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.st.ttft),
            (itl_name, "Histogram of inter-token latency in seconds.", self.st.itl),
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.st.e2e),
        ):
            out += ["# HELP %s %s" % (name, help_), "# TYPE %s histogram" % name]
            out += h.lines(name, inner)
        out += [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            "vllm:num_requests_running%s %s" % (lab, float(self.st.running)),
        ]
        return "\n".join(out) + "\n"


def write_event(writer, data: str) -> None:
    payload = ("data: %s\n\n" % data).encode()
    writer.write(b"%x\r\n%s\r\n" % (len(payload), payload))


async def write_split(writer, data: str) -> None:
    """One SSE event in two HTTP chunks, cut inside a multi-byte character, sent 20 ms apart
    so that the client reads the two halves in separate network reads."""
    payload = ("data: %s\n\n" % data).encode("utf-8")
    cut = next(i for i, b in enumerate(payload) if b >= 0xC0) + 1  # after a lead byte
    first, rest = payload[:cut], payload[cut:]
    writer.write(b"%x\r\n%s\r\n" % (len(first), first))
    await writer.drain()
    await asyncio.sleep(0.02)
    writer.write(b"%x\r\n%s\r\n" % (len(rest), rest))


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b""
    while True:
        size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await reader.readline()
            return body
        body += await reader.readexactly(size)
        await reader.readexactly(2)


async def main_async(args: argparse.Namespace) -> int:
    logger = Logger(args.log_file)
    loop = asyncio.get_running_loop()
    crashed = loop.create_future()

    def crash() -> None:
        for line in CRASH_TRACEBACK.splitlines():
            if line.startswith("ERROR"):
                logger.log(
                    line.split("] ", 1)[1], proc="EngineCore", level="ERROR", src="core.py:1584"
                )
            else:
                logger.raw("(EngineCore pid=%d) %s" % (logger.core_pid, line))
        if not crashed.done():
            crashed.set_result(3)

    if args.crash_after is not None:
        loop.call_later(args.crash_after, crash)

    def terminate() -> None:  # as vLLM's server: SIGTERM ends it (PID 1 in a container has no default)
        if not crashed.done():
            crashed.set_result(0)

    loop.add_signal_handler(signal.SIGTERM, terminate)

    if args.fingerprint_lines:
        with open(args.fingerprint_lines) as f:
            script = [ln.rstrip("\n") for ln in f]
        for ln in script:
            logger.raw(ln)
    else:
        lines = startup_lines(args)
        if args.hang:
            cut = next(i for i, x in enumerate(lines) if x[3].startswith("Capturing CUDA graphs"))
            lines = lines[: cut + 1]
        for proc, level, src, msg in lines:
            logger.log(msg, proc=proc, level=level, src=src)
    if args.hang:
        await crashed  # never healthy; only --crash-after can end it
        return crashed.result()
    startup = loop.create_task(asyncio.sleep(args.startup_delay))
    await asyncio.wait([startup, crashed], return_when=asyncio.FIRST_COMPLETED)
    if crashed.done():
        return crashed.result()

    srv = Server(args, logger)
    server = await asyncio.start_server(srv.handle, args.host, args.port, limit=1 << 22)
    srv.st.healthy = True
    if not args.fingerprint_lines:
        logger.log("Application startup complete.", src="on.py:62")
    await crashed
    server.close()
    return crashed.result()


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="bind address (Docker use passes 0.0.0.0)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="fake-model", help="served model name")
    p.add_argument("--alias", action="append", default=[], help="more served names (vLLM takes several)")
    p.add_argument("--tokens-per-s", type=float, default=50.0, help="decode rate of each stream")
    p.add_argument(
        "--tokens-per-chunk",
        type=int,
        default=1,
        help="tokens per SSE chunk (as with speculative decoding)",
    )
    p.add_argument(
        "--prefill-tok-s",
        type=float,
        default=0.0,
        help="if set, TTFT = uncached prompt tokens / this",
    )
    p.add_argument("--no-usage", action="store_true", help="never send usage, even when asked")
    p.add_argument("--no-tokenize", action="store_true", help="serve no /tokenize endpoint")
    p.add_argument(
        "--ttft-ms", type=float, default=0.0, help="fixed time to first token (else one step)"
    )
    p.add_argument(
        "--close-connections",
        action="store_true",
        help="answer `connection: close` and close the connection after every response",
    )
    p.add_argument(
        "--split-utf8",
        action="store_true",
        help="emit multi-byte words and cut their bytes across two writes",
    )
    p.add_argument(
        "--error-every", type=int, default=0, help="answer HTTP 500 to every Nth generation request"
    )
    p.add_argument(
        "--stall-every", type=int, default=0, help="stop sending mid-stream on every Nth request"
    )
    p.add_argument("--degenerate", action="store_true", help="emit one 4-gram over and over")
    p.add_argument(
        "--legacy-metrics", action="store_true", help="use vllm:gpu_prefix_cache_* counter names"
    )
    p.add_argument("--log-file", help="also append log lines here")
    p.add_argument(
        "--fingerprint-lines", help="print this file's lines instead of the built-in start-up log"
    )
    p.add_argument("--startup-delay", type=float, default=0.0, help="seconds before the port opens")
    p.add_argument(
        "--crash-after",
        type=float,
        default=None,
        help="print an engine-core failure and exit 3 after S s",
    )
    p.add_argument(
        "--hang", action="store_true", help="stop after 'Capturing CUDA graphs'; never healthy"
    )
    p.add_argument(
        "--access-log", action="store_true", help="log one line per request, as uvicorn does"
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(main_async(args))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
