"""A cell's `signature_context` line numbers point into its stored server log, where they are
written (harness/run/cell.py fingerprints the log as its file holds it, the harness's header
included) and after `harness rejudge`, which reads that file: both give the same numbers.

On a real stored run: examples/h200-source/run (vLLM 0.25.1 built from source on an H200), whose
FP8 cell's log shows Triton JIT compiling during inference. That cell was stored before the fix:
its number is short by the header's lines, which `harness rejudge` puts right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.cli import main as cli_main
from harness.fingerprint.parse import fingerprint
from harness.serve.base import LogBuffer

RUN = Path(__file__).resolve().parent.parent / "examples" / "h200-source" / "run"
CELL = "src-0251__qwen3moe-fp8__moe=triton"
SIG = "triton-jit-during-inference"


def _stored() -> tuple[str, tuple[str, ...], list[str]]:
    text = (RUN / "logs" / f"{CELL}.server.log").read_text()
    lines = text.splitlines()
    # harness/serve/stage.py's header: "# harness ...", "# command: ...", the env, "# container: ..."
    n = next(i for i, line in enumerate(lines) if line.startswith("# container: ")) + 1
    return text, tuple(lines[:n]), lines[n:]


def test_the_written_numbers_are_the_stored_files_and_rejudge_agrees(tmp_path):
    text, header, server_lines = _stored()
    assert len(header) == 6 and header[0].startswith("# harness ")  # above the server's first line
    # the log as the runner writes it: its header, then each line the server printed
    log = LogBuffer(tmp_path / "server.log", header)
    for line in server_lines:
        log.add(line)
    log.close()
    written = (tmp_path / "server.log").read_text()
    assert written == text if text.endswith("\n") else written == text + "\n"
    fp = fingerprint(log.stored_text())  # what harness/run/cell.py stores
    line = fp.signature_context[SIG].line
    assert "Triton kernel JIT compilation during inference" in written.splitlines()[line - 1]

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    before = json.loads((run / "cells" / f"{CELL}.json").read_text())["fingerprint"]["signature_context"][SIG]
    assert before["line"] == line - len(header)  # stored by the old writer: the header's lines short
    assert cli_main(["rejudge", str(run)]) in (0, 1)
    after = json.loads((run / "cells" / f"{CELL}.json").read_text())["fingerprint"]["signature_context"][SIG]
    assert after == {"line": line, "phase": fp.signature_context[SIG].phase}
