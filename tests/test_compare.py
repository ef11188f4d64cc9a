"""`harness compare` on real run directories (tests/fixtures/runs/make_runs.py): the fake server
at 400 tok/s for the baseline and 300 for the candidate, real captured logs fingerprinted."""

from __future__ import annotations

import json

import pytest
from conftest import make_runs_module

from harness.cli import main as cli_main
from harness.errors import Regression
from harness.results.compare import compare_runs, to_markdown
from harness.results.store import RunStore


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    return make_runs_module().build_all(tmp_path_factory.getbasetemp() / "runs")


@pytest.fixture(scope="session")
def mr():
    return make_runs_module()


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
    partial = mr.make_run(tmp_path, "same", only=(mr.MARLIN,), finish=False)
    cmp = compare_runs(runs["baseline"], partial)
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
    assert cell["serve"]["env"]["HF_TOKEN"] == "***"
    assert "--api-key" in cell["serve"]["command"]
