"""Verdicts: does what the log proves match what the cell asked for?

A request the log does not confirm is a failure, never a silent pass ("asking is not getting":
the kernel-couple study in matrix/rtx-pro-6000.toml). Each verdict quotes the log lines it rests on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.fingerprint.causes import NOT_IN_EXCERPT, FailureClass
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.tables import kernel_names, signatures

Status = Literal["pass", "fail", "warn"]


class VerdictStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"


class Verdict(BaseModel):
    """One check on one cell, from its log here or from the judge (harness/stages/judge.py);
    stored in the cell as it is. `asked`/`got` are set for requested-vs-selected checks, so a
    report can show both columns without judging again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    check: str = Field(description="what was checked: moe_backend, signature:<id>, expect.<key>, ...")
    status: VerdictStatus
    message: str
    lines: tuple[str, ...] = Field(default=(), description="the log lines the verdict rests on")
    asked: str | None = None
    got: str | None = None

    def __init__(self, *args: Any, **fields: Any) -> None:
        # Verdict(check, status, message, lines) reads best in the rules below
        super().__init__(**dict(zip(("check", "status", "message", "lines"), args, strict=False)), **fields)

    @property
    def failed(self) -> bool:
        return self.status is VerdictStatus.FAIL

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "status": self.status.value,
            "message": self.message,
            "lines": list(self.lines),
        }


# The checks that compare a requested kernel with the one the log shows.
SELECTION_CHECKS = ("moe_backend", "linear_backend", "attention_backend")


def _requested(value: str | None) -> str | None:
    return None if value is None or value.lower() == "auto" else value


def _moe(fp: Fingerprint, asked: str | None, require: bool) -> Verdict | None:
    line = fp.proof("moe_backend")
    if asked is None:
        if fp.moe_backend is None:
            return None
        return Verdict("moe_backend", "pass", f"auto: got {fp.moe_backend}", line)
    if fp.moe_backend is None:
        status: Status = "fail" if require else "warn"
        return Verdict(
            "moe_backend",
            status,
            f"asked {asked}, but the log has no MoE backend selection line",
            (),
        )
    expected = kernel_names().moe_expected(asked, fp.moe_quant)
    if expected is None:
        return Verdict(
            "moe_backend",
            "fail",
            f"asked {asked}, got {fp.moe_backend} ({asked!r} is not in harness/data/kernel_names.toml "
            f"for {fp.moe_quant or 'this'} MoE: add it if vLLM accepts it)",
            line,
        )
    if fp.moe_backend not in expected:
        return Verdict("moe_backend", "fail", f"asked {asked}, got {fp.moe_backend}", line)
    return Verdict("moe_backend", "pass", f"asked {asked}, got {fp.moe_backend}", line)


def _linear(fp: Fingerprint, asked: str | None, require: bool) -> Verdict | None:
    lines = tuple(
        fp.evidence[f"linear:{k}"] for k in fp.linear_kernels if f"linear:{k}" in fp.evidence
    )
    got = ", ".join(fp.linear_kernels)
    if asked is None:
        return Verdict("linear_backend", "pass", f"auto: got {got}", lines) if got else None
    if not fp.linear_kernels:
        status: Status = "fail" if require else "warn"
        return Verdict(
            "linear_backend",
            status,
            f"asked {asked}, but the log has no linear kernel selection line",
            (),
        )
    expected = kernel_names().linear_expected(asked) or frozenset()
    wrong = [k for k in fp.linear_kernels if k not in expected]
    if wrong:
        return Verdict("linear_backend", "fail", f"asked {asked}, got {', '.join(wrong)}", lines)
    return Verdict("linear_backend", "pass", f"asked {asked}, got {got}", lines)


