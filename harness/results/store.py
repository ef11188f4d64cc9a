"""The results directory of one run, written so that it survives an interruption.

Layout and fields: docs/results-format.md. Every file goes through `atomic_write_*` (temporary
file in the same directory, fsync, rename), so a reader or a `--resume` only ever sees whole
files. A cell's JSON is written once, when the cell is finished: its presence is what "done"
means on resume. Secrets are masked again on the way in, whatever the caller already did.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, StorageError
from harness.redact import redact_json, redact_text
from harness.results.build import BuildKey, BuildOutcome
from harness.results.model import CellResult, RunRecord, RunStatus
from harness.results.partial import PartialCell
from harness.results.schedule import SCHEDULE, ScheduleEntry
from harness.safety.paths import under
from harness.safety.roots import Root
from harness.safety.writes import write_text

RUN_FILE = "run.json"
SCHEDULE_FILE = "schedule.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+@-]")


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write `text` to `path` whole or not at all: a crash leaves the old file or none; never
    through a symlink or over a device (harness.safety.writes)."""

    write_text(path, text, make_parents=True, flag="file")


def atomic_write_json(path: Path | str, obj: Any) -> None:
    # Serialise before touching the disk: a value json cannot encode leaves the old file as it was.
    text = json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    atomic_write_text(path, text)


def new_run_id(matrix_name: str) -> str:
    """`<UTC yyyymmdd-HHMMSS>-<matrix name>-<6 hex>`: sorts by time, never collides."""
    name = _UNSAFE.sub("-", matrix_name).strip("-") or "run"
    return f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{name}-{secrets.token_hex(3)}"


def cell_key(cell_id: str) -> str:
    """File-name form of a cell id: '/' -> '__' (ids are `stack/model/config`)."""
    return _UNSAFE.sub("_", cell_id.replace("/", "__"))


def mask(obj: Any, key: str = "") -> Any:
    """A copy of JSON data with every secret masked (harness.redact.redact_json: env maps by
    variable name, command lines under `command`/`argv`, a secret key's value, secrets inside
    any free text). The one place results are redacted: everything the store writes goes
    through it."""
    return redact_json(obj, key)


