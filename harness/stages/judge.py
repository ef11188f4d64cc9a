"""The judge stage: what a cell's log, benchmark and memory trend prove against the matrix.

The one place where "asked X, got Y" is decided. Per cell: requested vs selected kernels (a
request the log does not confirm is a failure), autotuner skips, known signatures,
`[[expect.select]]` rules, decode floor, output health, failed requests, memory. Across cells:
NVFP4 against the FP8 cell the matrix pairs it with (harness.matrix.pairs), judged beyond the noise band, and re-appliable
to a stored run (`harness rejudge`). Report, compare and bug render these verdicts; they never
judge again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.bench.noise import classify
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.verdicts import verdicts
from harness.matrix.model import Expect, SelectRule
from harness.matrix.plan import Cell
from harness.matrix.select import compile_expression
from harness.results.model import (
    FORMAT_CHECK,
    NOT_READY,
    SELECTION_CHECKS,
    BenchRecord,
    CellResult,
    FormatComparison,
    FormatVerdict,
    LevelRatio,
    MemoryRecord,
    Requested,
    ServeState,
    Status,
    Verdict,
    VerdictStatus,
)


@dataclass(frozen=True)
class Judgement:
    status: Status
    verdicts: tuple[Verdict, ...]


def _got(fp: Fingerprint, check: str) -> str | None:
    if check == "linear_backend":
        return ", ".join(fp.linear_kernels) or None
    return getattr(fp, check, None)


def _typed(v: Verdict, asked: dict[str, str | None], fp: Fingerprint) -> Verdict:
    """The log's verdict with asked/got for selections (`asked`: the cell's request per SELECTION_CHECKS)."""
    check = v.check.removeprefix("log:")
    extra = {}
    if check in SELECTION_CHECKS:
        extra = {"asked": asked[check], "got": _got(fp, check)}
    return v.model_copy(update={"lines": tuple(x for x in v.lines if x), **extra})


def _fail(check: str, message: str, lines: Iterable[str] = ()) -> Verdict:
    return Verdict(check=check, status=VerdictStatus.FAIL, message=message, lines=tuple(lines))


def _check(check: str, ok: bool, good: str, bad: str, **kw) -> Verdict:
    return Verdict(check=check, status=VerdictStatus.PASS if ok else VerdictStatus.FAIL,
                   message=good if ok else bad, **kw)


def readiness_verdict(state: ServeState, exit_code: int | None, detail: str) -> Verdict:
    why = {ServeState.EXITED: f"server exited with code {exit_code} before it was ready"
                              + (f" ({detail})" if detail else ""),
           ServeState.HUNG: f"start hung: {detail}", ServeState.TIMEOUT: detail or "not ready in time"}[state]
    return _fail("serve.ready", why)


@dataclass(frozen=True)
class Subject:
    """What the judge needs to know of a cell: from the matrix in a run, from the stored
    result in `harness rejudge`."""

    id: str
    requested: Requested
    load_format: str | None = None

    @classmethod
    def of(cls, cell: Cell) -> Subject:
        c = cell.config
        return cls(cell.id, Requested(moe_backend=c.moe_backend, linear_backend=c.linear_backend,
                                      attention_backend=c.attention_backend,
                                      cudagraph_mode=c.cudagraph_mode), cell.model.load_format)

    def select_rules(self, rules: Iterable[SelectRule]) -> list[SelectRule]:
        return [r for r in rules if compile_expression(r.cells)(self.id)]


def judge(cell: Subject, expect: Expect, fp: Fingerprint, *, ready_state: ServeState,
          exit_code: int | None = None, detail: str = "", bench: BenchRecord | None = None,
          memory: MemoryRecord | None = None, extra: Iterable[Verdict] = (),
          not_ready: Verdict | None = None) -> Judgement:
    """Every verdict on one served (or failed-to-serve) cell, and the status they give.
    `not_ready` replaces the start-up verdict (rejudge keeps the one the run wrote)."""
    ready = ready_state.ready
    req = cell.requested
    asked = {"moe_backend": req.moe_backend, "linear_backend": req.linear_backend,
             "attention_backend": req.attention_backend}
    asked = {k: (None if v is None or v.lower() == "auto" else v) for k, v in asked.items()}
    out: list[Verdict] = []
    if not ready:
        out.append(not_ready or readiness_verdict(ready_state, exit_code, detail))
    match = expect.kernels_match_request
    out += [_typed(v, asked, fp) for v in verdicts(
        fp,
        requested_moe=asked["moe_backend"] if match else None,
        requested_linear=asked["linear_backend"] if match else None,
        requested_attention=asked["attention_backend"] if match else None,
        max_autotuner_skips=expect.max_autotuner_skips,
        allowed_signatures=expect.allowed_signatures,
        require_selection=ready,
    )]
    if ready:
        out += _select_rules(cell, expect, fp)
    if bench is not None:
        out += _bench_checks(cell, expect, bench)
    if memory is not None and memory.leak:
        out.append(_fail("memory", memory.reason or "memory leak"))
    out += list(extra)
    if not ready:
        status = NOT_READY[ready_state]
    else:
        status = Status.FAIL if any(v.failed for v in out) else Status.PASS
    return Judgement(status, tuple(out))


def _select_rules(cell: Subject, expect: Expect, fp: Fingerprint) -> list[Verdict]:
    out = []
    for rule in cell.select_rules(expect.select):
        for key in ("moe_backend", "attention_backend", "cudagraph_mode"):
            want, got = getattr(rule, key), getattr(fp, key)
            if want is None:
                continue
            out.append(_check(f"expect.{key}", (got or "").upper() == want.upper(),
                              f"{key} is {got}", f"expected {want}, got {got}",
                              lines=fp.proof(key), asked=want, got=got))
        if rule.linear_kernel is not None:
            got = ", ".join(fp.linear_kernels) or None
            out.append(_check("expect.linear_kernel", rule.linear_kernel in fp.linear_kernels,
                              f"{rule.linear_kernel} selected",
                              f"expected {rule.linear_kernel}, got {got or 'none'}",
                              asked=rule.linear_kernel, got=got))
    return out


def _bench_checks(cell: Subject, expect: Expect, bench: BenchRecord) -> list[Verdict]:
    out = []
    if expect.min_decode_tok_s:
        solo = bench.per_stream(1)
        out.append(_check("expect.min_decode_tok_s",
                          solo is not None and solo >= expect.min_decode_tok_s,
                          f"decode {solo} tok/s at c=1 (floor {expect.min_decode_tok_s})",
                          f"decode {solo} tok/s at c=1 (floor {expect.min_decode_tok_s})"))
    degenerate = [lv.concurrency for lv in bench.levels if lv.degenerate]
    if degenerate and cell.load_format != "dummy":  # random weights write noise by design
        out.append(_fail("output_health",
                         f"degenerate output (4-gram diversity < 0.6) at c={degenerate}"))
    failed = sum(lv.failed for lv in bench.levels)
    if failed:
        out.append(_fail("bench.failed_requests", f"{failed} benchmark requests failed"))
    return out


def rejudge(cell: CellResult, expect: Expect, log_text: str | None) -> CellResult:
    """A stored cell judged again with today's fingerprint and rules, from its stored log and
    figures. Cells that never served (build failed, tool error) keep their verdicts."""
    if log_text is None or cell.status in (Status.BUILD_FAILED, Status.ERROR, Status.SKIPPED):
        return cell
    state = (cell.serve.state if cell.serve else None) or ServeState.READY
    fp = fingerprint(log_text, process_ended=not state.ready, hung=state is ServeState.HUNG)
    kept = [v for v in cell.verdicts if v.check in ("build.archs", FORMAT_CHECK)]
    verdict = judge(Subject(cell.id, cell.requested, cell.model_info.load_format), expect, fp,
                    ready_state=state, exit_code=cell.serve.exit_code if cell.serve else None,
                    bench=cell.bench, memory=cell.memory, extra=kept,
                    not_ready=cell.verdict("serve.ready"))
    status = verdict.status
    return cell.model_copy(update={"fingerprint": fp,
                                   "verdicts": verdict.verdicts, "status": status})


def with_verdict(cell: CellResult, verdict: Verdict) -> CellResult:
    """The cell with `verdict` replacing any earlier one of the same check, status re-derived
    for cells that served (a crash stays a crash whatever a cross-cell rule says)."""
    kept = tuple(v for v in cell.verdicts if v.check != verdict.check) + (verdict,)
    status = cell.status
    if status.served:
        status = Status.FAIL if any(v.failed for v in kept) else Status.PASS
    return cell.model_copy(update={"verdicts": kept, "status": status})


def without_verdict(cell: CellResult, check: str) -> CellResult:
    """The cell with no verdict of `check`, status re-derived as in with_verdict."""
    kept = tuple(v for v in cell.verdicts if v.check != check)
    status = cell.status
    if status.served:
        status = Status.FAIL if any(v.failed for v in kept) else Status.PASS
    return cell.model_copy(update={"verdicts": kept, "status": status})


# --- across cells: NVFP4 against FP8 ----------------------------------------------------------


def _samples(bench: BenchRecord | None, conc: int, key: str) -> list[float]:
    lv = bench.level(conc) if bench else None
    return [v for v in lv.values(key) if v] if lv else []


def _levels(n: CellResult, f: CellResult) -> list[int]:
    """The concurrency levels both cells measured, lowest first."""
    have = [{lv.concurrency for lv in c.bench.levels} if c.bench else set() for c in (n, f)]
    return sorted(have[0] & have[1])


def compare_pair(n: CellResult, f: CellResult, ratio_min: float, noise_floor: float) -> FormatComparison | None:
    """NVFP4 cell `n` against FP8 cell `f` at every level both measured, as figures; None when
    no level has figures on both sides."""
    levels = []
    for conc in _levels(n, f):
        key, metric = ("per_stream_tok_s", "per_stream") if conc == 1 else ("aggregate_tok_s", "aggregate")
        ns, fs = _samples(n.bench, conc, key), _samples(f.bench, conc, key)
        if not ns or not fs:
            continue
        # the band is judged against ratio_min x FP8, so a required 0.9x is a 0.9x-scaled baseline
        change = classify([ratio_min * x for x in fs], ns, floor=noise_floor)
        fp8 = change.baseline / ratio_min
        levels.append(LevelRatio(concurrency=conc, metric=metric, nvfp4_tok_s=change.candidate,
                                 fp8_tok_s=fp8, ratio=change.candidate / fp8, band=change.band,
                                 kind=change.kind))
    if not levels:
        return None
    losses = [lv for lv in levels if lv.kind == "loss"]
    deciding = losses[0] if losses else min(levels, key=lambda lv: lv.ratio)
    return FormatComparison(nvfp4=n.id, fp8=f.id, min_ratio=ratio_min, noise_floor=noise_floor,
                            levels=tuple(levels), deciding=deciding.concurrency)


_WORD = {"loss": "below the required {r:g}x beyond", "noise": "within",
         "gain": "above the required {r:g}x beyond"}


def format_message(cmp: FormatComparison) -> str:
    """The verdict's words, written from the comparison (readers use the comparison itself)."""
    parts = [f"c={lv.concurrency} {lv.metric.replace('_', ' ')} {lv.nvfp4_tok_s:.1f} vs {lv.fp8_tok_s:.1f} "
             f"tok/s = {lv.ratio:.3f}x ({_WORD[lv.kind].format(r=cmp.min_ratio)} the ±{lv.band:.1%} noise band)"
             for lv in cmp.levels]
    return (f"NVFP4 vs FP8 cell {cmp.fp8}: " + "; ".join(parts)
            + (f". Fails at c={cmp.deciding}" if cmp.lost else ""))


