"""Compare two runs cell by cell: what changed, and is it beyond the runs' own noise?

Built to gate a driver (or image) rollout: record a baseline, change one thing, re-run, compare.
A figure is called a gain or a loss only when it clears the noise band (`harness.bench.noise`:
the larger of the matrix's noise floor and the spread each side showed over its repeats).
What ran (kernel selections), what broke (status, failure signatures) and memory trend are
compared as facts: any change there is reported, and the ones that make things worse gate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from harness.bench.noise import classify
from harness.fingerprint.tables import signatures
from harness.hostenv import HostFingerprint
from harness.matrix.model import NOISE_FLOOR
from harness.redact import redact_text
from harness.results.model import STATUS_RANK, BenchRecord, CellResult, RunRecord, RunStatus
from harness.results.store import RunStore

Kind = Literal["regression", "gain", "change", "note"]
DEFAULT_FLOOR = NOISE_FLOOR
# Prefill is one cold measurement: no repeats to estimate its noise from, and on a busy
# client host two identical runs of the fake server differed by 5 %. Ask for 10 % before
# calling it; a repeated prefill probe in harness.bench would let the band come from data.
SINGLE_SAMPLE_FLOOR = 0.10
# Below this many milliseconds a TTFT difference is client-host scheduling, not the server.
TTFT_ABS_FLOOR_MS = 5.0
KERNEL_FIELDS = ("moe_backend", "linear_kernels", "attention_backend", "cudagraph_mode")
# (figure in a bench level, label, higher is better)
_LEVEL_FIGURES = (
    ("per_stream_tok_s", "decode per-stream tok/s", True),
    ("aggregate_tok_s", "decode aggregate tok/s", True),
    ("ttft_ms_p50", "TTFT p50 ms", False),
)


# what one side of a finding was: a status or a kernel name, the kernels, a figure, a flag
Value = str | int | float | bool | list[str] | None


@dataclass(frozen=True)
class Finding:
    cell: str
    kind: Kind
    what: str
    message: str
    baseline: Value = None
    candidate: Value = None
    delta: float | None = None  # relative change, for figures
    band: float | None = None  # the band it had to clear


@dataclass(frozen=True)
class RunSide:
    run_id: str
    path: str
    status: RunStatus | None
    host: HostFingerprint = field(default_factory=HostFingerprint)

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "path": self.path, "status": self.status.value if self.status else None,
                "host": self.host.model_dump(mode="json")}


@dataclass(frozen=True)
class Comparison:
    baseline: RunSide
    candidate: RunSide
    floor: float
    compared: tuple[str, ...]
    only_baseline: tuple[str, ...]
    only_candidate: tuple[str, ...]
    findings: tuple[Finding, ...]
    figures: tuple[dict, ...]  # every compared figure, for the table

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "regression"]

    def of(self, kind: Kind) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def to_json(self) -> dict:
        return {
            "format": 1,
            "baseline": self.baseline.to_json(),
            "candidate": self.candidate.to_json(),
            "noise_floor": self.floor,
            "compared": list(self.compared),
            "only_baseline": list(self.only_baseline),
            "only_candidate": list(self.only_candidate),
            "regressions": len(self.regressions),
            "findings": [asdict(f) for f in self.findings],
            "figures": list(self.figures),
        }


def _floor(run: RunRecord) -> float | None:
    return run.matrix.noise_floor


def _side(store: RunStore) -> RunSide:
    return RunSide(store.run_id, str(store.dir), store.run.status, store.run.host)


def _error(cell: CellResult) -> str:
    return f" ({cell.error.type}: {cell.error.message})" if cell.error else ""


def _status(cid: str, b: CellResult, c: CellResult) -> list[Finding]:
    bs, cs = b.status, c.status
    if bs == cs:
        return []
    if bs not in STATUS_RANK or cs not in STATUS_RANK:  # skipped, error: nothing about the stack
        why = _error(c) or _error(b)
        return [Finding(cid, "note", "status", f"status {bs} -> {cs} (not comparable){why}",
                        bs.value, cs.value)]
    why = "; ".join(c.reasons) or "-"
    rb, rc = STATUS_RANK[bs], STATUS_RANK[cs]
    kind: Kind = "regression" if rc > rb else "gain" if rc < rb else "change"
    return [Finding(cid, kind, "status", f"status {bs} -> {cs} ({why})", bs.value, cs.value)]


def _kernels(cid: str, b: CellResult, c: CellResult, gate: bool) -> list[Finding]:
    fb, fc = b.fingerprint, c.fingerprint
    if fb is None or fc is None:
        return []
    out = []
    for name in KERNEL_FIELDS:
        vb, vc = getattr(fb, name), getattr(fc, name)
        if name == "linear_kernels":
            vb, vc = sorted(vb) or None, sorted(vc) or None
        # A side that never got as far as selecting proves nothing about the selection.
        if vb is None or vc is None or vb == vc:
            continue
        out.append(
            Finding(
                cid,
                "regression" if gate else "change",
                name,
                f"{name} changed: {_cell(vb)} -> {_cell(vc)} (different kernels ran)",
                vb,
                vc,
            )
        )
    return out


def _signatures(cid: str, b: CellResult, c: CellResult) -> list[Finding]:
    fatal_ids = {s.id for s in signatures() if s.severity == "fatal"}
    sb = set(b.fingerprint.signatures if b.fingerprint else ())
    sc = set(c.fingerprint.signatures if c.fingerprint else ())
    out = []
    for sig in sorted(sc - sb):
        fatal = sig in fatal_ids
        out.append(
            Finding(
                cid,
                "regression" if fatal else "change",
                f"signature:{sig}",
                f"new {'fatal ' if fatal else ''}failure signature {sig}",
                None,
                sig,
            )
        )
    for sig in sorted(sb - sc):
        fatal = sig in fatal_ids
        out.append(
            Finding(
                cid,
                "gain" if fatal else "change",
                f"signature:{sig}",
                f"signature {sig} gone",
                sig,
                None,
            )
        )
    return out


def _figure(cid, what, vb, vc, floor, higher, abs_floor=0.0):
    """One compared figure: (row for the table, finding or None)."""
    change = classify(vb, vc, floor=floor, higher_is_better=higher)
    kind = change.kind
    if kind != "noise" and abs(change.candidate - change.baseline) < abs_floor:
        kind = "noise"
    row = {
        "cell": cid,
        "what": what,
        "baseline": change.baseline,
        "candidate": change.candidate,
        "delta": change.delta,
        "band": change.band,
        "kind": kind,
        "baseline_samples": list(vb),
        "candidate_samples": list(vc),
    }
    if kind == "noise":
        return row, None
    verdict: Kind = "gain" if kind == "gain" else "regression"
    msg = (
        f"{what} {change.baseline:.4g} -> {change.candidate:.4g} ({change.delta:+.1%}, "
        f"beyond the ±{change.band:.1%} noise band)"
    )
    return row, Finding(
        cid, verdict, what, msg, change.baseline, change.candidate, change.delta, change.band
    )


def _bench(cid: str, b: CellResult, c: CellResult, floor: float) -> tuple[list[dict], list[Finding]]:
    bb, bc = b.bench, c.bench
    if bb is None or bc is None:
        return [], []
    return _levels(cid, bb, bc, floor)


def _levels(cid: str, bb: BenchRecord, bc: BenchRecord, floor: float) -> tuple[list[dict], list[Finding]]:
    rows, found = [], []
    for lb in bb.levels:
        conc = lb.concurrency
        lc = bc.level(conc)
        if lc is None:
            continue
        for key, label, higher in _LEVEL_FIGURES:
            vb, vc = lb.values(key), lc.values(key)
            if not vb or not vc or not _nonzero(vb):
                continue
            abs_floor = TTFT_ABS_FLOOR_MS if key.startswith("ttft") else 0.0
            row, f = _figure(cid, f"{label} @c={conc}", vb, vc, floor, higher, abs_floor)
            rows.append(row)
            if f:
                found.append(f)
        fb, fc = lb.failed, lc.failed
        if fc > fb:
            found.append(
                Finding(
                    cid,
                    "regression",
                    f"failed requests @c={conc}",
                    f"failed requests @c={conc}: {fb} -> {fc}",
                    fb,
                    fc,
                )
            )
        if lc.degenerate and not lb.degenerate:
            found.append(
                Finding(
                    cid,
                    "regression",
                    f"degenerate output @c={conc}",
                    f"output became degenerate @c={conc} (4-gram diversity "
                    f"{lc.diversity_min}): numerics broke",
                    False,
                    True,
                )
            )
    pb, pc = bb.prefill_tok_s, bc.prefill_tok_s
    if pb and pc:
        row, f = _figure(cid, "prefill tok/s", [pb], [pc], max(floor, SINGLE_SAMPLE_FLOOR), True)
        rows.append(row)
        if f:
            found.append(f)
    return rows, found


def _nonzero(values: list[float]) -> bool:
    return any(v != 0 for v in values)


def _memory(cid: str, b: CellResult, c: CellResult) -> list[Finding]:
    mb, mc = b.memory, c.memory
    if mc is None:
        return []
    was_leaking = mb is not None and mb.leak
    slopes = (mb.host_slope_gib_per_h if mb else None, mc.host_slope_gib_per_h)
    if mc.leak and not was_leaking:
        return [Finding(cid, "regression", "memory", f"memory leak flagged: {mc.reason}", *slopes)]
    if was_leaking and not mc.leak:
        return [Finding(cid, "gain", "memory", f"memory leak gone: {mc.reason}", *slopes)]
    return []


def _formats(cid: str, b: CellResult, c: CellResult) -> list[Finding]:
    """The NVFP4-vs-FP8 verdict on a cell, as each run's judge recorded it (its typed comparison;
    a v2 run's verdict has none, and only its pass/fail is compared)."""
    vb, vc = b.format_comparison, c.format_comparison
    if b.compare_with != c.compare_with:
        return [Finding(cid, "note", "nvfp4_vs_fp8", f"judged against {c.compare_with or 'no FP8 cell'}, "
                        f"was {b.compare_with or 'no FP8 cell'} (not comparable)",
                        b.compare_with, c.compare_with)]
    if vb is None or vc is None or vb.lost == vc.lost:
        return []
    lb, lc = vb.deciding_level, vc.deciding_level
    if vc.lost:
        return [Finding(cid, "regression", "nvfp4_vs_fp8",
                        f"NVFP4 vs FP8 now fails at c={vc.deciding}: {lc.ratio:.3f}x "
                        f"(required {vc.min_ratio:g}x, band ±{lc.band:.1%})", lb.ratio, lc.ratio)]
    return [Finding(cid, "gain", "nvfp4_vs_fp8",
                    f"NVFP4 vs FP8 passes now: it failed at c={vb.deciding} ({lb.ratio:.3f}x)",
                    lb.ratio, lc.ratio)]


