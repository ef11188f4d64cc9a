"""Hosts and slots: which Docker engines a matrix runs on, and which cell may go where.

`[hosts.NAME]` tables load into frozen `Host` records; no table means one host, `local`, that
is today's engine (DOCKER_HOST or the local socket) with one slot. A slot is one cell running
at a time on a host; a host lends a pool of GPU ids, and a cell takes
tensor_parallel_size x pipeline_parallel_size of them, for its own container only.

Placement is a pure function (`pick`): the first pending cell, in execution order, that may run
on the host; when that cell does not fit the free GPUs, the host waits for it rather than pass
it by (no backfill), so a cell asking for N GPUs is never starved by smaller ones. `Board` is
the thread-safe live version the pipeline's slot threads share; `simulate` replays the same
rule over given durations for `harness plan` and the scheduler benchmark.

Merging with the single-host `[host]` table (GPU attach modes): `[host]` is the one-entry
`[hosts]` `{"local": [host]}`; `EngineHost` then subclasses that table's model (its attach
fields are named alike here) and a matrix giving both `[host]` and `[hosts]` is refused.
"""

from __future__ import annotations

import fnmatch
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from harness.archs import CC, FIRST_MAJOR
from harness.matrix.load import Matrix
from harness.matrix.model import MatrixFile
from harness.matrix.plan import Cell

LOCAL = "local"


@dataclass(frozen=True)
class Tls:
    ca_cert: str | None
    client_cert: str
    client_key: str
    verify: bool = True


@dataclass(frozen=True)
class Host:
    name: str
    url: str | None  # None: DOCKER_HOST or the local socket
    hardware: str
    cc: str
    gpus: tuple[str, ...] | None  # None: 'all' (not pooled, one cell at a time); (): none
    slots: int
    network: str | None = "bridge"  # None: the matrix's own ([host].network or serve.network)
    address: str = "127.0.0.1"
    ports: tuple[int, int] = (8100, 8199)
    stacks: tuple[str, ...] = ("*",)
    gpu_attach: str = "runtime"
    tls: Tls | None = None
    # The implicit host of a matrix without [hosts]: today's engine, connected on first use (a run
    # of local stacks needs none), reaped by the session, not fingerprinted; its cells and
    # builds carry no host name.
    default: bool = False

    @property
    def is_local(self) -> bool:
        """The engine runs on the controller's machine (local stacks may run here too)."""
        return self.url is None or self.url.startswith("unix://")

    def slot_port(self, index: int) -> int:
        return self.ports[0] + index


@dataclass(frozen=True)
class Slot:
    host: Host
    index: int

    @property
    def name(self) -> str:
        return f"{self.host.name}#{self.index}"

    @property
    def port(self) -> int:
        return self.host.slot_port(self.index)


def _address(url: str | None) -> str:
    if url is None or url.startswith(("unix://", "npipe://")):
        return "127.0.0.1"
    return urlsplit(url).hostname or "127.0.0.1"


def hosts_of(matrix: Matrix | MatrixFile) -> tuple[Host, ...]:
    """The hosts of a matrix, in file order; without [hosts], the one default local host."""
    spec = matrix.spec if isinstance(matrix, Matrix) else matrix
    hw_name = spec.matrix.hardware
    if not spec.hosts:
        # the matrix's own port and network; no cc, so every cell may run here (the build audit
        # and the judge say whether its kernels fit this GPU)
        port = spec.serve.host_port or spec.serve.port
        return (Host(name=LOCAL, url=None, hardware=hw_name, cc="", gpus=None, slots=1, network=None,
                     ports=(port, port), default=True),)
    out = []
    for name, h in spec.hosts.items():
        hw_key = h.hardware or hw_name
        hw = spec.hardware[hw_key]  # the load checked that every host's profile is one
        gpus = None if h.gpus == "all" else () if h.gpus == "none" else tuple(str(g) for g in h.gpus)
        slots = h.slots or (len(gpus) if gpus else 1)
        tls = Tls(h.tls.ca_cert, h.tls.client_cert, h.tls.client_key, h.tls.verify) if h.tls else None
        out.append(Host(name=name, url=h.engine, hardware=hw_key, cc=hw.cc, gpus=gpus,
                        slots=slots, network=h.network, address=h.address or _address(h.engine),
                        ports=(h.ports[0], h.ports[1]), stacks=tuple(h.stacks), gpu_attach=h.gpu_attach, tls=tls))
    return tuple(out)


# --- what a cell needs, and where it may run --------------------------------------------------

_PARALLEL = re.compile(r"^(--tensor-parallel-size|-tp|--pipeline-parallel-size|-pp)(?:=(\d+))?$")


