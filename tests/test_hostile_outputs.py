"""Where the tool writes what the user asked for: `--out -` and `/dev/stdout` (a link to
/proc/self/fd/1, what users type) mean standard output, never a refusal and never a write
through the link; and stored bench figures at the edges of a float (1e308, negatives) are
reported, not raised on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.hostile import run_cli

RUNS = Path(__file__).parent / "fixtures" / "runs"
BASE = RUNS / "20261130-082630-spark-baseline-7bc1bc"
CAND = RUNS / "20261130-082632-spark-candidate-eaf4fc"
CELL = "vllm-0251/qwen3moe-nvfp4/auto"


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_bug_out_to_standard_output(home, target):
    rc, text = run_cli(["bug", BASE, CELL, "--force", "--out", target])
    assert rc == 0 and "Traceback" not in text and CELL in text
    assert not (home / "-").exists()


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_compare_md_to_standard_output(home, target):
    rc, text = run_cli(["compare", BASE, CAND, "--md", target])
    assert rc in (0, 1) and "Traceback" not in text and "|" in text
    assert not (home / "-").exists()


@pytest.mark.parametrize("value", [1e308, -1e308, -5, 0, 1e-308])
def test_report_on_bench_figures_at_the_edges(home, value):
    run = home / "run"
    shutil.copytree(BASE, run)
    for cell in (run / "cells").glob("*.json"):
        doc = json.loads(cell.read_text())
        for level in (doc.get("bench") or {}).get("levels") or []:
            for key in list(level):
                if isinstance(level[key], float | int) and not isinstance(level[key], bool):
                    level[key] = value
        cell.write_text(json.dumps(doc))
    rc, text = run_cli(["report", run])
    assert rc in (0, 1, 2) and "Traceback" not in text, text[-2000:]


@pytest.mark.parametrize("sub", ["cells", "logs", "builds"])
@pytest.mark.parametrize("command", ["rejudge", "report", "bug"])
def test_a_run_folder_whose_sub_folder_is_a_link_is_refused(home, victim, sub, command):
    from support.hostile import check_after, make_sandbox

    sb = make_sandbox(home / "sb", victim)
    run = sb.work / "run"
    shutil.copytree(BASE, run)
    shutil.copytree(run / sub, sb.canary / sub)  # the link's target looks like the real thing
    shutil.rmtree(run / sub)
    (run / sub).symlink_to(sb.canary / sub)
    before = sb.snapshot()
    argv = {"rejudge": ["rejudge", run], "report": ["report", run], "bug": ["bug", run, CELL, "--force"]}[command]
    rc, text = run_cli(argv)
    check_after(sb, before, victim, argv, rc, text)
    said = " ".join(text.split())
    if sub == "cells":  # every one of these reads the cells: refused, naming why
        assert rc == 2 and ("symbolic link" in said or "outside" in said), said[-2000:]
