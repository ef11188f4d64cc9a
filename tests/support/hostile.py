"""What every hostile-input test shares: a sandbox, hostile files, and the checks after each run.

A test plants files of every kind a careless user or an attacker could hand the tool (a FIFO, a
device behind a symlink, a symlink loop, a symlink to a canary file outside the inputs, deep
nesting, random bytes) and runs a command in-process through `harness.cli.main`. After each run:
the exit code is one of the documented ones, no traceback was printed, the canary folder (files
outside the inputs that links point at) is byte-for-byte and mtime-for-mtime as it was, the
canary process (started by the test, not by the tool) is alive, and the planted secret appears
in no output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.cli import main

# Planted only where a secret sits (a URL password, a token parameter, a *_PASS value, an API
# key argument): any output holding it leaked a secret.
SECRET = "Zq7hunter2Secret9Xw"
EXIT_CODES = (0, 1, 2, 3)

# The kinds of file a hostile input may put where the tool expects a file.
KINDS = ("regular", "empty", "binary", "fifo", "dev_zero", "dev_urandom", "folder", "link_canary",
         "link_loop", "link_etc", "deep_json", "deep_toml", "sparse_huge", "link_dangling")


def run_cli(argv: list[str]) -> tuple[int, str]:
    """`harness ARGV` in this process: (exit code, stdout + stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse's usage errors exit 2 from inside main
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, out.getvalue() + err.getvalue()


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_toml(depth: int) -> str:
    return "a = " + "[" * depth + "]" * depth + "\n"


@dataclass
class Sandbox:
    """The temp folder of one test: inputs under `work`, links point into `canary`, HOME is `home`."""

    root: Path
    canary: Path
    home: Path
    work: Path
    victim_pid: int
    victim_ticks: float | None

    def snapshot(self) -> dict[str, tuple]:
        seen = {}
        for dirpath, dirs, files in os.walk(self.canary):
            for name in [*dirs, *files]:
                p = Path(dirpath) / name
                st = p.lstat()
                seen[str(p)] = (st.st_mode, st.st_size, st.st_mtime_ns, p.read_bytes() if p.is_file() else None)
        return seen

    def plant(self, path: Path, kind: str, text: str = "") -> Path:
        """Put a file of `kind` at `path` (its folder is made); `text` is a regular file's content."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(path) and not path.is_dir():
            path.unlink()  # a FIFO planted here before would block the write below
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        if kind == "regular":
            path.write_text(text)
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "binary":
            path.write_bytes(random.Random(len(text)).randbytes(257) + b"\xff\xfe\x00")
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "dev_zero":
            path.symlink_to("/dev/zero")
        elif kind == "dev_urandom":
            path.symlink_to("/dev/urandom")
        elif kind == "folder":
            path.mkdir(exist_ok=True)
        elif kind == "link_canary":
            path.symlink_to(self.canary / "secret.txt")
        elif kind == "link_loop":
            path.symlink_to(path.name)
        elif kind == "link_etc":
            path.symlink_to("/etc/passwd")
        elif kind == "link_dangling":
            path.symlink_to(self.root / "nowhere" / "x")
        elif kind == "deep_json":
            path.write_text(deep_json(50_000))
        elif kind == "deep_toml":
            path.write_text(deep_toml(50_000))
        elif kind == "sparse_huge":
            with path.open("wb") as f:
                f.truncate(5 << 30)  # 5 GiB of holes: read whole, it would take minutes and all memory
        else:  # pragma: no cover - a typo in a test
            raise ValueError(kind)
        return path


def make_sandbox(root: Path, victim: subprocess.Popen) -> Sandbox:
    from harness.proc import start_ticks

    canary, home, work = root / "canary", root / "home", root / "work"
    for d in (canary, home, work):
        d.mkdir(parents=True, exist_ok=True)
    (canary / "secret.txt").write_text(f"root:{SECRET}:0:0\n")
    (canary / "victim").write_text("must stay\n")
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "id_ed25519").write_text(f"PRIVATE {SECRET}\n")
    return Sandbox(root, canary, home, work, victim.pid, start_ticks(victim.pid))


def start_victim() -> subprocess.Popen:
    """A process the tool did not start, leading its own group: no forged record may get it killed."""
    return subprocess.Popen(["sleep", "3600"], start_new_session=True, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def check_after(sb: Sandbox, before: dict, victim: subprocess.Popen, argv: list, rc: int, text: str) -> None:
    shown = f"{argv}: exit {rc}\n{text[-3000:]}"
    assert rc in EXIT_CODES, shown
    assert "Traceback" not in text, shown
    assert SECRET not in text, shown
    assert victim.poll() is None, f"{argv}: the canary process was signalled"
    assert sb.snapshot() == before, f"{argv}: a file outside the inputs was touched"


def forge_run(run_dir: Path, sb: Sandbox, *, dead_pid: int) -> None:
    """A run folder that claims to be running under a dead controller, with a partial cell that
    names the canary process's group and its true start time (both readable from /proc)."""
    import socket

    run = json.loads((run_dir / "run.json").read_text())
    run.update(status="running", finished_at=None,
               controller={"host": socket.gethostname(), "pid": dead_pid, "started": 1.0})
    (run_dir / "run.json").write_text(json.dumps(run))
    from harness.results.store import cell_key

    cell_id = run["cells"][0]
    (run_dir / "cells" / f"{cell_key(cell_id)}.partial.json").write_text(json.dumps(
        {"id": cell_id, "server": {"kind": "local", "pgid": sb.victim_pid, "started": sb.victim_ticks}}))