class RunStore:
    """One `results/<run-id>/` directory. Safe to call from several threads."""

    def __init__(self, run_dir: Path, run: RunRecord) -> None:
        self._dir = Path(run_dir)
        self._run = run
        self._lock = threading.Lock()
        self._sealed = False

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def create(cls, results_root: Path, run: RunRecord) -> RunStore:
        """Make `results_root/<run id>/` and write run.json with status "running"."""
        run_dir = Path(results_root) / run.run_id
        check_writable(Path(results_root))
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
            for sub in ("cells", "logs", "builds"):
                (run_dir / sub).mkdir()
        except FileExistsError:
            raise ConfigError(
                f"{run_dir} already exists",
                hint="use a fresh run id (new_run_id) or `--resume` that run",
            ) from None
        except OSError as exc:
            raise ConfigError(f"{run_dir}: cannot create the run directory ({exc.strerror})",
                              hint="give --results a folder you can write to") from None
        run.status = RunStatus.RUNNING
        run.started_at = run.started_at or utc_now()
        run.finished_at = None
        store = cls(run_dir, run)
        store._save_run()
        return store

    @classmethod
    def open(cls, run_dir: Path) -> RunStore:
        run_dir = Path(run_dir)
        path = run_dir / RUN_FILE
        hint = "give a results/<run-id>/ directory made by `harness run` (it holds run.json)"
        if not run_dir.is_dir() or not path.is_file():
            raise ConfigError(f"{run_dir} is not a run directory: no {RUN_FILE} in it", hint=hint)
        try:
            run = RunRecord.from_json(_read_json(run_dir, RUN_FILE))
        except ConfigError as exc:
            raise ConfigError(f"{path}: not a run file ({_short(Exception(exc.message))})", hint=hint) from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not a run file ({_short(exc)})", hint=hint) from None
        return cls(run_dir, run)

    # -- run ------------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def run(self) -> RunRecord:
        return self._run

    @property
    def run_id(self) -> str:
        return self._run.run_id

    def update_run(self, **fields: Any) -> None:
        """Set top-level fields of run.json (e.g. `cells=` after a resume adds some)."""
        with self._lock:
            for k, v in fields.items():
                setattr(self._run, k, v)
            self._save_run_locked()

    def finish(self, status: RunStatus | str, note: str | None = None) -> None:
        status = RunStatus(status)
        if status is RunStatus.RUNNING:
            raise ValueError("a run finishes as 'finished' or 'interrupted'")
        with self._lock:
            self._run.status = status
            self._run.finished_at = utc_now()
            if note:
                self._run.note = note
            self._save_run_locked()

    def _save_run(self) -> None:
        with self._lock:
            self._save_run_locked()

    def _save_run_locked(self) -> None:
        _write(self._dir / RUN_FILE, mask(self._run.to_json()), root=self._dir)

    # -- cells ----------------------------------------------------------------------------

    def cell_path(self, cell_id: str) -> Path:
        return self._dir / "cells" / f"{cell_key(cell_id)}.json"

    def log_path(self, cell_id: str) -> Path:
        return self._dir / "logs" / f"{cell_key(cell_id)}.server.log"

    def build_log_path(self, stack: str) -> Path:
        return self._dir / "logs" / f"build-{cell_key(stack)}.log"

    def partial_path(self, cell_id: str) -> Path:
        return self._dir / "cells" / f"{cell_key(cell_id)}.partial.json"

    def write_log(self, cell_id: str, text: str) -> Path:
        """Replace a cell's server log with a masked copy (for a log captured to memory or
        to a file first): results directories get shared, and vLLM echoes its arguments."""
        path = self.log_path(cell_id)
        _write_text(path, redact_text(text), root=self._dir)
        return path

    def seal(self) -> None:
        """The run is stopping: from now on no cell and no partial record is written (a cell cut
        short is an interrupted one, redone by `--resume`, not an error). run.json still is."""
        self._sealed = True

    def write_cell(self, cell: CellResult) -> Path:
        """Write a finished cell (masked), and drop what was saved of it along the way."""
        path = self.cell_path(cell.id)
        if self._sealed:
            return path
        _write(path, mask(cell.to_json()), root=self._dir)
        with contextlib.suppress(OSError, ConfigError):
            Root(self._dir, what="run folder").remove(f"cells/{self.partial_path(cell.id).name}")
        return path

    def write_partial(self, partial: PartialCell) -> None:
        """What a cell has measured so far, so a controller killed mid-cell loses nothing:
        `--resume` redoes the cell, and report/bug can still show what it had."""
        if self._sealed:
            return
        _write(self.partial_path(partial.id), mask(partial.to_json()), root=self._dir)

    def read_partial(self, cell_id: str) -> PartialCell | None:
        """The cell's partial record; None when there is none or it cannot be read (a controller
        killed mid-write): it only ever adds to what a failed cell shows."""
        path = self.partial_path(cell_id)
        if not path.is_file():
            return None
        try:
            return PartialCell.model_validate(_read_json(self._dir, path.relative_to(self._dir)))
        except (OSError, ValueError, ConfigError):  # ValidationError is a ValueError
            return None

    def read_log(self, rel: str | Path, *, max_bytes: int = 16 << 20) -> str | None:
        """The last `max_bytes` of a log named by the run folder (relative to it); None when it
        is missing. A path that leaves the run folder (absolute, '..', a symlink out) or a file
        that is not regular (a FIFO, a device) is a ConfigError: a run folder is data."""

        # the run folder is a root: a log path with a link in it is refused, never followed
        root = Root(self._dir, what="run folder")
        under(self._dir, str(rel), what=f"{self._dir}: log path",
              hint="logs are files inside the run folder: this one was edited by hand")
        if not root.exists(str(rel)):
            return None
        return root.tail_text(str(rel), max_bytes=max_bytes)

    def read_cell(self, cell_id: str) -> CellResult | None:
        path = self.cell_path(cell_id)
        if not path.is_file():
            return None
        return self._load_cell(path)

    def cells(self) -> list[CellResult]:
        """Finished cells in run.json plan order; cells not in the plan follow, by id."""
        by_id = {c.id: c for c in self._all_cells()}
        ordered = [by_id.pop(cid) for cid in self._run.cells if cid in by_id]
        return ordered + [by_id[k] for k in sorted(by_id)]

    def finished_ids(self) -> set[str]:
        return {c.id for c in self._all_cells()}

    def _all_cells(self) -> list[CellResult]:
        folder = self._dir / "cells"
        # leftover .tmp files and partial records are not finished cells; a link is never listed
        return [self._load_cell(folder / n) for n in Root(self._dir, what="run folder").files("cells", suffix=".json")
                if not n.endswith(".partial.json")]

    def schedule(self) -> tuple[ScheduleEntry, ...]:
        """schedule.json: which slot held which cell when (a run over listed [hosts]); empty
        when the run wrote none."""
        if not Root(self._dir, what="run folder").exists(SCHEDULE_FILE):
            return ()
        try:
            return SCHEDULE.validate_python(self._load(self._dir / SCHEDULE_FILE))
        except ValueError as exc:
            raise _bad_file(self._dir / SCHEDULE_FILE, exc) from None

    # -- builds ---------------------------------------------------------------------------

    def build_record(self, outcome: BuildOutcome) -> str:
        """Where a build outcome is kept, relative to the run folder: builds/<stack>.json, or
        builds/<stack>@<host>.json for one built on a [hosts] entry. A cell names it
        (`build_record`) to point at its build, and its audit."""
        return f"builds/{cell_key(outcome.file_name)}.json"

    def write_build(self, outcome: BuildOutcome, host: str | None = None) -> Path:
        """A build outcome; with `host` (a run over several hosts builds on each) it records
        that host and is kept as builds/<stack>@<host>.json."""
        if host is not None:
            outcome = outcome.model_copy(update={"host": host})
        path = self._dir / self.build_record(outcome)
        _write(path, mask(outcome.model_dump(mode="json")), root=self._dir)
        return path

    def builds(self) -> dict[BuildKey, BuildOutcome]:
        """Every stored build outcome, by (stack, host); host None in a run on one host."""
        folder = self._dir / "builds"
        out: dict[BuildKey, BuildOutcome] = {}
        for name in Root(self._dir, what="run folder").files("builds", suffix=".json"):
            path = folder / name
            data = self._load(path)
            try:
                b = BuildOutcome.from_json(data, stack=path.stem)
            except ValueError as exc:
                raise _bad_file(path, exc) from None
            out[b.key] = b
        return out

    def builds_on(self, host: str | None) -> dict[str, BuildOutcome]:
        """The build outcomes of one host (None: a run on one host), by stack."""
        return {stack: b for (stack, h), b in self.builds().items() if h == host}

    def build_for(self, stack: str, host: str | None) -> BuildOutcome | None:
        """The build a cell of `stack` that ran on `host` used: the one built there; else the
        stack's build of a run on one host; else its only build (a run's default host records
        its cells with no host)."""
        builds = self.builds()
        if (stack, host) in builds:
            return builds[(stack, host)]
        if (stack, None) in builds:
            return builds[(stack, None)]
        same = [b for (s, _), b in builds.items() if s == stack]
        return same[0] if len(same) == 1 else None

    def build_of(self, cell: CellResult) -> BuildOutcome | None:
        """The build a cell served from: the record it names (format 4), else the one of its
        stack on its host (build_for). None when it had none, or the record is gone."""
        if cell.build_record is None:
            return self.build_for(cell.stack, cell.host)
        root = Root(self._dir, what="run folder")
        under(self._dir, cell.build_record, what=f"{self.cell_path(cell.id)}: build_record",
              hint="a cell names its build as builds/<name>.json inside the run folder: this one was edited by hand")
        if not cell.build_record.startswith("builds/") or not root.exists(cell.build_record):
            return None
        path = self._dir / cell.build_record
        try:
            return BuildOutcome.from_json(self._load(path), stack=path.stem)
        except ValueError as exc:
            raise _bad_file(path, exc) from None

    def _load_cell(self, path: Path) -> CellResult:
        try:
            return CellResult.from_json(self._load(path))
        except ValueError as exc:
            raise _bad_file(path, exc) from None

    def _load(self, path: Path) -> Any:
        try:
            return _read_json(self._dir, path.relative_to(self._dir))
        except (OSError, ValueError) as exc:
            raise _bad_file(path, exc) from None


