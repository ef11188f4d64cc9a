"""HTTP: the one module that speaks it with urllib (sdists, PR patches, API JSON, the package
index answers `harness lock` reads, and the health polls of the servers the tool started).

Every download is https (a test may allow plain http to a loopback address, never a remote
one), redirects included; bodies are capped in size; and only named transient failures are
retried (connection reset or aborted, a timeout, HTTP 429 and 5xx), with tenacity, logged
before each sleep. Anything else is one clear error the first time. `server_get` is the one
plain-http request: a readiness poll of a vLLM server this run started (its address comes from
the runner, never from data), answered or not, never retried, never followed elsewhere.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tenacity import (
    RetryCallState,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from harness.errors import ConfigError, EnvironmentProblem

log = logging.getLogger("harness.http")

# Tests that serve answers from a local http.server set this (monkeypatch); production never does.
ALLOW_LOOPBACK_HTTP = False
ATTEMPTS = 4
WAIT_INITIAL_S = 1.0
WAIT_MAX_S = 20.0
CHUNK = 1 << 16
USER_AGENT = "vllm-bw-harness"
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class HttpError(EnvironmentProblem):
    """A request that failed for good (after retries, when the failure was transient)."""

    def __init__(self, message: str, *, status: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


class _Transient(Exception):
    """A failure worth another try: wraps the named transient errors below."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"{url}: {why}")
        self.why = why


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_url(url: str) -> str:
    """`url` if it may be fetched: https to any host, or http to loopback when a test allows it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and ALLOW_LOOPBACK_HTTP and _is_loopback(parts.hostname):
        return url
    raise ConfigError(f"refusing to fetch {url!r}: only https:// URLs are fetched",
                      hint="use the https:// address (file://, ftp://, plain http and others are never followed)")


class _CheckedRedirect(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to a URL check_url accepts (no https -> http, no file://)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        check_url(urllib.parse.urljoin(req.full_url, newurl))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_CheckedRedirect)


def _read_capped(resp, url: str, max_bytes: int, sink: Callable[[bytes], None]) -> int:
    length = resp.length  # the Content-Length http.client read from the answer's head; None: none given
    if length is not None and length > max_bytes:
        raise HttpError(f"{url}: answer is {length} bytes, over the {max_bytes}-byte cap",
                        hint="the URL is not the file expected, or the cap is too small for it")
    total = 0
    while block := resp.read(CHUNK):
        total += len(block)
        if total > max_bytes:
            raise HttpError(f"{url}: answer exceeds the {max_bytes}-byte cap",
                            hint="the URL is not the file expected, or the cap is too small for it")
        sink(block)
    return total


def _once(url: str, accept: str, timeout: float, max_bytes: int, sink: Callable[[bytes], None]) -> int:
    req = urllib.request.Request(check_url(url), headers={"Accept": accept, "User-Agent": USER_AGENT})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return _read_capped(resp, url, max_bytes, sink)
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:  # urllib itself refused the target (file://, ...)
            raise ConfigError(f"refusing {url}'s redirect: only https:// URLs are fetched ({exc.reason})",
                              hint="use the final https:// address") from None
        if exc.code in TRANSIENT_STATUS:
            raise _Transient(url, f"HTTP {exc.code} {exc.reason}") from exc
        raise HttpError(f"GET {url}: HTTP {exc.code} {exc.reason}", status=exc.code,
                        hint="check the address (a 404 is a wrong name or number; 403 may be a rate limit)") from None
    except (ConnectionResetError, ConnectionAbortedError, http.client.RemoteDisconnected,
            http.client.IncompleteRead, TimeoutError) as exc:
        raise _Transient(url, f"{type(exc).__name__}: {exc}") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (ConnectionResetError, ConnectionAbortedError, TimeoutError)):
            raise _Transient(url, f"{type(exc.reason).__name__}: {exc.reason}") from exc
        raise HttpError(f"GET {url}: {exc.reason}", hint="check the network and the address") from None


def _retrying(attempts: int, wait_initial_s: float) -> Retrying:
    return Retrying(
        retry=retry_if_exception(lambda e: isinstance(e, _Transient)),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=wait_initial_s, max=WAIT_MAX_S) + wait_random(0, wait_initial_s),
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )


def _fetch(url: str, accept: str, timeout: float, max_bytes: int, sink_factory, attempts: int,
           wait_initial_s: float) -> int:
    try:
        for attempt in _retrying(attempts, wait_initial_s):
            with attempt:
                return _once(url, accept, timeout, max_bytes, sink_factory(attempt.retry_state))
    except _Transient as exc:
        raise HttpError(f"GET {url}: {exc.why} (gave up after {attempts} attempts)",
                        hint="the server or the network is failing: try again later") from None
    raise AssertionError("unreachable")  # pragma: no cover - Retrying either returns or raises


def get(url: str, *, accept: str = "*/*", timeout: float = 60, max_bytes: int = 16 << 20,
        attempts: int = ATTEMPTS, wait_initial_s: float = WAIT_INITIAL_S) -> bytes:
    """The body of `url`, at most `max_bytes`."""
    chunks: list[bytes] = []

    def fresh(_state: RetryCallState):
        chunks.clear()  # a retry starts the body over
        return chunks.append

    _fetch(url, accept, timeout, max_bytes, fresh, attempts, wait_initial_s)
    return b"".join(chunks)


def get_json(url: str, *, accept: str = "application/json", timeout: float = 60, max_bytes: int = 4 << 20,
             attempts: int = ATTEMPTS, wait_initial_s: float = WAIT_INITIAL_S) -> object:
    body = get(url, accept=accept, timeout=timeout, max_bytes=max_bytes, attempts=attempts,
               wait_initial_s=wait_initial_s)
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, a 5000-digit number, too deep
        raise HttpError(f"GET {url}: the answer is not JSON ({str(exc)[:200]})", hint="check the address") from None


def download(url: str, dest: Path, *, timeout: float = 600, max_bytes: int = 2 << 30,
             attempts: int = ATTEMPTS, wait_initial_s: float = WAIT_INITIAL_S) -> int:
    """Stream `url` into `dest` (written whole or not at all); the number of bytes."""
    tmp = dest.with_name(dest.name + ".part")
    handle = None

    def fresh(_state: RetryCallState):
        nonlocal handle
        if handle is not None:
            handle.close()
        handle = tmp.open("wb")
        return handle.write

    try:
        size = _fetch(url, "application/octet-stream", timeout, max_bytes, fresh, attempts, wait_initial_s)
        if handle is not None:  # always: _fetch calls fresh() before the first byte
            handle.close()
        tmp.replace(dest)
        return size
    finally:
        if handle is not None:
            handle.close()
        tmp.unlink(missing_ok=True)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # a server of ours does not redirect its health check: not followed


_SERVER_OPENER = urllib.request.build_opener(_NoRedirect)


def server_get(url: str, *, timeout: float = 3, max_bytes: int = 1 << 20) -> bytes | None:
    """The body of a 200 answer from a server the tool started (http:// or https:// at the
    address its runner gave), at most `max_bytes`; None for any other answer or none."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return None
    try:
        with _SERVER_OPENER.open(url, timeout=timeout) as resp:  # noqa: S310 - scheme checked above
            return resp.read(max_bytes) if resp.status == 200 else None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return None
