"""Subprocesses: the one place that starts them, says what it runs, and bounds how long."""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger("harness.proc")


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def which(name: str) -> str | None:
    return shutil.which(name)


def run(argv: Sequence[str], *, timeout: float = 60, cwd: str | None = None,
        env: Mapping[str, str] | None = None, input: str | None = None) -> Result:
    """Run to completion and capture; a missing program or a timeout is a Result, not a raise."""
    log.debug("run: %s", shlex.join(argv))
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, cwd=cwd,
                           env=dict(env) if env is not None else None, input=input, check=False)
    except FileNotFoundError:
        return Result(tuple(argv), 127, "", f"{argv[0]}: not found")
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Result(tuple(argv), 124, out, f"timed out after {timeout:.0f} s")
    return Result(tuple(argv), p.returncode, p.stdout, p.stderr)


def spawn(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
          stdout=None) -> subprocess.Popen:
    """Start a long-lived process in its own session, so it and its children stop together."""
    log.debug("spawn: %s", shlex.join(argv))
    return subprocess.Popen(list(argv), env=dict(env) if env is not None else None, cwd=cwd,
                            stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)
