"""The fingerprint's shortcuts (regexes tried only at line starts or after a literal, parsed
once per log) give exactly what the plain scans give, on every real log shipped here and on the
edge cases where a match runs into the next line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.fingerprint import failure
from harness.fingerprint.failure import Indexed, literal_prefixes
from harness.fingerprint.lines import split_lines
from harness.fingerprint.tables import signatures

ROOT = Path(__file__).resolve().parent.parent
LOGS = sorted((ROOT / "tests/fixtures/logs").rglob("*.log")) + sorted(
    (ROOT / "examples").rglob("*.log")
)


def _plain_exception_lines(ix: Indexed) -> list[tuple[int, str, str | None]]:
    """The scan the shortcut replaces: each regex over the whole joined text."""
    found = []
    for rx, cpp in ((failure._EXCEPTION_M, False), (failure._CPP_WHAT_M, True)):
        for m in rx.finditer(ix.text):
            i = ix.index_of(m.start())
            if ix.lines[i].level in failure.QUIET_LEVELS:
                continue
            found.append(
                (i, m.group("msg"), "c10::Error")
                if cpp
                else (i, ix.lines[i].message, m.group("type"))
            )
    found.sort(key=lambda f: f[0])
    return found


def _plain_find(ix: Indexed, rx: re.Pattern[str]) -> list[int]:
    """Every line the regex matches, one `search` per line of the joined text."""
    return [
        i
        for i in range(len(ix.lines))
        if rx.search(ix.text, ix.starts[i], ix.starts[i] + len(ix.lines[i].message))
    ]


EDGE = "\n".join(
    [
        "(EngineCore_0 pid=1) ERROR 05-01 10:00:00 [core.py:1] what():",
        "  CUDA error: an illegal memory access was encountered",
        "what():  what(): nested",
        "ValueError:",
        "RuntimeError: next line",
        "INFO 05-01 10:00:01 [x.py:2] torch.OutOfMemoryError: quiet",
        "KeyError",
        "  what(): indented is not a line start",
        "what():",
    ]
)


@pytest.mark.parametrize("path", LOGS + [None], ids=[p.name for p in LOGS] + ["edge-cases"])
def test_exception_lines_equal_the_plain_scan(path):
    text = EDGE if path is None else path.read_text(encoding="utf-8", errors="replace")
    ix = Indexed(split_lines(text))
    assert failure._exception_lines(ix) == _plain_exception_lines(ix)
    # computed once per log: the second call returns the same list
    assert failure._exception_lines(ix) is failure._exception_lines(ix)


def test_edge_cases_exercise_the_cross_line_match():
    found = failure._exception_lines(Indexed(split_lines(EDGE)))
    # `what():` at a line end takes the next line as its message, as the plain scan does
    assert (0, "CUDA error: an illegal memory access was encountered", "c10::Error") in found
    assert any(t == "ValueError" for _, _, t in found)


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_literal_find_equals_a_search_per_line(path):
    ix = Indexed(split_lines(path.read_text(encoding="utf-8", errors="replace")))
    rxs = [
        failure._multiline(s.pattern)
        for s in signatures()
        if literal_prefixes(failure._multiline(s.pattern))
    ]
    assert rxs, "the signature table has literal-prefixed patterns"
    for rx in rxs * 2:  # twice: the second pass reads the positions cached by the first
        assert list(ix.find(rx)) == _plain_find(ix, rx), rx.pattern


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_op_near_cached_equals_computed(path):
    ix = Indexed(split_lines(path.read_text(encoding="utf-8", errors="replace")))
    for i in range(len(ix.lines)):
        assert failure.op_near(ix, i) == failure._op_near(ix, i)
    assert failure.op_near(ix, 0) == ix.ops[0] if ix.lines else not ix.ops


@pytest.mark.parametrize("extra", ["", "naïve — ünïcode line"])
def test_literal_lines_are_the_same_whether_the_log_is_scanned_as_bytes_or_as_text(extra):
    """An ASCII log is scanned as bytes, any other as text: the same lines either way, and a
    non-ASCII literal never found in an ASCII log."""
    text = "\n".join(["INFO start", "CUDA error: out of memory", extra or "plain", "x CUDA error: again",
                      "Segmentation fault (core dumped)"])
    ix = Indexed(split_lines(text))
    assert (ix._literal_lines.ascii is None) == bool(extra)
    want = [i for i, ln in enumerate(ix.lines) if "CUDA error" in ln.message]
    assert ix._lines_with("CUDA error") == want == [1, 3]
    assert ix._lines_with("core dumped") == [len(ix.lines) - 1]
    assert ix._lines_with("ünïcode") == ([2] if extra else [])
    assert ix._lines_with("not there") == []