def _attention(fp: Fingerprint, asked: str | None, require: bool) -> Verdict | None:
    line = fp.proof("attention_backend")
    if asked is None:
        return (
            Verdict("attention_backend", "pass", f"auto: got {fp.attention_backend}", line)
            if fp.attention_backend
            else None
        )
    if fp.attention_backend is None:
        status: Status = "fail" if require else "warn"
        return Verdict(
            "attention_backend",
            status,
            f"asked {asked}, but the log has no attention backend line",
            (),
        )
    if asked.upper() != fp.attention_backend.upper():
        return Verdict(
            "attention_backend", "fail", f"asked {asked}, got {fp.attention_backend}", line
        )
    return Verdict("attention_backend", "pass", f"asked {asked}, got {fp.attention_backend}", line)


def verdicts(
    fp: Fingerprint,
    *,
    requested_moe: str | None,
    requested_linear: str | None,
    requested_attention: str | None,
    max_autotuner_skips: int = 0,
    allowed_signatures: Sequence[str] = (),
    require_selection: bool = True,
) -> list[Verdict]:
    """Judge one fingerprint against what the cell asked for. Order: selections, what the log
    itself says was asked, autotuner, known signatures."""
    asked = {
        "moe_backend": _requested(requested_moe),
        "linear_backend": _requested(requested_linear),
        "attention_backend": _requested(requested_attention),
    }
    out = [
        v
        for v in (
            _moe(fp, asked["moe_backend"], require_selection),
            _linear(fp, asked["linear_backend"], require_selection),
            _attention(fp, asked["attention_backend"], require_selection),
        )
        if v is not None
    ]

    # The log's own record of a request (non-default args, env vars) can disagree with what ran
    # even when the cell did not ask: that is the case a cell author most needs to see.
    cell_asked = {what for what, value in asked.items() if value is not None}
    for m in fp.mismatches:
        if m.what not in cell_asked:
            # where the log records the request (its args, else its env), then the selection line
            lines = (*(fp.proof("requested") or fp.proof("requested_env")), *fp.proof(m.what))
            out.append(Verdict(f"log:{m.what}", "fail", f"asked {m.asked}, got {m.got}", lines))

    for op, count in fp.autotuner_skipped:
        line = fp.proof(f"autotuner:{op}") or ("",)
        if count > max_autotuner_skips:
            out.append(
                Verdict(
                    f"autotuner:{op}",
                    "fail",
                    f"FlashInfer autotuner skipped {count} unsupported tactic(s) for {op} "
                    f"(limit {max_autotuner_skips}): kernels for this arch are missing",
                    line,
                )
            )
        else:
            out.append(
                Verdict(
                    f"autotuner:{op}",
                    "pass",
                    f"{count} skipped tactic(s) for {op}, within {max_autotuner_skips}",
                    line,
                )
            )

    by_id = {s.id: s for s in signatures()}
    allowed = set(allowed_signatures)
    for sig_id in fp.signatures:
        sig = by_id[sig_id]
        line = fp.proof(f"signature:{sig_id}") or ("",)
        status: Status = "fail" if sig.severity == "fatal" and sig_id not in allowed else "warn"
        note = " (allowed for this cell)" if sig_id in allowed else ""
        out.append(
            Verdict(
                f"signature:{sig_id}",
                status,
                f"{_context(fp, sig_id)}{sig.meaning} [{sig.tracker}: {sig.link}]{note}",
                line,
            )
        )

    # A death is a failure even when every fatal signature was allowed: say what died of what.
    if fp.fatal:
        fatal_ids = [s for s in fp.signatures if by_id[s].severity == "fatal"]
        status = "warn" if fatal_ids and all(s in allowed for s in fatal_ids) else "fail"
        out.append(Verdict("failure", status, failure_summary(fp), _cause_lines(fp)))
    return out


def _context(fp: Fingerprint, sig_id: str) -> str:
    ctx = fp.signature_context.get(sig_id)  # None: a record written before contexts were kept
    if ctx is None:
        return ""
    parts = [f"{k} {v}" for k, v in (("phase", ctx.phase), ("op", ctx.op), ("asked", ctx.asked)) if v]
    return f"({', '.join(parts)}) " if parts else ""


def _cause_lines(fp: Fingerprint) -> tuple[str, ...]:
    cause = cause_of(fp)
    return (cause.line,) if cause is not None and cause.line else ()


