"""Hostile run folders through every command that reads one: report, rejudge, bug, compare, reap.

A run folder is data (it is shared, copied, unpacked from an attachment). Each example copies a
real run folder, then plants hostile content: a file replaced by a FIFO, a device, a symlink to
a file outside the inputs, a symlink loop, deep nesting, a 5 GiB sparse file; a field set to an
absolute or `../` log path, a negative latency, a NaN, markup, a `$`, a secret in a secret's
place; a forged `running` record naming a process the tool never started. Whatever the folder
holds, the command ends with exit 0-3, prints no traceback and no secret, touches no file
outside the inputs and signals no process (harness/safety, tests/support/hostile.py).
Examples are derandomized and few enough for a busy 2-core CI machine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import (
    KINDS,
    SECRET,
    check_after,
    forge_run,
    make_sandbox,
    run_cli,
)

FIXTURE = Path(__file__).parent / "fixtures" / "runs" / "20261130-082630-spark-baseline-7bc1bc"
OTHER = Path(__file__).parent / "fixtures" / "runs" / "20261130-082632-spark-candidate-eaf4fc"
FUZZ = settings(max_examples=80, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

FILES = ["run.json", "cells/{cell}.json", "logs/{cell}.server.log", "builds/vllm-0251.json",
         "cells/{cell}.partial.json", "cells/extra.json"]
FIELDS = [("serve", "log"), ("id",), ("bench", "levels", 0, "ttft_ms_p50"), ("bench", "levels", 0, "per_stream_tok_s"),
          ("serve", "log_tail"), ("serve", "env"), ("serve", "command"), ("status",), ("reasons",), ("fingerprint",),
          ("requested",), ("bench",), ("durations",), ("started_at",)]
VALUES = [
    "/etc/shadow", "/etc/passwd", "../../canary/secret.txt", "../../../../../etc/passwd", "logs/../../canary/victim",
    "logs/link", "/dev/zero", "logs/fifo", "", "\x00", "a\nb", "$x$^^\\frac{", "[red]x[/red]", "<script>alert(1)</script>",
    -5, -1e9, float("nan"), float("inf"), 10**400, 1e308, 0, None, True, [], {}, "@@DEEP@@",
    [f"--api-key {SECRET}"], [f"export DB_PASS={SECRET}", f"https://u:{SECRET}@h.example/x"],
    {"DB_PASS": SECRET, "API_TOKEN": SECRET, "SESSION_COOKIE": SECRET},
    ["vllm", "serve", "m", "--api-key", SECRET, "--hf-token", SECRET],
    f"https://h.example/x?access_token={SECRET}", "x" * 100_000,
]
COMMANDS = ["report", "report-out", "rejudge", "bug", "bug-out", "compare", "compare-md", "reap"]


def _set(doc, path: tuple, value) -> None:
    node = doc
    for part in path[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return
    if isinstance(node, dict):
        node[path[-1]] = value
    elif isinstance(node, list) and isinstance(path[-1], int) and path[-1] < len(node):
        node[path[-1]] = value


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _argv(command: str, run: Path, other: Path, cell: str, out: Path) -> list:
    return {
        "report": ["report", run],
        "report-out": ["report", run, "--out", out],
        "rejudge": ["rejudge", run],
        "bug": ["bug", run, cell],
        "bug-out": ["bug", run, cell, "--out", out],
        "compare": ["compare", other, run],
        "compare-md": ["compare", run, other, "--md", out],
        "reap": ["reap", "--results", run.parent],
    }[command]


@FUZZ
@given(
    plants=st.lists(st.tuples(st.sampled_from(FILES), st.sampled_from(KINDS)), max_size=2),
    edits=st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(VALUES)), max_size=3),
    forge=st.booleans(),
    out_kind=st.sampled_from(["new", "link_canary", "fifo", "dev_zero", "folder", "missing_dir", "html_name"]),
    command=st.sampled_from(COMMANDS),
)
def test_hostile_run_folder(home, victim, plants, edits, forge, out_kind, command):
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        sb = make_sandbox(Path(tmp), victim)
        root = sb.work / "results"
        run = root / FIXTURE.name
        shutil.copytree(FIXTURE, run, symlinks=True)
        other = sb.work / "other" / OTHER.name
        shutil.copytree(OTHER, other, symlinks=True)
        cell_id = json.loads((run / "run.json").read_text())["cells"][0]
        from harness.results.store import cell_key

        key = cell_key(cell_id)
        (run / "logs" / "link").symlink_to(sb.canary / "secret.txt")
        (run / "logs" / "fifo").unlink(missing_ok=True)
        import os

        os.mkfifo(run / "logs" / "fifo")
        if forge:
            forge_run(run, sb, dead_pid=_dead_pid())
        cell_file = run / "cells" / f"{key}.json"
        if edits and cell_file.is_file():
            doc = json.loads(cell_file.read_text())
            for path, value in edits:
                _set(doc, path, value)
            text = json.dumps(doc).replace('"@@DEEP@@"', "[" * 20_000 + "]" * 20_000)
            cell_file.write_text(text)
        for rel, kind in plants:
            sb.plant(run / rel.format(cell=key), kind, text='{"format": 1}')
        out = {"new": sb.work / "out.md", "missing_dir": sb.work / "no" / "such" / "out.md",
               "html_name": sb.work / "x.html"}.get(out_kind) or sb.plant(sb.work / "out.md", out_kind)
        before = sb.snapshot()
        out_mode = out.lstat().st_mode if out.is_symlink() or out.exists() else None
        argv = _argv(command, run, other, cell_id, out)
        rc, text = run_cli(argv)
        check_after(sb, before, victim, argv, rc, text)
        if out_mode is not None and out_kind != "folder":
            # a FIFO, a device link or a link to a file outside is never replaced nor written through
            assert out.lstat().st_mode == out_mode, f"{argv}: replaced the {out_kind} at the target"
        if command == "report-out" and out_kind in ("html_name", "missing_dir"):
            assert rc == 2 and not out.exists(), f"{argv}: made a folder from a file name"


def test_forged_running_record_never_kills_a_process_the_tool_did_not_start(home, victim):
    """The exact forgery: status running, a dead controller, a partial cell naming a live process
    group and its true start time. `reap` marks the run interrupted and leaves the process alone."""
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        sb = make_sandbox(Path(tmp), victim)
        run = sb.work / "results" / FIXTURE.name
        shutil.copytree(FIXTURE, run)
        forge_run(run, sb, dead_pid=_dead_pid())
        assert sb.victim_ticks is not None
        before = sb.snapshot()
        rc, text = run_cli(["reap", "--results", run.parent])
        check_after(sb, before, victim, ["reap"], rc, text)
        assert rc == 0
        assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
        assert "process group" not in text


def test_log_paths_never_leave_the_run_folder(home, victim):
    """rejudge and bug read a cell's log by the path the cell names: an absolute path, `../`
    or a symlink out of the folder is refused (exit 2), and the linked file's lines never show."""
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        sb = make_sandbox(Path(tmp), victim)
        run = sb.work / "results" / FIXTURE.name
        shutil.copytree(FIXTURE, run)
        cell_id = json.loads((run / "run.json").read_text())["cells"][0]
        from harness.results.store import cell_key

        key = cell_key(cell_id)
        cell_file = run / "cells" / f"{key}.json"
        doc = json.loads(cell_file.read_text())
        for bad in (str(sb.canary / "secret.txt"), "../../../canary/secret.txt", "logs/link"):
            (run / "logs" / "link").unlink(missing_ok=True)
            (run / "logs" / "link").symlink_to(sb.canary / "secret.txt")
            doc["serve"]["log"] = bad
            cell_file.write_text(json.dumps(doc))
            rc, text = run_cli(["rejudge", run])
            assert rc == 2 and ("outside" in text or "leaves" in text), text
            assert "root:" not in text
        # the server log itself replaced by a link to the secret: bug must not quote it
        (run / "logs" / f"{key}.server.log").unlink()
        (run / "logs" / f"{key}.server.log").symlink_to(sb.canary / "secret.txt")
        doc["serve"]["log"] = f"logs/{key}.server.log"
        doc["serve"]["log_tail"] = []
        cell_file.write_text(json.dumps(doc))
        rc, text = run_cli(["bug", run, cell_id, "--force"])
        assert rc in (0, 2) and "root:" not in text and SECRET not in text, text
