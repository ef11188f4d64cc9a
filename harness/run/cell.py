"""`harness run`, top to bottom: build -> serve -> measure -> judge -> store, cell by cell.

Each stage is a module of harness/stages returning a typed outcome; this module only strings
them together. A cell ends as a `CellResult`, written (masked, atomically) before its server is
stopped. Anything a cell raises makes that cell `error` with the exception and the log tail, and
the run goes on: only Ctrl-C / SIGTERM stop a run. A run starts by reaping what dead
controllers left (containers, run directories marked running), and can be resumed.
"""

from __future__ import annotations

import hashlib
import re
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from harness import __version__, controller
from harness.errors import ConfigError, StorageError
from harness.fingerprint import fingerprint
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell, expand
from harness.results.model import (
    BuildInfo,
    BuildOutcome,
    CellError,
    CellResult,
    ImageInfo,
    MatrixInfo,
    MemoryRecord,
    ModelInfo,
    Requested,
    RunRecord,
    ServeInfo,
    Status,
    Verdict,
    VerdictStatus,
)
from harness.results.store import RunStore, cell_key, new_run_id
from harness.serve import stage as serve_stage
from harness.serve.base import Runner
from harness.serve.readiness import wait_ready
from harness.stages import judge as judge_stage
from harness.stages import measure as measure_stage


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Progress(Protocol):
    """What `harness run` shows while it works; every method is optional to act on."""

    def build_event(self, event: Any) -> None: ...
    def cell_started(self, cell: Cell, index: int, total: int) -> None: ...
    def cell_phase(self, cell: Cell, phase: str, log: Any = None) -> None: ...
    def cell_finished(self, result: CellResult, index: int, total: int) -> None: ...
    def cell_updated(self, result: CellResult, before: Status) -> None: ...


class QuietProgress:
    def build_event(self, event: Any) -> None:
        pass

    def cell_started(self, cell: Cell, index: int, total: int) -> None:
        pass

    def cell_phase(self, cell: Cell, phase: str, log: Any = None) -> None:
        pass

    def cell_finished(self, result: CellResult, index: int, total: int) -> None:
        pass

    def cell_updated(self, result: CellResult, before: Status) -> None:
        pass


@dataclass
class RunOptions:
    results_root: Path = Path("results")
    keep_failed: bool = False
    soak_s: float = 0.0
    bench: bool = True
    force_build: bool = False
    allow_unpinned: bool = False
    audit_local: bool = True
    # A shell command run against each ready server after the benchmark (another client, to
    # hold our figures against): it sees HARNESS_URL, HARNESS_MODEL and HARNESS_OUT (a JSON path).
    cross_check: str | None = None
    # A Dockerfile template other than the packaged one (tests use a small one).
    build_template: Path | None = None
    build_template_values: dict | None = None
    argv: tuple[str, ...] = ()
    # How a runner is made for a stack; tests swap it.
    runner_for: Callable[[Cell], Runner] | None = None
    # Whether this host has a GPU for the cells that need one (serve.gpus != "none"); None
    # asks the GPU probe (NVML, then nvidia-smi). Without one, cells are skipped, not failed.
    gpu_present: Callable[[], str | None] | None = None
    progress: Progress = field(default_factory=QuietProgress)


class _Engine:
    """The Docker engine, connected on first use: a run of local stacks never needs one."""

    def __init__(self) -> None:
        self._engine = None

    def __call__(self):
        if self._engine is None:
            from harness.engine import connect

            self._engine = connect()
        return self._engine


def _default_runner_for(engine: _Engine) -> Callable[[Cell], Runner]:
    def make(cell: Cell) -> Runner:
        if cell.stack.runner == "local":
            from harness.serve.local import LocalRunner

            return LocalRunner()
        from harness.serve.docker import DockerRunner

        return DockerRunner(engine())

    return make


# --- one cell ---------------------------------------------------------------------------------


def _base(cell: Cell) -> dict[str, Any]:
    c = cell.config
    m = cell.model
    return {
        "id": cell.id, "stack": cell.stack_name, "model": cell.model_name,
        "config": cell.config_name, "quantization": cell.quantization, "runner": cell.stack.runner,
        "requested": Requested(moe_backend=c.moe_backend, linear_backend=c.linear_backend,
                               attention_backend=c.attention_backend,
                               cudagraph_mode=c.cudagraph_mode),
        "model_info": ModelInfo(active_params_b=m.active_params_b, bytes_per_param=m.bytes_per_param,
                                checkpoint=m.checkpoint, load_format=m.load_format),
    }


