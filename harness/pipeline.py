"""`harness run`, top to bottom: build -> serve -> measure -> judge -> store, cell by cell.

Each stage is a module of harness/stages returning a typed outcome; this module only strings
them together. A cell ends as a `CellResult`, written (masked, atomically) before its server is
stopped. Anything a cell raises makes that cell `error` with the exception and the log tail, and
the run goes on: only Ctrl-C / SIGTERM stop a run. A run starts by reaping what dead
controllers left (containers, run directories marked running), and can be resumed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from harness import __version__, controller
from harness.errors import ConfigError, EnvironmentProblem, StorageError
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
from harness.runners.base import Runner
from harness.runners.readiness import wait_ready
from harness.stages import judge as judge_stage
from harness.stages import measure as measure_stage
from harness.stages import serve as serve_stage
from harness.stages.build import build_stage


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

    @property
    def connected(self):
        return self._engine


def _default_runner_for(engine: _Engine) -> Callable[[Cell], Runner]:
    def make(cell: Cell) -> Runner:
        if cell.stack.runner == "local":
            from harness.runners.local import LocalRunner

            return LocalRunner()
        from harness.runners.docker import DockerRunner

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
    from harness import hosts as hostmod

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
        run = _HostsRun(matrix, cells, store, opts, hosts, engine if default else None)
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


class HostUnreachable(EnvironmentProblem):
    """A host's engine does not answer: its cells are errors, the other hosts carry on."""


class _HostStore:
    """The run's one store as one named host sees it: cells carry the host's name, builds are
    kept per host (builds/<stack>@<host>.json) when there are several, and once the run is
    stopping nothing more is written (an interrupted cell is redone by --resume)."""

    def __init__(self, store: RunStore, host: str, per_host_builds: bool, stopping: threading.Event) -> None:
        self._store = store
        self._host = host
        self._suffix = f"@{host}" if per_host_builds else ""
        self._stopping = stopping

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def write_cell(self, cell: CellResult) -> Path:
        if self._stopping.is_set():
            return self._store.cell_path(cell.id)
        return self._store.write_cell(cell.model_copy(update={"host": self._host}))

    def write_partial(self, cell_id: str, data: dict[str, Any]) -> None:
        if not self._stopping.is_set():
            self._store.write_partial(cell_id, {**data, "host": self._host})

    def write_build(self, outcome: BuildOutcome) -> Path:
        return self._store.write_build(outcome.model_copy(update={"stack": outcome.stack + self._suffix}))

    def builds(self) -> dict[str, BuildOutcome]:
        every = self._store.builds()
        if not self._suffix:
            return every
        return {k.removesuffix(self._suffix): v for k, v in every.items() if k.endswith(self._suffix)}


class _LockedProgress:
    """Progress callbacks from slot threads, one at a time."""

    def __init__(self, inner: Progress) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._inner, name)

        def call(*args: Any, **kw: Any) -> Any:
            with self._lock:
                return method(*args, **kw)
        return call


class _SlotRunner:
    """A runner whose servers get the slot's GPUs only: device ids for a container,
    CUDA_VISIBLE_DEVICES for a local server."""

    def __init__(self, inner: Runner, gpus: tuple[str, ...] | None) -> None:
        self._inner = inner
        self._gpus = gpus
        self.name = inner.name

    def serve(self, spec):
        if self._gpus:
            ids = ",".join(self._gpus)
            if self._inner.name == "docker":
                if spec.gpus is not None:
                    spec = dataclasses.replace(spec, gpus=ids)
            else:
                spec = dataclasses.replace(spec, env={**spec.env, "CUDA_VISIBLE_DEVICES": ids})
        return self._inner.serve(spec)


@dataclass
class _Live:
    """One host during a run: its engine (None until connected), builds, and whether it is gone."""

    host: Any
    engine: Any = None
    down: str | None = None  # why the host is unreachable
    builds: dict = field(default_factory=dict)
    gpu_probe: list = field(default_factory=list)
    store: Any = None


