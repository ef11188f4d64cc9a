"""`harness compare` on the committed run directories in tests/fixtures/runs/ (real runs made by
make_runs.py: the fake server at 400 tok/s for the baseline and 300 for the candidate, real
captured logs fingerprinted), read as they are: nothing here measures against the clock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, make_runs_module

from harness.cli import main as cli_main
from harness.errors import ConfigError, Regression
from harness.results.compare import compare_runs, to_markdown
from harness.results.model import CellError, Status
from harness.results.store import RunStore

RUNS = FIXTURES / "runs"
EXAMPLE = ROOT / "examples" / "h200" / "run"


def _run_dir(kind: str) -> Path:
    (path,) = RUNS.glob(f"*-spark-{kind}-*")
    return path


@pytest.fixture(scope="session")
def runs() -> dict[str, RunStore]:
    return {kind: RunStore.open(_run_dir(kind)) for kind in ("baseline", "candidate", "same")}


@pytest.fixture(scope="session")
def mr():
    return make_runs_module()


def _copy(kind: str, tmp_path: Path) -> Path:
    dst = tmp_path / _run_dir(kind).name
    shutil.copytree(_run_dir(kind), dst)
    return dst


def kinds(cmp, cell):
    return {(f.what, f.kind) for f in cmp.findings if f.cell == cell}


def test_kernel_change_is_found(runs, mr):
    cmp = compare_runs(runs["baseline"], runs["candidate"])
    found = {f.what: f for f in cmp.findings if f.cell == mr.MARLIN}
    assert found["moe_backend"].baseline == "MARLIN" and found["moe_backend"].candidate == "HUMMING"
    assert found["moe_backend"].kind == "regression"
    assert found["linear_kernels"].candidate == ["MarlinNvFp4LinearKernel"]
    assert found["status"].baseline == "pass" and found["status"].candidate == "fail"
    relaxed = compare_runs(runs["baseline"], runs["candidate"], kernel_changes_regress=False)
    assert ("moe_backend", "change") in kinds(relaxed, mr.MARLIN)


def test_new_crash_signature_and_status(runs, mr):
    cmp = compare_runs(runs["baseline"], runs["candidate"])
    k = kinds(cmp, mr.CRASH)
    assert ("signature:illegal-memory-access", "regression") in k
    assert ("status", "regression") in k
    # The crashed side never selected kernels: no kernel "change" is invented from None.
    assert not any(w in {"moe_backend", "attention_backend"} for w, _ in k)


def test_decode_regression_beyond_noise(runs, mr):
    cmp = compare_runs(runs["baseline"], runs["candidate"])
    decode = [f for f in cmp.findings if f.cell == mr.DECODE and f.what.startswith("decode")]
    assert decode and all(f.kind == "regression" for f in decode)
    assert all(f.delta < -0.15 and abs(f.delta) > f.band for f in decode)
    # The figures carry the per-repeat samples the verdict came from.
    row = next(r for r in cmp.figures if r["cell"] == mr.DECODE and "per-stream" in r["what"])
    assert len(row["baseline_samples"]) == 3 and len(row["candidate_samples"]) == 3


def test_leak_flag_appearing_is_a_regression(runs, mr):
    cmp = compare_runs(runs["baseline"], runs["candidate"])
    mem = [f for f in cmp.findings if f.what == "memory"]
    assert [(f.cell, f.kind) for f in mem] == [(mr.DECODE, "regression")]
    assert "leak" in mem[0].message


def test_same_rate_twice_is_quiet(runs):
    cmp = compare_runs(runs["baseline"], runs["same"])
    assert cmp.regressions == [], to_markdown(cmp)
    assert not cmp.of("gain")
    assert cmp.figures and all(r["kind"] == "noise" for r in cmp.figures)
    assert len(cmp.compared) == 3


def test_reversed_direction_is_gains(runs, mr):
    cmp = compare_runs(runs["candidate"], runs["baseline"], kernel_changes_regress=False)
    k = kinds(cmp, mr.CRASH)
    assert ("status", "gain") in k and ("signature:illegal-memory-access", "gain") in k
    assert ("memory", "gain") in kinds(cmp, mr.DECODE)


def test_cells_in_one_run_only_are_listed(runs, mr, tmp_path):
    partial = _copy("same", tmp_path)  # as a run stopped after its first cell leaves it
    for cid in (mr.DECODE, mr.CRASH):
        RunStore.open(partial).cell_path(cid).unlink()
    cmp = compare_runs(runs["baseline"], RunStore.open(partial))
    assert cmp.only_baseline == (mr.DECODE, mr.CRASH) and cmp.only_candidate == ()
    md = to_markdown(cmp)
    assert "Cells in one run only" in md and mr.CRASH in md


def test_floor_comes_from_the_matrix(runs):
    assert compare_runs(runs["baseline"], runs["same"]).floor == 0.02
    wide = compare_runs(runs["baseline"], runs["candidate"], floor=0.5)
    assert not [f for f in wide.findings if f.what.startswith("decode")]


def test_cli_markdown_json_and_exit_code(runs, tmp_path, capsys):
    base, cand, same = (str(runs[k].dir) for k in ("baseline", "candidate", "same"))
    md = tmp_path / "cmp.md"
    assert cli_main(["compare", base, cand, "--md", str(md)]) == Regression.exit_code == 1
    text = md.read_text()
    assert "## Regressions" in text and "590.48.01 **(changed)**" in text
    err = capsys.readouterr().err
    assert "regression(s)" in err and "harness bug" in err

    assert cli_main(["compare", base, same, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["regressions"] == 0 and data["noise_floor"] == 0.02
    assert cli_main(["compare", base, same]) == 0
    assert "No regression beyond noise" in capsys.readouterr().out


def test_cli_rejects_a_directory_that_is_not_a_run(tmp_path, runs, capsys):
    assert cli_main(["compare", str(tmp_path), str(runs["same"].dir)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_no_secret_in_compare_output_or_stored_json(runs, mr):
    cmp = compare_runs(runs["baseline"], runs["candidate"])
    texts = [to_markdown(cmp), json.dumps(cmp.to_json())]
    for store in runs.values():
        texts += [p.read_text() for p in store.dir.rglob("*") if p.is_file()]
    for secret in mr.SECRETS:
        assert not any(secret in t for t in texts), secret
    # ...and they were really planted: the masks are there.
    cell = RunStore.open(runs["candidate"].dir).read_cell(mr.MARLIN)
    assert cell.serve.env["HF_TOKEN"] == "***"
    assert "--api-key" in cell.serve.command


def test_the_v1_example_against_itself_is_quiet():
    """examples/h200/run, a real H200 run in results format 1, through the typed path."""
    run = RunStore.open(EXAMPLE)
    cmp = compare_runs(run, run)
    assert cmp.findings == () and len(cmp.compared) == 3
    # c=1 and c=8: per-stream, aggregate and TTFT each, plus prefill, for 3 cells
    assert len(cmp.figures) == 3 * (2 * 3 + 1)
    assert all(r["kind"] == "noise" and r["delta"] == 0 for r in cmp.figures)
    assert cli_main(["compare", str(EXAMPLE), str(EXAMPLE)]) == 0


def test_error_and_skipped_are_notes_not_regressions(runs, mr, tmp_path):
    """A tool error says nothing about the stack: never a gain or a regression."""
    broken = _copy("same", tmp_path)
    store = RunStore.open(broken)
    cell = store.read_cell(mr.DECODE)
    store.cell_path(mr.DECODE).write_text(json.dumps(cell.model_copy(update={
        "status": Status.ERROR, "bench": None,
        "error": CellError(type="ValueError", message="bench returned no level at c=1"),
    }).to_json()))
    skipped = store.read_cell(mr.MARLIN).model_copy(update={"status": Status.SKIPPED})
    store.cell_path(mr.MARLIN).write_text(json.dumps(skipped.to_json()))
    cmp = compare_runs(runs["baseline"], RunStore.open(broken))
    status = {f.cell: f for f in cmp.findings if f.what == "status"}
    assert {cid: f.kind for cid, f in status.items()} == {mr.DECODE: "note", mr.MARLIN: "note"}
    assert "not comparable" in status[mr.DECODE].message
    assert "ValueError: bench returned no level at c=1" in status[mr.DECODE].message
    assert cmp.regressions == []


@pytest.mark.parametrize("floor", ["nan", "-1", "0", "5", "inf"])
def test_cli_refuses_a_floor_outside_0_1(runs, floor, capsys):
    base, same = str(runs["baseline"].dir), str(runs["same"].dir)
    assert cli_main(["compare", base, same, "--floor", floor]) == ConfigError.exit_code == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "--floor" in err and "fix:" in err and "Traceback" not in err


def test_cli_md_that_is_a_folder_or_has_no_folder_is_exit_2(runs, tmp_path, capsys):
    base, same = str(runs["baseline"].dir), str(runs["same"].dir)
    assert cli_main(["compare", base, same, "--md", str(tmp_path)]) == 2
    assert "is a folder" in " ".join(capsys.readouterr().err.split())
    missing = tmp_path / "no" / "such" / "cmp.md"
    assert cli_main(["compare", base, same, "--md", str(missing)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "does not exist" in err and "Traceback" not in err
    assert not missing.parent.exists()


@pytest.mark.parametrize("damage", ["run-list", "cell-list", "cell-no-status"])
def test_cli_wrong_shaped_json_is_exit_2(runs, mr, tmp_path, damage, capsys):
    bad = _copy("same", tmp_path)
    if damage == "run-list":
        target = bad / "run.json"
        target.write_text("[]")
    else:
        target = RunStore.open(bad).cell_path(mr.MARLIN)
        data = json.loads(target.read_text())
        if damage == "cell-list":
            data = [data]
        else:
            del data["status"]
        target.write_text(json.dumps(data))
    assert cli_main(["compare", str(runs["baseline"].dir), str(bad)]) == 2
    err = "".join(capsys.readouterr().err.split())
    assert target.name in err and "Traceback" not in err  # (whitespace removed: paths wrap)


def test_the_format_verdict_is_compared_from_its_figures(tmp_path):
    """The judge's NVFP4-vs-FP8 comparison is compared as figures (never from its message): the
    H200 example's NVFP4 auto cell fails at c=8 (0.71x of FP8's aggregate); a copy where it
    matches FP8 passes. From the passing run to the failing one is a regression, back a gain."""
    nv = "vllm-0251/qwen3moe-nvfp4/auto"
    failing, passing = tmp_path / "failing", tmp_path / "passing"
    shutil.copytree(EXAMPLE, failing)
    shutil.copytree(EXAMPLE, passing)
    path = passing / "cells" / "vllm-0251__qwen3moe-nvfp4__auto.json"
    cell = json.loads(path.read_text())
    for lv in cell["bench"]["levels"]:
        if lv["concurrency"] == 8:
            lv["aggregate_tok_s"], lv["samples"]["aggregate_tok_s"] = 1645.0, [1644.0, 1645.0, 1646.0]
    path.write_text(json.dumps(cell))
    for run in (failing, passing):
        assert cli_main(["rejudge", str(run)]) == 0
    worse = compare_runs(RunStore.open(passing), RunStore.open(failing))
    (found,) = [f for f in worse.findings if f.cell == nv and f.what == "nvfp4_vs_fp8"]
    assert found.kind == "regression" and "now fails at c=8" in found.message
    assert found.candidate == pytest.approx(1169.19 / 1642.94, abs=1e-3)
    better = compare_runs(RunStore.open(failing), RunStore.open(passing))
    assert ("nvfp4_vs_fp8", "gain") in kinds(better, nv)