def _image(cell: Cell, build: BuildOutcome | None) -> ImageInfo | None:
    if build is None or cell.stack.runner != "docker":
        return None
    return ImageInfo(ref=build.image_ref, id=build.image_id, labels=build.labels)


def _build_verdicts(build: BuildOutcome | None) -> list[Verdict]:
    # the build log says the archs asked for are not the archs built: THE trap
    return [Verdict(check="build.archs", status=VerdictStatus.FAIL, message=p)
            for p in (build.arch_problems if build else ())]


# The engine could not get the base image: a registry, network or login problem on this host,
# not a bug in the stack (docker 20.10-29 wordings).
_NO_BASE = re.compile(r"pull access denied|manifest unknown|manifest for \S+ not found|"
                      r"no such host|dial tcp|i/o timeout|failed to resolve|TLS handshake timeout|"
                      r"unauthorized: |repository does not exist|toomanyrequests", re.IGNORECASE)


def build_failed_cell(cell: Cell, build: BuildOutcome) -> CellResult:
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
        **_base(cell), status=Status.BUILD_FAILED,
        verdicts=(verdict,),
        image=ImageInfo(ref=build.image_ref), started_at=now_iso(), finished_at=now_iso(),
        build=BuildInfo(log=build.log_path, log_tail=tuple(build.log_tail[-40:])),
    )


def error_cell(cell: Cell, exc: BaseException, *, started: str, log_tail: tuple[str, ...] = (),
               partial: dict | None = None, log_rel: str | None = None) -> CellResult:
    """A cell the tool itself failed on: the exception is the result, the run goes on."""
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    hint = getattr(exc, "hint", None)
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    extra: dict[str, Any] = {}
    if partial:  # whatever was measured before it broke
        for key in ("bench", "image_fingerprint", "cross_check"):
            if partial.get(key) is not None:
                extra[key] = partial[key]
    return CellResult(
        **_base(cell), status=Status.ERROR,
        verdicts=(Verdict(check="error", status=VerdictStatus.FAIL,
                          message=f"{type(exc).__name__}: {message}" + (f" (fix: {hint})" if hint else "")),),
        error=CellError(type=type(exc).__name__, message=message,
                        traceback=tuple("".join(tb).splitlines()[-30:])),
        serve=ServeInfo(log=log_rel, log_tail=log_tail) if (log_tail or log_rel) else None,
        started_at=started, finished_at=now_iso(), **extra,
    )


@dataclass
class _Ctx:
    matrix: Matrix
    store: RunStore
    opts: RunOptions
    runner_for: Callable[[Cell], Runner]
    _gpu: list = field(default_factory=list)

    def no_gpu(self) -> str | None:
        """Probed once per run, on the first cell that needs a GPU."""
        if not self._gpu:
            self._gpu.append((self.opts.gpu_present or no_gpu_reason)())
        return self._gpu[0]


def serve_cell(cell: Cell, ctx: _Ctx, build: BuildOutcome | None) -> CellResult:
    """serve -> measure -> judge -> store for one cell. The result is written before the server
    is stopped; this function may raise (the caller turns that into an `error` cell)."""
    store, opts, matrix = ctx.store, ctx.opts, ctx.matrix
    progress = opts.progress
    t0 = time.monotonic()
    started = now_iso()
    log_path = store.log_path(cell.id)
    image = build.image_ref if (build and cell.stack.runner == "docker") else None
    planned = serve_stage.plan(cell, matrix, run_id=store.run_id, log_path=log_path, image=image,
                               keep_failed=opts.keep_failed)
    spec, cmd = planned.spec, planned.command
    partial: dict[str, Any] = {"started_at": started}

    def save(key: str, value: Any) -> None:
        partial[key] = value
        store.write_partial(cell.id, partial)

    serve_cfg = matrix.spec.serve
    with ExitStack() as stack:
        server = stack.enter_context(ctx.runner_for(cell).serve(spec))
        save("server", server.record())
        watch = stack.enter_context(_memwatch())
        progress.cell_phase(cell, "start-up", server.log)
        ready = wait_ready(server, timeout_s=serve_cfg.startup_timeout_s,
                           quiet_s=serve_cfg.quiet_period_s, identity=cmd.identity)
        save("readiness", {"state": ready.state, "startup_s": round(ready.startup_s, 1)})
        serve_info = ServeInfo(
            command=spec.argv, env=spec.env, log=str(log_path.relative_to(store.dir)),
            startup_s=round(ready.startup_s, 1), exit_code=ready.exit_code, state=ready.state,
            log_tail=ready.tail, url=server.base_url, served_model=cmd.served_name)
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
        fp = fingerprint(server.log.text(), process_ended=not ready.ready)
        verdict = judge_stage.judge(judge_stage.Subject.of(cell), matrix.spec.expect, fp, ready_state=ready.state,
                                    exit_code=ready.exit_code, detail=ready.detail, bench=m.bench,
                                    memory=memory, extra=_build_verdicts(build))
        result = CellResult(
            **_base(cell), status=verdict.status, verdicts=verdict.verdicts,
            fingerprint=fp.to_json(), bench=m.bench, image=_image(cell, build),
            image_fingerprint=m.image_fingerprint, memory=memory, serve=serve_info,
            audit=(build.audit_summary or build.audit) if build else None,
            cross_check=m.cross_check,
            durations={"startup_s": round(ready.startup_s, 1), **m.durations,
                       "total_s": round(time.monotonic() - t0, 1)},
            started_at=started, finished_at=now_iso(),
        )
        store.write_cell(result)  # before the server stops: nothing measured is lost
        if not result.status.ok:
            server.mark_failed()
    return result


