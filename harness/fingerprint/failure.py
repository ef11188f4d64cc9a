"""Reading a failure nobody described: did the engine die, what was the first real exception,
in which phase and around which operation; and `read_failure`, the failure reader of
`fingerprint()`: the table signatures the log shows, each with its context, and the death's name.

Data in harness/data/failures.toml (death lines, wrapper exceptions, phases, operations) and
signatures.toml; this module only walks the lines. Pure functions of the parsed lines.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any, AnyStr, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)

from harness.fingerprint.causes import FailureClass
from harness.fingerprint.lines import LogLine
from harness.fingerprint.readers import Context
from harness.fingerprint.tables import Signature, _invalid, _read, signatures

# "Type: message" of a Python exception line (dotted type names, Ray's `Type(Inner)`), the C++
# `what():` line of an uncaught c10::Error, and CUDA runtime errors printed bare.
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failed|Exit|Interrupt|Fault))"
    # Ray's `Type(Inner)`; the repr form a V0 engine loop logs, `NotImplementedError('...')`
    r"(?:\([\w.]+\)|(?=\(['\"]))?(?::\s?(?P<msg>.*)|\((?P<repr>['\"].*['\"])\))?$"
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


class _Cause(BaseModel):
    model_config = ConfigDict(extra="forbid")
    class_: FailureClass = Field(alias="class", description="The cause class this rule names.")
    pattern: str = Field(description="Regex searched in the root-cause line.")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        re.compile(value)
        return value


class _FailureFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    death: list[str] = Field(description="Regexes of lines that prove the engine died.")
    wrappers: list[str] = Field(description="Regexes of exceptions that only wrap another one.")
    started: str = Field(description="Regex of a line that ends the server's start-up.")
    shutdown: str = Field(description="Regex of a line that starts an orderly stop.")
    phase: list[_Phase] = Field(description="Start-up phases, in order.")
    op_window: int = Field(description="Lines searched around a failing line for its operation.")
    op: list[_Op] = Field(description="Operations, most specific first.")
    cause: list[_Cause] = Field(description="Cause rules for the root-cause line, first match wins.")

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
    causes: tuple[tuple[FailureClass, re.Pattern[str]], ...]

    def cause_of(self, text: str) -> FailureClass | None:
        """The class of the first [[cause]] rule whose pattern `text` matches."""
        return next((cls for cls, rx in self.causes if rx.search(text)), None)


@cache
def failure_tables() -> FailureTables:
    name = "failures.toml"
    try:
        spec = _FailureFile.model_validate(_read(name))
    except ValidationError as exc:
        raise _invalid(name, exc) from exc
    return FailureTables(
        # plain `|` joins (alternation is associative) keep each entry's leading literal visible
        # to literal_prefixes()
        death=re.compile("|".join(spec.death), re.M),
        wrapper=re.compile("|".join(spec.wrappers)),
        started=re.compile(spec.started),
        shutdown=re.compile(spec.shutdown, re.M),
        phases=tuple((p.name, re.compile(p.start, re.M)) for p in spec.phase),
        op_window=spec.op_window,
        ops=tuple((o.name, re.compile(o.pattern)) for o in spec.op),
        causes=tuple((c.class_, re.compile(c.pattern)) for c in spec.cause),
    )


class _LinesWith(dict[str, list[int]]):
    """literal -> indexes of the lines of `ix` where it occurs, scanned on its first lookup."""

    def __init__(self, ix: Indexed) -> None:
        super().__init__()
        self.ix = ix
        # An ASCII log (most are) is scanned as bytes: `bytes.find` is about a third faster than
        # `str.find` over a megabyte, and its offsets are the text's. A non-ASCII literal cannot
        # occur in it. A log with other characters is scanned as text.
        self.ascii = ix.text.encode("ascii") if ix.text.isascii() else None

    def __missing__(self, literal: str) -> list[int]:
        if self.ascii is None:
            found = self._lines(self.ix.text, literal)
        elif literal.isascii():
            found = self._lines(self.ascii, literal.encode("ascii"))
        else:
            found = []
        self[literal] = found
        return found

    def _lines(self, text: AnyStr, needle: AnyStr) -> list[int]:
        found, pos = [], text.find(needle)
        while pos != -1:
            found.append(self.ix.index_of(pos))
            pos = text.find(needle, pos + 1)
        return found


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
        self._literal_lines = _LinesWith(self)
        self.ops: dict[int, str | None] = {}  # op_near's answers
        self.cut: CutTraceback | None | Literal[False] = False  # cut_traceback's answer, once computed
        self.exceptions: list[tuple[int, str, str | None]] | None = None  # _exception_lines'

    def index_of(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def find(self, rx: re.Pattern[str]) -> Iterator[int]:
        """Indexes of the lines `rx` matches, each once, in order.

        When every branch of `rx` starts with a literal, `str.find` (memchr speed) picks the
        candidate lines and the regex only runs on those: Python's `re` has no such shortcut for
        an alternation, and a 1 MB log is mostly request lines no signature cares about."""
        prefixes = literal_prefixes(rx)
        if prefixes is None:
            last = -1
            for m in rx.finditer(self.text):
                i = self.index_of(m.start())
                if i != last:
                    last = i
                    yield i
            return
        candidates: set[int] = set()
        for lit in prefixes:
            candidates.update(self._lines_with(lit))
        for i in sorted(candidates):
            if rx.search(self.lines[i].message):
                yield i

    def _lines_with(self, literal: str) -> list[int]:
        """Indexes of the lines where `literal` occurs, scanned once per log: the signature,
        death and phase tables share many literals and some are searched several times."""
        return self._literal_lines[literal]

    def any(self, rx: re.Pattern[str]) -> bool:
        return next(self.find(rx), None) is not None

    def phase(self, index: int) -> str | None:
        """The phase lines[index] belongs to: the last phase start seen at or before it."""
        if self._phase_events is None:
            tables = failure_tables()
            events: list[tuple[int, str]] = []
            for name, rx in tables.phases:
                events.extend((i, name) for i in self.find(rx))
            events.extend((i, "post-capture") for i in self.find(_CAPTURE_END))
            events.extend((i + 1, "post-autotune") for i in self.find(_AUTOTUNE_END))
            # every event's name: the phases in table order, the two ends after them
            order = {"post-capture": 99, "post-autotune": 99} | {
                name: n for n, (name, _) in enumerate(tables.phases)}
            events.sort(key=lambda e: (e[0], order[e[1]]))
            self._phase_events = events
        k = bisect_right(self._phase_events, (index, "\uffff")) - 1
        return self._phase_events[k][1] if k >= 0 else None


_META = set(".^$*+?{}[]()|\\")
_QUANTIFIERS = set("*+?{")


def _split_top(pattern: str) -> list[str] | None:
    """The top-level alternatives of a regex; None when it has inline flags we cannot honour."""
    branches, depth, in_class, start, i = [], 0, False, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            branches.append(pattern[start:i])
            start = i + 1
        i += 1
    branches.append(pattern[start:])
    return branches


def _leading_literal(branch: str) -> str:
    out: list[str] = []
    i = 1 if branch.startswith("^") else 0
    while i < len(branch):
        c = branch[i]
        if c == "\\":
            nxt = branch[i + 1 : i + 2]
            if not nxt or nxt.isalnum():  # \w \d \s \b ...: not a literal
                break
            lit, step = nxt, 2
        elif c in _META:
            break
        else:
            lit, step = c, 1
        if branch[i + step : i + step + 1] in _QUANTIFIERS and branch[i + step : i + step + 1]:
            break  # "a?" or "a*": the char may be absent
        out.append(lit)
        i += step
    return "".join(out)


@cache
def literal_prefixes(rx: re.Pattern[str]) -> tuple[str, ...] | None:
    """Literals one of which starts every match of `rx`, or None when there are none to use
    (a case-insensitive pattern, a branch that starts with a class or a group)."""
    if rx.flags & re.IGNORECASE or rx.pattern.startswith("(?"):
        return None
    branches = _split_top(rx.pattern)
    if not branches:
        return None
    lits = tuple(_leading_literal(b) for b in branches)
    return lits if all(len(x) >= 4 for x in lits) else None


@cache
def _multiline(rx: re.Pattern[str]) -> re.Pattern[str]:
    """The table regex for a search over the joined text (^ and $ per line)."""
    return re.compile(rx.pattern, rx.flags | re.MULTILINE)


_CAPTURE_END = re.compile(r"Graph capturing finished", re.M)
_AUTOTUNE_END = re.compile(r"utotuning process ends", re.M)


def op_near(ix: Indexed, index: int) -> str | None:
    """The operation named by the error lines and traceback frames around lines[index]."""
    # asked for every candidate line of every signature with ops, and again for the verdict
    if index not in ix.ops:
        ix.ops[index] = _op_near(ix, index)
    return ix.ops[index]


def _op_near(ix: Indexed, index: int) -> str | None:
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


def _at_line_starts(ix: Indexed, rx: re.Pattern[str], starts: Iterable[int]) -> Iterator[re.Match[str]]:
    """What `rx.finditer(ix.text)` yields, for a `^`-anchored (re.M) `rx` that never matches
    empty, trying only `starts` (ascending, a superset of the line starts it can match at).

    `finditer` would run the regex at every character of the log (a million C calls on 1 MB);
    a match may still run into the next line (`\\s` matches the newline), so the same
    no-overlap rule applies."""
    end = 0
    for pos in starts:
        if pos >= end and (m := rx.match(ix.text, pos)):
            end = m.end()
            yield m


def _literal_line_starts(ix: Indexed, literal: str) -> Iterator[int]:
    text, pos = ix.text, ix.text.find(literal)
    while pos != -1:
        if pos == 0 or text[pos - 1] == "\n":
            yield pos
        pos = text.find(literal, pos + 1)


def _exception_lines(ix: Indexed) -> list[tuple[int, str, str | None]]:
    if ix.exceptions is None:
        ix.exceptions = _find_exception_lines(ix)
    return ix.exceptions


def _find_exception_lines(ix: Indexed) -> list[tuple[int, str, str | None]]:
    found: list[tuple[int, str, str | None]] = []
    for rx, cpp, starts in (
        (_EXCEPTION_M, False, ix.starts),
        (_CPP_WHAT_M, True, _literal_line_starts(ix, "what():")),
    ):
        for m in _at_line_starts(ix, rx, starts):
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


# the line part may be wrapped onto the next line by a paste: `File "/x/y.py"` alone is a frame too
# (a paste through a word processor turns the quotes into “ ”)
# (faulthandler's dump after a fatal signal writes `File "x.py", line 99 in fn`, no comma)
_FRAME = re.compile(r'^File ["“](?P<file>[^"”]+)["”](?:, line (?P<line>\d+),? in (?P<fn>[^\s]+)|\s*$)')
# carets under a code line; loguru's variable annotations ("    │    └ <Command main>")
_CARETS = re.compile(r"^(?:[~^\s]+|[│\s]*(?:└ .*)?)$")


@dataclass(frozen=True)
class CutTraceback:
    """A traceback the log ends inside: the process that raised and the frames seen."""

    index: int  # of its `Traceback (most recent call last):` line, else of its first frame
    process: str | None
    frames: tuple[str, ...]  # "file.py:line in fn", outermost first
    last: int = 0  # index of the last line that process printed


def cut_traceback(ix: Indexed) -> CutTraceback | None:
    """The traceback whose exception line never came (a paste cut short, a process killed, a
    grep that kept only the frames).

    Read per process: interleaved workers (`(EngineCore_0 pid=1)`, `(VllmWorker rank=1 pid=2)`,
    bare API-server lines) each print their own traceback line by line, so one process's frames
    sit between another's. A process's output ends inside a traceback when its last frame (with
    or without the `Traceback (most recent call last):` header before it, at ERROR level behind a
    logger prefix or bare) is followed by nothing of that process but the frame's code line and
    caret lines. Of several, the one whose process printed last."""
    if ix.cut is False:
        ix.cut = _cut_traceback(ix)
    return ix.cut


def _cut_traceback(ix: Indexed) -> CutTraceback | None:
    lines = ix.lines
    # process -> its last frame or traceback header (-1: none yet)
    last: defaultdict[str | None, int] = defaultdict(lambda: -1)
    for literal in ('File "', 'File “', _TRACEBACK):
        for pos in _literal_line_starts(ix, literal):
            i = ix.index_of(pos)
            ln = lines[i]
            if ln.level in QUIET_LEVELS or (literal != _TRACEBACK and not _FRAME.match(ln.message)):
                continue
            if i > last[ln.process]:
                last[ln.process] = i
    best: tuple[int, CutTraceback] | None = None
    for process, at in last.items():
        end = _traceback_tail(lines, process, at)
        if end is None or (best is not None and end <= best[0]):
            continue
        start, frames = _traceback_head(lines, process, at)
        best = (end, CutTraceback(start, process, frames, end))
    return best[1] if best else None


def _frame_name(m: re.Match[str]) -> str:
    name = m.group("file").rsplit("/", 1)[-1]
    return f"{name}:{m.group('line')} in {m.group('fn')}" if m.group("line") else name


def _traceback_tail(lines: list[LogLine], process: str | None, at: int) -> int | None:
    """The last line `process` printed when nothing after lines[at] (its last frame or header)
    ends the traceback; None when something does (an exception line, any other line)."""
    after_frame, end = lines[at].message != _TRACEBACK, at
    for j in range(at + 1, len(lines)):
        ln = lines[j]
        if ln.process != process:
            continue
        if after_frame or _CARETS.match(ln.message):  # the frame's code line, then carets
            after_frame, end = False, j
            continue
        return None
    return end


def _traceback_head(lines: list[LogLine], process: str | None, at: int) -> tuple[int, tuple[str, ...]]:
    """(index of the traceback's header or first frame, its frames) for the run of frames of
    `process` that ends at lines[at], read backwards."""
    own = [j for j in range(at, -1, -1) if lines[j].process == process]
    start, frames = at, []
    for k, j in enumerate(own):
        msg = lines[j].message
        if lines[j].level in QUIET_LEVELS:
            break
        if msg == _TRACEBACK:
            start = j
            break
        if m := _FRAME.match(msg):
            frames.append(_frame_name(m))
            start = j
            continue
        # a code line (the line before it is a frame) or a caret line
        before = lines[own[k + 1]].message if k + 1 < len(own) else ""
        if not (_CARETS.match(msg) or _FRAME.match(before)):
            break
    return start, tuple(reversed(frames))


_TRACEBACK_M = re.compile("^" + re.escape(_TRACEBACK), re.M)


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
    if last_tb is not None:
        after = lines[last_tb + 1 :]
        if any(tables.started.search(ln.message) for ln in after):
            return None
        # The exception line may be cut off by the paste: a bare exception anywhere will do.
        if any(ln.level is None and _EXCEPTION.match(ln.message) for ln in lines):
            return last_tb
    # ... or the log ends inside a traceback (the process died mid-print, the paste stops, or
    # only its frames were kept), with or without its header
    cut = cut_traceback(ix)
    if cut is not None and (stop is None or cut.index < stop):
        if not any(tables.started.search(ln.message) for ln in lines[cut.index :]):
            return cut.index
    # A bare exception line (no logger prefix, no traceback around it: a C++ error as it reaches
    # the log, `RuntimeError: ... Invalid status`) that is the last thing its process printed
    # (c10's backtrace lines aside).
    return _last_bare_exception(ix, stop)


# What may follow a C++ exception's `what()` text: c10's backtrace.
_CPP_TRACE = re.compile(r"^(?:frame #\d+:|Exception raised from |terminate called|Aborted|\(core dumped\))")


def _last_bare_exception(ix: Indexed, stop: int | None) -> int | None:
    tables = failure_tables()
    found = [e for e in _exception_lines(ix) if stop is None or e[0] < stop]
    for i, _, _ in reversed(found):
        ln = ix.lines[i]
        if tables.wrapper.search(ln.message):
            continue
        if ln.level is not None:  # logged: a request error the server survived, or read above
            return None
        later = (x for x in ix.lines[i + 1 : stop] if x.process == ln.process)
        if all(_CPP_TRACE.match(x.message) for x in later):
            return i
        return None
    return None


# --- the failure reader of `fingerprint()` ---------------------------------------------------


@dataclass(frozen=True)
class _Hit:
    sig: Signature
    index: int
    asked: str | None
    phase: str | None
    op: str | None


def _signature_hit(
    sig: Signature, ix: Indexed, root: RootCause | None, process_ended: bool, hung: bool
) -> _Hit | None:
    if (sig.hung_only and not hung) or (sig.unless_hung and hung):
        return None
    lines = ix.lines
    if sig.on == "root-cause":
        candidates: Iterator[int] = iter(
            [root.index] if root is not None and sig.pattern.search(root.line) else []
        )
    else:
        candidates = ix.find(_multiline(sig.pattern))
    if sig.last_only:
        # a progress bar: only its last update says where the log stopped
        candidates = iter([i for i in candidates][-1:])
    # the hit is the first line that qualifies; with min_hits, the last of them (a stall the log
    # ends in is timed from its last report)
    keep_last = sig.min_hits > 1
    found, hit = 0, None
    for i in candidates:
        ln = lines[i]
        if sig.raised_only and ln.level in QUIET_LEVELS:
            continue
        phase = ix.phase(i)
        if (sig.phases and phase not in sig.phases) or phase in sig.not_phases:
            continue
        op = op_near(ix, i) if (sig.ops or sig.not_ops) else None
        if (sig.ops and op not in sig.ops) or op in sig.not_ops:
            continue
        m = sig.pattern.search(ln.message)
        asked = m.group("asked") if m and "asked" in sig.pattern.groupindex else None
        hit, found = _Hit(sig, i, asked, phase, op), found + 1
        if not keep_last:
            break
    if hit is None or found < sig.min_hits:
        return None
    if not all(ix.any(_multiline(r)) for r in sig.requires):
        return None
    if sig.unless_any is not None and ix.any(_multiline(sig.unless_any)):
        return None
    if sig.unless_after is not None:
        if not process_ended:
            return None
        rest = ix.text[ix.starts[hit.index + 1] :] if hit.index + 1 < len(lines) else ""
        if _multiline(sig.unless_after).search(rest):
            return None
    return hit


@dataclass
class _Fallbacks:
    """The signatures that fire on no line of their own, by their `on` (the last one wins)."""

    unclassified_death: Signature | None = None
    traceback_cut: Signature | None = None
    engine_died: Signature | None = None

    def add(self, sig: Signature) -> bool:
        """Keep `sig` if it is a fallback signature; False if it fires on lines."""
        match sig.on:
            case "unclassified-death":
                self.unclassified_death = sig
            case "traceback-cut":
                self.traceback_cut = sig
            case "engine-died":
                self.engine_died = sig
            case _:
                return False
        return True


def _is_wrapper(text: str) -> bool:
    """A secondary message: an exception that only carries (or follows) another one."""
    return bool(failure_tables().wrapper.search(text))


def _names_a_cause(text: str) -> bool:
    """An exception line that names a cause: not a wrapper, or a wrapper that carries the
    message of the exception it wraps ("Worker failed with error 'Invalid thread config: ...'")."""
    return not _is_wrapper(text) or failure_tables().cause_of(text) is not None


def _name_failure(
    ix: Indexed,
    explained: _Hit | None,
    root: RootCause | None,
    death: int | None,
    fallback: _Fallbacks,
    phase: str | None,
    op: str | None,
) -> tuple[str | None, _Hit | None]:
    """(the failure's name, the fallback signature hit to add when no table signature explains
    it). A raised exception that names a cause wins over a traceback the log ends inside (the cut
    one is at best the same exception printed again by another process): `traceback-cut` is the
    name only when no such exception line is in the log."""
    if explained is not None:
        return explained.sig.id, None
    primary = root if root is not None and _names_a_cause(root.line) else None
    unclassified = fallback.unclassified_death
    if primary is not None:
        hit = _Hit(unclassified, primary.index, None, phase, op) if unclassified else None
        return f"exception:{primary.type}", hit
    cut = cut_traceback(ix)
    if cut is not None and fallback.traceback_cut:
        return "traceback-cut", _Hit(fallback.traceback_cut, cut.index, None, ix.phase(cut.index),
                                     op_near(ix, len(ix.lines) - 1))
    if root is not None:
        hit = _Hit(unclassified, root.index, None, phase, op) if unclassified else None
        return f"exception:{root.type}", hit
    if death is not None:
        sig = fallback.engine_died
        return "engine-died", _Hit(sig, death, None, phase, op) if sig else None
    return None, None


def _explaining(hits: list[_Hit], root: RootCause | None) -> _Hit | None:
    """The fatal table signature that explains the death: one matching the root-cause line (its
    pattern or a required pattern), else the earliest; within each, a signature that names a
    cause before one that names a shape (`refine`)."""
    fatal = [h for h in hits if h.sig.severity == "fatal" and h.sig.failure_class]
    specific = [h for h in fatal if not h.sig.refine]
    generic = [h for h in fatal if h.sig.refine]
    if root is not None:
        for group in (specific, generic):
            for h in group:
                if h.index == root.index or any(
                    r.search(root.line) for r in (h.sig.pattern, *h.sig.requires)
                ):
                    return h
    for group in (specific, generic):
        if group:
            return min(group, key=lambda h: h.index)
    return None


def _message(ix: Indexed, root: RootCause) -> str:
    """The root-cause line and the lines that continue its message (pydantic's "1 validation
    error for ModelConfig" names the cause on the lines after it): up to three lines of the same
    process that start no frame, traceback, log record or exception of their own."""
    parts, lines = [root.line], ix.lines
    process, level = lines[root.index].process, lines[root.index].level
    for ln in lines[root.index + 1 : root.index + 4]:
        msg = ln.message
        if (ln.process != process or ln.level != level or msg == _TRACEBACK or _FRAME.match(msg)
                or _EXCEPTION.match(msg) or msg.startswith("During handling")
                or msg.startswith("The above exception")):
            break
        parts.append(msg)
    return " ".join(parts)


def _classify(ix: Indexed, explained: _Hit | None, root: RootCause | None) -> FailureClass:
    """The most specific cause class the lines support.

    A signature that names a cause gives its class. Otherwise the [[cause]] rules read the primary
    root-cause line (a raised exception that is not a wrapper), the explaining signature's own
    line, then the message a wrapper carries ("Worker failed with error '...'"). A refining
    signature's own class comes next; then `other` for a primary exception no rule knows, and
    `secondary` when only secondary messages (a death line, a wrapper) show the death."""
    tables = failure_tables()
    if explained is not None and not explained.sig.refine and explained.sig.failure_class:
        return explained.sig.failure_class
    primary = root if root is not None and not _is_wrapper(root.line) else None
    texts = (_message(ix, primary) if primary else None,
             ix.lines[explained.index].message if explained else None,
             root.line if root is not None and primary is None else None)
    for text in texts:
        if text and (cls := tables.cause_of(text)) is not None:
            return cls
    if explained is not None and explained.sig.failure_class:
        return explained.sig.failure_class
    if primary is not None:
        return FailureClass.OTHER
    if root is not None or ix.any(tables.death):
        return FailureClass.SECONDARY
    return FailureClass.OTHER


class SignatureContext(BaseModel):
    """Where one signature the log shows was found: `Fingerprint.signature_context[<id>]`.
    Stored with the keys its writer set (`process`, `frames` only for `traceback-cut`, `op` only
    for a fatal signature, `asked` only when its pattern names what was asked); unknown keys are
    kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    # Field order is the key order of the stored JSON.
    line: int | None = Field(None, description="the log line number of the hit")
    phase: str | None = Field(None, description="the start-up phase it happened in")
    process: str | None = Field(None, description="traceback-cut: the process whose traceback is cut")
    frames: tuple[str, ...] = Field((), description="traceback-cut: the frames printed before the cut")
    op: str | None = Field(None, description="a fatal signature: the operation around its line")
    asked: str | None = Field(None, description="what its pattern says was asked for")

    @model_serializer(mode="wrap")
    def _to_stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for key in type(self).model_fields.keys() - self.model_fields_set:
            out.pop(key, None)
        return out


class FailureFacts(BaseModel):
    """How the engine died, when it did, and every signature the log shows."""

    model_config = ConfigDict(frozen=True)
    signatures: tuple[str, ...] = ()
    fatal: bool = False
    failure_class: FailureClass | None = None
    root_cause: str | None = None
    root_cause_line: int | None = None
    failure_phase: str | None = None
    failure_op: str | None = None
    asked: str | None = None
    signature_context: dict[str, SignatureContext] = {}
    failure_signature: str | None = None


def read_failure(lines: list[LogLine], requested: dict[str, str | None], cx: Context,
                 process_ended: bool, hung: bool = False) -> FailureFacts:
    """Signatures with their context, then the death, its root cause and its name."""
    names, ev = cx.names, cx.evidence
    ix = Indexed(lines)
    death = died(ix)
    root = root_cause(ix)
    hits: list[_Hit] = []
    fallback = _Fallbacks()
    for sig in signatures():
        if fallback.add(sig):
            continue
        if hit := _signature_hit(sig, ix, root, process_ended, hung):
            hits.append(hit)
    fatal = death is not None or any(h.sig.severity == "fatal" for h in hits)
    cause = phase = op = asked = named = None
    failure_class: FailureClass | None = None
    cause_line: int | None = None
    if fatal:
        explained = _explaining(hits, root)
        failure_class = _classify(ix, explained, root)
        if root is not None:
            cause, cause_line = root.line, lines[root.index].number
            ev["root_cause"] = root.line
        elif explained is not None:
            cause, cause_line = lines[explained.index].message, lines[explained.index].number
        elif death is not None:
            cause, cause_line = lines[death].message, lines[death].number
        at = explained.index if explained else root.index if root else death
        if at is not None:
            phase = explained.phase if explained else ix.phase(at)
            op = (explained.op if explained else None) or op_near(ix, at)
        named, extra = _name_failure(ix, explained, root, death, fallback, phase, op)
        if extra is not None:
            hits.append(extra)
        cut = cut_traceback(ix) if named == "traceback-cut" and root is None else None
        if cut is not None and death in (None, cut.index):
            where = cut.frames[-1] if cut.frames else "its first frame"
            cause = f"traceback cut off after {where} ({cut.process or 'unprefixed process'})"
            cause_line = lines[cut.index].number
        if explained is not None and explained.sig.failure_class is FailureClass.BACKEND:
            asked_from = explained.sig.asked_from
            asked = requested[asked_from] if asked_from else None
            if asked is None and explained.asked:
                asked = names.moe_flag(explained.asked) or explained.asked.lower()
            if asked is None and asked_from == "moe_backend":
                line = lines[explained.index].message
                asked = next((flag for shown, flag in names.moe_display if shown in line), None)

    signature_context: dict[str, SignatureContext] = {}
    for h in hits:
        ev[f"signature:{h.sig.id}"] = (
            cause if h.sig.on == "unclassified-death" and cause else lines[h.index].message
        )
        # only the keys that apply are set (and stored)
        ctx: dict[str, Any] = {"line": lines[h.index].number, "phase": h.phase or ix.phase(h.index)}
        if h.sig.on == "traceback-cut" and (cut := cut_traceback(ix)) is not None:
            ctx["process"], ctx["frames"] = cut.process, cut.frames
        if h.sig.severity == "fatal":
            ctx["op"] = h.op or op_near(ix, h.index)
        if h.asked:
            ctx["asked"] = h.asked
        signature_context[h.sig.id] = SignatureContext(**ctx)
    return FailureFacts(
        signatures=tuple(h.sig.id for h in hits), fatal=fatal, failure_class=failure_class,
        root_cause=cause, root_cause_line=cause_line, failure_phase=phase, failure_op=op,
        asked=asked, signature_context=signature_context, failure_signature=named,
    )