def gpus_needed(cell: Cell, matrix: Matrix) -> int:
    """GPUs a cell's server needs: 0 with serve.gpus = 'none', else tensor x pipeline parallel
    size (vLLM's -tp/--tensor-parallel-size and -pp/--pipeline-parallel-size, in model or config args)."""
    if matrix.spec.serve.gpus == "none":
        return 0
    sizes = {"t": 1, "p": 1}
    args = [*cell.model.args, *cell.config.args]
    for i, a in enumerate(args):
        m = _PARALLEL.match(a)
        if not m:
            continue
        value = m[2] if m[2] is not None else (args[i + 1] if i + 1 < len(args) else "")
        if value.isdigit():
            sizes["p" if m[1] in ("--pipeline-parallel-size", "-pp") else "t"] = int(value)
    return sizes["t"] * sizes["p"]


def arch_refusals(cells: Sequence[Cell], matrix: Matrix) -> list[str]:
    """Stacks of `cells` whose arch list builds nothing that runs on the chips the matrix runs on:
    its hardware, or its hosts' hardware with [hosts]. Each such cell would serve a server that
    finds no kernel image for its GPU; `harness plan` and `harness run` refuse them, naming the
    stack, its arch list and the hardware."""
    spec = matrix.spec
    chips = ({h.hardware: h.cc for h in hosts_of(matrix)} if spec.hosts
             else {spec.matrix.hardware: spec.hardware[spec.matrix.hardware].cc})
    problems = []
    for name in dict.fromkeys(c.stack_name for c in cells):
        archs = spec.stacks[name].torch_cuda_arch_list
        if archs is None or any(archs.runs_on(cc) for cc in chips.values()):
            continue
        where = ", ".join(f"{hw} (cc {cc})" for hw, cc in chips.items())
        cc = next(iter(chips.values()))
        add = f"'{cc}a' or '{cc}'" if CC.parse(cc).major >= FIRST_MAJOR["a"] else f"'{cc}'"
        problems.append(f"stacks.{name}.torch_cuda_arch_list: '{archs}' builds nothing that runs on the "
                        f"hardware it would serve on: {where} (add {add} to the list, or point [matrix] "
                        "hardware / [hosts] at the chip the stack is built for)")
    return problems