MAX_RESULT_BYTES = 64 << 20


def _read_json(run_dir: Path, rel: str | Path) -> Any:
    """A JSON file of a run folder: inside it (symlinks included), regular, bounded in size and depth."""
    hint = ("files here are written atomically: this one was edited or truncated by hand, or is not "
            "from `harness run`; delete it to have `harness run --resume` redo that part")
    under(run_dir, str(rel), what=f"{run_dir}: result file", hint=hint)  # absolute or '..': named as such
    # the run folder is a root: a link anywhere under it is refused, never followed
    return Root(run_dir, what="run folder").load_json(str(rel), limit=MAX_RESULT_BYTES, hint=hint)


def _short(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return text if len(text) < 300 else text[:300] + "..."


def _bad_file(path: Path, exc: BaseException) -> ConfigError:
    return ConfigError(
        f"{path}: not a result file this tool can read ({_short(exc)})",
        hint="files here are written atomically: this one was edited or truncated by hand, or "
        "is not from `harness run`; delete it to have `harness run --resume` redo that part",
    )


def _write(path: Path, obj: Any, *, root: Path) -> None:
    # Serialise before touching the disk: a value json cannot encode leaves the old file as it was.
    _write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n", root=root)


def _write_text(path: Path, text: str, *, root: Path) -> None:
    """Written under the run folder opened as a root (harness.safety.roots): a cells/ or logs/
    that is a link is refused, never written through."""
    try:
        Root(root, what="run folder").save_text(str(path.relative_to(root)), text)
    except OSError as exc:
        raise StorageError(path, exc) from None


MIN_FREE_BYTES = 64 * 2**20


def check_writable(folder: Path, min_free: int = MIN_FREE_BYTES) -> None:
    """Before a run starts: the results folder can be made, written, and has room."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--results {folder}: exists and is not a folder",
                          hint="give a folder for the run directories (default ./results)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"--results {folder}: cannot write there ({exc.strerror})",
                          hint="give --results a folder you can write to") from None
    free = shutil.disk_usage(folder).free
    if free < min_free:
        raise ConfigError(
            f"--results {folder}: only {free / 2**20:.0f} MiB free",
            hint=f"free at least {min_free / 2**20:.0f} MiB there (server logs and results), "
            "or give --results another disk")
