"""One streamed request, timed as its bytes arrive, and what it did (`RequestRecord`).

Follows `vllm bench serve` (vllm/benchmarks/lib/endpoint_request_func.py, 0.33.0) where it
can: SSE messages split on blank lines, TTFT at the first message that carries text,
`usage.completion_tokens` / `usage.prompt_tokens` from the final usage message, TPOT/ITL per
request as (last token - first token) / (tokens - 1). Differences, and why:
- the clock starts when the request's bytes are written on an already open connection, so
  connection set-up is not inside TTFT (it is kept apart, `connect_s`, when it happens);
- bytes are decoded with an incremental UTF-8 decoder: a character cut across two network
  reads survives (a plain `bytes.decode` per read would mangle it);
- every SSE message is stamped with the time of the network read that delivered it: several
  messages read at once share one time, so chunk-arrival gaps are reported apart from ITL
  and never stand in for it;
- a chat role-only message carries no text and is not a token message.

Each message is validated once into a `StreamEvent` (the fields read here, every other key
kept); a message that is not a JSON object of that shape makes the request's record unreadable.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass, replace
from time import perf_counter

from pydantic import BaseModel, ConfigDict, Field

from harness.bench.wire import Connection, HTTPError


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class Delta(_Message):
    """A chat choice's `delta` (streamed) or `message`."""
    content: str | None = Field(None, description="Answer text.")
    reasoning_content: str | None = Field(None, description="Reasoning text (older vLLM).")
    reasoning: str | None = Field(None, description="Reasoning text.")


class Choice(_Message):
    text: str | None = Field(None, description="A completion's text.")
    delta: Delta | None = Field(None, description="A chat stream's new text.")
    message: Delta | None = Field(None, description="A chat message, whole.")


class Usage(_Message):
    completion_tokens: int | None = Field(None, description="Tokens generated.")
    prompt_tokens: int | None = Field(None, description="Tokens in the prompt.")


class StreamError(_Message):
    message: str | None = Field(None, description="What went wrong.")


class StreamEvent(_Message):
    """One SSE `data:` message of an OpenAI-style completion or chat stream."""
    id: str | None = Field(None, description="The response's id.")
    object: str | None = Field(None, description="`error` on an error message.")
    choices: list[Choice] | None = Field(None, description="New text, one per choice.")
    usage: Usage | None = Field(None, description="Token counts (the last message, when asked for).")
    error: StreamError | str | None = Field(None, description="An error, inside the stream.")
    message: str | None = Field(None, description="What went wrong, on an `object: error` message.")


_parse = StreamEvent.model_validate_json


