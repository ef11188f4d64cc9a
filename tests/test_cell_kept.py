"""A cell whose result was written keeps it when stopping its server fails afterwards.

run_cell used to decide "this result is this attempt's" by comparing its own start time with
the stored cell's `started_at`, which serve_cell read from the clock a moment later; both are
whole seconds, so a second boundary between the two readings made a good result look foreign,
and it was replaced by an `error` cell. The test puts that boundary there (the clock ticks one
second per reading) and serves the stand-in vLLM with the real LocalRunner, whose server then
fails to stop.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from pathlib import Path

from test_pipeline_local import free_port, matrix_text

from harness.matrix.load import load_matrix
from harness.matrix.plan import expand
from harness.results.model import Status
from harness.run import cell as cell_mod
from harness.run.options import RunOptions
from harness.run.session import _new_store
from harness.serve.base import Placement
from harness.serve.local import LocalRunner


class StopFails:
    """The LocalRunner, except that stopping the server raises once it is stopped (a container
    the engine will not remove, a process group that will not die)."""

    name = "local"

    def __init__(self) -> None:
        self.inner = LocalRunner(stop_timeout_s=10)

    @contextmanager
    def serve(self, spec):
        with self.inner.serve(spec) as server:
            yield server
        raise RuntimeError("the server would not stop")


def test_a_written_result_survives_a_failed_stop_across_a_second_boundary(tmp_path, monkeypatch):
    path = tmp_path / "fake.toml"
    path.write_text(matrix_text(free_port()))
    matrix = load_matrix(path)
    cell = expand(matrix, "qwen-fp8 and auto")[0]
    opts = RunOptions(results_root=tmp_path / "results", bench=False)
    store = _new_store(matrix, None, [cell], opts)
    seconds = itertools.count()
    monkeypatch.setattr(cell_mod, "utc_now", lambda: f"2026-12-06T10:00:{next(seconds):02d}Z")

    result = cell_mod.run_cell(cell, Placement(runner=StopFails(), port=free_port()), None,
                               matrix=matrix, store=store, opts=opts)

    assert result.status is not Status.ERROR, result.error
    assert result.serve is not None and result.serve.state == "ready"
    stored = store.read_cell(cell.id)
    assert stored is not None and stored.status == result.status and stored.error is None
    assert stored.started_at == result.started_at == "2026-12-06T10:00:01Z"  # serve_cell's reading
    assert Path(store.dir / stored.serve.log).is_file()
