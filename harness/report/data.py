"""Read a run directory into frozen rows, one per thing the report shows.

The report judges nothing new: kernel mismatches come from the verdicts the run recorded (or,
for a cell without them, from the same kernel-name tables the verdicts use), roofline figures
from harness.bench.roofline. Absent facts stay None and print as "n/a".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench.roofline import roofline_efficiency
from harness.fingerprint.tables import kernel_names
from harness.results.store import RunStore

STATUS_ORDER = ("pass", "fail", "build-failed", "crashed", "hung", "timeout", "skipped", "not run")
_QUANT_IN_NAME = re.compile(r"[-_.]?(?:nvfp4|fp8)(?=[-_.]|$)", re.IGNORECASE)


@dataclass(frozen=True)
class Stat:
    """A median with the min and max of its repeats (lo == hi == value when there is one)."""

    value: float
    lo: float
    hi: float
    repeats: int


@dataclass(frozen=True)
class Kernel:
    """One requested-vs-selected column. state: ok, mismatch, unconfirmed or auto."""

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
    format_verdict: dict | None = None


@dataclass(frozen=True)
class Pair:
    """FP8 and NVFP4 of one model family on one stack and config."""

    stack: str
    config: str
    family: str
    fp8: Cell
    nvfp4: Cell
    ratio: float | None  # nvfp4 / fp8, per-stream decode at c=1
    aggregate_ratio: float | None
    min_ratio: float | None
    verdict: str  # PASS, FAIL, "no rule" or "n/a (...)"


@dataclass(frozen=True)
class Build:
    stack: str
    status: str
    image: str
    audit_status: str
    audit_lines: tuple[str, ...]


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

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.cells:
            counts[c.status] = counts.get(c.status, 0) + 1
        order = {s: i for i, s in enumerate(STATUS_ORDER)}
        return dict(sorted(counts.items(), key=lambda kv: order.get(kv[0], len(order))))


def read_run_dir(run_dir: Path) -> tuple[dict[str, Any], list[dict], list[dict]]:
    """run.json, the cell JSONs (plan order) and the build JSONs, as plain dicts."""
    store = RunStore.open(run_dir)
    builds = [{"stack": stack, **b} for stack, b in store.builds().items()]
    return dict(store.run), store.cells(), builds


def _stat(level: dict | None, key: str) -> Stat | None:
    if not level or level.get(key) is None:
        return None
    value = float(level[key])
    samples = [float(s) for s in (level.get("samples") or {}).get(key) or () if s is not None]
    if len(samples) < 2:
        return Stat(value, value, value, len(samples) or 1)
    return Stat(value, min(samples), max(samples), len(samples))


def _kernel(
    asked: str | None, got: str | None, verdict: dict | None, log_said: list[str]
) -> Kernel:
    asked = None if asked is None or str(asked).lower() == "auto" else str(asked)
    if verdict is not None and verdict.get("status") in ("fail", "warn"):
        state = "mismatch" if verdict["status"] == "fail" and got else "unconfirmed"
        text = verdict.get("message") or f"asked {asked}, got {got}"
        return Kernel(asked, got, state, "; ".join([text, *(x for x in log_said if x != text)]))
    if log_said:  # the log's own record of a request disagrees with what ran
        return Kernel(asked, got, "mismatch", "; ".join(log_said))
    if asked is None:
        return Kernel(None, got, "auto", f"auto: {got}" if got else "n/a")
    if got is None:
        return Kernel(asked, None, "unconfirmed", f"asked {asked}, log does not confirm it")
    return Kernel(asked, got, "ok", f"asked {asked}, got {got}")


def _kernels(cell: dict) -> dict[str, Kernel]:
    fp = cell.get("fingerprint") or {}
    req = cell.get("requested") or {}
    recorded = {v.get("check"): v for v in cell.get("verdicts") or ()}
    names = kernel_names()

    def verdict(check: str, asked: str | None, got: str | None, ok: bool | None) -> dict | None:
        """The recorded verdict; for a cell recorded without verdicts, the same rule here."""
        if recorded and check != "cudagraph_mode":  # the run never judges graph modes
            return recorded.get(check)
        if ok is False:
            return {"status": "fail", "message": f"asked {asked}, got {got}"}
        return None

    def log_said(what: str) -> list[str]:
        return [
            f"asked {m['asked']}, got {m['got']}"
            for m in fp.get("mismatches") or ()
            if m.get("what") == what
        ]

    def same(a: str | None, b: str | None) -> bool | None:
        return None if not a or a.lower() == "auto" or not b else a.upper() == b.upper()

    out = {}
    asked, got = req.get("moe_backend"), fp.get("moe_backend")
    ok = (
        None
        if not asked or asked.lower() == "auto" or not got
        else (got in (names.moe_expected(asked, fp.get("moe_quant")) or ()))
    )
    out["moe"] = _kernel(
        asked, got, verdict("moe_backend", asked, got, ok), log_said("moe_backend")
    )

    linear = list(fp.get("linear_kernels") or ())
    asked, got = req.get("linear_backend"), ", ".join(linear) or None
    ok = (
        None
        if not asked or asked.lower() == "auto" or not linear
        else (set(linear) <= (names.linear_expected(asked) or frozenset()))
    )
    out["linear"] = _kernel(
        asked, got, verdict("linear_backend", asked, got, ok), log_said("linear_backend")
    )

    asked, got = req.get("attention_backend"), fp.get("attention_backend")
    out["attention"] = _kernel(
        asked,
        got,
        verdict("attention_backend", asked, got, same(asked, got)),
        log_said("attention_backend"),
    )
    asked, got = req.get("cudagraph_mode"), fp.get("cudagraph_mode")
    out["cudagraph"] = _kernel(
        asked, got, verdict("cudagraph_mode", asked, got, same(asked, got)), []
    )
    return out


def _model_info(cell: dict, run: dict) -> tuple[float | None, float | None]:
    """(active_params_b, bytes_per_param): the cell's model_info, else run.json matrix.models."""
    info = cell.get("model_info") or {}
    if not info:
        models = (run.get("matrix") or {}).get("models") or {}
        info = models.get(cell.get("model")) or {}
    a, b = info.get("active_params_b"), info.get("bytes_per_param")
    return (float(a) if a else None), (float(b) if b else None)


