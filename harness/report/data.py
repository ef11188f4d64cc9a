"""Read a run directory (typed records, harness.results.model) into frozen rows for the report.

The report judges nothing: kernel columns come from the verdicts the run recorded
(harness.stages.judge, with their asked/got) and the fingerprint's selected values; a kernel no
verdict judged shows what the log says. Roofline figures come from harness.bench.roofline.
Absent facts stay None and print as "n/a".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness.bench.roofline import roofline_efficiency
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.verdicts import cause_of
from harness.gpus import other_bandwidth
from harness.results.build import BuildKey, BuildOutcome, BuildStatus
from harness.results.model import (
    FORMAT_CHECK,
    BenchInfo,
    BenchLevel,
    CellResult,
    FormatComparison,
    MemoryRecord,
    RunRecord,
    Status,
    Verdict,
    VerdictStatus,
)
from harness.results.store import RunStore

STATUS_ORDER = (*(s.value for s in Status), "not run")


@dataclass(frozen=True)
class Stat:
    """A median with the min and max of its repeats (lo == hi == value when there is one)."""

    value: float
    lo: float
    hi: float
    repeats: int


@dataclass(frozen=True)
class Kernel:
    """One requested-vs-selected column. state: ok, mismatch, unconfirmed (a verdict failed or
    warned and the log shows no selection), unjudged (asked, but no verdict recorded) or auto."""

    asked: str | None
    got: str | None
    state: str
    text: str


@dataclass(frozen=True)
class Cell:
    id: str
    stack: str
    model: str
    config: str
    quantization: str
    status: str
    reasons: tuple[str, ...]
    kernels: dict[str, Kernel]  # keys: moe, linear, attention, cudagraph
    signatures: tuple[str, ...] = ()
    kv_cache_tokens: int | None = None
    autotuner: str = "n/a"  # "none", or "gemm2: 10" per op
    spec: str | None = None  # speculative decoding: method, tokens, acceptance, drafter MoE
    per_stream_c1: Stat | None = None
    aggregate: Stat | None = None  # at top_concurrency
    top_concurrency: int | None = None
    prefill_tok_s: float | None = None
    prefill_prompt_tokens: int | None = None
    cold_ttft_ms: float | None = None
    prefix_hit_rate: float | None = None
    warm_ttft_ms: float | None = None
    efficiency_c1: float | None = None
    efficiency_top: float | None = None
    roofline_note: str = "n/a"
    leak: bool | None = None
    memory_note: str = "not watched"
    total_s: float | None = None
    # the run's own FP8-vs-NVFP4 verdict on this (NVFP4) cell, noise band included
    format_verdict: Verdict | None = None
    comparison: FormatComparison | None = None  # its figures (results format v3)
    compare_with: str | None = None  # NVFP4: the FP8 cell the run paired it with
    error: str | None = None  # status "error": the tool raised inside the cell ("Type: message")
    traceback: tuple[str, ...] = ()
    # the server died: why, in words ("cause not in this excerpt" when its log does not hold it),
    # and the log line that shows it
    cause: str | None = None
    cause_line: str | None = None


@dataclass(frozen=True)
class Pair:
    """An NVFP4 cell and the FP8 cell the run judged it against (same stack and config)."""

    stack: str
    config: str
    family: str  # "<nvfp4 model> vs <fp8 model>"
    fp8: Cell
    nvfp4: Cell
    ratio: float | None  # nvfp4 / fp8, per-stream decode at c=1
    aggregate_ratio: float | None
    min_ratio: float | None
    verdict: str  # PASS, FAIL (at c=N), "no rule", "not judged ..." or "n/a (...)"
    verdict_status: VerdictStatus | None = None  # the run's verdict on the pair; None: none recorded


@dataclass(frozen=True)
class Build:
    stack: str
    status: BuildStatus
    image: str
    audit_status: str
    audit_lines: tuple[str, ...]
    compile: str = "-"  # the build's wall time and what the compile cache did


def compile_text(b: BuildOutcome) -> str:
    """`412 s; cache 117/118 hits (99.2 %), compile 95 s` for a build; '-' for a reuse."""
    if b.status != "built":
        return "-"
    parts = [f"{b.duration_s:.0f} s"]
    c = b.compile_cache
    if c is None:  # no compile steps (a wheel stack), or a record from before the cache
        pass
    elif c.off:
        parts.append(f"compile cache off: {c.off}")
    else:
        looked = c.hits + c.misses + c.uncacheable
        rate = f" ({c.hit_rate * 100:.1f} %)" if c.hit_rate is not None else ""
        parts.append(f"cache {c.hits}/{looked} hits{rate}")
        if c.seconds_compiling is not None:
            parts.append(f"compile {c.seconds_compiling:.0f} s")
    return "; ".join(parts)


@dataclass(frozen=True)
class Report:
    run_id: str
    matrix_name: str
    hardware: str
    bandwidth_gbs: float | None
    run_status: str
    started_at: str
    finished_at: str
    tool_version: str
    min_ratio: float | None
    ratio_recorded: bool  # False: run.json predates the rule or dropped it
    cells: tuple[Cell, ...]
    pairs: tuple[Pair, ...]
    builds: tuple[Build, ...]
    note: str | None = None  # why the run stopped early, when it did
    bench: BenchInfo = field(default_factory=BenchInfo)  # run.json matrix.bench: says why a section is empty
    gpu: str | None = None  # the card the run found (run.json host), and whether it is the matrix's

    def status_counts(self) -> dict[str, int]:
        counts = Counter(c.status for c in self.cells)
        # STATUS_ORDER first, any other status after it
        return {s: counts[s] for s in dict.fromkeys((*STATUS_ORDER, *counts)) if counts[s]}


def read_run_dir(run_dir: Path) -> tuple[RunRecord, list[CellResult], dict[BuildKey, BuildOutcome]]:
    """run.json, the finished cells (plan order) and the build outcomes, as typed records."""
    store = RunStore.open(run_dir)
    return store.run, store.cells(), store.builds()


def _stat(level: BenchLevel | None, key: str) -> Stat | None:
    value = getattr(level, key, None) if level else None
    if value is None or level is None:
        return None
    value = float(value)
    samples = level.values(key)
    if len(samples) < 2:
        return Stat(value, value, value, len(samples) or 1)
    return Stat(value, min(samples), max(samples), len(samples))


# column -> (the requested field, the fingerprint's selected value, the checks that judge it)
_COLUMNS = {
    "moe": ("moe_backend", ("moe_backend", "log:moe_backend", "expect.moe_backend")),
    "linear": ("linear_backend", ("linear_backend", "log:linear_backend", "expect.linear_kernel")),
    "attention": ("attention_backend",
                  ("attention_backend", "log:attention_backend", "expect.attention_backend")),
    "cudagraph": ("cudagraph_mode", ("expect.cudagraph_mode",)),
}


def _selected(fp: Fingerprint | None, column: str) -> str | None:
    if fp is None:
        return None
    if column == "linear":
        return ", ".join(fp.linear_kernels) or None
    return getattr(fp, _COLUMNS[column][0], None)


def _auto(value: str | None) -> str | None:
    return None if value is None or value.lower() == "auto" else value


def _kernel(cell: CellResult, column: str) -> Kernel:
    """One kernel column, from the verdicts the run recorded. A failed or warned verdict makes
    the cell a mismatch (the log shows another kernel) or unconfirmed (it shows none); a passed
    one with a request is ok; without a verdict the column shows what the fingerprint says."""
    field, checks = _COLUMNS[column]
    got = _selected(cell.fingerprint, column)
    recorded = [v for v in cell.verdicts if v.check in checks]
    bad = [v for v in recorded if v.status is not VerdictStatus.PASS]
    if bad:
        main = bad[0]
        asked = main.asked or _auto(getattr(cell.requested, field))
        shown = main.got or got
        state = "mismatch" if any(v.failed for v in bad) and shown else "unconfirmed"
        text = "; ".join(dict.fromkeys(v.message for v in bad))
        return Kernel(asked, shown, state, text)
    if recorded:
        asked = next((_auto(v.asked) for v in recorded if _auto(v.asked)), None)
        if asked is None and any(v.check == field and v.asked is None for v in recorded):
            asked = _auto(getattr(cell.requested, field))  # v1 verdicts carry no asked/got
        shown = next((v.got for v in recorded if v.got), None) or got
        if asked is not None:
            return Kernel(asked, shown, "ok", f"asked {asked}, got {shown}")
        return Kernel(None, shown, "auto", f"auto: {shown}" if shown else "n/a")
    requested = _auto(getattr(cell.requested, field))
    if cell.fingerprint is None:  # never read a log (not served, tool error): nothing to show
        return Kernel(requested, None, "auto", "n/a")
    if requested is not None:  # asked, but nothing judged it: say so, judge nothing here
        return Kernel(requested, got, "unjudged",
                      f"asked {requested}, no verdict recorded; the log shows {got or 'nothing'}")
    return Kernel(None, got, "auto", f"auto: {got}" if got else "n/a")


def _kernels(cell: CellResult) -> dict[str, Kernel]:
    return {column: _kernel(cell, column) for column in _COLUMNS}


def _model_info(cell: CellResult, run: RunRecord) -> tuple[float | None, float | None]:
    """(active_params_b, bytes_per_param): the cell's model_info, else run.json matrix.models."""
    a, b = cell.model_info.active_params_b, cell.model_info.bytes_per_param
    if a is None and b is None and cell.model in run.matrix.models:
        info = run.matrix.models[cell.model]
        a, b = info.active_params_b, info.bytes_per_param
    return (float(a) if a else None), (float(b) if b else None)