def _memwatch():
    from harness.results.memwatch import MemWatch

    return MemWatch(interval_s=5)


# --- the run ----------------------------------------------------------------------------------


def _new_store(matrix: Matrix, k: str | None, cells: list[Cell], opts: RunOptions) -> RunStore:
    from harness.hostenv import host_fingerprint

    spec = matrix.spec
    hw = spec.hardware[spec.matrix.hardware]
    run = RunRecord(
        run_id=new_run_id(spec.matrix.name), tool_version=__version__, argv=list(opts.argv), k=k,
        matrix=MatrixInfo(path=str(matrix.path), sha256=hashlib.sha256(matrix.source_bytes).hexdigest(),
                          name=spec.matrix.name, hardware_name=spec.matrix.hardware,
                          hardware=hw.model_dump(mode="json"),
                          expect=spec.expect.model_dump(mode="json"),
                          bench=spec.bench.model_dump(mode="json")),
        host=host_fingerprint(), cells=[c.id for c in cells], controller=controller.me(),
    )
    return RunStore.create(opts.results_root, run)


def execution_order(cells: list[Cell]) -> list[Cell]:
    """Plan order, except that within a stack the NVFP4 cells run after the others: the
    NVFP4-vs-FP8 rule can then judge an NVFP4 cell the moment it ends, so the status shown live
    is its final one."""
    stacks = list(dict.fromkeys(c.stack_name for c in cells))
    return sorted(cells, key=lambda c: (stacks.index(c.stack_name), c.quantization == "nvfp4"))


def apply_format_rule(store: RunStore) -> list[tuple[CellResult, Status]]:
    """(Re)apply the cross-cell FP8-vs-NVFP4 rule to the stored cells of a run, from its
    run.json. Idempotent. Returns the cells it wrote, with their status before."""
    run = store.run
    floor = run.matrix.noise_floor if run.matrix.noise_floor is not None else 0.02
    cells = {c.id: c for c in store.cells()}
    changed = []
    for cell_id, verdict in judge_stage.compare_formats(cells.values(), run.matrix.min_ratio, floor):
        before = cells[cell_id]
        after = judge_stage.with_verdict(before, verdict)
        if after != before:
            store.write_cell(after)
        changed.append((after, before.status))
    return changed


def run_matrix(matrix: Matrix, *, k: str | None, opts: RunOptions,
               resume_dir: Path | None = None) -> RunStore:
    """Run the selected cells; returns the store (its run dir holds every result).

    Cells are spread over the matrix's hosts (harness/hosts.py), one thread per slot; without
    [hosts] there is one host, today's engine, and one slot, run in this thread."""
    from harness.run import schedule as hostmod

    cells = expand(matrix, k)
    if not cells:
        raise ConfigError(f"{matrix.path}: no cell matches -k {k!r}", hint="see `harness plan -m ... --list`")
    hosts = hostmod.hosts_of(matrix)
    engine = _Engine()
    default = hosts[0].default
    reap_dead(opts.results_root, engine_if_needed=engine if default and _needs_docker(cells) else None)
    if resume_dir is not None:
        store = RunStore.open(resume_dir)
        planned = list(store.run.cells)
        added = [c.id for c in cells if c.id not in planned]
        # `--resume DIR -k EXPR` widens a run with more cells of the same matrix
        store.update_run(cells=planned + added, status="running", finished_at=None,
                         controller=controller.me())
    else:
        store = _new_store(matrix, k, cells, opts)
    # a cell whose host was unreachable never ran: a resume runs it again
    done = {c.id for c in store.cells() if not (c.error and c.error.type == "HostUnreachable")}
    try:
        from harness.run.executor import HostsRun

        run = HostsRun(matrix, cells, store, opts, hosts, engine if default else None)
        run.prepare()
        run.dispatch([c for c in execution_order(cells) if c.id not in done])
        store.finish("finished")
    except BaseException as exc:  # Ctrl-C, SIGTERM, a refusal before any cell: the run stopped
        note = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        try:
            store.finish("interrupted", note=note[:500])
        except StorageError:
            pass  # the disk itself is the problem: the original error says so
        raise
    return store