def compare_runs(
    baseline: RunStore,
    candidate: RunStore,
    *,
    floor: float | None = None,
    kernel_changes_regress: bool = True,
) -> Comparison:
    """Match cells by id and judge every difference. `floor` overrides the runs' noise floor
    (default: the larger of the two matrices' `bench.noise_floor`, else 2 %)."""
    if floor is None:
        floors = [f for f in (_floor(baseline.run), _floor(candidate.run)) if f is not None]
        floor = max(floors) if floors else DEFAULT_FLOOR
    cells_b = {c.id: c for c in baseline.cells()}
    cells_c = {c.id: c for c in candidate.cells()}
    compared = [cid for cid in cells_b if cid in cells_c]
    findings: list[Finding] = []
    figures: list[dict] = []
    for cid in compared:
        b, c = cells_b[cid], cells_c[cid]
        findings += _status(cid, b, c)
        findings += _kernels(cid, b, c, kernel_changes_regress)
        findings += _signatures(cid, b, c)
        findings += _formats(cid, b, c)
        rows, found = _bench(cid, b, c, floor)
        figures += rows
        findings += found
        findings += _memory(cid, b, c)
    return Comparison(
        baseline=_side(baseline),
        candidate=_side(candidate),
        floor=floor,
        compared=tuple(compared),
        only_baseline=tuple(cid for cid in cells_b if cid not in cells_c),
        only_candidate=tuple(cid for cid in cells_c if cid not in cells_b),
        findings=tuple(findings),
        figures=tuple(figures),
    )