def _spec(fp: Fingerprint | None) -> str | None:
    """Speculative decoding as the log shows it (None when the cell had none)."""
    if fp is None or not (fp.spec_method or fp.spec_acceptance_rate is not None):
        return None
    parts = [fp.spec_method or "method n/a"]
    if fp.num_speculative_tokens:
        parts.append(f"{fp.num_speculative_tokens} tokens")
    if fp.spec_acceptance_rate is not None:
        parts.append(f"acceptance {fp.spec_acceptance_rate:.1%}")
    if fp.spec_acceptance_per_position:
        parts.append("per position " + " ".join(f"{x:.0%}" for x in fp.spec_acceptance_per_position[:8]))
    if fp.drafter_moe_backend:
        parts.append(f"drafter MoE {fp.drafter_moe_backend}")
    return ", ".join(parts)


def _autotuner(fp: Fingerprint | None) -> str:
    if fp is None:
        return "n/a"
    return ", ".join(f"{op.rsplit('::', 1)[-1]}: {n}" for op, n in fp.autotuner_skipped) or "none"


def _memory(mem: MemoryRecord | None) -> str:
    if mem is None:
        return "not watched"
    slopes = ", ".join(
        f"{name} {value:+.2f} GiB/h"
        for name, value in (("host free", mem.host_slope_gib_per_h), ("gpu used", mem.gpu_slope_gib_per_h))
        if value is not None
    )
    return "; ".join(x for x in (slopes, mem.reason) if x) or "no slope"


