"""`harness run` from start to end: reap what dead controllers left, open (or resume) the run's
store, hand the cells to the executor with the cell function, finish the run, say its exit code.

A run starts by reaping what dead controllers left (containers, run directories marked running),
and can be resumed: `--resume DIR` runs what is not finished yet.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path

from harness import __version__, owner
from harness.audit.report import AuditState
from harness.errors import ConfigError, EnvironmentProblem, MatrixError, StorageError
from harness.hostenv import host_fingerprint
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell, expand
from harness.results.model import MatrixInfo, RunRecord
from harness.results.store import RunStore, new_run_id
from harness.run.cell import run_cell
from harness.run.executor import Executor, LazyEngine
from harness.run.options import RunOptions, SerialProgress
from harness.run.schedule import arch_refusals, execution_order, hosts_of
from harness.safety.roots import Root
from harness.serve.local import kill_group


def _new_store(matrix: Matrix, k: str | None, cells: list[Cell], opts: RunOptions) -> RunStore:
    spec = matrix.spec
    hw = spec.hardware[spec.matrix.hardware]
    run = RunRecord(
        run_id=new_run_id(spec.matrix.name), tool_version=__version__, argv=list(opts.argv), k=k,
        matrix=MatrixInfo(path=str(matrix.path), sha256=hashlib.sha256(matrix.source_bytes).hexdigest(),
                          name=spec.matrix.name, hardware_name=spec.matrix.hardware,
                          hardware=hw.model_dump(mode="json"),
                          expect=spec.expect.model_dump(mode="json"),
                          bench=spec.bench.model_dump(mode="json")),
        host=host_fingerprint(), cells=[c.id for c in cells], controller=owner.me(),
    )
    return RunStore.create(opts.results_root, run)


def run_matrix(matrix: Matrix, *, k: str | None, opts: RunOptions,
               resume_dir: Path | None = None) -> RunStore:
    """Run the selected cells; returns the store (its run dir holds every result).

    Cells are spread over the matrix's hosts, one thread per slot; without [hosts] there is
    one host, today's engine, and one slot, run in this thread."""
    cells = expand(matrix, k)
    if not cells:
        raise ConfigError(f"{matrix.path}: no cell matches -k {k!r}", hint="see `harness plan -m ... --list`")
    if problems := arch_refusals(cells, matrix):  # before anything is reaped, built or stored
        raise MatrixError(str(matrix.path), problems)
    hosts = hosts_of(matrix)
    engine = LazyEngine()
    reap_dead(opts.results_root, engine_if_needed=engine if hosts[0].default and _needs_docker(cells) else None)
    if resume_dir is not None:
        store = RunStore.open(resume_dir)
        planned = list(store.run.cells)
        added = [c.id for c in cells if c.id not in planned]
        # `--resume DIR -k EXPR` widens a run with more cells of the same matrix
        store.update_run(cells=planned + added, status="running", finished_at=None,
                         controller=owner.me())
    else:
        store = _new_store(matrix, k, cells, opts)
    # a cell whose host was unreachable never ran: a resume runs it again
    done = {c.id for c in store.cells() if not (c.error and c.error.type == "HostUnreachable")}
    # progress is called from the slot threads: one call at a time
    opts = dataclasses.replace(opts, progress=SerialProgress(opts.progress))
    try:
        cell_fn = functools.partial(run_cell, matrix=matrix, store=store, opts=opts)
        run = Executor(matrix, cells, store, opts, hosts, cell_fn, engine)
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


def _needs_docker(cells: list[Cell]) -> bool:
    return any(c.stack.runner == "docker" for c in cells)


@dataclasses.dataclass
class Reaped:
    """What a reap removed: container names, local servers' process groups, run folders marked."""

    containers: list[str] = dataclasses.field(default_factory=list)
    servers: list[str] = dataclasses.field(default_factory=list)
    runs: list[str] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.containers or self.servers or self.runs)


def reap_dead(results_root: Path, engine_if_needed: LazyEngine | None = None) -> Reaped:
    """Remove what dead controllers left: their containers (when an engine is at hand) and the
    `running` mark of their run directories under `results_root` (now `interrupted`, so
    `--resume` finishes them). Returns what was done, for `harness reap` to print."""
    done = Reaped()
    if engine_if_needed is not None:
        try:
            done.containers = engine_if_needed().reap()
        except EnvironmentProblem:
            pass  # no engine: nothing of ours can be running there either
    root = Root(results_root, what="--results")
    for run_json in [Path(results_root) / d / "run.json" for d in root.folders() if "run.json" in root.files(d)]:
        try:
            store = RunStore.open(run_json.parent)
        except ConfigError:
            continue
        who = store.run.controller
        if store.run.status != "running" or who is None or owner.alive(who) is not False:
            continue
        for cell_id in store.run.cells:
            server = partial.server if (partial := store.read_partial(cell_id)) else None
            if server is not None and server.local_group is not None and \
                    kill_group(server.local_group, server.started):
                done.servers.append(f"{cell_id} (process group {server.local_group})")
        try:
            store.finish("interrupted", note=f"controller pid {who.pid} on {who.host} died; "
                         "reaped by a later run")
        except StorageError:
            continue
        done.runs.append(str(run_json.parent))
    return done


def exit_code(store: RunStore) -> int:
    """0 when every cell passed or was skipped and every build and audit passed."""
    cells = store.cells()
    builds_ok = all(not b.failed and b.audit_status is not AuditState.FAIL for b in store.builds().values())
    return 0 if cells and builds_ok and all(c.status.ok and not c.reasons for c in cells) else 1
