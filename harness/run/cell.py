"""One cell of `harness run`, its stages in order: serve -> measure -> judge -> store.

Each stage is a module returning a typed outcome; this module only strings them together. A
cell ends as a `CellResult`, written (masked, atomically) before its server is stopped. Anything
a cell raises makes that cell `error` with the exception and the log tail, and the run goes on:
only Ctrl-C / SIGTERM (or a full disk) stop a run. Where the cell runs (host, slot, port, GPUs,
runner) comes fixed in its `Placement`.
"""

from __future__ import annotations

import time
from contextlib import ExitStack

from harness.errors import StorageError
from harness.fingerprint.parse import fingerprint
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell
from harness.results.build import BuildOutcome
from harness.results.memwatch import MemWatch
from harness.results.model import CellResult, MemoryRecord, ServeInfo
from harness.results.partial import PartialCell, ServerRecord, StartUp
from harness.results.store import RunStore, cell_key, utc_now
from harness.run.options import RunOptions
from harness.run.outcome import (
    build_failed_cell,
    build_verdicts,
    cell_base,
    error_cell,
    image_info,
    skipped_cell,
)
from harness.safety.paths import tail_text
from harness.serve import stage as serve_stage
from harness.serve.base import Placement
from harness.serve.readiness import settle, wait_ready
from harness.stages import judge as judge_stage
from harness.stages import measure as measure_stage


def serve_cell(cell: Cell, placement: Placement, build: BuildOutcome | None, *, matrix: Matrix,
               store: RunStore, opts: RunOptions, written: list[CellResult] | None = None) -> CellResult:
    """serve -> measure -> judge -> store for one cell. The result is written before the server
    is stopped, and appended to `written`; this function may raise (the caller turns that into an
    `error` cell, unless `written` holds this attempt's result)."""
    progress = opts.progress
    host = placement.host
    t0 = time.monotonic()
    started = utc_now()
    log_path = store.log_path(cell.id)
    image = build.image_ref if (build and cell.stack.runner == "docker") else None
    planned = serve_stage.plan(cell, matrix, run_id=store.run_id, log_path=log_path, image=image,
                               placement=placement, keep_failed=opts.keep_failed)
    spec, cmd = planned.spec, planned.command
    partial = PartialCell(id=cell.id, started_at=started, **({"host": host} if host is not None else {}))

    def save(key: str, value: ServerRecord | StartUp | measure_stage.Part) -> None:
        nonlocal partial
        partial = partial.with_part(**{key: value})
        store.write_partial(partial)

    serve_cfg = matrix.spec.serve
    with ExitStack() as stack:
        server = stack.enter_context(placement.runner.serve(spec))
        save("server", server.record())
        watch = stack.enter_context(MemWatch(interval_s=5))
        progress.cell_phase(cell, "start-up", server.log)
        ready = wait_ready(server, timeout_s=serve_cfg.startup_timeout_s,
                           quiet_s=serve_cfg.quiet_period_s, identity=cmd.identity)
        save("readiness", StartUp(state=ready.state, startup_s=round(ready.startup_s, 1)))
        serve_info = ServeInfo(
            command=spec.argv, env=spec.env, log=str(log_path.relative_to(store.dir)),
            startup_s=round(ready.startup_s, 1), exit_code=ready.exit_code, state=ready.state,
            log_tail=ready.tail, url=server.base_url or None, served_model=cmd.served_name)
        m = measure_stage.Measurement()
        if ready.ready:
            watch.mark_steady()
            m = measure_stage.measure(
                server, cmd.served_name, matrix.spec.bench, bench=opts.bench,
                cross_check_cmd=opts.cross_check,
                cross_check_out=store.dir / "logs" / f"{cell_key(cell.id)}.cross-check.json",
                soak_s=opts.soak_s, on_partial=save,
                on_phase=lambda p: progress.cell_phase(cell, p, server.log))
        watch.stop()
        memory = MemoryRecord.model_validate(watch.result())
        progress.cell_phase(cell, "judge", None)
        if ready.ready and not server.state().running:
            settle(server)  # it died while measured: its last lines are read to the end first
        # the stored file's text, header included: the line numbers kept are the file's (rejudge's)
        fp = fingerprint(server.log.stored_text(), process_ended=not ready.ready, hung=ready.state == "hung")
        verdict = judge_stage.judge(judge_stage.Subject.of(cell), matrix.spec.expect, fp, ready_state=ready.state,
                                    exit_code=ready.exit_code, detail=ready.detail, bench=m.bench,
                                    memory=memory, extra=build_verdicts(build))
        result = CellResult(
            **cell_base(cell, host, store.build_record(build) if build else None),
            status=verdict.status, verdicts=verdict.verdicts,
            fingerprint=fp, bench=m.bench, image=image_info(cell, build),
            image_fingerprint=m.image_fingerprint, memory=memory, serve=serve_info,
            cross_check=m.cross_check,
            durations={"startup_s": round(ready.startup_s, 1), **m.durations,
                       "total_s": round(time.monotonic() - t0, 1)},
            started_at=started, finished_at=utc_now(),
        )
        store.write_cell(result)  # before the server stops: nothing measured is lost
        if written is not None:
            written.append(result)
        if not result.status.ok:
            server.mark_failed()
    return result


def run_cell(cell: Cell, placement: Placement, build: BuildOutcome | None, *, matrix: Matrix,
             store: RunStore, opts: RunOptions) -> CellResult:
    """One cell; whatever it raises (but Ctrl-C / SIGTERM / a full disk) is its result."""
    host = placement.host
    record = store.build_record(build) if build else None
    if build is not None and build.failed:
        result = build_failed_cell(cell, build, host, record)
        store.write_cell(result)
        return result
    if matrix.spec.serve.gpus != "none" and (why := placement.no_gpu()) is not None:
        result = skipped_cell(cell, why, build, host, record)
        store.write_cell(result)
        return result
    started = utc_now()
    written: list[CellResult] = []
    try:
        return serve_cell(cell, placement, build, matrix=matrix, store=store, opts=opts, written=written)
    except (KeyboardInterrupt, SystemExit, StorageError):
        raise
    except Exception as exc:  # noqa: BLE001 - a failed cell is a result, not a crash
        if written:
            # it broke while stopping the server, after this attempt's result was written: keep
            # that (known by what this attempt wrote, never by comparing clock readings)
            return written[-1]
        log = store.log_path(cell.id)
        tail: tuple[str, ...] = ()
        if log.is_file():
            tail = tuple(tail_text(log, max_bytes=1 << 20).splitlines()[-40:])
        result = error_cell(cell, exc, started=started, log_tail=tail,
                            partial=store.read_partial(cell.id),
                            log_rel=str(log.relative_to(store.dir)) if log.is_file() else None,
                            host=host, record=record)
        store.write_cell(result)
        return result