def memory_judged(mem_note: str) -> bool:
    """False when the watch was too short for the leak rule to say anything either way."""
    return "too short to judge" not in mem_note


def _error(cell: CellResult) -> str | None:
    if cell.error is None:
        return None
    return f"{cell.error.type}: {cell.error.message}"


def _identity(cell: CellResult) -> dict:
    return {"id": cell.id, "stack": cell.stack, "model": cell.model, "config": cell.config,
            "quantization": str(cell.quantization or "?"), "status": cell.status.value}


def _reasons(cell: CellResult) -> tuple[str, ...]:
    """The failed verdicts' messages (CellResult.reasons), the tool's own error marked as such;
    for a skipped cell, why it was skipped (a warning verdict, since skipping is not failing)."""
    out = [f"tool error: {v.message}" if v.check == "error" else v.message
           for v in cell.verdicts if v.failed]
    error = _error(cell)
    if error and not any(v.check == "error" for v in cell.verdicts):
        out.insert(0, f"tool error: {error}")
    if not out and cell.status is Status.SKIPPED:
        out = [v.message for v in cell.verdicts if v.status is VerdictStatus.WARN]
    return tuple(out)


def _cell(cell: CellResult, run: RunRecord) -> Cell:
    fp, bench = cell.fingerprint, cell.bench
    levels = sorted(bench.levels, key=lambda lv: lv.concurrency) if bench else []
    c1 = bench.level(1) if bench else None
    top = levels[-1] if levels else None
    per_stream, aggregate = _stat(c1, "per_stream_tok_s"), _stat(top, "aggregate_tok_s")
    top_c = top.concurrency if top else None

    bandwidth = run.matrix.hardware.bandwidth_gbs
    active_b, bpp = _model_info(cell, run)
    eff_c1 = eff_top = None
    if not (active_b and bpp):
        note = "n/a: no model_info (active_params_b, bytes_per_param) for this cell"
    elif not bandwidth:
        note = "n/a: run.json has no matrix.hardware.bandwidth_gbs"
    else:
        note = f"{active_b:g}B active x {bpp:g} B/param at {bandwidth:g} GB/s"
        if per_stream:
            eff_c1 = roofline_efficiency(per_stream.value, active_b * 1e9, bpp, bandwidth)
        if aggregate and top_c:  # one weight read serves top_c streams
            eff_top = roofline_efficiency(aggregate.value / top_c, active_b * 1e9, bpp, bandwidth)

    error = _error(cell)
    cause = cause_of(fp) if fp else None
    return Cell(
        **_identity(cell),
        reasons=_reasons(cell),
        signatures=tuple(fp.signatures) if fp else (),
        kernels=_kernels(cell),
        kv_cache_tokens=fp.kv_cache_tokens if fp else None,
        autotuner=_autotuner(fp),
        spec=_spec(fp),
        per_stream_c1=per_stream,
        aggregate=aggregate,
        top_concurrency=top_c,
        prefill_tok_s=bench.prefill_tok_s if bench else None,
        prefill_prompt_tokens=bench.prefill_prompt_tokens if bench else None,
        cold_ttft_ms=bench.cold_ttft_ms if bench else None,
        prefix_hit_rate=bench.prefix_cache_hit_rate if bench else None,
        warm_ttft_ms=bench.warm_ttft_ms if bench else None,
        efficiency_c1=eff_c1,
        efficiency_top=eff_top,
        roofline_note=note,
        leak=cell.memory.leak if cell.memory else None,
        memory_note=_memory(cell.memory),
        total_s=cell.durations.get("total_s"),
        format_verdict=cell.verdict(FORMAT_CHECK),
        comparison=cell.format_comparison,
        compare_with=cell.compare_with,
        error=error,
        traceback=cell.error.traceback if cell.error else (),
        cause=cause.words if cause else None,
        cause_line=cause.evidence() if cause else None,
    )


