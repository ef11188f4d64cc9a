"""Subprocesses: the one place that starts them, says what it runs, and bounds how long.

Every command runs in its own process group (a new session), and the whole group ends with it:
on its timeout, on Ctrl-C or SIGTERM (the command line turns SIGTERM into KeyboardInterrupt),
and for a command a worker thread was waiting on when the tool stops (`end_all`). A command's
children and grandchildren never outlive it there, even when the signal comes while it is being
started (`_start`). `-v` shows each command with its argv (masked: harness.redact.redact_args)
as a debug line, and `harness.redact` is the one rule for what it masks (`-u user:PASS`,
`-pPASS`, `--password X`, a token anywhere).

A command whose output is not ours to trust (an interpreter the user names, a tool inside a
folder from data) runs with `max_output`: what it prints is read up to that many bytes per
stream and the command is ended past it (returncode OUTPUT_OVER), never held whole in memory.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from harness.errors import EnvironmentProblem
from harness.redact import redact_args

log = logging.getLogger("harness.proc")
T = TypeVar("T")
OUTPUT_OVER = 125  # run(max_output=...): the command printed more than the bound and was ended
# for the callers of spawn: the process type and the pipe flag, without importing subprocess
Popen = subprocess.Popen
PIPE = subprocess.PIPE


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


def shown(argv: Sequence[str]) -> str:
    """A command line as the debug log shows it: shell-quoted, secrets masked."""
    return shlex.join(redact_args([str(a) for a in argv]))


# groups started by run() and stream() and not yet ended, so that `end_all` can end the ones a
# worker thread waits on when the main thread is interrupted; how many are being started now,
# and whether the tool is stopping (then no command starts any more)
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Condition()
_STARTING = 0
_STOPPING = False
TERM_GRACE_S = 5.0
# how long `end_all` waits for a worker thread's command that is being started at that moment
START_WAIT_S = 10.0


def end_group(p: subprocess.Popen, grace_s: float = TERM_GRACE_S) -> None:
    """End `p` and every process in its group: SIGTERM, then SIGKILL to whatever is left
    (a grandchild that ignores SIGTERM, or outlives its parent) after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if sig == signal.SIGTERM:
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:  # a process stuck in the kernel: nothing more to send it
        log.warning("process group %d did not end after SIGKILL", p.pid)


def end_all() -> None:
    """End every command group still running (the tool is stopping). A command a worker
    thread is starting at this moment is waited for, then ended with the others; none starts
    afterwards."""
    global _STOPPING
    with _LIVE_LOCK:
        _STOPPING = True
        _LIVE_LOCK.wait_for(lambda: _STARTING == 0, timeout=START_WAIT_S)
        live = list(_LIVE)
    for p in live:
        end_group(p, grace_s=1.0)


def _track(p: subprocess.Popen, live: bool) -> None:
    with _LIVE_LOCK:
        (_LIVE.add if live else _LIVE.discard)(p)


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _start(argv: Sequence[str], **popen: Any) -> tuple[subprocess.Popen | Result, Callable[[], None]]:
    """Start `argv` in a new session and track it: the Popen and `release`, which the caller
    calls first thing inside the `try` that ends the group; or, when it cannot start, a Result
    (released already: a held signal has been delivered).

    Ctrl-C and SIGTERM become KeyboardInterrupt in the main thread (harness.cli). Raised inside
    Popen after the fork, the command would run on with its children, known to no one (seen
    under load: the signal came as the fork returned). So, in the main thread, those two
    signals are held here and delivered by `release`, once the group is tracked and inside the
    caller's clean-up; `end_all` waits for a start under way in a worker thread."""
    global _STARTING
    held: list[int] = []
    old: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in _HELD_SIGNALS:
            if signal.getsignal(sig) is not None:  # None: set outside Python, it could not be put back
                old[sig] = signal.signal(sig, lambda signum, _frame: held.append(signum))

    def release() -> None:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        old.clear()
        while held:
            signal.raise_signal(held.pop(0))  # to its own handler now: KeyboardInterrupt, or the default

    def not_started(code: int, why: str) -> tuple[Result, Callable[[], None]]:
        release()  # nothing was started: a held signal is delivered at once
        return Result(tuple(argv), code, "", why), release

    try:
        with _LIVE_LOCK:
            if _STOPPING:
                return not_started(130, "not started: the tool is stopping")
            _STARTING += 1
        try:
            p = subprocess.Popen(list(argv), start_new_session=True, **popen)
        except FileNotFoundError:
            return not_started(127, f"{argv[0]}: not found")
        except OSError as exc:  # not executable, or an argument list the kernel refuses
            return not_started(126, f"{argv[0]}: cannot start: {exc}")
        finally:
            with _LIVE_LOCK:
                _STARTING -= 1
                _LIVE_LOCK.notify_all()
        _track(p, True)
        return p, release
    except BaseException:
        release()
        raise


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
        env: Mapping[str, str] | None = None, input: str | None = None, max_output: int | None = None) -> Result:
    """Run to completion and capture; a missing program or a timeout is a Result, not a raise.
    Output that is not UTF-8 is read with replacement characters. stdin is empty unless
    `input` is given (no command may wait on the terminal). With `max_output`, each stream is
    kept to that many bytes and a command that prints more is ended (returncode OUTPUT_OVER)."""
    log.debug("run: %s", shown(argv))
    if max_output is not None:
        return _run_bounded(argv, timeout=timeout, cwd=cwd, env=env, input=input, limit=max_output)
    p, release = _start(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                        cwd=cwd, env=dict(env) if env is not None else None)
    if isinstance(p, Result):
        return p
    try:
        try:
            release()
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            log.debug("timed out after %.0f s, ending its process group: %s", timeout, shown(argv))
            end_group(p)
            try:  # what it wrote before; a process that left the group may still hold a pipe
                out, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                out = ""
            return Result(tuple(argv), 124, out or "", f"timed out after {timeout:.0f} s")
        except BaseException:  # Ctrl-C, SIGTERM (as KeyboardInterrupt), anything else
            end_group(p)
            raise
    finally:
        _track(p, False)
    return Result(tuple(argv), p.returncode, out, err)


