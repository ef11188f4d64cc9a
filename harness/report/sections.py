"""The report as a list of sections of plain table text, shared by the Markdown and HTML writers.

Each table cell carries a tone (bad, warn, good or none) that each writer shows its own way:
Markdown marks it with a sign and bold, HTML with a colour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from harness.matrix.model import NOISE_FLOOR
from harness.report.data import Cell, Report, Stat, memory_judged
from harness.results.memwatch import LEAK_GIB_PER_H, MIN_R2, MIN_SAMPLES, MIN_WINDOW_S
from harness.results.model import Status, VerdictStatus

BAD, WARN, GOOD, PLAIN = "bad", "warn", "good", ""
# "error" is the tool failing, not the stack: it reads as a warning, with its own section.
# Every status a report cell has (a Status, or "not run" for a cell no result was written for).
_STATUS_TONE = {s.value: BAD for s in Status} | {
    "pass": GOOD, "skipped": PLAIN, "not run": WARN, "error": WARN}
# The run's verdict on an NVFP4/FP8 pair; None: no verdict recorded (no rule, no figures).
_PAIR_TONE: dict[VerdictStatus | None, str] = {
    VerdictStatus.PASS: GOOD, VerdictStatus.FAIL: BAD, VerdictStatus.WARN: WARN, None: WARN}
# A request the log does not confirm fails like a contradicted one ("asking is not getting");
# one no verdict judged is shown as asked, with what the log says, as a warning.
_KERNEL_TONE = {"mismatch": BAD, "unconfirmed": BAD, "ok": GOOD, "auto": PLAIN, "unjudged": WARN}
_SHOW_TEXT = ("mismatch", "unconfirmed", "unjudged")


# The figures a section can show: html.render is given every one (None: nothing to draw).
FigureKey = Literal["decode", "fp8_vs_nvfp4", "roofline"]


@dataclass(frozen=True)
class Td:
    text: str
    tone: str = PLAIN


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    notes: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    rows: tuple[tuple[Td, ...], ...] = ()
    figure: FigureKey | None = None  # drawn in HTML only
    items: tuple[Td, ...] = field(default=())  # a list under the table


def num(v: float | int | None, digits: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def stat(s: Stat | None) -> str:
    if s is None:
        return "n/a"
    if s.repeats < 2:
        return f"{s.value:.1f}"
    return f"{s.value:.1f} ({s.lo:.1f}-{s.hi:.1f}, n={s.repeats})"


def _status_tone(status: str) -> str:
    return _STATUS_TONE[status]


def _overview(r: Report) -> Section:
    counts = ", ".join(f"{s}: {n}" for s, n in r.status_counts().items()) or "no cells"
    rows = tuple(
        (
            Td(c.id),
            Td(c.status, _status_tone(c.status)),
            Td("; ".join(c.reasons) or "-"),
            Td(", ".join(c.signatures) or "-", WARN if c.signatures else PLAIN),
            Td(num(c.total_s)),
        )
        for c in r.cells
    )
    return Section(
        "status",
        "Status overview",
        (f"{len(r.cells)} cells: {counts}.",),
        ("cell", "status", "reasons", "log signatures", "total s"),
        rows,
    )


def _errors(r: Report) -> Section | None:
    """Cells where the tool itself raised: its bug (or the host's), not the stack's."""
    failed = [c for c in r.cells if c.error]
    if not failed:
        return None
    rows = tuple((Td(c.id), Td(c.error or "", WARN), Td(" | ".join(c.traceback[-3:]) or "-"))
                 for c in failed)
    return Section(
        "errors",
        "Tool errors",
        (f"{len(failed)} cell(s) ended as 'error': the harness raised inside the cell and the run "
         "went on. This says nothing about the stack; the full traceback is in the cell's JSON.",),
        ("cell", "error", "last traceback lines"),
        rows,
    )


def _causes(r: Report) -> Section | None:
    """Cells whose server died: the cause in words and the log line that shows it."""
    died = [c for c in r.cells if c.cause]
    if not died:
        return None
    rows = tuple((Td(c.id), Td(c.cause or "", WARN), Td(c.cause_line or "-")) for c in died)
    return Section(
        "causes",
        "Why the server died",
        (f"{len(died)} cell(s) with a death in their server log: the cause as a class of "
         "docs/log-catalog.md, and the log line it rests on. \"cause not in this excerpt\": the "
         "log holds only the death (a cut traceback, a secondary process's message).",),
        ("cell", "cause", "evidence"),
        rows,
    )


def _kernels(r: Report) -> Section:
    cols = ("moe", "linear", "attention", "cudagraph")
    rows, items = [], []
    for c in r.cells:
        row = [Td(c.id)]
        for col in cols:
            k = c.kernels[col]
            text = k.text if k.state in _SHOW_TEXT else (k.got or "n/a")
            row.append(Td(text, _KERNEL_TONE[k.state]))
            if k.state in ("mismatch", "unconfirmed"):
                items.append(Td(f"{c.id}: {col}: {k.text}", BAD))
        skipped = c.autotuner not in ("none", "n/a")
        row += [Td(num(c.kv_cache_tokens)), Td(c.autotuner, WARN if skipped else PLAIN)]
        rows.append(tuple(row))
    return Section(
        "kernels",
        "Kernel selection (requested vs what the log shows)",
        (
            "Asking is not getting: a column shows what the server log proves was selected; a "
            "request the log contradicts reads 'asked X, got Y'. Every mark comes from the "
            "verdicts the run recorded; a request no verdict judged says so.",
        ),
        (
            "cell",
            "MoE backend",
            "linear kernels",
            "attention",
            "CUDA graphs",
            "KV cache tokens",
            "autotuner skips",
        ),
        tuple(rows),
        items=tuple(items),
    )


def _decode(r: Report) -> Section:
    rows = tuple(
        (
            Td(c.id),
            Td(stat(c.per_stream_c1)),
            Td(f"c={c.top_concurrency}" if c.top_concurrency else "n/a"),
            Td(stat(c.aggregate)),
        )
        for c in r.cells
        if c.per_stream_c1 or c.aggregate
    )
    return Section(
        "decode",
        "Decode",
        ("tok/s; median over repeats, (min-max, n) where repeats exist.",)
        if rows
        else ("No cell has decode measurements.",),
        ("cell", "per stream at c=1", "highest concurrency", "aggregate"),
        rows,
        figure="decode",
    )


def _pairs(r: Report) -> Section:
    if r.min_ratio:
        rule = (f"NVFP4 decode >= {r.min_ratio:g} x FP8 at every concurrency both measured (per stream "
                f"at c=1, aggregate above), a shortfall inside the noise band "
                f"(±{r.bench.noise_floor or NOISE_FLOOR:.0%} or the repeats' spread) not counted")
    else:
        rule = "none set" if r.ratio_recorded else "not recorded in this run.json"
    rows = tuple(
        (
            Td(p.stack),
            Td(p.config),
            Td(p.family),
            Td(stat(p.fp8.per_stream_c1)),
            Td(stat(p.nvfp4.per_stream_c1)),
            Td("n/a" if p.ratio is None else f"{p.ratio:.2f}x"),
            Td("n/a" if p.aggregate_ratio is None else f"{p.aggregate_ratio:.2f}x"),
            Td(p.verdict, _PAIR_TONE[p.verdict_status]),
        )
        for p in r.pairs
    )
    notes: tuple[str, ...] = (f"Rule (run.json matrix.expect.nvfp4_over_fp8_min_ratio): {rule}.",)
    if not rows:
        notes += ("No NVFP4 cell of this run was paired with an FP8 cell (the matrix's [models] family "
                  "or compare_with says which compare).",)
    return Section(
        "fp8-nvfp4",
        "FP8 vs NVFP4",
        notes,
        (
            "stack",
            "config",
            "models",
            "FP8 tok/s c=1",
            "NVFP4 tok/s c=1",
            "ratio",
            "aggregate ratio",
            "verdict",
        ),
        rows,
        figure="fp8_vs_nvfp4",
    )


def _roofline(r: Report) -> Section:
    bw = (
        f"{r.bandwidth_gbs:g} GB/s" if r.bandwidth_gbs else "n/a (no matrix.hardware.bandwidth_gbs)"
    )
    rows = tuple(
        (
            Td(c.id),
            Td(pct(c.efficiency_c1)),
            Td(
                f"{pct(c.efficiency_top)} at c={c.top_concurrency}"
                if c.efficiency_top is not None
                else "n/a"
            ),
            Td(c.roofline_note, WARN if c.roofline_note.startswith("n/a") else PLAIN),
        )
        for c in r.cells
        if c.per_stream_c1 or c.aggregate
    )
    return Section(
        "roofline",
        "Roofline efficiency",
        (
            f"(active params x bytes/param x tok/s) / bandwidth, {r.hardware} at {bw}. Weight "
            "reads only, so an upper bound; at concurrency c one weight read serves c streams.",
        ),
        ("cell", "c=1", "highest concurrency", "basis"),
        rows,
        figure="roofline",
    )


def _why_no_prefill(r: Report) -> str:
    asked = r.bench.prefill
    if asked is False:
        return ("No cell measured prefill: the run's bench config asks for none "
                "(run.json matrix.bench.prefill = false; set [bench] prefill = true to measure it).")
    if asked is None:
        return "No cell measured prefill: this run.json does not record whether it was asked for (matrix.bench.prefill)."
    return ("No cell measured prefill although the bench config asks for it (matrix.bench.prefill = true): "
            "no cell reached the prefill step; each cell's status and reasons say why.")


def _prefill(r: Report) -> Section:
    measured = [c for c in r.cells if c.prefill_tok_s is not None or c.prefix_hit_rate is not None]
    rows = tuple(
        (
            Td(c.id),
            Td(num(c.prefill_tok_s)),
            Td(num(c.prefill_prompt_tokens)),
            Td(num(c.cold_ttft_ms)),
            Td(pct(c.prefix_hit_rate)),
            Td(num(c.warm_ttft_ms)),
        )
        for c in measured
    )
    return Section(
        "prefill",
        "Prefill and prefix cache",
        () if rows else (_why_no_prefill(r),),
        (
            "cell",
            "prefill tok/s",
            "prompt tokens",
            "cold TTFT ms",
            "prefix-cache hit rate",
            "warm TTFT ms",
        ),
        rows,
    )


def _memory(r: Report) -> Section:
    def leak(c: Cell) -> Td:
        if c.leak is None:
            return Td("n/a")
        if c.leak:
            return Td("LEAK", BAD)
        return Td("no", GOOD) if memory_judged(c.memory_note) else Td("not judged", WARN)

    rows = tuple((Td(c.id), leak(c), Td(c.memory_note)) for c in r.cells if c.leak is not None)
    rule = (f"Slopes are least-squares fits over the samples taken after the server was ready: "
            f"'host free' is MemAvailable (a rise is memory given back, a leak shows as a fall), "
            f"'gpu used' is the GPU's used memory. LEAK: MemAvailable falls faster than "
            f"{LEAK_GIB_PER_H:g} GiB/h with r² >= {MIN_R2}, over at least {MIN_SAMPLES} samples and "
            f"{MIN_WINDOW_S:.0f} s (`harness run --soak SECONDS`); a shorter watch is 'not judged', "
            f"whatever its slope: a few seconds of start-up traffic extrapolated to an hour mean nothing.")
    return Section(
        "memory",
        "Memory watch",
        (rule,) if rows else ("No cell was memory-watched.",),
        ("cell", "leak", "slopes / reason"),
        rows,
    )


def _builds(r: Report) -> Section:
    rows = tuple(
        (
            Td(b.stack),
            Td(b.status, GOOD if b.status in ("built", "reused", "local", "pass", "ok", "cached") else BAD),
            Td(b.image),
            Td(b.compile),
            Td(
                b.audit_status, {"pass": GOOD, "fail": BAD, "warn": WARN}.get(b.audit_status, PLAIN)
            ),
            Td("; ".join(b.audit_lines) or "-"),
        )
        for b in r.builds
    )
    return Section(
        "builds",
        "Builds and binary audit",
        () if rows else ("No builds/*.json in this run.",),
        ("stack", "build", "image", "wall time, compile cache", "audit", "audit verdicts per target"),
        rows,
    )


def _spec(r: Report) -> Section | None:
    rows = tuple((Td(c.id), Td(c.spec)) for c in r.cells if c.spec)
    if not rows:
        return None
    return Section(
        "spec",
        "Speculative decoding",
        ("From the server log: the method and number of speculative tokens it was started with, "
         "the acceptance rate of its last `SpecDecoding metrics` line, overall and per position, "
         "and the drafter's own MoE kernel (kept apart from the main model's).",),
        ("cell", "speculative decoding"),
        rows,
    )


def sections(r: Report) -> list[Section]:
    errors = _errors(r)
    causes = _causes(r)
    spec = _spec(r)
    return [
        _overview(r),
        *([errors] if errors else []),
        *([causes] if causes else []),
        _kernels(r),
        *([spec] if spec else []),
        _decode(r),
        _pairs(r),
        _roofline(r),
        _prefill(r),
        _memory(r),
        _builds(r),
    ]


def header(r: Report) -> list[tuple[str, str]]:
    bw = f" ({r.bandwidth_gbs:g} GB/s)" if r.bandwidth_gbs else ""
    return [
        ("run", r.run_id),
        ("matrix", r.matrix_name),
        ("hardware", r.hardware + bw),
        *([("GPU found", r.gpu)] if r.gpu else []),
        ("status", r.run_status + (f" ({r.note})" if r.note else "")),
        ("started", r.started_at),
        ("finished", r.finished_at),
        ("harness", r.tool_version),
    ]
