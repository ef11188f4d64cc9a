"""Verdicts: does what the log proves match what the cell asked for?

A request the log does not confirm is a failure, never a silent pass ("asking is not getting":
the kernel-couple study in matrix/rtx-pro-6000.toml). Each verdict quotes the log lines it rests on.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

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
    return tuple(x for x in [fp.root_cause] if x)


def failure_summary(fp: Fingerprint) -> str:
    """One line: class, what was asked, where, and the root-cause line."""
    where = ", ".join(
        x
        for x in (
            f"asked {fp.asked}" if fp.asked else "",
            f"during {fp.failure_phase}" if fp.failure_phase else "",
            f"in {fp.failure_op}" if fp.failure_op else "",
        )
        if x
    )
    head = f"engine died: {fp.failure_class or 'unclassified'}"
    # the name says more than the class when no table signature explains the death
    if fp.failure_signature and (fp.failure_class or "unclassified") == "unclassified":
        head += f" [{fp.failure_signature}]"
    if where:
        head += f" ({where})"
    line = f" at line {fp.root_cause_line}" if fp.root_cause_line else ""
    return f"{head}; root cause{line}: {fp.root_cause or 'not in the log'}"