def no_gpu_reason() -> str | None:
    """None when this host has an NVIDIA GPU; else why not (what the probe said)."""
    from harness import gpus

    p = gpus.probe()
    return None if p.ok else p.reason


def skipped_cell(cell: Cell, why: str, build: BuildOutcome | None) -> CellResult:
    """Not served: this host has no GPU. Its build was still checked: the arch trap in the
    build log fails the cell all the same."""
    trap = _build_verdicts(build)
    return CellResult(
        **_base(cell), status=Status.FAIL if trap else Status.SKIPPED,
        verdicts=(Verdict(check="host.gpu", status=VerdictStatus.WARN,
                          message=f"skipped: no GPU on this host ({why})"),
                  *trap),
        image=_image(cell, build), audit=(build.audit_summary or build.audit) if build else None,
        started_at=now_iso(), finished_at=now_iso(),
    )


def _guarded(cell: Cell, ctx: _Ctx, build: BuildOutcome | None) -> CellResult:
    """One cell; whatever it raises (but Ctrl-C / SIGTERM / a full disk) is its result."""
    if build is not None and build.failed:
        result = build_failed_cell(cell, build)
        ctx.store.write_cell(result)
        return result
    if ctx.matrix.spec.serve.gpus != "none" and (why := ctx.no_gpu()) is not None:
        result = skipped_cell(cell, why, build)
        ctx.store.write_cell(result)
        return result
    started = now_iso()
    try:
        return serve_cell(cell, ctx, build)
    except (KeyboardInterrupt, SystemExit, StorageError):
        raise
    except Exception as exc:  # noqa: BLE001 - a failed cell is a result, not a crash
        store = ctx.store
        written = store.read_cell(cell.id)
        if written is not None and written.started_at == started:
            # it broke while stopping the server, after its result was written: keep that
            return written
        log = store.log_path(cell.id)
        tail: tuple[str, ...] = ()
        if log.is_file():
            tail = tuple(log.read_text(errors="replace").splitlines()[-40:])
        result = error_cell(cell, exc, started=started, log_tail=tail,
                            partial=store.read_partial(cell.id),
                            log_rel=str(log.relative_to(store.dir)) if log.is_file() else None)
        store.write_cell(result)
        return result


def _needs_docker(cells: list[Cell]) -> bool:
    return any(c.stack.runner == "docker" for c in cells)


def reap_dead(results_root: Path, engine_if_needed: _Engine | None = None) -> dict[str, list[str]]:
    """Remove what dead controllers left: their containers (when an engine is at hand) and the
    `running` mark of their run directories under `results_root` (now `interrupted`, so
    `--resume` finishes them). Returns what was done, for `harness reap` to print."""
    from harness.errors import EnvironmentProblem
    from harness.serve.local import kill_group

    done: dict[str, list[str]] = {"containers": [], "runs": [], "servers": []}
    if engine_if_needed is not None:
        try:
            done["containers"] = engine_if_needed().reap()
        except EnvironmentProblem:
            pass  # no engine: nothing of ours can be running there either
    root = Path(results_root)
    for run_json in sorted(root.glob("*/run.json")) if root.is_dir() else ():
        try:
            store = RunStore.open(run_json.parent)
        except ConfigError:
            continue
        owner = store.run.controller
        if store.run.status != "running" or owner is None or controller.alive(owner) is not False:
            continue
        for cell_id in store.run.cells:
            server = (store.read_partial(cell_id) or {}).get("server") or {}
            if server.get("kind") == "local" and isinstance(server.get("pgid"), int) and \
                    kill_group(server["pgid"], server.get("started")):
                done["servers"].append(f"{cell_id} (process group {server['pgid']})")
        try:
            store.finish("interrupted", note=f"controller pid {owner.pid} on {owner.host} died; "
                         "reaped by a later run")
        except StorageError:
            continue
        done["runs"].append(str(run_json.parent))
    return done


def exit_code(store: RunStore) -> int:
    """0 when every cell passed or was skipped and every build and audit passed."""
    cells = store.cells()
    builds_ok = all(not b.failed and b.audit_status != "fail" for b in store.builds().values())
    return 0 if cells and builds_ok and all(c.status.ok and not c.reasons for c in cells) else 1
