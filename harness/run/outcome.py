"""What a cell ends as when it is not served to the end (its build failed, no GPU here, the tool
itself failed on it), and the cross-cell rule applied to a run's stored cells."""

from __future__ import annotations

import re
import traceback
from typing import Any

from harness.matrix.model import Bench, Expect
from harness.matrix.plan import Cell
from harness.results.build import BuildOutcome
from harness.results.model import (
    BuildInfo,
    CellError,
    CellResult,
    ImageInfo,
    ModelInfo,
    Requested,
    ServeInfo,
    Status,
    Verdict,
    VerdictStatus,
)
from harness.results.partial import PartialCell
from harness.results.store import RunStore, utc_now
from harness.stages import judge as judge_stage


def cell_base(cell: Cell, host: str | None = None, record: str | None = None) -> dict[str, Any]:
    """The fields every result of `cell` starts with (`host`: where it ran, in a run of several;
    `record`: its build's file in the run folder, RunStore.build_record)."""
    c = cell.config
    m = cell.model
    return {
        "id": cell.id, "stack": cell.stack_name, "model": cell.model_name,
        "config": cell.config_name, "quantization": cell.quantization, "runner": cell.stack.runner,
        "compare_with": cell.compare_with,
        "requested": Requested(moe_backend=c.moe_backend, linear_backend=c.linear_backend,
                               attention_backend=c.attention_backend,
                               cudagraph_mode=c.cudagraph_mode),
        "model_info": ModelInfo(active_params_b=m.active_params_b, bytes_per_param=m.bytes_per_param,
                                checkpoint=m.checkpoint, load_format=m.load_format),
        "build_record": record,
        **({"host": host} if host is not None else {}),
    }


def image_info(cell: Cell, build: BuildOutcome | None) -> ImageInfo | None:
    if build is None or cell.stack.runner != "docker":
        return None
    return ImageInfo(ref=build.image_ref, id=build.image_id, labels=build.labels)


def build_verdicts(build: BuildOutcome | None) -> list[Verdict]:
    # the build log says the archs asked for are not the archs built: THE trap
    return [Verdict(check="build.archs", status=VerdictStatus.FAIL, message=p)
            for p in (build.arch_problems if build else ())]


# The engine could not get the base image: a registry, network or login problem on this host,
# not a bug in the stack (docker 20.10-29 wordings).
_NO_BASE = re.compile(r"pull access denied|manifest unknown|manifest for \S+ not found|"
                      r"no such host|dial tcp|i/o timeout|failed to resolve|TLS handshake timeout|"
                      r"unauthorized: |repository does not exist|toomanyrequests", re.IGNORECASE)


def build_failed_cell(cell: Cell, build: BuildOutcome, host: str | None = None,
                      record: str | None = None) -> CellResult:
    why = build.reason or (build.log_tail[-1] if build.log_tail else "(no log)")
    base = cell.stack.base_image.reference if cell.stack.base_image else None
    text = " ".join([why, *build.log_tail[-10:]])
    if base and _NO_BASE.search(text):
        verdict = Verdict(check="build.base", status=VerdictStatus.FAIL,
                          message=f"could not get base image {base}: {why.strip()[-300:]} "
                          "(a registry or network problem on this host, not a bug in the stack)")
    else:
        verdict = Verdict(check="build", status=VerdictStatus.FAIL,
                          message=f"image for stack {cell.stack_name} did not build: {why}")
    return CellResult(
        **cell_base(cell, host, record), status=Status.BUILD_FAILED,
        verdicts=(verdict,),
        image=ImageInfo(ref=build.image_ref), started_at=utc_now(), finished_at=utc_now(),
        build=BuildInfo(log=build.log_path, log_tail=tuple(build.log_tail[-40:])),
    )


def error_cell(cell: Cell, exc: BaseException, *, started: str, log_tail: tuple[str, ...] = (),
               partial: PartialCell | None = None, log_rel: str | None = None,
               host: str | None = None, record: str | None = None) -> CellResult:
    """A cell the tool itself failed on: the exception is the result, the run goes on."""
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    hint = getattr(exc, "hint", None)
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    extra = partial.measured() if partial else {}  # whatever was measured before it broke
    return CellResult(
        **cell_base(cell, host, record), status=Status.ERROR,
        verdicts=(Verdict(check="error", status=VerdictStatus.FAIL,
                          message=f"{type(exc).__name__}: {message}" + (f" (fix: {hint})" if hint else "")),),
        error=CellError(type=type(exc).__name__, message=message,
                        traceback=tuple("".join(tb).splitlines()[-30:])),
        serve=ServeInfo(log=log_rel, log_tail=log_tail) if (log_tail or log_rel) else None,
        started_at=started, finished_at=utc_now(), **extra,
    )


def skipped_cell(cell: Cell, why: str, build: BuildOutcome | None, host: str | None = None,
                 record: str | None = None) -> CellResult:
    """Not served: this host has no GPU. Its build was still checked: the arch trap in the
    build log fails the cell all the same."""
    trap = build_verdicts(build)
    return CellResult(
        **cell_base(cell, host, record), status=Status.FAIL if trap else Status.SKIPPED,
        verdicts=(Verdict(check="host.gpu", status=VerdictStatus.WARN,
                          message=f"skipped: no GPU on this host ({why})"),
                  *trap),
        image=image_info(cell, build), started_at=utc_now(), finished_at=utc_now(),
    )


def apply_format_rule(store: RunStore, expect: Expect, bench: Bench) -> list[tuple[CellResult, Status]]:
    """(Re)apply the cross-cell FP8-vs-NVFP4 rule to the stored cells of a run, with the matrix's
    own thresholds: `expect.nvfp4_over_fp8_min_ratio` and `bench.noise_floor` (a live run hands
    its matrix's tables; `harness rejudge` reads run.json's copy into the same classes).
    Idempotent. A format verdict on a cell the rule no longer compares (a run judged before the
    pairing was explicit) is removed. Returns the cells it wrote, with their status before."""
    cells = {c.id: c for c in store.cells()}
    judged = dict(judge_stage.compare_formats(cells.values(), expect.nvfp4_over_fp8_min_ratio,
                                              bench.noise_floor))
    changed = []
    for cell_id, before in cells.items():
        if cell_id in judged:
            after = judge_stage.with_verdict(before, judged[cell_id])
        elif before.verdict(judge_stage.FORMAT_CHECK) is not None:
            after = judge_stage.without_verdict(before, judge_stage.FORMAT_CHECK)
        else:
            continue
        if after != before:
            store.write_cell(after)
        changed.append((after, before.status))
    return changed