def compare_formats(cells: Iterable[CellResult], ratio_min: float | None,
                    noise_floor: float) -> list[tuple[str, FormatVerdict]]:
    """The FP8-vs-NVFP4 rule: a verdict on each NVFP4 cell whose FP8 cell (`compare_with`, from
    the matrix's pairing, harness.matrix.pairs) is in `cells`.

    At every concurrency level both cells measured, NVFP4 must reach `ratio_min` x FP8: per-stream
    decode at c=1 (what one user sees), aggregate decode above it (what the server delivers). A
    difference inside the noise band (the floor, about 2 %: the spread of two identical runs; or
    the spread of either side's repeats if larger) is not a loss: NVFP4 fails when it is below
    ratio_min x FP8 by more than that band at any level. Judging c=1 alone passed an NVFP4 that
    tied one stream and lost a quarter of the aggregate at c=8.
    Returns (nvfp4 cell id, verdict) pairs.
    """
    if ratio_min is None:
        return []
    cells = list(cells)
    by_id = {c.id: c for c in cells}
    out = []
    for n in cells:
        f = by_id.get(n.compare_with) if n.quantization == "nvfp4" and n.compare_with else None
        if f is None or f.quantization != "fp8":
            continue
        cmp = compare_pair(n, f, ratio_min, noise_floor)
        if cmp is None:
            continue
        lv = cmp.deciding_level
        out.append((n.id, FormatVerdict(
            check=FORMAT_CHECK, status=VerdictStatus.FAIL if cmp.lost else VerdictStatus.PASS,
            message=format_message(cmp), asked=f"{ratio_min:g}", got=f"{lv.ratio:.3f}", comparison=cmp,
        )))
    return out