# -- Markdown ---------------------------------------------------------------------------------


def _cell(v: Value) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v).replace("|", "\\|")


def _host_row(label: str, vb: Any, vc: Any) -> str:
    vb, vc = _cell(vb), _cell(vc)
    mark = " **(changed)**" if vb != vc else ""
    return f"| {label} | {vb} | {vc}{mark} |"


def to_markdown(cmp: Comparison) -> str:
    b, c = cmp.baseline, cmp.candidate
    regs = cmp.regressions
    lines = [
        f"# Compare {b.run_id} -> {c.run_id}",
        "",
        f"**{len(regs)} regression(s)**, {len(cmp.of('gain'))} gain(s), "
        f"{len(cmp.of('change'))} other change(s) over {len(cmp.compared)} matched cell(s); "
        f"noise floor {cmp.floor:.1%} (a figure must also clear the spread of its own repeats).",
        "",
        "| | baseline | candidate |",
        "|---|---|---|",
        f"| run | `{b.run_id}` ({b.status}) | `{c.run_id}` ({c.status}) |",
        _host_row("GPU", *(h.first_gpu.name if h.first_gpu else None for h in (b.host, c.host))),
        _host_row("compute capability", *(h.first_gpu.cc if h.first_gpu else None for h in (b.host, c.host))),
        _host_row("driver", b.host.driver, c.host.driver),
        _host_row("CUDA driver", b.host.cuda_driver, c.host.cuda_driver),
        _host_row("kernel", b.host.kernel, c.host.kernel),
        _host_row("OS", b.host.os, c.host.os),
        "",
    ]
    sections: tuple[tuple[Kind, str], ...] = (
        ("regression", "Regressions"),
        ("gain", "Gains"),
        ("change", "Other changes"),
        ("note", "Notes"),
    )
    for kind, title in sections:
        items = cmp.of(kind)
        if not items:
            continue
        lines += [
            f"## {title}",
            "",
            "| cell | what | baseline | candidate | detail |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{f.cell}` | {f.what} | {_cell(f.baseline)} | {_cell(f.candidate)} | "
            f"{_cell(f.message)} |"
            for f in items
        ]
        lines.append("")
    if cmp.only_baseline or cmp.only_candidate:
        lines += ["## Cells in one run only", ""]
        lines += [
            f"- `{cid}`: baseline only (not run, or not finished, in the candidate)"
            for cid in cmp.only_baseline
        ]
        lines += [f"- `{cid}`: candidate only" for cid in cmp.only_candidate]
        lines.append("")
    if cmp.figures:
        lines += [
            "## Figures",
            "",
            "| cell | figure | baseline | candidate | change | band | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in cmp.figures:
            lines.append(
                f"| `{r['cell']}` | {r['what']} | {r['baseline']:.4g} | {r['candidate']:.4g} | "
                f"{r['delta']:+.1%} | ±{r['band']:.1%} | {r['kind']} |"
            )
        lines.append("")
    if not regs:
        lines.append(
            "No regression beyond noise: the candidate may be rolled out on this evidence."
        )
    else:
        lines.append(
            "The candidate regressed: do not roll it out before each regression is explained."
        )
    # A second line of defence: nothing here should hold a secret, but masking costs nothing.
    return redact_text("\n".join(lines) + "\n")