def why_not(cell: Cell, host: Host, matrix: Matrix) -> str | None:
    """None when `cell` may run on `host`, else why not (for plan and for unplaceable cells)."""
    if not any(fnmatch.fnmatchcase(cell.stack_name, p) for p in host.stacks):
        return f"host {host.name} takes stacks {', '.join(host.stacks)}"
    if cell.stack.runner == "local" and not host.is_local:
        return f"stack {cell.stack_name} is local and host {host.name} is another machine"
    archs = cell.stack.torch_cuda_arch_list
    if archs is not None and host.cc and not archs.runs_on(host.cc):
        return f"stack {cell.stack_name} is built for {archs}, host {host.name} has cc {host.cc} ({host.hardware})"
    need = -(-gpus_needed(cell, matrix) // cell.config.nodes)  # on each of its nodes
    if host.gpus is not None and need > len(host.gpus):
        return f"needs {need} GPUs{' per node' if cell.config.nodes > 1 else ''}, host {host.name} lends {len(host.gpus)}"
    return None


def placement(cells: Sequence[Cell], hosts: Sequence[Host], matrix: Matrix) -> dict[str, tuple[str, ...]]:
    """Cell id -> the hosts (names, in file order) it may run on; () when none."""
    return {c.id: tuple(h.name for h in hosts if why_not(c, h, matrix) is None) for c in cells}


def execution_order(cells: list[Cell]) -> list[Cell]:
    """Plan order, except that within a stack the NVFP4 cells run after the others: the
    NVFP4-vs-FP8 rule can then judge an NVFP4 cell the moment it ends, so the status shown live
    is its final one."""
    stacks = list(dict.fromkeys(c.stack_name for c in cells))
    return sorted(cells, key=lambda c: (stacks.index(c.stack_name), c.quantization == "nvfp4"))


def listen_port(cell: Cell, slot: Slot) -> int | None:
    """The port a cell's server binds on the host itself, when it does (a local server, host
    networking, the head of a cell over several nodes): its slot's own, so two cells on one host
    never meet. None: it listens inside its container, published where the engine likes."""
    if cell.stack.runner == "local" or slot.host.network == "host" or cell.config.nodes > 1:
        return slot.port
    return None


# --- the scheduler ------------------------------------------------------------------------------


@dataclass
class HostState:
    free: list[str]  # free GPU ids (pooled hosts)
    running: int = 0


def fits(need: int, host: Host, state: HostState) -> bool:
    if state.running >= host.slots:
        return False
    return host.gpus is None or need <= len(state.free)


def pick(pending: Sequence[str], host: Host, state: HostState, where: dict[str, tuple[str, ...]],
         need: dict[str, int]) -> tuple[str | None, bool]:
    """The cell `host` starts next: (cell id or None, whether any pending cell could still run
    here). The first pending cell allowed on this host is taken when it fits, else the host waits."""
    for cid in pending:
        if host.name in where[cid]:
            return (cid if fits(need[cid], host, state) else None), True
    return None, False


def take_gpus(host: Host, state: HostState, need: int) -> tuple[str, ...] | None:
    """The GPU ids a starting cell gets (None: the host's 'all'/'none' setting applies as is)."""
    state.running += 1
    if host.gpus is None or not host.gpus:
        return None
    got, state.free[:] = tuple(state.free[:need]), state.free[need:]
    return got


def give_back(host: Host, state: HostState, gpus: tuple[str, ...] | None) -> None:
    state.running -= 1
    if gpus:
        state.free.extend(gpus)
        order = list(host.gpus or ())
        state.free.sort(key=order.index)


@dataclass(frozen=True)
class Placed:
    cell: str
    host: str
    slot: int
    gpus: tuple[str, ...] | None
    start: float
    end: float


def simulate(order: Sequence[str], hosts: Sequence[Host], where: dict[str, tuple[str, ...]],
             need: dict[str, int], duration: Callable[[str], float]) -> list[Placed]:
    """What the slot threads would do if cell `c` took `duration(c)`: a pure replay of `pick`.
    `where` is `placement`'s map, a key for every cell of `order`; cells placeable nowhere are
    left out."""
    pending = [c for c in order if where[c]]
    states = {h.name: HostState(free=list(h.gpus or ())) for h in hosts}
    free_slots = {h.name: list(range(h.slots)) for h in hosts}
    running: list[tuple[float, int, Placed]] = []
    out: list[Placed] = []
    now = 0.0
    seq = 0
    while pending or running:
        started = True
        while started:
            started = False
            for h in hosts:
                cid, _ = pick(pending, h, states[h.name], where, need)
                if cid is None:
                    continue
                gpus = take_gpus(h, states[h.name], need[cid])
                slot = free_slots[h.name].pop(0)
                p = Placed(cid, h.name, slot, gpus, now, now + duration(cid))
                pending.remove(cid)
                running.append((p.end, seq, p))
                seq += 1
                out.append(p)
                started = True
        if not running:
            break  # what is left fits nowhere now and nothing will free up
        running.sort()
        end, _, p = running.pop(0)
        now = end
        host = next(h for h in hosts if h.name == p.host)
        give_back(host, states[p.host], p.gpus)
        free_slots[p.host].append(p.slot)
        free_slots[p.host].sort()
    return out


class Board:
    """The live schedule: pending cells, free GPUs and slots per host, shared by slot threads.
    `where` is `placement`'s map, a key for every cell of `order`."""

    def __init__(self, order: Iterable[str], hosts: Sequence[Host], where: dict[str, tuple[str, ...]],
                 need: dict[str, int]) -> None:
        self._cond = threading.Condition()
        self._pending = [c for c in order if where[c]]
        self._hosts = {h.name: h for h in hosts}
        self._where = dict(where)
        self._need = dict(need)
        self._state = {h.name: HostState(free=list(h.gpus or ())) for h in hosts}
        self._closed = False

    def take(self, host: Host) -> tuple[str, tuple[str, ...] | None] | None:
        """Block until a cell may start on `host`; None when none ever will (or the board closed)."""
        with self._cond:
            while not self._closed:
                cid, more = pick(self._pending, host, self._state[host.name], self._where, self._need)
                if cid is not None:
                    self._pending.remove(cid)
                    return cid, take_gpus(host, self._state[host.name], self._need[cid])
                if not more:
                    return None
                self._cond.wait()
            return None

    def release(self, host: Host, gpus: tuple[str, ...] | None) -> None:
        with self._cond:
            give_back(host, self._state[host.name], gpus)
            self._cond.notify_all()

    def drop_host(self, name: str) -> list[str]:
        """A host is gone: it takes nothing more. Returns the pending cells nothing else can run."""
        with self._cond:
            self._where = {c: tuple(h for h in hs if h != name) for c, hs in self._where.items()}
            orphans = [c for c in self._pending if not self._where[c]]
            self._pending = [c for c in self._pending if c not in orphans]
            self._cond.notify_all()
            return orphans

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