def _run_bounded(argv: Sequence[str], *, timeout: float, cwd: str | None, env: Mapping[str, str] | None,
                 input: str | None, limit: int) -> Result:
    p, release = _start(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                        env=dict(env) if env is not None else None)
    if isinstance(p, Result):
        return p
    over = threading.Event()
    kept: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}

    def drain(stream, buf: bytearray) -> None:
        while block := stream.read1(1 << 16):
            if len(buf) + len(block) > limit:
                buf += block[: limit - len(buf)]
                over.set()
                _kill_group(p)
                return
            buf += block

    readers = [threading.Thread(target=drain, args=(pipe, kept[n]), daemon=True)
               for n, pipe in ((1, p.stdout), (2, p.stderr))]
    try:
        try:
            release()
            for t in readers:
                t.start()
            if input is not None and p.stdin is not None:
                try:
                    p.stdin.write(input.encode("utf-8"))
                    p.stdin.close()
                except BrokenPipeError:
                    pass
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.debug("timed out after %.0f s, ending its process group: %s", timeout, shown(argv))
            end_group(p)
            return Result(tuple(argv), 124, kept[1].decode("utf-8", "replace"), f"timed out after {timeout:.0f} s")
        except BaseException:
            end_group(p)
            raise
    finally:
        for t in readers:  # a grandchild that kept the pipes open does not keep them for long
            if t.ident is not None:
                t.join(timeout=10)
        for pipe in (p.stdout, p.stderr):
            if pipe is not None:
                pipe.close()
        _track(p, False)
    out, err = (kept[n].decode("utf-8", "replace") for n in (1, 2))
    if over.is_set():
        return Result(tuple(argv), OUTPUT_OVER, out, f"{err}\n(ended: printed more than {limit} bytes)".lstrip())
    return Result(tuple(argv), p.returncode, out, err)


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
    log.debug("spawn: %s", shown(argv))
    env = {**(env if env is not None else os.environ), **marker_env()}  # what a later reap checks
    return subprocess.Popen(list(argv), env=env, cwd=cwd,
                            stdout=stdout, stderr=subprocess.STDOUT, start_new_session=True)


def stream(argv: Sequence[str], consume: Callable[[Iterator[str]], T], *, timeout: float = 60) -> tuple[T, Result]:
    """Run `argv` and hand its stdout, line by line, to `consume` (never held whole: a
    disassembly can run to gigabytes). When `consume` returns before the output ends, the
    process is killed: the answer is in hand. Returns what `consume` returned and a Result
    whose stdout is empty; returncode 124 when `timeout` passed first, 127 when the program
    is missing, 0 when it was stopped early on purpose."""
    log.debug("stream: %s", shown(argv))
    with tempfile.TemporaryFile() as errors:
        p, release = _start(argv, stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL,
                            text=True, errors="replace")
        if isinstance(p, Result):
            return consume(iter(())), p
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            _kill_group(p)

        timer = threading.Timer(timeout, expire)
        ended = [False]

        def lines() -> Iterator[str]:
            assert p.stdout is not None
            yield from p.stdout
            ended[0] = True

        try:
            release()
            timer.start()
            value = consume(lines())
            early = not ended[0]  # the answer came before the output ended
            if early:
                _kill_group(p)
            code = p.wait()
        except BaseException:
            end_group(p)
            raise
        finally:
            timer.cancel()
            _track(p, False)
            if p.stdout is not None:
                p.stdout.close()
        errors.seek(0)
        err_text = errors.read(1 << 16).decode("utf-8", "replace")
    if expired.is_set():
        return value, Result(tuple(argv), 124, "", f"timed out after {timeout:.0f} s")
    return value, Result(tuple(argv), 0 if early else code, "", err_text)