@dataclass(frozen=True)
class RequestRecord:
    """What one request did. Times are `time.perf_counter()` seconds."""

    ok: bool
    error: str | None
    start: float  # request bytes written
    chunk_times: tuple[float, ...]  # network-read time of each SSE message that carried text
    usage_completion_tokens: int | None
    usage_prompt_tokens: int | None
    text: str
    response_id: str | None = None
    connect_s: float = 0.0  # a connection opened inside this request (0: it was open)
    counted_tokens: int | None = None  # from /tokenize or a tokenizer when usage is missing

    @property
    def chunks(self) -> int:
        return len(self.chunk_times)

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.start if self.chunk_times else None

    @property
    def first(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def end(self) -> float | None:
        """Last token's arrival, as vLLM's `latency` uses (not the [DONE] line)."""
        return self.chunk_times[-1] if self.chunk_times else None

    @property
    def tokens(self) -> int:
        """usage.completion_tokens, else a count of the returned text, else chunks."""
        if self.usage_completion_tokens is not None:
            return self.usage_completion_tokens
        if self.counted_tokens is not None:
            return self.counted_tokens
        return self.chunks

    @property
    def itl(self) -> float | None:
        """Per-request inter-token latency: (last - first token time) / (tokens - 1)."""
        n = self.tokens
        if n < 2 or self.chunks < 2:
            return None
        span = self.chunk_times[-1] - self.chunk_times[0]
        return span / (n - 1) if span > 0 else None

    @property
    def decode_tok_s(self) -> float | None:
        itl = self.itl
        return 1.0 / itl if itl else None

    def chunk_gaps(self) -> list[float]:
        """Gaps between arrivals of successive text messages (zero inside one read)."""
        t = self.chunk_times
        return [t[i] - t[i - 1] for i in range(1, len(t))]


def _texts(event: StreamEvent) -> str:
    choices = event.choices
    if not choices:
        return ""
    if len(choices) == 1 and choices[0].text is not None:  # the common case, without a list
        return choices[0].text
    out = []
    for ch in choices:
        if ch.text:
            out.append(ch.text)
        # an empty delta ({}) gives way to a whole message, as a falsy dict did
        delta = ch.delta if ch.delta is not None and (ch.delta.model_fields_set or ch.delta.model_extra) \
            else ch.message
        if delta is not None:
            out += [t for t in (delta.content, delta.reasoning_content, delta.reasoning) if t]
    return "".join(out)


class SSEReader:
    """Server-sent events from a byte stream, read by read: the body sink of one request.

    `keep` is the hot path, called for every network read while streams are being timed:
    it only stores the bytes and their read time. `replay` decodes and parses them later
    (after the round), giving each message the time of the read that completed it, exactly
    as parsing on arrival would, without spending the client's CPU inside the timing."""

    __slots__ = ("_decode", "_buf", "times", "parts", "usage", "done", "rid", "error", "reads")

    def __init__(self) -> None:
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        self._buf = ""
        self.times: list[float] = []
        self.parts: list[str] = []
        self.usage: Usage | None = None
        self.done = False
        self.rid: str | None = None
        self.error: str | None = None
        self.reads: list[tuple[bytes, float]] = []

    def keep(self, data: bytes, t: float) -> None:
        self.reads.append((data, t))

    def replay(self) -> None:
        reads, self.reads = self.reads, []
        for data, t in reads:
            self.feed(data, t)

    def feed(self, data: bytes, t: float) -> None:
        text = self._decode(data)
        if not text:
            return  # only part of a character so far
        buf = self._buf + text if self._buf else text
        if "\r" in buf:  # SSE allows CRLF; keep a trailing CR until its LF comes
            tail = "\r" if buf.endswith("\r") else ""
            buf = buf[: len(buf) - len(tail)].replace("\r\n", "\n").replace("\r", "\n") + tail
        if "\n\n" not in buf:
            self._buf = buf
            return
        messages = buf.split("\n\n")
        self._buf = messages.pop()
        for message in messages:
            self._message(message, t)

    def _message(self, message: str, t: float) -> None:
        if message.startswith("data:") and "\n" not in message:
            data = message[5:]
        else:  # comments, other fields, or data over several lines (joined with \n)
            lines = [ln[5:] for ln in message.split("\n") if ln.startswith("data:")]
            if not lines:
                return
            data = "\n".join(ln[1:] if ln.startswith(" ") else ln for ln in lines)
        data = data.strip()
        if data == "[DONE]":
            self.done = True
            return
        event = _parse(data)
        if self.rid is None:
            self.rid = event.id
        if "error" in event.model_fields_set or event.object == "error":
            err = event.error if "error" in event.model_fields_set else event
            msg = err.message if isinstance(err, StreamError | StreamEvent) else err
            self.error = f"error event in stream: {msg}"[:300]
            return
        usage = event.usage
        if usage is not None and (usage.model_fields_set or usage.model_extra):  # `{}` says nothing
            self.usage = usage
        text = _texts(event)
        if text:
            self.times.append(t)
            self.parts.append(text)


async def stream_request(
    conn: Connection, path: str, body: bytes, *, read_timeout_s: float
) -> RequestRecord:
    """POST one streaming request on `conn` and parse it at once (see `stream_raw`)."""
    return (await stream_raw(conn, path, body, read_timeout_s=read_timeout_s))()


async def stream_raw(
    conn: Connection, path: str, body: bytes, *, read_timeout_s: float
) -> Callable[[], RequestRecord]:
    """POST one streaming request on `conn`; return a function that parses what arrived into
    its record (call it after the timed round). Never raises and never retries: failures
    are records. A closed connection is opened first, and that time is recorded apart."""
    sse = SSEReader()
    connect_s = 0.0
    start = 0.0

    def record(ok: bool, error: str | None) -> RequestRecord:
        try:
            sse.replay()
        except (ValueError, RecursionError) as exc:  # not JSON, not a stream message (ValidationError), too deep
            ok, error = False, error or f"unreadable SSE message: {type(exc).__name__}: {exc}"[:300]
        u = sse.usage or Usage()
        return RequestRecord(
            ok=ok,
            error=error,
            start=start,
            chunk_times=tuple(sse.times),
            usage_completion_tokens=u.completion_tokens,
            usage_prompt_tokens=u.prompt_tokens,
            text="".join(sse.parts),
            response_id=sse.rid,
            connect_s=connect_s,
        )

    try:
        if conn.closed:
            t0 = perf_counter()
            await conn.open(read_timeout_s)
            connect_s = perf_counter() - t0
        start, resp, waiter = conn.send("POST", path, body, sse.keep)
        await conn.wait(waiter, read_timeout_s)
        if resp.status != 200:
            text = b"".join(resp.body or []).decode("utf-8", "replace")
            return lambda: record(False, f"HTTP {resp.status}: {text[:300]}")
    except TimeoutError:
        return lambda: record(
            False, f"timeout: no byte for {read_timeout_s:g} s after {len(sse.reads)} reads"
        )
    except (HTTPError, ValueError, OSError) as exc:
        conn.close()
        msg = f"{type(exc).__name__}: {exc}"[:300]
        return lambda: record(False, msg)
    return lambda: _judge(record, sse)


def _judge(record: Callable[[bool, str | None], RequestRecord], sse: SSEReader) -> RequestRecord:
    rec = record(True, None)  # parses first: the checks below read what it found
    if not rec.ok:
        return rec
    if sse.error:
        return replace(rec, ok=False, error=sse.error)
    if not sse.times:
        return replace(rec, ok=False, error="stream ended without any token")
    if not sse.done:
        return replace(
            rec, ok=False, error=f"stream ended without [DONE] after {len(sse.times)} chunks"
        )
    return rec
