"""Subprocesses: the one place that starts them, says what it runs, and bounds how long."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.errors import EnvironmentProblem

log = logging.getLogger("harness.proc")
T = TypeVar("T")


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


# The host tools the harness itself runs, what for, and how a user gets them (`harness doctor`
# checks each; a missing one is a host problem, exit 3, never a verdict on the input).
HOST_TOOLS: dict[str, tuple[str, str]] = {
    "git": ("applies each patch with `git apply` (patch preflight), fetches git-pinned sources and bisects",
            "install git (Debian/Ubuntu: apt-get install git)"),
}


def require_tool(name: str, purpose: str | None = None) -> str:
    """The path of a host tool the next step needs; EnvironmentProblem (exit 3) naming it when
    it is missing: a host problem, never taken for a fault of the input (a stale patch)."""
    path = shutil.which(name)
    if path is None:
        why, fix = HOST_TOOLS.get(name, ("is needed here", f"install {name}"))
        raise EnvironmentProblem(f"{name} is not installed on this host: harness {purpose or why}", hint=fix)
    return path


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


def start_ticks(pid: int) -> float | None:
    """The process start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    rest = stat.rsplit(")", 1)[-1].split()
    try:
        return float(rest[19])
    except (IndexError, ValueError):
        return None



# Every process the tool starts carries, in its environment, a marker naming the controller that
# started it (host, pid, process start time): the kernel keeps that initial environment in
# /proc/PID/environ, so a later reap can prove a process is the tool's (harness/serve/signals.py).
MARKER = "HARNESS_STARTED_BY"


def marker_env() -> dict[str, str]:
    """The variables to give every process the tool starts (and may have to reap later)."""
    pid = os.getpid()
    started = start_ticks(pid)
    return {MARKER: f"{socket.gethostname()}:{pid}:{started if started is not None else ''}"}


def spawn(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
          stdout=None) -> subprocess.Popen:
    """Start a long-lived process in its own session, so it and its children stop together."""
    log.debug("spawn: %s", shlex.join(argv))
    env = {**(env if env is not None else os.environ), **marker_env()}  # what a later reap checks
    return subprocess.Popen(list(argv), env=env, cwd=cwd,
                            stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)


def stream(argv: Sequence[str], consume: Callable[[Iterator[str]], T], *, timeout: float = 60) -> tuple[T, Result]:
    """Run `argv` and hand its stdout, line by line, to `consume` (never held whole: a
    disassembly can run to gigabytes). When `consume` returns before the output ends, the
    process is killed: the answer is in hand. Returns what `consume` returned and a Result
    whose stdout is empty; returncode 124 when `timeout` passed first, 127 when the program
    is missing, 0 when it was stopped early on purpose."""
    log.debug("stream: %s", shlex.join(argv))
    with tempfile.TemporaryFile() as errors:
        try:
            p = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL,
                                 text=True, errors="replace", start_new_session=True)
        except FileNotFoundError:
            return consume(iter(())), Result(tuple(argv), 127, "", f"{argv[0]}: not found")
        except OSError as exc:  # not executable, or an argument list the kernel refuses
            return consume(iter(())), Result(tuple(argv), 126, "", f"{argv[0]}: cannot start: {exc}")
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            p.kill()

        timer = threading.Timer(timeout, expire)
        timer.start()
        ended = [False]

        def lines() -> Iterator[str]:
            assert p.stdout is not None
            yield from p.stdout
            ended[0] = True

        try:
            value = consume(lines())
            early = not ended[0]  # the answer came before the output ended
            if early:
                p.kill()
            code = p.wait()
        except BaseException:
            p.kill()
            p.wait()
            raise
        finally:
            timer.cancel()
            if p.stdout is not None:
                p.stdout.close()
        errors.seek(0)
        err_text = errors.read(1 << 16).decode("utf-8", "replace")
    if expired.is_set():
        return value, Result(tuple(argv), 124, "", f"timed out after {timeout:.0f} s")
    return value, Result(tuple(argv), 0 if early else code, "", err_text)
