"""One streamed request, timed as its bytes arrive.

Follows `vllm bench serve` (vllm/benchmarks/lib/endpoint_request_func.py, 0.33.0): read the
body with `iter_any()`, stamp each read with `time.perf_counter()`, split SSE messages on
blank lines, take TTFT at the first chunk that carries choices, and read
`usage.completion_tokens` / `usage.prompt_tokens` from the final usage chunk. Unlike it, a
chunk counts as a token chunk only when it carries text (a chat role-only chunk does not).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class RequestRecord:
    """What one request did. Times are `perf_counter()` seconds."""

    ok: bool
    error: str | None
    start: float
    chunk_times: tuple[float, ...]  # arrival of each chunk that carried text
    usage_completion_tokens: int | None
    usage_prompt_tokens: int | None
    text: str

    @property
    def chunks(self) -> int:
        return len(self.chunk_times)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def end(self) -> float | None:
        """Last token's arrival, as vLLM's `latency` uses (not the [DONE] line)."""
        return self.chunk_times[-1] if self.chunk_times else None

    def tokens(self, use_usage: bool) -> int:
        if use_usage and self.usage_completion_tokens is not None:
            return self.usage_completion_tokens
        return self.chunks

    def tokens_per_chunk(self, use_usage: bool) -> float:
        return self.tokens(use_usage) / self.chunks if self.chunks else 0.0

    def decode_tok_s(self, use_usage: bool) -> float | None:
        """Tokens after the first chunk over the time from first to last chunk.

        When a chunk carries several tokens (speculative decoding), the tokens are spread
        evenly over the chunks: the first chunk is taken to hold tokens/chunks of them, so a
        stream of k-token chunks reads at its true rate instead of k times too fast or slow.
        """
        if self.chunks < 2:
            return None
        n = self.tokens(use_usage)
        after_first = n - n / self.chunks
        span = self.chunk_times[-1] - self.chunk_times[0]
        return after_first / span if span > 0 else None

    def itls(self, use_usage: bool) -> list[float]:
        """Gaps between chunks, each divided by the tokens one chunk carries on average."""
        per = self.tokens_per_chunk(use_usage) or 1.0
        t = self.chunk_times
        return [(t[i] - t[i - 1]) / per for i in range(1, len(t))]


def _texts(event: dict) -> str:
    out = []
    for ch in event.get("choices") or []:
        if "text" in ch:
            out.append(ch.get("text") or "")
        delta = ch.get("delta") or ch.get("message") or {}
        for key in ("content", "reasoning_content", "reasoning"):
            if delta.get(key):
                out.append(delta[key])
    return "".join(out)


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    payload: dict,
    *,
    read_timeout_s: float,
) -> RequestRecord:
    """POST one streaming request. Never raises and never retries: failures are records."""
    start = time.perf_counter()
    times: list[float] = []
    parts: list[str] = []
    usage: dict | None = None
    done = False
    buf = ""
    timeout = aiohttp.ClientTimeout(
        total=None, sock_connect=read_timeout_s, sock_read=read_timeout_s
    )

    def record(ok: bool, error: str | None) -> RequestRecord:
        u = usage or {}
        return RequestRecord(
            ok=ok,
            error=error,
            start=start,
            chunk_times=tuple(times),
            usage_completion_tokens=u.get("completion_tokens"),
            usage_prompt_tokens=u.get("prompt_tokens"),
            text="".join(parts),
        )

    try:
        async with session.post(url, json=payload, timeout=timeout) as resp:
            if resp.status != 200:
                body = (await resp.text())[:300]
                return record(False, f"HTTP {resp.status}: {body}")
            async for raw in resp.content.iter_any():
                now = time.perf_counter()
                buf += raw.decode("utf-8", errors="replace")
                while "\n\n" in buf:
                    message, buf = buf.split("\n\n", 1)
                    for line in message.splitlines():
                        if not line.startswith("data:"):
                            continue  # SSE comments / pings
                        data = line[5:].strip()
                        if data == "[DONE]":
                            done = True
                            continue
                        event = json.loads(data)
                        if event.get("usage"):
                            usage = event["usage"]
                        text = _texts(event)
                        if text:
                            times.append(now)
                            parts.append(text)
    except TimeoutError:
        return record(False, f"timeout: no byte for {read_timeout_s:g} s after {len(times)} chunks")
    except (aiohttp.ClientError, ValueError) as exc:
        return record(False, f"{type(exc).__name__}: {exc}"[:300])
    if not times:
        return record(False, "stream ended without any token")
    if not done:
        return record(False, f"stream ended without [DONE] after {len(times)} chunks")
    return record(True, None)
