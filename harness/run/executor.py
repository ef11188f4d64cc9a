"""The cells of `harness run` over hosts and slots: one thread per slot.

Before the cells, every listed host is connected, reaped, fingerprinted and builds (or reuses)
its own images. Then each slot thread takes the next cell its host may run from the shared
`Board`, fixes its `Placement` (host, slot, port, GPUs, runner) and hands it to the cell
function the session gave (the executor never imports the cell's stages). A host whose engine
stops answering errors its cells (`host X unreachable: ...`); the others carry on. Cells with
`nodes > 1` run after the others, one by one, on a Ray cluster (harness/serve/multinode.py).
A matrix without [hosts] has one host with one slot, run in the caller's thread.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness import gpus as gpu_probe
from harness.engine import Engine, connect
from harness.errors import ConfigError, EnvironmentProblem
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell
from harness.results.build import BuildOutcome
from harness.results.model import CellError, CellResult, Status, Verdict, VerdictStatus
from harness.results.schedule import ScheduleEntry, schedule_json
from harness.results.store import RunStore, atomic_write_json, utc_now
from harness.run.options import RunOptions
from harness.run.outcome import apply_format_rule, error_cell
from harness.run.schedule import Board, Host, Slot, gpus_needed, listen_port, placement, why_not
from harness.serve.base import Placement, Runner
from harness.serve.docker import DockerRunner
from harness.serve.local import LocalRunner, kill_group
from harness.serve.multinode import Node, RayRunner, ray_argv
from harness.stages.build import build_stage

# What the executor runs per cell, handed to it by the session: the cell's stages, in order.
CellFn = Callable[[Cell, Placement, BuildOutcome | None], CellResult]


class HostUnreachable(EnvironmentProblem):
    """A host's engine does not answer: its cells are errors, the other hosts carry on."""


class LazyEngine:
    """The Docker engine of DOCKER_HOST or the local socket, connected on first use: a run of
    local stacks never needs one."""

    def __init__(self) -> None:
        self._engine: Engine | None = None

    def __call__(self) -> Engine:
        if self._engine is None:
            self._engine = connect()
        return self._engine

    @property
    def connected(self) -> bool:
        return self._engine is not None


def no_gpu_reason() -> str | None:
    """None when this machine has an NVIDIA GPU; else why not (what the probe said)."""
    p = gpu_probe.probe()
    return None if p.ok else p.reason


@dataclass
class _HostRun:
    """One host during a run: its engine, its builds, whether it is gone. Owned by the executor."""

    host: Host
    engine: Callable[[], Engine]
    label: str | None  # the name its cells are recorded under (None: the implicit host)
    build_key: str | None  # its builds are kept apart from other hosts' (several hosts)
    builds: dict[str, BuildOutcome] = field(default_factory=dict)
    down: str | None = None  # why the host is unreachable
    _no_gpu: list[str | None] = field(default_factory=list)

    def no_gpu(self, probe: Callable[[], str | None]) -> str | None:
        """Probed once per host, on the first cell that needs a GPU."""
        if not self._no_gpu:
            self._no_gpu.append(probe())
        return self._no_gpu[0]


