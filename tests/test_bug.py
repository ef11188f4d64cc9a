"""`harness bug` on the committed run directories (tests/fixtures/runs/, results format 1, and
the v1 example H200 run): every section, the right tracker, the right rebuild step for each kind
of stack, no secret, and no report for a cell with nothing wrong."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, make_runs_module

from harness.cli import main as cli_main
from harness.errors import ConfigError
from harness.fingerprint.model import Fingerprint
from harness.results.bug import bug_report, stack_kind, symptom, trackers
from harness.results.build import BuildOutcome
from harness.results.model import (
    CellError,
    CellResult,
    ImageInfo,
    RunRecord,
    Status,
    Verdict,
    VerdictStatus,
)
from harness.results.store import RunStore

EXAMPLE = ROOT / "examples" / "h200" / "run"

SECTIONS = (
    "## Environment",
    "### Host",
    "### Image",
    "### Patches (from the image labels, with sha256)",
    "### Archs actually compiled",
    "## Rebuild the exact image",
    "## Serve command and environment",
    "## Expected vs actual",
    "## Evidence from the server log",
    "## Reproduce",
    "Likely tracker:",
)


@pytest.fixture(scope="session")
def mr():
    return make_runs_module()


@pytest.fixture(scope="session")
def cand():
    (path,) = (FIXTURES / "runs").glob("*-spark-candidate-*")
    return RunStore.open(path)


def _cell(status: Status, **fields) -> CellResult:
    return CellResult(id="s/m/c", stack="s", model="m", config="c", status=status, **fields)


def test_mismatch_cell_report(cand, mr):
    text = bug_report(cand, mr.MARLIN)
    for section in SECTIONS:
        assert section in text, section
    title = text.splitlines()[0]
    assert title.startswith("# [NVIDIA GB10 (SM_121, cc 12.1)]")
    assert "--moe-backend not honoured: asked marlin, got HUMMING" in title
    assert "vLLM 0.25.1" in title and "590.48.01" in title
    assert "Likely tracker: **vLLM**" in text
    assert "| MoE backend | marlin | HUMMING |" in text
    # Evidence: the selection lines quoted from the log, not the whole log.
    assert "Using 'HUMMING' NvFp4 MoE backend" in text
    assert "Using MarlinNvFp4LinearKernel for NVFP4 GEMM" in text
    assert "Last " not in text  # a served cell gets its evidence, not a log tail
    assert f"harness run -m matrix/spark.toml -k '{mr.MARLIN}'" in text
    assert f"harness build -m matrix/spark.toml -k '{mr.MARLIN}'" in text
    assert "harness.patch.vllm.0001-cmake-sm121a.patch" in text and "sha256:" in text
    assert "audit.nvfp4_gemm" in text
    assert "580.142" not in text  # the candidate's host, not the baseline's


def test_crashed_cell_report(cand, mr):
    text = bug_report(cand, mr.CRASH)
    for section in SECTIONS:
        assert section in text, section
    assert "illegal memory access [illegal-memory-access]: server crashes at start-up" in text.splitlines()[0]
    assert "## Cause" in text and "**illegal memory access**" in text
    assert "an illegal memory access was encountered" in text
    assert "Last " in text and "EngineCore failed to start" in text
    assert "Cell status: **crashed**" in text


def test_driver_signature_points_at_the_driver():
    cell = _cell(Status.CRASHED, fingerprint=Fingerprint(signatures=("nv-err-no-memory",)))
    assert trackers(cell)[0].key == "driver"
    cell = _cell(Status.FAIL, verdicts=(Verdict(check="autotuner:trtllm::fused_moe::gemm2",
                                               status=VerdictStatus.FAIL, message="skipped 10"),))
    assert trackers(cell)[0].key == "flashinfer"


def test_a_tool_error_points_at_the_harness():
    cell = _cell(Status.ERROR, error=CellError(type="ValueError", message="no level at c=1"))
    assert symptom(cell) == "harness raised inside the cell: ValueError: no level at c=1"
    assert trackers(cell)[0].key == "harness"


def test_no_secret_in_any_report(cand, mr):
    for cid in mr.PLAN:
        text = bug_report(cand, cid, force=True)
        for secret in mr.SECRETS:
            assert secret not in text, (cid, secret)
        assert "HF_TOKEN='***'" in text and "--api-key ***" in text


def test_unknown_cell_names_the_finished_ones(cand):
    with pytest.raises(ConfigError, match="no finished cell") as exc:
        bug_report(cand, "nope/nope/nope")
    assert "vllm-0251/qwen3moe-fp8/auto" in exc.value.hint


def test_a_cell_with_nothing_wrong_has_no_report_unless_forced(cand, mr, capsys):
    """The DECODE cell of the candidate passed (slower, but no verdict failed): no bug."""
    with pytest.raises(ConfigError, match="no bug to report") as exc:
        bug_report(cand, mr.DECODE)
    assert mr.MARLIN in exc.value.hint and "--force" in exc.value.hint
    assert cli_main(["bug", str(cand.dir), mr.DECODE]) == 2
    assert "--force" in capsys.readouterr().err
    text = bug_report(cand, mr.DECODE, force=True)
    title = text.splitlines()[0]
    assert "no failure recorded" in title and "cell status pass" not in title
    assert "exit code None" not in text and "Start-up: state `ready`, after 1.0 s." in text


def test_v1_example_local_stack(tmp_path, monkeypatch):
    """examples/h200/run: a local stack (nothing to build) with its matrix path stored absolute."""
    cid = "vllm-0251/qwen3moe-nvfp4/moe=marlin"
    monkeypatch.chdir(tmp_path)  # the run's /work/main/matrix/... is not under here
    text = bug_report(RunStore.open(EXAMPLE), cid, force=True)
    assert "## The Python environment (local stack: nothing to build)" in text
    assert "harness build" not in text and "## Rebuild the exact image" not in text
    assert "vllm==0.25.1" in text and "torch==2.11.0" in text
    assert "python 3.12.3 (/opt/torch/.venv/bin/python3)" in text
    assert f"harness run -m h200-local.toml -k '{cid}'" in text
    assert "h200-local.toml` from a directory outside this one" in text
    assert "/work/main/matrix" not in text
    assert "`logs/vllm-0251__qwen3moe-nvfp4__moe=marlin.server.log` in the run directory" in text


def test_matrix_path_under_the_current_directory_is_relative(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    data = json.loads((run / "run.json").read_text())
    data["matrix"]["path"] = str(tmp_path / "matrix" / "h200-local.toml")
    (run / "run.json").write_text(json.dumps(data))
    monkeypatch.chdir(tmp_path)
    text = bug_report(RunStore.open(run), "vllm-0251/qwen3moe-fp8/auto", force=True)
    assert "harness run -m matrix/h200-local.toml -k" in text and str(tmp_path) not in text


def _prebuilt_run(root: Path, mr) -> RunStore:
    """A stack that names an image the harness did not build: reused, no harness.* labels."""
    (src,) = (FIXTURES / "runs").glob("*-spark-candidate-*")
    cell = RunStore.open(src).read_cell(mr.MARLIN)
    store = RunStore.create(root, RunRecord.from_json(json.loads((src / "run.json").read_text())))
    ref, image_id = "nvcr.io/nvidia/vllm:25.11-py3", "sha256:" + "d4" * 32
    labels = {"org.opencontainers.image.version": "25.11"}
    store.write_build(BuildOutcome(stack=cell.stack, status="reused", image_ref=ref,
                                   image_id=image_id, labels=labels))
    store.write_cell(cell.model_copy(update={"image": ImageInfo(ref=ref, id=image_id,
                                                                labels=labels)}))
    return store


def test_prebuilt_image_is_pulled_not_built(tmp_path, mr):
    store = _prebuilt_run(tmp_path, mr)
    cell = store.read_cell(mr.MARLIN)
    assert stack_kind(cell, store.builds()[(cell.stack, None)]) == "prebuilt"
    text = bug_report(store, mr.MARLIN)
    assert "## The image (prebuilt: nothing to build)" in text
    assert "docker pull nvcr.io/nvidia/vllm:25.11-py3" in text
    assert "sha256:" + "d4" * 32 in text
    assert "harness build" not in text


def test_a_multi_host_run_keys_builds_by_stack_and_host(tmp_path, mr):
    """Each host of a run over several builds its own image of a stack: stored as
    builds/<stack>@<host>.json, read back keyed (stack, host), and `harness bug` finds the one
    built where the cell ran (v2 stored the key as the stack name "<stack>@<host>": read the same)."""
    (src,) = (FIXTURES / "runs").glob("*-spark-candidate-*")
    cell = RunStore.open(src).read_cell(mr.MARLIN).model_copy(update={"host": "rtx"})
    store = RunStore.create(tmp_path, RunRecord.from_json(json.loads((src / "run.json").read_text())))
    for host, digest in (("spark", "a1"), ("rtx", "b2")):
        store.write_build(BuildOutcome(stack=cell.stack, status="reused", image_ref=f"img-{host}",
                                       image_id="sha256:" + digest * 32), host=host)
    store.write_cell(cell.model_copy(update={"image": None}))
    assert sorted(store.builds()) == [(cell.stack, "rtx"), (cell.stack, "spark")]
    assert (store.dir / "builds" / f"{cell.stack}@rtx.json").is_file()
    assert store.builds_on("spark")[cell.stack].image_ref == "img-spark"
    assert store.build_for(cell.stack, "rtx").image_id == "sha256:" + "b2" * 32
    text = bug_report(store, mr.MARLIN)
    assert "sha256:" + "b2" * 32 in text and "sha256:" + "a1" * 32 not in text
    # a v2 record of the same build
    v2 = store.dir / "builds" / f"{cell.stack}@rtx.json"
    data = json.loads(v2.read_text())
    del data["host"], data["format"]  # a v2 build record said no format
    data["stack"] = f"{cell.stack}@rtx"
    v2.write_text(json.dumps(data))
    assert store.build_for(cell.stack, "rtx").image_ref == "img-rtx"


def test_stack_kinds():
    built = BuildOutcome(stack="s", status="built", image_ref="vllm-bw:s-1",
                         labels={"harness.stack": "s"})
    cached = built.model_copy(update={"status": "reused"})  # built by the harness earlier
    prebuilt = BuildOutcome(stack="s", status="reused", image_ref="vllm/vllm-openai:v0.25.1")
    local = BuildOutcome(stack="s", status="local", image_ref="local:/usr/bin/python3",
                         labels={"harness.local.vllm_dir": "/x/vllm"})
    cell = _cell(Status.FAIL)
    assert [stack_kind(cell, b) for b in (built, cached, prebuilt, local)] == [
        "built", "built", "prebuilt", "local"]
    assert stack_kind(_cell(Status.FAIL, runner="local"), None) == "local"
    assert stack_kind(_cell(Status.BUILD_FAILED), BuildOutcome(stack="s", status="failed")) == "built"


def test_cli_writes_the_report(cand, mr, tmp_path, capsys):
    out = tmp_path / "bug.md"
    assert cli_main(["bug", str(cand.dir), mr.CRASH, "--out", str(out)]) == 0
    assert out.read_text().startswith("# [NVIDIA GB10")
    assert cli_main(["bug", str(cand.dir), mr.MARLIN]) == 0
    assert "## Reproduce" in capsys.readouterr().out


def test_cli_out_that_is_a_folder_is_exit_2(cand, mr, tmp_path, capsys):
    assert cli_main(["bug", str(cand.dir), mr.CRASH, "--out", str(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "is a folder" in err and "Traceback" not in err
    assert cli_main(["bug", str(cand.dir), mr.CRASH, "--out", str(tmp_path / "no" / "b.md")]) == 2


def test_versions_the_probe_did_not_record_come_from_the_image_labels():
    """The Docker example's cells carry no in-image probe: torch, vLLM, CUDA and Python come from
    the labels the build wrote, each said to be a label (not what the probe confirmed)."""
    store = RunStore.open(ROOT / "examples" / "h200-docker" / "run")
    cell = store.read_cell("docker-0251/qwen3moe-fp8/auto")
    assert not (cell.image_fingerprint or {}).get("torch")
    text = bug_report(store, cell.id, force=True)
    assert "| torch | 2.11.0 (from the base image) (image label) |" in text
    assert "| vLLM | 0.25.1 (image label) |" in text
    assert "| Python | /opt/torch/.venv/bin/python3 (image label) |" in text


def test_every_tracker_a_report_can_name_has_its_entry() -> None:
    """`bug_report` indexes TRACKERS by a Tracker's key: every key a signature or the report
    itself can give has a name and a place to file."""
    from typing import get_args

    from harness.fingerprint.tables import signatures
    from harness.results.bug import TRACKERS, TrackerKey

    keys = {k for part in get_args(TrackerKey) for k in get_args(part)}
    assert keys == set(TRACKERS)
    assert {s.tracker for s in signatures()} <= keys
