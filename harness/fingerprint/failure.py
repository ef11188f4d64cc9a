"""Reading a failure nobody described: did the engine die, what was the first real exception,
in which phase and around which operation.

Data in harness/data/failures.toml (death lines, wrapper exceptions, phases, operations); this
module only walks the lines. Pure functions of the parsed lines.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.fingerprint.lines import LogLine
from harness.fingerprint.tables import _invalid, _read

# "Type: message" of a Python exception line (dotted type names, Ray's `Type(Inner)`), the C++
# `what():` line of an uncaught c10::Error, and CUDA runtime errors printed bare.
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failed|Exit|Interrupt|Fault))"
    r"(?:\([\w.]+\))?(?::\s?(?P<msg>.*))?$"
)
_CPP_WHAT = re.compile(r"^what\(\):\s+(?P<msg>.+)$")
_TRACEBACK = "Traceback (most recent call last):"
# Levels whose exception lines are reported, not raised (a caught optional import, a retried
# tactic): they never name the root cause.
QUIET_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "WARN"})


class _Phase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Phase id shown in verdicts (load, autotune, ...).")
    start: str = Field(description="Regex of the message that starts the phase.")


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Operation id shown in verdicts (fused-moe, attention, ...).")
    pattern: str = Field(description="Regex searched in the lines around a failing line.")


class _FailureFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    death: list[str] = Field(description="Regexes of lines that prove the engine died.")
    wrappers: list[str] = Field(description="Regexes of exceptions that only wrap another one.")
    started: str = Field(description="Regex of a line that ends the server's start-up.")
    shutdown: str = Field(description="Regex of a line that starts an orderly stop.")
    phase: list[_Phase] = Field(description="Start-up phases, in order.")
    op_window: int = Field(description="Lines searched around a failing line for its operation.")
    op: list[_Op] = Field(description="Operations, most specific first.")

    @field_validator("death", "wrappers")
    @classmethod
    def _compile_all(cls, values: list[str]) -> list[str]:
        for v in values:
            re.compile(v)
        return values


@dataclass(frozen=True)
class FailureTables:
    death: re.Pattern[str]
    wrapper: re.Pattern[str]
    started: re.Pattern[str]
    shutdown: re.Pattern[str]
    phases: tuple[tuple[str, re.Pattern[str]], ...]
    op_window: int
    ops: tuple[tuple[str, re.Pattern[str]], ...]


@cache
def failure_tables() -> FailureTables:
    name = "failures.toml"
    try:
        spec = _FailureFile.model_validate(_read(name))
    except ValidationError as exc:
        raise _invalid(name, exc) from exc
    return FailureTables(
        death=re.compile("|".join(f"(?:{d})" for d in spec.death), re.M),
        wrapper=re.compile("|".join(f"(?:{w})" for w in spec.wrappers)),
        started=re.compile(spec.started),
        shutdown=re.compile(spec.shutdown, re.M),
        phases=tuple((p.name, re.compile(p.start, re.M)) for p in spec.phase),
        op_window=spec.op_window,
        ops=tuple((o.name, re.compile(o.pattern)) for o in spec.op),
    )


class Indexed:
    """The parsed lines joined into one text, so a table regex scans the whole log in one C call
    (re.MULTILINE) instead of one Python call per line; positions map back to line indexes."""

    def __init__(self, lines: list[LogLine]) -> None:
        self.lines = lines
        self.text = "\n".join(ln.message.replace("\n", " ") for ln in lines)
        self.starts: list[int] = []
        pos = 0
        for ln in lines:
            self.starts.append(pos)
            pos += len(ln.message) + 1
        self._phase_events: list[tuple[int, str]] | None = None

    def index_of(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def find(self, rx: re.Pattern[str]) -> Iterator[int]:
        """Indexes of the lines `rx` matches, each once, in order."""
        last = -1
        for m in rx.finditer(self.text):
            i = self.index_of(m.start())
            if i != last:
                last = i
                yield i

    def any(self, rx: re.Pattern[str]) -> bool:
        return rx.search(self.text) is not None

    def phase(self, index: int) -> str | None:
        """The phase lines[index] belongs to: the last phase start seen at or before it."""
        if self._phase_events is None:
            tables = failure_tables()
            events: list[tuple[int, str]] = []
            for name, rx in tables.phases:
                events.extend((i, name) for i in self.find(rx))
            events.extend((i, "post-capture") for i in self.find(_CAPTURE_END))
            events.extend((i + 1, "post-autotune") for i in self.find(_AUTOTUNE_END))
            order = {name: n for n, (name, _) in enumerate(tables.phases)}
            events.sort(key=lambda e: (e[0], order.get(e[1], 99)))
            self._phase_events = events
        k = bisect_right(self._phase_events, (index, "\uffff")) - 1
        return self._phase_events[k][1] if k >= 0 else None


@cache
def _multiline(rx: re.Pattern[str]) -> re.Pattern[str]:
    return re.compile(rx.pattern, rx.flags | re.MULTILINE)


_CAPTURE_END = re.compile(r"Graph capturing finished", re.M)
_AUTOTUNE_END = re.compile(r"(?i)autotuning process ends", re.M)


def op_near(ix: Indexed, index: int) -> str | None:
    """The operation named by the error lines and traceback frames around lines[index]."""
    tables = failure_tables()
    lines = ix.lines
    lo, hi = max(0, index - tables.op_window), min(len(lines), index + tables.op_window + 1)
    # The failing line first, then the nearest lines outward; only error-ish lines count
    # (INFO lines around a crash name every kernel the model uses).
    for i in sorted(range(lo, hi), key=lambda i: abs(i - index)):
        ln = lines[i]
        if ln.level in QUIET_LEVELS:
            continue
        for name, rx in tables.ops:
            if rx.search(ln.message):
                return name
    return None


@dataclass(frozen=True)
class RootCause:
    index: int  # into the parsed lines
    line: str  # "Type: message" as printed
    type: str | None


_EXCEPTION_M = re.compile(_EXCEPTION.pattern, re.M)
_CPP_WHAT_M = re.compile(_CPP_WHAT.pattern, re.M)


def _exception_lines(ix: Indexed) -> list[tuple[int, str, str | None]]:
    found: list[tuple[int, str, str | None]] = []
    for rx, cpp in ((_EXCEPTION_M, False), (_CPP_WHAT_M, True)):
        for m in rx.finditer(ix.text):
            i = ix.index_of(m.start())
            if ix.lines[i].level in QUIET_LEVELS:
                continue
            if cpp:
                found.append((i, m.group("msg"), "c10::Error"))
            else:
                found.append((i, ix.lines[i].message, m.group("type")))
    found.sort(key=lambda f: f[0])
    return found


def root_cause(ix: Indexed) -> RootCause | None:
    """The first raised exception that is not a wrapper; the first wrapper if that is all."""
    tables = failure_tables()
    candidates = _exception_lines(ix)
    stop = next(ix.find(tables.shutdown), None)
    if stop is not None:
        candidates = [c for c in candidates if c[0] < stop]
    for i, text, typ in candidates:
        if not tables.wrapper.search(text):
            return RootCause(i, text, typ)
    if candidates:
        i, text, typ = candidates[0]
        return RootCause(i, text, typ)
    return None


def died(ix: Indexed) -> int | None:
    """Index of the first line that proves the engine or server died, else None.

    Besides the death lines of the table, an uncaught traceback (bare, not logged) that ends
    the log with no start-up line after it counts: a `vllm` library user's script died."""
    tables = failure_tables()
    stop = next(ix.find(tables.shutdown), None)
    for i in ix.find(tables.death):
        return i if stop is None or i < stop else None
    # An exception raised and logged at ERROR during start-up (before any start-up-complete
    # line): vLLM does not recover from those (a one-line excerpt of a worker's ValueError).
    started = next(ix.find(_multiline(tables.started)), None)
    for i, _, _ in _exception_lines(ix):
        ln = ix.lines[i]
        if ln.level in ("ERROR", "CRITICAL") and (started is None or i < started):
            if (stop is None or i < stop) and not tables.wrapper.search(ln.message):
                return i
    lines = ix.lines
    if stop is not None:
        lines = lines[:stop]
    last_tb = None
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].message == _TRACEBACK and lines[i].level not in QUIET_LEVELS:
            last_tb = i
            break
    if last_tb is None:
        return None
    after = lines[last_tb + 1 :]
    if any(tables.started.search(ln.message) for ln in after):
        return None
    if any(_EXCEPTION.match(ln.message) for ln in after):
        return last_tb
    return None
