"""Every table the CLI prints stays readable at 80 columns: nothing cut with an ellipsis, and no
id, arch, kernel name, image tag or path folded across lines (a user copies them). Each command
runs as a user runs it, in a subprocess with COLUMNS set, and its stdout is checked against the
names the same command gives in JSON (or the run directory holds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from harness.tables import Col, show

ROOT = Path(__file__).resolve().parents[1]
CUBINS = ROOT / "tests" / "fixtures" / "cubins"
LOG = ROOT / "tests" / "fixtures" / "logs" / "h200_v0251_nvfp4_moe_marlin.log"
H200 = ROOT / "examples" / "h200" / "run"
H200_DOCKER = ROOT / "examples" / "h200-docker" / "run"
WIDTHS = (80, 120)


def harness(*args: str, width: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(width), "PYTHONPATH": str(ROOT)}
    env.pop("LINES", None)
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def assert_whole(text: str, names: set[str], width: int) -> None:
    assert "…" not in text, text
    lines = text.splitlines()
    for name in names:
        assert any(name in line for line in lines), f"{name!r} is split or missing at {width} columns:\n{text}"
    for line in lines:
        # a grid row fits; prose lines are soft-wrapped by the terminal between words
        if any(c in line for c in "│┃┏└"):
            assert len(line) <= width, f"table row wider than {width}: {line!r}"


@pytest.fixture(scope="module")
def cubins(tmp_path_factory) -> tuple[Path, dict]:
    """Four of the nvcc-built fixtures (the SASS check on all of them is slow on a busy machine):
    eight archs, a/f/plain and PTX among them, and their audit as JSON."""
    d = tmp_path_factory.mktemp("cubins")
    for name in ("mixed.so", "nvfp4_sm120a_sm121a.so", "kernels.fatbin", "kernels.o"):
        (d / name).write_bytes((CUBINS / name).read_bytes())
    data = json.loads(harness("audit", str(d), "--no-sass", "--jobs", "1", "--json", width=200).stdout)
    return d, data


@pytest.mark.parametrize("width", WIDTHS)
def test_audit_lists_archs_as_rows_whole(width, cubins):
    d, data = cubins
    r = harness("audit", str(d), "--cc", "12.1", "--cc", "9.0", "--no-sass", "--jobs", "1", width=width)
    assert r.returncode in (0, 1), r.stderr
    archs = {a for f in data["files"] for a in f["cubins"]}
    files = {f["path"].rsplit("!", 1)[-1].rsplit("/", 1)[-1] for f in data["files"] if f["cubins"]}
    assert archs >= {"sm_120a", "sm_120f", "sm_121a", "sm_100f", "sm_90a"}
    assert_whole(r.stdout, archs | files, width)
    # one row per arch: each arch opens its own line of the per-arch table
    for a in archs:
        assert any(line.lstrip("│ ").startswith(a + " ") or line.startswith(f"- arch: {a}")
                   for line in r.stdout.splitlines()), a


@pytest.mark.parametrize("width", WIDTHS)
def test_plan_keeps_cell_ids_and_images_whole(width):
    matrix = "matrix/rtx-pro-6000.toml"
    ids = set(harness("plan", "-m", matrix, "--list", width=200).stdout.split())
    rows = json.loads(harness("plan", "-m", matrix, "--json", width=200).stdout)
    r = harness("plan", "-m", matrix, width=width)
    assert r.returncode == 0, r.stderr
    assert len(ids) > 10
    assert_whole(r.stdout, ids | {row["image"] for row in rows}, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_fingerprint_keeps_kernel_names_whole(width):
    fp = json.loads(harness("fingerprint", str(LOG), "--json", width=200).stdout)["fingerprint"]
    names = {fp["moe_backend"], *fp["linear_kernels"], fp["attention_backend"]}
    assert "MarlinNvFp4LinearKernel" in names
    r = harness("fingerprint", str(LOG), width=width)
    assert_whole(r.stdout, names, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_and_env_keep_check_names_whole(width):
    r = harness("doctor", width=width)
    assert r.returncode in (0, 3), r.stderr
    assert_whole(r.stdout, {"docker engine", "gpus", "free disk", "cuobjdump"}, width)
    e = harness("env", width=width)
    keys = set(json.loads(harness("env", "--json", width=200).stdout))
    assert_whole(e.stdout, keys, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_compare_and_bug_over_the_examples(width):
    cells = [p.stem for p in (H200 / "cells").glob("*.json")]
    ids = {json.loads((H200 / "cells" / f"{c}.json").read_text())["id"] for c in cells}
    r = harness("compare", str(H200), str(H200), width=width)
    assert r.returncode == 0, r.stderr
    assert_whole(r.stdout, ids, width)
    cell = sorted(ids)[0]
    b = harness("bug", str(H200), cell, "--force", width=width)
    assert b.returncode == 0, b.stderr
    assert_whole(b.stdout, {cell}, width)


def test_a_table_too_wide_becomes_a_list_with_every_name_whole():
    sink = Console(width=80, record=True, color_system=None, file=open(os.devnull, "w"))
    ident = "spark-stock/qwen36-nvfp4-heretic-long-model-name/moe=flashinfer_cutlass,lin=auto"
    cols = [Col("cell", whole=True), Col("kernel", whole=True), Col("note")]
    show(sink, "cells", cols, [[Text(ident), Text("FlashInferCutlassNvFp4LinearKernel"),
                                Text("a note " * 12)]])
    text = sink.export_text()
    assert "…" not in text
    assert f"- cell: {ident}" in text
    assert "    kernel: FlashInferCutlassNvFp4LinearKernel" in text
    assert all(len(line) <= 80 for line in text.splitlines() if ident not in line)


def test_a_table_that_fits_stays_a_grid():
    sink = Console(width=120, record=True, color_system=None, file=open(os.devnull, "w"))
    show(sink, "t", [Col("arch", whole=True), Col("cubins", justify="right")],
         [[Text("sm_121a"), Text("5")], [Text("sm_120f"), Text("3")]])
    text = sink.export_text()
    assert "┃ arch" in text and "│ sm_121a │" in text
