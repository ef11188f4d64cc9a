"""What a run is asked to do (`RunOptions`) and what it shows while it works (`Progress`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.matrix.plan import Cell
from harness.results.model import CellResult, Status


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


class SerialProgress:
    """A Progress called from several slot threads: one call at a time."""

    def __init__(self, inner: Progress) -> None:
        self._inner = inner
        self._lock = threading.Lock()

    def build_event(self, event: Any) -> None:
        with self._lock:
            self._inner.build_event(event)

    def cell_started(self, cell: Cell, index: int, total: int) -> None:
        with self._lock:
            self._inner.cell_started(cell, index, total)

    def cell_phase(self, cell: Cell, phase: str, log: Any = None) -> None:
        with self._lock:
            self._inner.cell_phase(cell, phase, log)

    def cell_finished(self, result: CellResult, index: int, total: int) -> None:
        with self._lock:
            self._inner.cell_finished(result, index, total)

    def cell_updated(self, result: CellResult, before: Status) -> None:
        with self._lock:
            self._inner.cell_updated(result, before)


@dataclass(frozen=True)
class RunOptions:
    results_root: Path = Path("results")
    keep_failed: bool = False
    soak_s: float = 0.0
    bench: bool = True
    force_build: bool = False
    allow_unpinned: bool = False
    # A shell command run against each ready server after the benchmark (another client, to
    # hold our figures against): it sees HARNESS_URL, HARNESS_MODEL and HARNESS_OUT (a JSON path).
    cross_check: str | None = None
    # A Dockerfile template other than the packaged one (tests use a small one).
    build_template: Path | None = None
    build_template_values: dict | None = None
    argv: tuple[str, ...] = ()
    # Whether this host has a GPU for the cells that need one (serve.gpus != "none"); None
    # asks the GPU probe (NVML, then nvidia-smi). Without one, cells are skipped, not failed.
    gpu_present: Callable[[], str | None] | None = None
    progress: Progress = field(default_factory=QuietProgress)