# Failure names that say what the death looked like, never what caused it: the log ends inside a
# traceback, only a death line shows, torch's CUDA hint survived without its error line.
_SHAPE_NAMES = frozenset({"traceback-cut", "engine-died", "cuda-error-async"})
NOT_IN_EXCERPT_WORDS = "cause not in this excerpt"


@dataclass(frozen=True)
class Cause:
    """Why a fatal log's engine died, as the report, `harness bug` and `harness fingerprint` say
    it: the class in words and the log line that shows it (`in_excerpt`), or, when the log does
    not hold the cause, "cause not in this excerpt" and the line that shows the death."""

    failure_class: FailureClass
    in_excerpt: bool
    line: str | None  # the evidence line (the cause's, else the death's)
    line_number: int | None
    name: str | None = None  # the failure's name (Fingerprint.failure_signature)

    @property
    def words(self) -> str:
        """The class in words; "cause not in this excerpt" (and the class when it says more than
        `other`) when the log does not hold the cause."""
        if self.in_excerpt:
            # `other` alone says nothing: the name (a signature id, `exception:<Type>`) does
            if self.failure_class is FailureClass.OTHER and self.name:
                return f"other ({self.name})"
            return self.failure_class.words
        if self.failure_class is FailureClass.OTHER:
            return NOT_IN_EXCERPT_WORDS
        return f"{NOT_IN_EXCERPT_WORDS} ({self.failure_class.words})"

    def evidence(self) -> str:
        """`line 12: <the cause's line>`, or `the log shows (line 12): <the death's line>`."""
        if not self.line:
            return "no line of the log shows it"
        if self.in_excerpt:
            return f"line {self.line_number}: {self.line}" if self.line_number else self.line
        at = f" (line {self.line_number})" if self.line_number else ""
        return f"the log shows{at}: {self.line}"

    def sentence(self) -> str:
        """The words and the evidence in one line."""
        return f"{self.words}; {self.evidence()}"


def cause_of(fp: Fingerprint) -> Cause | None:
    """The cause of a fatal log, None for a log that shows no death. A record written before the
    cause vocabulary reads too: its `unclassified` is `other`, and one written before `fatal` and
    `failure_class` were kept is read from its fatal signatures."""
    table = {s.id: s for s in signatures()}
    fatal_ids = [s for s in fp.signatures if s in table and table[s].severity == "fatal"]
    if not fp.fatal and not fatal_ids:
        return None
    name = fp.failure_signature or (fatal_ids[0] if fatal_ids else None)
    cls = fp.failure_class
    if cls is None and name in table and not table[name].refine:
        cls = table[name].failure_class
    cls = cls or FailureClass.OTHER
    in_excerpt = cls not in NOT_IN_EXCERPT and name not in _SHAPE_NAMES
    line, number = fp.root_cause, fp.root_cause_line
    # a table signature that names the cause quotes its own line (the root-cause line may be the
    # wrapper around it, or another process's)
    if in_excerpt and name and not name.startswith("exception:"):
        ctx = fp.signature_context.get(name)
        if (shown := fp.evidence.get(f"signature:{name}")) is not None:
            line, number = shown, ctx.line if ctx is not None else None
    return Cause(cls, in_excerpt, line, number, name)


def failure_summary(fp: Fingerprint) -> str:
    """One line: the cause in words (or "cause not in this excerpt"), the failure's name, what
    was asked, where, and the evidence line."""
    where = ", ".join(
        x
        for x in (
            f"asked {fp.asked}" if fp.asked else "",
            f"during {fp.failure_phase}" if fp.failure_phase else "",
            f"in {fp.failure_op}" if fp.failure_op else "",
        )
        if x
    )
    cause = cause_of(fp) or Cause(FailureClass.OTHER, False, None, None)
    name = f" [{fp.failure_signature}]" if fp.failure_signature else ""
    head = f"engine died: {cause.words}{name}"
    if where:
        head += f" ({where})"
    return f"{head}; {cause.evidence()}"