def _missing(cell_id: str) -> Cell:
    stack, model, config = (cell_id.split("/", 2) + ["?", "?"])[:3]
    none = Kernel(None, None, "auto", "n/a")
    return Cell(
        id=cell_id,
        stack=stack,
        model=model,
        config=config,
        quantization="?",
        status="not run",
        reasons=("no cell result was written",),
        kernels=dict.fromkeys(_COLUMNS, none),
    )


def _ratio(nv: Stat | None, fp8: Stat | None) -> float | None:
    return nv.value / fp8.value if nv and fp8 and fp8.value else None


def _pair_verdict(nv: Cell, min_ratio: float | None) -> str:
    """The run's own verdict on the pair, from its typed comparison: the report judges nothing."""
    cmp, verdict = nv.comparison, nv.format_verdict
    if cmp is not None and verdict is not None:
        word = verdict.status.value.upper()
        if cmp.lost:
            return f"{word} at c={cmp.deciding}"
        return f"{word} (within noise)" if cmp.deciding_level.kind == "noise" else word
    if verdict is not None:  # a v2 run: its verdict, without the figures it rested on
        return verdict.status.value.upper()
    if min_ratio is None:
        return "no rule"
    if not nv.per_stream_c1:
        return "n/a (no decode figures)"
    return "not judged (no verdict recorded)"


