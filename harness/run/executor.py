"""The cell loop of `harness run` over hosts and slots (harness/hosts.py): one thread per slot.

Before the cells, every named host is connected, reaped, fingerprinted and builds (or reuses)
its own images. Then each slot thread takes the next cell its host may run from the shared
`Board` and runs it exactly as a single-host run does (`pipeline._guarded`), through a store
view that records the host and a runner that gives the container the slot's GPUs only. A host
whose engine stops answering errors its cells (`host X unreachable: ...`); the others carry on.
Cells with `nodes > 1` run after the others, one by one, on a Ray cluster (harness/multinode.py).
Without [hosts] there is one slot, and it runs in the caller's thread, as runs always did.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, EnvironmentProblem
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell
from harness.results.model import (
    BuildOutcome,
    CellError,
    CellResult,
    Status,
    Verdict,
    VerdictStatus,
)
from harness.results.store import RunStore
from harness.run.cell import (
    Progress,
    RunOptions,
    _Ctx,
    _default_runner_for,
    _Engine,
    _guarded,
    apply_format_rule,
    error_cell,
    now_iso,
)
from harness.serve.base import Runner
from harness.stages.build import build_stage


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


class HostsRun:
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
        from harness.run import schedule as hostmod

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
        from harness.run import schedule as hostmod

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
        from harness.run.schedule import Slot
        from harness.serve.multinode import Node, RayRunner, ray_argv

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
        from harness.serve.local import kill_group

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
            from harness.serve.local import LocalRunner

            return LocalRunner()
        from harness.serve.docker import DockerRunner

        return DockerRunner(lv.engine, network=lv.host.network, address=lv.host.address)

    return make
