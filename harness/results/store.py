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
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from harness.errors import ConfigError
from harness.redact import redact_args, redact_env, redact_text

FORMAT = 1
RUN_FILE = "run.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+@-]")


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def atomic_write_text(path: Path | str, text: str) -> None:
    """Write `text` to `path` whole or not at all: a crash leaves the old file or none."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # The rename itself must reach the disk too, or a power cut can undo it.
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


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


def redact_cell(cell: dict) -> dict:
    """A copy of a cell record with secrets masked in everything that came from outside:
    serve env and command, log lines quoted in the tail, verdicts, reasons and evidence."""
    cell = json.loads(json.dumps(cell))  # deep copy, and proof that it is JSON
    serve = cell.get("serve")
    if isinstance(serve, dict):
        if isinstance(serve.get("env"), dict):
            serve["env"] = redact_env(serve["env"])
        if isinstance(serve.get("command"), list):
            serve["command"] = redact_args([str(a) for a in serve["command"]])
        if isinstance(serve.get("log_tail"), list):
            serve["log_tail"] = [redact_text(str(x)) for x in serve["log_tail"]]
    if isinstance(cell.get("reasons"), list):
        cell["reasons"] = [redact_text(str(r)) for r in cell["reasons"]]
    for v in cell.get("verdicts") or []:
        if isinstance(v, dict):
            v["message"] = redact_text(str(v.get("message", "")))
            v["lines"] = [redact_text(str(x)) for x in v.get("lines") or []]
    fp = cell.get("fingerprint")
    if isinstance(fp, dict) and isinstance(fp.get("evidence"), dict):
        fp["evidence"] = {k: redact_text(str(x)) for k, x in fp["evidence"].items()}
    return cell


class RunStore:
    """One `results/<run-id>/` directory. Safe to call from several threads."""

    def __init__(self, run_dir: Path, run: dict) -> None:
        self._dir = Path(run_dir)
        self._run = run
        self._lock = threading.Lock()

    # -- opening -------------------------------------------------------------------------

    @classmethod
    def create(cls, results_root: Path, run_id: str, run_meta: dict) -> RunStore:
        """Make `results_root/run_id/` and write run.json with status "running"."""
        run_dir = Path(results_root) / run_id
        try:
            run_dir.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise ConfigError(
                f"{run_dir} already exists",
                hint="use a fresh run id (new_run_id) or `--resume` that run",
            ) from None
        for sub in ("cells", "logs", "builds"):
            (run_dir / sub).mkdir()
        run = {"format": FORMAT, "run_id": run_id, **run_meta}
        run["run_id"] = run_id
        run["format"] = FORMAT
        if isinstance(run.get("argv"), list):
            run["argv"] = redact_args([str(a) for a in run["argv"]])
        run.setdefault("cells", [])
        run["status"] = "running"
        run["started_at"] = run.get("started_at") or utc_now()
        run["finished_at"] = None
        store = cls(run_dir, run)
        store._save_run()
        return store

    @classmethod
    def open(cls, run_dir: Path) -> RunStore:
        run_dir = Path(run_dir)
        path = run_dir / RUN_FILE
        hint = "give a results/<run-id>/ directory made by `harness run` (it holds run.json)"
        if not path.is_file():
            raise ConfigError(f"{run_dir} is not a run directory: no {RUN_FILE} in it", hint=hint)
        try:
            run = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: cannot read it as JSON ({exc})", hint=hint) from exc
        if not isinstance(run, dict) or "run_id" not in run:
            raise ConfigError(f"{path}: not a run file (no run_id)", hint=hint)
        if run.get("format") != FORMAT:
            raise ConfigError(
                f"{path}: results format {run.get('format')!r}, this tool reads format {FORMAT}",
                hint="open it with the harness version that wrote it",
            )
        return cls(run_dir, run)

    # -- run ------------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def run(self) -> dict:
        return self._run

    @property
    def run_id(self) -> str:
        return self._run["run_id"]

    def update_run(self, **fields: Any) -> None:
        """Merge top-level fields into run.json (e.g. `cells=` after a resume adds some)."""
        with self._lock:
            self._run.update(fields)
            self._save_run_locked()

    def finish(self, status: Literal["finished", "interrupted"]) -> None:
        if status not in ("finished", "interrupted"):
            raise ValueError(f"finish status must be 'finished' or 'interrupted', not {status!r}")
        with self._lock:
            self._run["status"] = status
            self._run["finished_at"] = utc_now()
            self._save_run_locked()

    def _save_run(self) -> None:
        with self._lock:
            self._save_run_locked()

    def _save_run_locked(self) -> None:
        atomic_write_json(self._dir / RUN_FILE, self._run)

    # -- cells ----------------------------------------------------------------------------

    def cell_key(self, cell_id: str) -> str:
        return cell_key(cell_id)

    def cell_path(self, cell_id: str) -> Path:
        return self._dir / "cells" / f"{cell_key(cell_id)}.json"

    def log_path(self, cell_id: str) -> Path:
        return self._dir / "logs" / f"{cell_key(cell_id)}.server.log"

    def build_log_path(self, stack: str) -> Path:
        return self._dir / "logs" / f"build-{cell_key(stack)}.log"

    def write_log(self, cell_id: str, text: str) -> Path:
        """Replace a cell's server log with a masked copy (for a log captured to memory or
        to a file first): results directories get shared, and vLLM echoes its arguments."""
        path = self.log_path(cell_id)
        atomic_write_text(path, redact_text(text))
        return path

    def write_cell(self, cell: dict) -> Path:
        """Write a finished cell. `cell["id"]` is required; `format` is filled in."""
        if not isinstance(cell.get("id"), str) or not cell["id"]:
            raise ValueError("a cell record needs its id (the `stack/model/config` string)")
        record = redact_cell({"format": FORMAT, **cell})
        path = self.cell_path(cell["id"])
        atomic_write_json(path, record)
        return path

    def read_cell(self, cell_id: str) -> dict | None:
        path = self.cell_path(cell_id)
        if not path.is_file():
            return None
        return self._load(path)

    def cells(self) -> list[dict]:
        """Finished cells in run.json plan order; cells not in the plan follow, by id."""
        by_id = {c["id"]: c for c in self._all_cells()}
        ordered = [by_id.pop(cid) for cid in self._run.get("cells", []) if cid in by_id]
        return ordered + [by_id[k] for k in sorted(by_id)]

    def finished_ids(self) -> set[str]:
        return {c["id"] for c in self._all_cells()}

    def _all_cells(self) -> list[dict]:
        folder = self._dir / "cells"
        if not folder.is_dir():
            return []
        found = []
        for path in sorted(folder.glob("*.json")):  # leftover .tmp files are not cells
            cell = self._load(path)
            if isinstance(cell.get("id"), str):
                found.append(cell)
        return found

    # -- builds ---------------------------------------------------------------------------

    def write_build(self, stack: str, outcome: dict) -> Path:
        path = self._dir / "builds" / f"{cell_key(stack)}.json"
        atomic_write_json(path, {"stack": stack, **outcome})
        return path

    def builds(self) -> dict[str, dict]:
        folder = self._dir / "builds"
        out: dict[str, dict] = {}
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            data = self._load(path)
            out[str(data.get("stack") or path.stem)] = data
        return out

    @staticmethod
    def _load(path: Path) -> dict:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"{path}: cannot read it as JSON ({exc})",
                hint="files here are written atomically: this one was edited or truncated by "
                "hand; delete it to have `harness run --resume` redo that part",
            ) from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object", hint="delete it and re-run")
        return data