def _pairs(cells: tuple[Cell, ...], min_ratio: float | None) -> tuple[Pair, ...]:
    """Each NVFP4 cell with the FP8 cell the run paired it with (CellResult.compare_with)."""
    by_id = {c.id: c for c in cells}
    out = []
    for nv in cells:
        fp8 = by_id.get(nv.compare_with or "") if nv.quantization == "nvfp4" else None
        if fp8 is None:
            continue
        cmp = nv.comparison
        if cmp is not None:
            c1, top = cmp.level(1), cmp.levels[-1]
            ratio = c1.ratio if c1 else None
            agg = top.ratio if top.metric == "aggregate" else None
        else:
            ratio = _ratio(nv.per_stream_c1, fp8.per_stream_c1)
            agg = (_ratio(nv.aggregate, fp8.aggregate)
                   if fp8.top_concurrency == nv.top_concurrency else None)
        status = nv.format_verdict.status if nv.format_verdict else None
        out.append(Pair(nv.stack, nv.config, f"{nv.model} vs {fp8.model}", fp8, nv, ratio, agg,
                        min_ratio, _pair_verdict(nv, min_ratio), status))
    return tuple(out)


def _build(b: BuildOutcome) -> Build:
    image = b.image_ref or b.image_id  # v1's {ref, id} is lifted by BuildOutcome.from_json
    audit = b.audit
    lines = list(audit.lines) if audit else []
    audit_status = b.audit_status or ("n/a" if audit is None else "?")
    if audit_status == "not-audited" and audit and audit.reason:
        lines.append(f"not audited: {audit.reason}")
    if b.failed and b.reason:
        lines.insert(0, f"build: {b.reason}")
    where = b.stack if b.host is None else f"{b.stack} on {b.host}"
    return Build(where, b.status, str(image or "n/a"), str(audit_status), tuple(lines), compile_text(b))


def load(run_dir: str | Path) -> Report:
    run_dir = Path(run_dir)
    run, finished, builds = read_run_dir(run_dir)
    matrix = run.matrix
    seen = {c.id: c for c in finished}
    order = list(run.cells) + [i for i in seen if i not in run.cells]
    cells = tuple(_cell(seen[i], run) if i in seen else _missing(i) for i in order)
    min_ratio = matrix.min_ratio
    return Report(
        run_id=run.run_id,
        matrix_name=str(matrix.name or "?"),
        hardware=str(matrix.hardware_name or matrix.hardware.description or "?"),
        bandwidth_gbs=matrix.hardware.bandwidth_gbs,
        run_status=run.status.value,
        started_at=str(run.started_at or "?"),
        finished_at=str(run.finished_at or "-"),
        tool_version=str(run.tool_version or "?"),
        min_ratio=min_ratio,
        ratio_recorded=matrix.ratio_recorded,
        cells=cells,
        pairs=_pairs(cells, min_ratio),
        builds=tuple(_build(b) for b in builds.values()),
        note=run.note,
        bench=matrix.bench,
        gpu=_gpu_found(run),
    )


def _gpu_found(run: RunRecord) -> str | None:
    """GPU 0 as the run found it; when its data-sheet bandwidth is not the matrix's (an H100 running
    an H200 matrix: the same cc), said here, since every roofline figure uses the matrix's."""
    found = run.host.gpus
    if not found:
        return None
    g = found[0]
    line = f"{g.name} (cc {g.cc})" + (f", {len(found)} GPUs" if len(found) > 1 else "")
    want = run.matrix.hardware.bandwidth_gbs
    if (bw := other_bandwidth(g.name or "", want)) is not None:
        line += (f": not the matrix's {run.matrix.hardware_name or 'hardware'}; this card reads {bw:g} GB/s, "
                 f"the roofline figures use {want:g} GB/s")
    return line