class Executor:
    def __init__(self, matrix: Matrix, cells: list[Cell], store: RunStore, opts: RunOptions,
                 hosts: tuple[Host, ...], run_cell: CellFn, local_engine: LazyEngine) -> None:
        self.matrix, self.cells, self.store, self.opts = matrix, cells, store, opts
        self.run_cell = run_cell
        self.by_id = {c.id: c for c in cells}
        self.stopping = threading.Event()
        self.lock = threading.Lock()  # the cross-cell format rule, the start counter
        self.timeline: list[ScheduleEntry] = []
        several = len(hosts) > 1
        self.hosts = {h.name: _HostRun(h, local_engine if h.default else _unconnected(h),
                                       None if h.default else h.name, h.name if several else None)
                      for h in hosts}
        # which slot held which cell when: kept for runs over listed hosts
        self.schedule_file = None if any(h.default for h in hosts) else store.dir / "schedule.json"
        self.where: dict[str, tuple[str, ...]] = {}
        self.total = 0
        self.started = 0

    # --- before the cells: connect, reap, fingerprint and build on every host ------------------

    def prepare(self) -> None:
        hosts = [h.host for h in self.hosts.values()]
        self.where = placement(self.cells, hosts, self.matrix)
        fingerprints: dict[str, dict] = {}
        for name, h in self.hosts.items():
            mine = [c for c in self.cells if name in self.where[c.id]]
            unconnected = h.engine
            try:
                if not h.host.default:
                    fingerprints[name] = self._open(h)
                h.builds = build_stage(self.matrix, mine, self.store, engine=h.engine,
                                       force=self.opts.force_build, allow_unpinned=self.opts.allow_unpinned,
                                       template=self.opts.build_template,
                                       template_values=self.opts.build_template_values,
                                       on_event=self.opts.progress.build_event, host=h.build_key)
            except ConfigError:
                raise
            except EnvironmentProblem as exc:
                if h.host.default:
                    raise
                connected = h.engine is not unconnected
                h.down = f"host {name} unreachable: {exc.message}" if connected else exc.message
                fingerprints[name] = {"engine": h.host.url, "unreachable": h.down}
        if fingerprints:
            self.store.update_run(hosts=fingerprints)
        # a host whose build of a stack failed is not used for it while another host has it
        for c in self.cells:
            ok = tuple(n for n in self.where[c.id] if self.hosts[n].down is None and not (
                (b := self.hosts[n].builds.get(c.stack_name)) is not None and b.failed))
            if ok:
                self.where[c.id] = ok

    def _open(self, h: _HostRun) -> dict:
        """Connect a listed host's engine, remove what dead controllers left there, and say what
        it is. (The implicit host is today's engine: connected on first use, reaped by the session.)"""
        engine = connect(h.host.url, name=h.host.name, tls=h.host.tls)
        h.engine = lambda: engine
        engine.reap()
        info = engine.info()
        return {"engine": info.host, "version": info.version, "os": info.os,
                "runtimes": list(info.runtimes), "gpu_capable": info.gpu_capable,
                "hardware": h.host.hardware, "gpus": list(h.host.gpus)
                if h.host.gpus is not None else "all", "slots": h.host.slots}

    # --- the cells --------------------------------------------------------------------------

    def dispatch(self, order: list[Cell]) -> None:
        hosts = [h.host for h in self.hosts.values()]
        need = {c.id: gpus_needed(c, self.matrix) for c in self.cells}
        self.total = len(order)
        self.started = 0
        # cells that span nodes take several hosts at once: they run after the others, one by one
        multi = [c for c in order if c.config.nodes > 1]
        order = [c for c in order if c.config.nodes == 1]
        board = Board([c.id for c in order], hosts, self.where, need)
        for name, h in self.hosts.items():
            if h.down is not None:
                for cid in board.drop_host(name):
                    self._unreachable(self.by_id[cid], h)
        for c in order:
            if not self.where[c.id]:
                reasons = "; ".join(why_not(c, host, self.matrix) or "" for host in hosts)
                self._write_error(c, ConfigError(f"no host can run this cell: {reasons}",
                                                 hint="add a host for its hardware to [hosts], or widen a host's "
                                                 "`stacks`/`gpus`"))
        slots = [Slot(h.host, i) for h in self.hosts.values() if h.down is None
                 for i in range(h.host.slots)]
        try:
            if len(slots) <= 1:
                for slot in slots:  # one slot: this thread
                    self._slot_loop(slot, board)
            else:
                self._threads(slots, board)
            self._multinode(multi, need)
        finally:
            self._save_timeline()

    def _threads(self, slots: list[Slot], board: Board) -> None:
        errors: list[BaseException] = []

        def work(slot: Slot) -> None:
            try:
                self._slot_loop(slot, board)
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
            raise
        if errors:
            raise errors[0]

    def _multinode(self, cells: list[Cell], need: dict[str, int]) -> None:
        """Each cell with `nodes = N` on the first N live hosts that take it: a Ray head on the
        first, a worker on each next (harness/serve/multinode.py), serving on the head."""
        implicit = any(h.host.default for h in self.hosts.values())
        for cell in cells:
            n = cell.config.nodes
            names = [h for h in self.where[cell.id] if self.hosts[h].down is None][:n]
            if len(names) < n:
                self._write_error(cell, ConfigError(
                    f"this cell spans {n} nodes and {len(names)} host(s) can take it"
                    + (" (no [hosts] in the matrix)" if implicit else ""),
                    hint="list a host per node in [hosts] (the first is the Ray head)"))
                continue
            head = self.hosts[names[0]]
            per_node = max(1, -(-need[cell.id] // n))  # GPUs each node declares to Ray
            nodes = [Node(self.hosts[h].engine(), h, self.hosts[h].host.address, per_node) for h in names]
            runner = RayRunner(nodes, base_port=head.host.ports[1] + 1,
                               ready_timeout_s=self.matrix.spec.serve.startup_timeout_s)
            where = "+".join(names)
            placed = Placement(runner=runner, host=where, slot=0,
                               port=listen_port(cell, Slot(head.host, 0)),
                               no_gpu=functools.partial(self._no_gpu, head))
            index = self._count()
            self.opts.progress.cell_started(cell, index, self.total)
            t0 = time.time()
            builds = [self.hosts[h].builds.get(cell.stack_name) for h in names]
            build = next((b for b in builds if b is not None and b.failed), builds[0])
            # the command says what runs it: vLLM's Ray executor (recorded in the cell, the log)
            cell = dataclasses.replace(cell, config=cell.config.model_copy(
                update={"args": ray_argv(cell.config.args)}))
            result = self.run_cell(cell, placed, build)
            self.timeline.append(ScheduleEntry(cell=cell.id, host=where, slot=0, gpus=None,
                                               start=round(t0, 3), end=round(time.time(), 3)))
            self._finished(result, index)

    def _slot_loop(self, slot: Slot, board: Board) -> None:
        h = self.hosts[slot.host.name]
        while not self.stopping.is_set():
            got = board.take(slot.host)
            if got is None:
                return
            cid, gpus = got
            cell = self.by_id[cid]
            t0 = time.time()
            try:
                index = self._count()
                self.opts.progress.cell_started(cell, index, self.total)
                result = self._one(cell, h, slot, gpus)
                # a listed host's engine may be gone: its cells then go to no other slot of it
                if h.label is not None and not result.status.ok and (why := h.engine().ping()) is not None:
                    h.down = f"host {h.host.name} unreachable: {why}"
                    result = self._unreachable(cell, h, result)
                    for orphan in board.drop_host(h.host.name):
                        self._unreachable(self.by_id[orphan], h)
                if self.stopping.is_set():
                    return
                self._finished(result, index)
            finally:
                self.timeline.append(ScheduleEntry(cell=cid, host=slot.host.name, slot=slot.index,
                                                   gpus=gpus or None, start=round(t0, 3),
                                                   end=round(time.time(), 3)))
                board.release(slot.host, gpus)
            if h.down is not None:
                return

    def _one(self, cell: Cell, h: _HostRun, slot: Slot, gpus: tuple[str, ...] | None) -> CellResult:
        """The cell on this slot: its placement fixed, then the cell function."""
        try:
            placed = Placement(runner=self._runner(cell, h), host=h.label, slot=slot.index,
                               port=listen_port(cell, slot), gpus=gpus,
                               no_gpu=functools.partial(self._no_gpu, h))
        except EnvironmentProblem as exc:  # its engine is gone before it started: its result
            return self._write_error(cell, exc, host=h.label)
        return self.run_cell(cell, placed, h.builds.get(cell.stack_name))

    def _runner(self, cell: Cell, h: _HostRun) -> Runner:
        if cell.stack.runner == "local":
            return LocalRunner()
        return DockerRunner(h.engine(), network=h.host.network, address=h.host.address)

    def _no_gpu(self, h: _HostRun) -> str | None:
        return h.no_gpu(self._gpu_probe(h))

    def _gpu_probe(self, h: _HostRun) -> Callable[[], str | None]:
        if self.opts.gpu_present is not None:
            return self.opts.gpu_present
        if h.host.is_local:
            return no_gpu_reason
        return lambda: None if h.engine().info().gpu_capable else (
            f"the engine of host {h.host.name} has no NVIDIA runtime or CDI spec")

    def _count(self) -> int:
        with self.lock:
            self.started += 1
            return self.started

    def _finished(self, result: CellResult, index: int) -> None:
        """The cross-cell rule over what is stored now, then the cell is shown (and any cell the
        rule changed)."""
        with self.lock:
            for after, before in apply_format_rule(self.store, self.matrix.spec.expect, self.matrix.spec.bench):
                if after.id == result.id:
                    result = after
                elif after.status != before:
                    self.opts.progress.cell_updated(after, before)
        self.opts.progress.cell_finished(result, index, self.total)

    def _write_error(self, cell: Cell, exc: BaseException, host: str | None = None) -> CellResult:
        result = error_cell(cell, exc, started=utc_now(), host=host)
        self.store.write_cell(result)
        return result

    def _unreachable(self, cell: Cell, h: _HostRun, result: CellResult | None = None) -> CellResult:
        """The cell's host is gone: an `error` whose first verdict is `host X unreachable: <what
        its engine said>`; what the cell itself raised, if it ran, follows."""
        msg = h.down or f"host {h.host.name} unreachable"
        host_verdict = Verdict(check="host", status=VerdictStatus.FAIL,
                               message=f"{msg} (fix: check that host's engine with `docker -H URL info`, "
                               "then `harness run --resume RUN_DIR` runs this cell again)")
        if result is None:
            result = error_cell(cell, HostUnreachable(msg), started=utc_now(), host=h.label)
            earlier: tuple[Verdict, ...] = ()
        else:
            earlier = result.verdicts
        result = result.model_copy(update={
            "status": Status.ERROR, "verdicts": (host_verdict, *earlier),
            "error": CellError(type="HostUnreachable", message=msg,
                               traceback=result.error.traceback if result.error else ())})
        self.store.write_cell(result)
        return result

    def _stop(self, board: Board, threads: list[threading.Thread]) -> None:
        """Ctrl-C with cells running on several slots: nothing more is written (an interrupted
        cell is redone by --resume); remove this run's containers on every host and stop its
        local servers, so the slot threads end."""
        self.stopping.set()
        self.store.seal()
        board.close()
        for h in self.hosts.values():
            if h.down is not None or (isinstance(h.engine, LazyEngine) and not h.engine.connected):
                continue
            try:
                h.engine().reap(run_id=self.store.run_id)
            except Exception:  # noqa: BLE001 - a gone engine: its labels let the next run reap
                continue
        for cid in self.store.run.cells:
            server = partial.server if (partial := self.store.read_partial(cid)) else None
            if server is not None and server.local_group is not None:
                kill_group(server.local_group, server.started)
        deadline = time.monotonic() + 30
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _save_timeline(self) -> None:
        if self.schedule_file is not None:
            atomic_write_json(self.schedule_file, schedule_json(self.timeline))


def _unconnected(host: Host) -> Callable[[], Engine]:
    def engine() -> Engine:
        raise HostUnreachable(f"host {host.name}: its engine is not connected")
    return engine
