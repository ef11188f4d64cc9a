"""`fingerprint(text)`: what vLLM really did, read from its own log.

A pure function of the text: no files, no clock, no environment. Every fact it reports keeps the
log line that proved it (`evidence`), so a verdict or a bug report can quote it.

The log is walked once; each line that carries one of the readers' words goes to every line
reader of readers.py (kernels, drafter, CUDA graphs, KV cache, load, autotuner, request, spec
decode), each filling its own sub-model. The failure reader below reads the whole log at the end
(signatures, death, root cause: failure.py and harness/data/failures.toml, signatures.toml). The
`Fingerprint` is the union of the sub-models' fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.fingerprint.failure import (
    QUIET_LEVELS,
    Indexed,
    RootCause,
    cut_traceback,
    died,
    op_near,
    root_cause,
)
from harness.fingerprint.lines import LogLine, split_lines
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.readers import (
    AutotunerReader,
    Context,
    DrafterReader,
    GraphReader,
    KernelReader,
    KVCacheReader,
    LoadReader,
    Reader,
    RequestReader,
    SpecDecodeReader,
)
from harness.fingerprint.tables import Signature, kernel_names, signatures


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
        hit = _Hit(sig, i, asked, phase, op)
        break
    else:
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


@cache
def _multiline(rx: re.Pattern[str]) -> re.Pattern[str]:
    """The table regex for a search over the joined text (^ and $ per line)."""
    return re.compile(rx.pattern, rx.flags | re.MULTILINE)


_FALLBACK_ON = ("unclassified-death", "traceback-cut", "engine-died")


def _name_failure(
    ix: Indexed,
    explained: _Hit | None,
    root: RootCause | None,
    death: int | None,
    fallback: dict[str, Signature],
    phase: str | None,
    op: str | None,
) -> tuple[str | None, _Hit | None]:
    """(the failure's name, the fallback signature hit to add when no table signature explains
    it). A traceback the log ends inside wins over an earlier exception: that exception did not
    kill the process whose traceback was being printed."""
    if explained is not None:
        return explained.sig.id, None
    cut = cut_traceback(ix)
    if cut is not None and (root is None or root.index < cut.last) and "traceback-cut" in fallback:
        return "traceback-cut", _Hit(fallback["traceback-cut"], cut.index, None, ix.phase(cut.index),
                                     op_near(ix, len(ix.lines) - 1))
    if root is not None:
        sig = fallback.get("unclassified-death")
        return f"exception:{root.type}", _Hit(sig, root.index, None, phase, op) if sig else None
    if death is not None:
        sig = fallback.get("engine-died")
        return "engine-died", _Hit(sig, death, None, phase, op) if sig else None
    return None, None


def _classify(hits: list[_Hit], root: RootCause | None, ix: Indexed) -> tuple[_Hit | None, str]:
    """The fatal signature that explains the death, and its class.

    First (in table order, specific before generic) a signature whose pattern or required
    pattern matches the root-cause line; then the earliest fatal hit in the log."""
    fatal = [h for h in hits if h.sig.severity == "fatal" and h.sig.failure_class]
    if root is not None:
        for h in fatal:
            if h.index == root.index or any(
                r.search(root.line) for r in (h.sig.pattern, *h.sig.requires)
            ):
                return h, h.sig.failure_class or "unclassified"
    if fatal:
        h = min(fatal, key=lambda h: h.index)
        return h, h.sig.failure_class or "unclassified"
    return None, "unclassified"


class FailureFacts(BaseModel):
    """How the engine died, when it did, and every signature the log shows."""

    model_config = ConfigDict(frozen=True)
    signatures: tuple[str, ...] = ()
    fatal: bool = False
    failure_class: str | None = None
    root_cause: str | None = None
    root_cause_line: int | None = None
    failure_phase: str | None = None
    failure_op: str | None = None
    asked: str | None = None
    signature_context: dict[str, dict[str, Any]] = {}
    failure_signature: str | None = None


def read_failure(lines: list[LogLine], requested: dict[str, str | None], cx: Context,
                 process_ended: bool, hung: bool = False) -> FailureFacts:
    """Signatures with their context, then the death, its root cause and its name."""
    names, ev = cx.names, cx.evidence
    ix = Indexed(lines)
    death = died(ix)
    root = root_cause(ix)
    hits: list[_Hit] = []
    fallback: dict[str, Signature] = {}
    for sig in signatures():
        if sig.on in _FALLBACK_ON:
            fallback[sig.on] = sig
        elif hit := _signature_hit(sig, ix, root, process_ended, hung):
            hits.append(hit)
    fatal = death is not None or any(h.sig.severity == "fatal" for h in hits)
    failure_class = cause = phase = op = asked = named = None
    cause_line: int | None = None
    if fatal:
        explained, failure_class = _classify(hits, root, ix)
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
        if explained is not None and explained.sig.failure_class == "backend-refused":
            asked_from = explained.sig.asked_from
            asked = requested.get(asked_from) if asked_from else None
            if asked is None and explained.asked:
                asked = names.moe_flag(explained.asked) or explained.asked.lower()
            if asked is None and asked_from == "moe_backend":
                line = lines[explained.index].message
                asked = next((flag for shown, flag in names.moe_display if shown in line), None)

    signature_context: dict[str, dict[str, Any]] = {}
    for h in hits:
        ev[f"signature:{h.sig.id}"] = (
            cause if h.sig.on == "unclassified-death" and cause else lines[h.index].message
        )
        ctx: dict[str, Any] = {"line": lines[h.index].number, "phase": h.phase or ix.phase(h.index)}
        if h.sig.on == "traceback-cut" and (cut := cut_traceback(ix)) is not None:
            ctx["process"], ctx["frames"] = cut.process, list(cut.frames)
        if h.sig.severity == "fatal":
            ctx["op"] = h.op or op_near(ix, h.index)
        if h.asked:
            ctx["asked"] = h.asked
        signature_context[h.sig.id] = ctx
    return FailureFacts(
        signatures=tuple(h.sig.id for h in hits), fatal=fatal, failure_class=failure_class,
        root_cause=cause, root_cause_line=cause_line, failure_phase=phase, failure_op=op,
        asked=asked, signature_context=signature_context, failure_signature=named,
    )


# DrafterReader first: it tells the others whether the line belongs to a drafter.
_LINE_READERS: tuple[type[Reader], ...] = (
    DrafterReader, KernelReader, GraphReader, KVCacheReader, LoadReader, AutotunerReader,
    RequestReader, SpecDecodeReader,
)


@cache
def _words() -> tuple[re.Pattern[str], tuple[str, ...]]:
    """The word filter: a line no reader has a word for is skipped (most of a long log is
    request and progress lines). Plain literals only: a branch that starts with a class makes
    `re` try it at every position, and this runs once per line."""
    words = dict.fromkeys(w for r in _LINE_READERS for w in r.words.split("|"))
    starts = tuple(dict.fromkeys(s for r in _LINE_READERS for s in r.raw_starts))
    return re.compile("|".join(words)), starts


def fingerprint(text: str, *, process_ended: bool = True, hung: bool = False) -> Fingerprint:
    """Read a vLLM log. `process_ended=False` when the server may still be running: then a log
    that stops during CUDA-graph capture says nothing yet. `hung=True` when the run's own
    quiet-period timer expired while the server was not ready: only then does a log that stops
    during capture read as a capture hang (a file alone reads as `ends-during-capture`)."""
    cx = Context(kernel_names())
    lines = split_lines(text)
    drafter, kernels, graphs, kv = DrafterReader(), KernelReader(), GraphReader(), KVCacheReader()
    load, autotuner, request, spec = LoadReader(), AutotunerReader(), RequestReader(), SpecDecodeReader()
    readers: tuple[Reader, ...] = (drafter, kernels, graphs, kv, load, autotuner, request, spec)  # _LINE_READERS
    interesting, raw_starts = _words()
    for ln in lines:
        msg = ln.message
        if not interesting.search(msg) and not ln.raw.startswith(raw_starts):
            continue
        for reader in readers:
            reader.read(ln, msg, cx)
    main = kernels.facts()
    asked = request.facts_for(main, cx.names)
    failure = read_failure(lines, asked.requested, cx, process_ended, hung)
    return Fingerprint(
        **dict(main), **dict(drafter.facts()), **dict(graphs.facts()), **dict(kv.facts()),
        **dict(load.facts()), **dict(autotuner.facts()), **dict(asked), **dict(spec.facts()),
        **dict(failure), evidence=cx.evidence,
    )