class _HostsRun:
    def __init__(self, matrix: Matrix, cells: list[Cell], store: RunStore, opts: RunOptions, hosts,
                 default_engine: _Engine | None) -> None:
        self.matrix, self.cells, self.store, self.opts = matrix, cells, store, opts
        self.by_id = {c.id: c for c in cells}
        self.default_engine = default_engine
        self.stopping = threading.Event()
        self.live = {h.name: _Live(h) for h in hosts}
        self.named = default_engine is None
        self.lock = threading.Lock()  # the cross-cell format rule, the start counter
        self.timeline: list[dict] = []
        for lv in self.live.values():
            lv.store = (_HostStore(store, lv.host.name, len(hosts) > 1, self.stopping)
                        if self.named else store)

    # --- before the cells: connect, reap, fingerprint and build on every host ------------------

    def prepare(self) -> None:
        from harness import hosts as hostmod

        progress = self.opts.progress
        if not self.named:
            lv = self.live[hostmod.LOCAL]
            lv.engine = self.default_engine
            lv.builds = build_stage(self.matrix, self.cells, self.store, engine=self.default_engine,
                                    force=self.opts.force_build, allow_unpinned=self.opts.allow_unpinned,
                                    audit_local=self.opts.audit_local, template=self.opts.build_template,
                                    template_values=self.opts.build_template_values,
                                    on_event=progress.build_event)
            self.where = {c.id: (hostmod.LOCAL,) for c in self.cells}
            return
        from harness.engine import connect

        hosts = [lv.host for lv in self.live.values()]
        self.where = hostmod.placement(self.cells, hosts, self.matrix)
        fingerprints: dict[str, Any] = {}
        for name, lv in self.live.items():
            mine = [c for c in self.cells if name in self.where[c.id]]
            try:
                lv.engine = connect(lv.host.url, name=name, tls=lv.host.tls)
                lv.engine.reap()  # what dead controllers left on this host
                info = lv.engine.info()
                fingerprints[name] = {"engine": info.host, "version": info.version, "os": info.os,
                                      "runtimes": list(info.runtimes), "gpu_capable": info.gpu_capable,
                                      "hardware": lv.host.hardware, "gpus": list(lv.host.gpus)
                                      if lv.host.gpus is not None else "all", "slots": lv.host.slots}
                lv.builds = build_stage(self.matrix, mine, lv.store, engine=lambda e=lv.engine: e,
                                        force=self.opts.force_build, allow_unpinned=self.opts.allow_unpinned,
                                        audit_local=self.opts.audit_local, template=self.opts.build_template,
                                        template_values=self.opts.build_template_values,
                                        on_event=progress.build_event)
            except ConfigError:
                raise
            except EnvironmentProblem as exc:
                lv.down = exc.message if lv.engine is None else f"host {name} unreachable: {exc.message}"
                fingerprints[name] = {"engine": lv.host.url, "unreachable": lv.down}
        self.store.update_run(hosts=fingerprints)
        # a host whose build of a stack failed is not used for it while another host has it
        for c in self.cells:
            ok = tuple(h for h in self.where[c.id] if self.live[h].down is None and not (
                (b := self.live[h].builds.get(c.stack_name)) is not None and b.failed))
            if ok:
                self.where[c.id] = ok

    # --- the cells --------------------------------------------------------------------------

    def dispatch(self, order: list[Cell]) -> None:
        from harness import hosts as hostmod

        hosts = [lv.host for lv in self.live.values()]
        need = {c.id: hostmod.gpus_needed(c, self.matrix) for c in self.cells}
        self.total = len(order)
        self.started = 0
        # cells that span nodes take several hosts at once: they run after the others, one by one
        multi = [c for c in order if c.config.nodes > 1]
        order = [c for c in order if c.config.nodes == 1]
        board = hostmod.Board([c.id for c in order], hosts, self.where, need)
        for name, lv in self.live.items():
            if lv.down is not None:
                for cid in board.drop_host(name):
                    self._unreachable(self.by_id[cid], lv)
        for c in order:
            if not self.where[c.id]:
                reasons = "; ".join(hostmod.why_not(c, h, self.matrix) or "" for h in hosts)
                self._write_error(c, ConfigError(f"no host can run this cell: {reasons}",
                                                 hint="add a host for its hardware to [hosts], or widen a host's "
                                                 "`stacks`/`gpus`"), self.store)
        slots = [hostmod.Slot(lv.host, i) for lv in self.live.values() if lv.down is None
                 for i in range(lv.host.slots)]
        if len(slots) <= 1:
            for slot in slots:  # one slot: this thread, as a run always did
                self._slot_loop(slot, board, self.opts)
            self._multinode(multi, need)
            self._save_timeline()
            return
        opts = dataclasses.replace(self.opts, progress=_LockedProgress(self.opts.progress))
        errors: list[BaseException] = []

        def work(slot) -> None:
            try:
                self._slot_loop(slot, board, opts)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                errors.append(exc)
                board.close()

        threads = [threading.Thread(target=work, args=(s,), name=f"slot-{s.name}", daemon=True) for s in slots]
        for t in threads:
            t.start()
        try:
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)
        except BaseException:
            self._stop(board, threads)
            self._save_timeline()
            raise
        if errors:
            self._save_timeline()
            raise errors[0]
        try:
            self._multinode(multi, need)
        finally:
            self._save_timeline()

    def _multinode(self, cells: list[Cell], need: dict[str, int]) -> None:
        """Each cell with `nodes = N` on the first N live hosts that take it: a Ray head on the
        first, a worker on each next (harness/multinode.py), serving on the head."""
        from harness.hosts import Slot
        from harness.multinode import Node, RayRunner, ray_argv

        for cell in cells:
            n = cell.config.nodes
            names = [h for h in self.where.get(cell.id, ()) if self.live[h].down is None][:n]
            if not self.named or len(names) < n:
                self._write_error(cell, ConfigError(
                    f"this cell spans {n} nodes and {len(names)} host(s) can take it"
                    + ("" if self.named else " (no [hosts] in the matrix)"),
                    hint="list a host per node in [hosts] (the first is the Ray head)"), self.store)
                continue
            head = self.live[names[0]]
            per_node = max(1, -(-need[cell.id] // n))  # GPUs each node declares to Ray
            nodes = [Node(self.live[h].engine, h, self.live[h].host.address, per_node) for h in names]
            runner = RayRunner(nodes, base_port=head.host.ports[1] + 1,
                               ready_timeout_s=self.matrix.spec.serve.startup_timeout_s)
            slot = Slot(head.host, 0)
            with self.lock:
                self.started += 1
                index = self.started
            self.opts.progress.cell_started(cell, index, self.total)
            t0 = time.time()
            ctx = self._ctx(slot, head, None, self.opts, cell)
            ctx.runner_for = lambda _c, r=runner: r
            ctx.store = _HostStore(self.store, "+".join(names), False, self.stopping)
            builds = [self.live[h].builds.get(cell.stack_name) for h in names]
            build = next((b for b in builds if b is not None and b.failed), builds[0])
            # the command says what runs it: vLLM's Ray executor (recorded in the cell, the log)
            cell = dataclasses.replace(cell, config=cell.config.model_copy(
                update={"args": ray_argv(cell.config.args)}))
            result = _guarded(cell, ctx, build)
            self.timeline.append({"cell": cell.id, "host": "+".join(names), "slot": 0, "gpus": None,
                                  "start": round(t0, 3), "end": round(time.time(), 3)})
            for after, before in apply_format_rule(self.store):
                if after.id == result.id:
                    result = after
                elif after.status != before:
                    self.opts.progress.cell_updated(after, before)
            self.opts.progress.cell_finished(result, index, self.total)

    def _slot_loop(self, slot, board, opts: RunOptions) -> None:
        lv = self.live[slot.host.name]
        while not self.stopping.is_set():
            got = board.take(slot.host)
            if got is None:
                return
            cid, gpus = got
            cell = self.by_id[cid]
            t0 = time.time()
            try:
                with self.lock:
                    self.started += 1
                    index = self.started
                opts.progress.cell_started(cell, index, self.total)
                result = _guarded(cell, self._ctx(slot, lv, gpus, opts, cell), lv.builds.get(cell.stack_name))
                if self.named and not result.status.ok and (why := lv.engine.ping()) is not None:
                    lv.down = f"host {lv.host.name} unreachable: {why}"
                    result = self._unreachable(cell, lv, result)
                    for orphan in board.drop_host(lv.host.name):
                        self._unreachable(self.by_id[orphan], lv)
                if self.stopping.is_set():
                    return
                with self.lock:
                    for after, before in apply_format_rule(self.store):
                        if after.id == result.id:
                            result = after
                        elif after.status != before:
                            opts.progress.cell_updated(after, before)
                opts.progress.cell_finished(result, index, self.total)
            finally:
                self.timeline.append({"cell": cid, "host": slot.host.name, "slot": slot.index,
                                      "gpus": list(gpus) if gpus else None, "start": round(t0, 3),
                                      "end": round(time.time(), 3)})
                board.release(slot.host, gpus)
            if lv.down is not None:
                return

    def _ctx(self, slot, lv: _Live, gpus, opts: RunOptions, cell: Cell) -> _Ctx:
        matrix = self.matrix
        if self.named and (cell.stack.runner == "local" or slot.host.network == "host" or cell.config.nodes > 1):
            # the server listens on the host itself: the slot's own port, never another's
            serve = matrix.spec.serve.model_copy(update={"port": slot.port, "host_port": None})
            matrix = matrix._replace(spec=matrix.spec.model_copy(update={"serve": serve}))
        if opts.runner_for is not None:
            inner_for = opts.runner_for
        elif not self.named:
            inner_for = _default_runner_for(lv.engine)
        else:
            inner_for = _host_runner_for(lv)
        gpu_present = opts.gpu_present
        if gpu_present is None and self.named and not slot.host.is_local:
            gpu_present = lambda: None if lv.engine.info().gpu_capable else (  # noqa: E731
                f"the engine of host {slot.host.name} has no NVIDIA runtime or CDI spec")
        ctx = _Ctx(matrix, lv.store, dataclasses.replace(opts, gpu_present=gpu_present),
                   lambda c: _SlotRunner(inner_for(c), gpus), lv.gpu_probe)
        return ctx

    def _write_error(self, cell: Cell, exc: BaseException, store) -> CellResult:
        result = error_cell(cell, exc, started=now_iso())
        store.write_cell(result)
        return result

    def _unreachable(self, cell: Cell, lv: _Live, result: CellResult | None = None) -> CellResult:
        """The cell's host is gone: an `error` whose first verdict is `host X unreachable: <what
        its engine said>`; what the cell itself raised, if it ran, follows."""
        msg = lv.down or f"host {lv.host.name} unreachable"
        host_verdict = Verdict(check="host", status=VerdictStatus.FAIL,
                               message=f"{msg} (fix: check that host's engine with `docker -H URL info`, "
                               "then `harness run --resume RUN_DIR` runs this cell again)")
        if result is None:
            result = error_cell(cell, HostUnreachable(msg), started=now_iso())
            earlier: tuple[Verdict, ...] = ()
        else:
            earlier = result.verdicts
        result = result.model_copy(update={
            "status": Status.ERROR, "verdicts": (host_verdict, *earlier),
            "error": CellError(type="HostUnreachable", message=msg,
                               traceback=result.error.traceback if result.error else ())})
        lv.store.write_cell(result)
        return result

    def _stop(self, board, threads) -> None:
        """Ctrl-C with cells running on several slots: remove this run's containers on every
        host and stop its local servers, so the slot threads end; nothing more is written."""
        from harness.runners.local import kill_group

        self.stopping.set()
        board.close()
        for lv in self.live.values():
            if lv.engine is None or lv.down is not None:
                continue
            try:
                engine = lv.engine() if isinstance(lv.engine, _Engine) else lv.engine
                engine.reap(run_id=self.store.run_id)
            except Exception:  # noqa: BLE001 - a gone engine: its labels let the next run reap
                continue
        for cid in self.store.run.cells:
            server = (self.store.read_partial(cid) or {}).get("server") or {}
            if server.get("kind") == "local" and isinstance(server.get("pgid"), int):
                kill_group(server["pgid"], server.get("started"))
        deadline = time.monotonic() + 30
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _save_timeline(self) -> None:
        if self.named:
            from harness.results.store import atomic_write_json

            atomic_write_json(self.store.dir / "schedule.json",
                              sorted(self.timeline, key=lambda e: e["start"]))


def _host_runner_for(lv: _Live) -> Callable[[Cell], Runner]:
    def make(cell: Cell) -> Runner:
        if cell.stack.runner == "local":
            from harness.runners.local import LocalRunner

            return LocalRunner()
        from harness.runners.docker import DockerRunner

        return DockerRunner(lv.engine, network=lv.host.network, address=lv.host.address)

    return make


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
    from harness.runners.local import kill_group

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
    builds_ok = all(not b.failed and (b.audit_summary or b.audit or {}).get("status") != "fail"
                    and (b.audit_summary or {}).get("audit.status") != "fail"
                    for b in store.builds().values())
    return 0 if cells and builds_ok and all(c.status.ok and not c.reasons for c in cells) else 1
