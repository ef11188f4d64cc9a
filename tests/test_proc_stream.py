"""proc.stream: a tool's stdout read line by line, the process stopped once the answer is in."""

from __future__ import annotations

import os
import sys
from itertools import islice

from harness import proc

PY = sys.executable


def test_reads_every_line_and_keeps_the_exit_code() -> None:
    script = "import sys; print('a'); print('b'); sys.stderr.write('bad thing\\n'); sys.exit(3)"
    lines, result = proc.stream([PY, "-c", script], list, timeout=60)
    assert lines == ["a\n", "b\n"]
    assert result.returncode == 3 and not result.ok
    assert "bad thing" in result.stderr


def test_stops_the_process_when_the_answer_is_in() -> None:
    """An endless writer: consume takes three lines and returns; the writer is killed, and
    that is not a failure."""
    script = "import os, sys\nprint(os.getpid(), flush=True)\nwhile True:\n    print('x' * 100)"
    first, result = proc.stream([PY, "-c", script], lambda it: list(islice(it, 3)), timeout=60)
    assert result.returncode == 0 and result.ok
    pid = int(first[0])
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive, "the writer outlived stream()"


def test_timeout_is_124() -> None:
    """A writer that goes quiet is killed at the timeout; what it wrote is kept (on a busy
    machine it may not have started writing by then)."""
    script = "import time; print('start', flush=True); time.sleep(600)"
    lines, result = proc.stream([PY, "-c", script], list, timeout=2)
    assert lines in ([], ["start\n"])
    assert result.returncode == 124 and "timed out" in result.stderr


def test_missing_program_is_127() -> None:
    lines, result = proc.stream(["/nonexistent/harness-no-such-tool"], list, timeout=5)
    assert lines == [] and result.returncode == 127


def test_an_error_in_consume_kills_the_process_and_propagates() -> None:
    script = "import os\nprint(os.getpid(), flush=True)\nwhile True:\n    print('y' * 100)"
    seen: list[int] = []

    def consume(it):
        seen.append(int(next(it)))
        raise ValueError("parser gave up")

    try:
        proc.stream([PY, "-c", script], consume, timeout=60)
    except ValueError as exc:
        assert "parser gave up" in str(exc)
    else:
        raise AssertionError("the consumer's error was swallowed")
    try:
        os.kill(seen[0], 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive


def test_an_argument_the_kernel_refuses_is_126_not_a_traceback() -> None:
    lines, result = proc.stream([PY, "-c", "print(1)", "x" * (256 << 10)], list, timeout=5)
    assert lines == [] and result.returncode == 126 and "cannot start" in result.stderr