def _autotuner(fp: dict) -> str:
    skips = fp.get("autotuner_skipped") or ()
    return ", ".join(f"{s['op'].rsplit('::', 1)[-1]}: {s['count']}" for s in skips) or "none"


def _cell(cell: dict, run: dict) -> Cell:
    fp = cell.get("fingerprint") or {}
    bench = cell.get("bench") or {}
    levels = sorted(bench.get("levels") or (), key=lambda lv: lv.get("concurrency", 0))
    c1 = next((lv for lv in levels if lv.get("concurrency") == 1), None)
    top = levels[-1] if levels else None
    per_stream, aggregate = _stat(c1, "per_stream_tok_s"), _stat(top, "aggregate_tok_s")
    top_c = top.get("concurrency") if top else None

    bandwidth = ((run.get("matrix") or {}).get("hardware") or {}).get("bandwidth_gbs")
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

    mem = cell.get("memory") or {}
    if not mem:
        mem_note = "not watched"
    else:
        slopes = ", ".join(
            f"{name} {mem[key]:+.2f} GiB/h"
            for name, key in (("host", "host_slope_gib_per_h"), ("gpu", "gpu_slope_gib_per_h"))
            if mem.get(key) is not None
        )
        mem_note = "; ".join(x for x in (slopes, mem.get("reason")) if x) or "no slope"
    return Cell(
        id=cell.get("id", "?"),
        stack=cell.get("stack", "?"),
        model=cell.get("model", "?"),
        config=cell.get("config", "?"),
        quantization=str(cell.get("quantization") or "?"),
        status=cell.get("status", "?"),
        reasons=tuple(cell.get("reasons") or ()),
        signatures=tuple(fp.get("signatures") or ()),
        kernels=_kernels(cell),
        kv_cache_tokens=fp.get("kv_cache_tokens"),
        autotuner=_autotuner(fp),
        per_stream_c1=per_stream,
        aggregate=aggregate,
        top_concurrency=top_c,
        prefill_tok_s=bench.get("prefill_tok_s"),
        prefill_prompt_tokens=bench.get("prefill_prompt_tokens"),
        cold_ttft_ms=bench.get("cold_ttft_ms"),
        prefix_hit_rate=bench.get("prefix_cache_hit_rate"),
        warm_ttft_ms=bench.get("warm_ttft_ms"),
        efficiency_c1=eff_c1,
        efficiency_top=eff_top,
        roofline_note=note,
        leak=mem.get("leak") if mem else None,
        memory_note=mem_note,
        total_s=(cell.get("durations") or {}).get("total_s"),
        format_verdict=next((v for v in cell.get("verdicts") or () if v.get("check") == "expect.nvfp4_over_fp8"),
                            None),
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
        kernels=dict.fromkeys(("moe", "linear", "attention", "cudagraph"), none),
    )


