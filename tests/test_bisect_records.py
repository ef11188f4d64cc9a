"""The records of `harness bisect` and `harness bug --bisect/--configure` are typed: every committed
bisect folder (examples/bisect-sm121a/) and configure record (examples/upstream-reports/) reads
into its record and writes back the same bytes, its answer renders to the committed result.md,
and what another tool wrote (a probe build's answer, a cell of `harness run`) is read as the
type that tool writes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from harness import proc
from harness.bisect import probes
from harness.bisect.history import HistorySpec, Point
from harness.bisect.report import markdown
from harness.bisect.search import BAD, SKIP
from harness.bisect.store import BisectFile, BisectResult, BisectStore, Step, dump
from harness.bisect.upstream_report import ConfigureRecord, _record
from harness.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
BISECTS = sorted(p.parent for p in (ROOT / "examples" / "bisect-sm121a").glob("*/bisect.json"))
RECORDS = sorted((ROOT / "examples" / "upstream-reports").glob("*/*/record.json"))


def _written(record) -> str:
    """What the store writes for a record (before masking, which these files do not need)."""
    return json.dumps(dump(record), indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("folder", BISECTS, ids=lambda p: p.name)
def test_every_committed_bisect_folder_reads_into_its_records_and_writes_the_same_bytes(folder):
    assert len(BISECTS) == 5
    files = [(folder / "bisect.json", BisectFile), (folder / "result.json", BisectResult),
             *[(p, Step) for p in sorted((folder / "steps").glob("*.json"))]]
    assert len(files) > 4
    for path, model in files:
        assert _written(model.model_validate_json(path.read_text())) == path.read_text(), path
    store = BisectStore.open(folder)
    steps = store.steps()
    assert len(steps) == len(files) - 2 and all(isinstance(s, Step) for s in steps.values())
    assert store.spec.history.kind == "releases" and store.points[0].id == steps[0].id


@pytest.mark.parametrize("folder", BISECTS, ids=lambda p: p.name)
def test_every_committed_answer_renders_to_its_committed_markdown(folder):
    committed = (folder / "result.md").read_text()
    command = re.search(r"```\n(harness bisect --resume .*)\n```", committed)
    assert command, folder
    result = BisectResult.model_validate_json((folder / "result.json").read_text())
    assert markdown(result, command.group(1)) == committed


def test_run_3_reads_as_the_answer_it_is():
    result = BisectResult.model_validate_json((ROOT / "examples/bisect-sm121a/run-3/result.json").read_text())
    assert result.done and result.first_bad and result.first_bad.id == "0.20.0"
    assert result.first_bad.decision == {"nvfp4_sm12x": ["12.0f"], "scaled_mm_sm120": ["12.0f"], "moe_data": ["12.0f"]}
    assert result.last_good.id == "0.19.1" and result.probe.torch_cuda_arch_list == "12.1a"
    assert result.cmake_diff and result.cmake_diff.file == "cmake.diff" and result.cmake_diff.from_ == "0.19.1"
    assert result.history.project == "vllm" and result.history.minor_first is True


def test_unknown_keys_are_kept_and_a_bisect_file_of_another_format_is_named(tmp_path):
    folder = ROOT / "examples" / "bisect-sm121a" / "run-3"
    doc = json.loads((folder / "bisect.json").read_text())
    doc["history"]["mirror"] = "kept"
    doc["written_by"] = "a newer harness"
    again = dump(BisectFile.model_validate(doc))
    assert again["written_by"] == "a newer harness" and again["history"]["mirror"] == "kept"  # type: ignore[index]
    copy = tmp_path / "b"
    shutil.copytree(folder, copy)
    for fmt, said in ((2, "format 2, this version reads 1"), (None, "format None, this version reads 1")):
        doc = json.loads((folder / "bisect.json").read_text())
        if fmt is None:
            del doc["format"]
        else:
            doc["format"] = fmt
        (copy / "bisect.json").write_text(json.dumps(doc))
        with pytest.raises(ConfigError, match=said):
            BisectStore.open(copy)


def test_a_step_that_is_not_a_step_is_named_with_its_field(tmp_path):
    folder = tmp_path / "b"
    shutil.copytree(ROOT / "examples" / "bisect-sm121a" / "run-3", folder)
    step = sorted((folder / "steps").glob("*.json"))[0]
    doc = json.loads(step.read_text())
    doc["verdict"] = "maybe"
    step.write_text(json.dumps(doc))
    with pytest.raises(ConfigError) as exc:
        BisectStore.open(folder).steps()
    assert step.name in exc.value.message and "verdict" in exc.value.message
    assert exc.value.hint is not None and "delete it to judge that point again" in exc.value.message


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.parent.name)
def test_every_committed_configure_record_reads_into_its_record_and_keeps_every_key(path):
    assert len(RECORDS) == 7
    raw = json.loads(path.read_text())
    rec = _record(path)
    assert dump(rec) == raw
    # 0.33.0 stops at its GCC check before vllm-flash-attn: no FA3 decision at all
    fa3 = {"0.25.1-patched-9.0a": "9.0a", "0.33.0-patched": None, "0.33.0-stock": None}
    assert rec.decisions.fa3_archs == fa3.get(path.parent.name, "")
    assert rec.sources.flash_attention and rec.sources.flash_attention.pin == raw["sources"]["flash-attention"]["pin"]


def test_a_configure_record_without_a_key_is_named(tmp_path):
    raw = json.loads(RECORDS[0].read_text())
    del raw["fa3"]
    (tmp_path / "record.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="configure record without 'fa3'"):
        _record(tmp_path / "record.json")
    raw["kind"] = "build"
    (tmp_path / "record.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="not a configure record"):
        _record(tmp_path / "record.json")
    assert ConfigureRecord.model_fields["decisions"].is_required()


# --- what other tools wrote, read as their types ---------------------------------------------------

CELLS = [ROOT / "examples/h200/run/cells/vllm-0251__qwen3moe-nvfp4__auto.json",  # results format 2
         ROOT / "tests/fixtures/runs/20261130-082632-spark-candidate-eaf4fc/cells/vllm-0251__qwen3moe-nvfp4__moe=marlin.json"]  # 1


@pytest.mark.parametrize("cell", CELLS, ids=lambda p: p.parent.parent.parent.name)
def test_the_cell_probe_reads_the_cell_harness_run_wrote(cell, tmp_path, monkeypatch):
    said = json.loads(cell.read_text())
    assert said["status"] == "fail" and said["reasons"]

    def run(argv, **_kw):  # `harness run ... --results DIR`: one run folder with this cell
        results = Path(argv[argv.index("--results") + 1])
        (results / "run-1" / "cells").mkdir(parents=True)
        shutil.copy(cell, results / "run-1" / "cells" / cell.name)
        return proc.Result(tuple(argv), 1, "", "")

    monkeypatch.setattr(probes.proc, "run", run)
    probe = probes.CellProbe(ROOT / "matrix" / "spark.toml", "spark-121a/qwen36-nvfp4/auto", "spark-121a",
                             HistorySpec(kind="releases", project="vllm", good="0.31.0", bad="0.32.0"))
    (tmp_path / "logs").mkdir()
    obs = probe.observe(tmp_path / "tree", Point("0.32.0", "vllm 0.32.0"), tmp_path / "logs" / "0001.log")
    assert obs.verdict == BAD and obs.reason == f"cell fail: {'; '.join(said['reasons'])[:200]}"
    assert obs.detail == {"status": "fail", "run_dir": str(tmp_path / "logs" / "0001.run" / "run-1")}


def test_a_probe_build_answer_of_another_shape_is_a_skip(tmp_path, monkeypatch):
    def run(argv, **_kw):
        out = Path(argv[argv.index("--log-dir") + 1])
        (out / "probe-s.json").write_text(json.dumps({"stack": "s", "rows": "not rows"}))
        return proc.Result(tuple(argv), 0, "", "")

    monkeypatch.setattr(probes.proc, "run", run)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text('[stacks.s.vllm]\npypi = "0.31.0"\npatches = []\n')
    probe = probes.BuildProbe(matrix, "s", HistorySpec(kind="releases", project="vllm", good="0.31.0", bad="0.32.0"))
    (tmp_path / "logs").mkdir()
    obs = probe.observe(tmp_path / "tree", Point("0.32.0", "vllm 0.32.0"), tmp_path / "logs" / "0001.log")
    assert obs.verdict == SKIP and obs.reason.endswith("probe-s.json: not a probe build's answer")