def family(model: str) -> str:
    """The model name without its quantization, so qwen3moe-fp8 and qwen3moe-nvfp4 pair up."""
    return _QUANT_IN_NAME.sub("", model) or model


def _pairs(cells: tuple[Cell, ...], min_ratio: float | None) -> tuple[Pair, ...]:
    groups: dict[tuple[str, str, str], dict[str, Cell]] = {}
    for c in cells:
        if c.quantization in ("fp8", "nvfp4"):
            groups.setdefault((c.stack, c.config, family(c.model)), {})[c.quantization] = c
    out = []
    for (stack, config, fam), by_q in groups.items():
        if len(by_q) != 2:
            continue
        fp8, nv = by_q["fp8"], by_q["nvfp4"]
        ratio = agg = None
        if fp8.per_stream_c1 and nv.per_stream_c1 and fp8.per_stream_c1.value:
            ratio = nv.per_stream_c1.value / fp8.per_stream_c1.value
        if (
            fp8.aggregate
            and nv.aggregate
            and fp8.aggregate.value
            and fp8.top_concurrency == nv.top_concurrency
        ):
            agg = nv.aggregate.value / fp8.aggregate.value
        if ratio is None:
            missing = [c.quantization for c in (fp8, nv) if not c.per_stream_c1]
            verdict = f"n/a (no decode at c=1 for {', '.join(missing)})"
        elif min_ratio is None:
            verdict = "no rule"
        elif nv.format_verdict is not None:  # the run judged it, with its noise band: show that
            verdict = nv.format_verdict["status"].upper()
            if "within noise" in nv.format_verdict.get("message", ""):
                verdict += " (within noise)"
        else:
            verdict = "PASS" if ratio >= min_ratio else "FAIL"
        out.append(Pair(stack, config, fam, fp8, nv, ratio, agg, min_ratio, verdict))
    return tuple(out)


def _build(b: dict) -> Build:
    image = b.get("image")
    if isinstance(image, dict):
        image = image.get("ref") or image.get("id")
    audit = b.get("audit") or {}
    lines: list[str] = []
    if isinstance(audit.get("verdicts"), list):  # AuditReport.to_json()
        lines = [
            f"{v.get('target')}: {v.get('status')}: {v.get('message')}" for v in audit["verdicts"]
        ]
    else:  # AuditReport.summary(): flat "audit.*" labels
        lines = [
            f"{k.removeprefix('audit.verdict.')}: {v}"
            for k, v in audit.items()
            if k.startswith("audit.verdict.")
        ]
    audit_status = audit.get("status") or audit.get("audit.status") or ("n/a" if not audit else "?")
    return Build(
        str(b.get("stack", "?")),
        str(b.get("status", "?")),
        str(image or "n/a"),
        str(audit_status),
        tuple(lines),
    )


def load(run_dir: str | Path) -> Report:
    run_dir = Path(run_dir)
    run, raw_cells, raw_builds = read_run_dir(run_dir)
    matrix = run.get("matrix") or {}
    hw = matrix.get("hardware") or {}
    seen = {c.get("id"): c for c in raw_cells}
    order = list(run.get("cells") or ()) + [i for i in seen if i not in (run.get("cells") or ())]
    cells = tuple(_cell(seen[i], run) if i in seen else _missing(i) for i in order)
    expect = matrix.get("expect") or {}
    min_ratio = expect.get("nvfp4_over_fp8_min_ratio")
    return Report(
        run_id=str(run.get("run_id", run_dir.name)),
        matrix_name=str(matrix.get("name", "?")),
        hardware=str(matrix.get("hardware_name") or hw.get("description") or "?"),
        bandwidth_gbs=hw.get("bandwidth_gbs"),
        run_status=str(run.get("status", "?")),
        started_at=str(run.get("started_at") or "?"),
        finished_at=str(run.get("finished_at") or "-"),
        tool_version=str(run.get("tool_version", "?")),
        min_ratio=min_ratio,
        ratio_recorded="nvfp4_over_fp8_min_ratio" in expect,
        cells=cells,
        pairs=_pairs(cells, min_ratio),
        builds=tuple(_build(b) for b in raw_builds),
    )
