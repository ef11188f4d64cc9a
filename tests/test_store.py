"""RunStore and the atomic writers: whole files only, resume by presence, secrets masked."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from harness.errors import ConfigError, StorageError
from harness.results.build import BuildOutcome
from harness.results.model import FORMAT, CellResult, CrossCheck, RunRecord, Status
from harness.results.partial import PartialCell
from harness.results.store import (
    RunStore,
    atomic_write_json,
    atomic_write_text,
    cell_key,
    check_writable,
    new_run_id,
)

META = {
    "tool_version": "0.1.0",
    "argv": ["harness", "run"],
    "matrix": {"name": "m"},
    "host": {},
    "cells": ["s/m/a", "s/m/b", "s/m/c"],
}


def run(run_id: str = "r1", **extra) -> RunRecord:
    return RunRecord.model_validate({**META, "run_id": run_id, **extra})


def cell(cid: str, **extra) -> CellResult:
    stack, model, config = cid.split("/")
    return CellResult.model_validate({
        "id": cid, "stack": stack, "model": model, "config": config,
        "status": "pass",
        "serve": {"command": ["vllm", "serve"], "env": {}},
        **extra,
    })


def test_run_id_shape():
    rid = new_run_id("h200-local")
    assert re.fullmatch(r"\d{8}-\d{6}-h200-local-[0-9a-f]{6}", rid), rid
    assert new_run_id("h200-local") != rid
    assert "/" not in new_run_id("a/b c")


def test_create_writes_running_run_json(tmp_path):
    store = RunStore.create(tmp_path, run())
    data = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert data["status"] == "running" and data["format"] == FORMAT and data["run_id"] == "r1"
    assert data["finished_at"] is None and data["started_at"].endswith("Z")
    assert store.dir == tmp_path / "r1" and store.run.cells == META["cells"]
    for sub in ("cells", "logs", "builds"):
        assert (tmp_path / "r1" / sub).is_dir()
    with pytest.raises(ConfigError, match="already exists"):
        RunStore.create(tmp_path, run())


def test_paths_follow_the_format(tmp_path):
    store = RunStore.create(tmp_path, run())
    cid = "vllm-0251/qwen3moe-nvfp4/moe=marlin"
    assert cell_key(cid) == "vllm-0251__qwen3moe-nvfp4__moe=marlin"
    assert (
        store.log_path(cid)
        == store.dir / "logs" / "vllm-0251__qwen3moe-nvfp4__moe=marlin.server.log"
    )
    assert store.build_log_path("spark-121a") == store.dir / "logs" / "build-spark-121a.log"


def test_interrupted_run_reopens_with_two_finished(tmp_path):
    store = RunStore.create(tmp_path, run())
    store.write_cell(cell("s/m/b"))
    store.write_cell(cell("s/m/a"))
    # The third cell was mid-flight: its log exists, its JSON does not, and a temp file is left.
    store.log_path("s/m/c").write_text("half a log")
    (store.dir / "cells" / ".s__m__c.json.123.tmp").write_text('{"id": "s/m/c"')
    del store
    again = RunStore.open(tmp_path / "r1")
    assert again.run.status == "running"
    assert again.finished_ids() == {"s/m/a", "s/m/b"}
    assert [c.id for c in again.cells()] == ["s/m/a", "s/m/b"]  # plan order
    assert again.read_cell("s/m/c") is None
    again.finish("interrupted")
    data = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert data["status"] == "interrupted" and data["finished_at"]
    with pytest.raises(ValueError):
        again.finish("done")


def test_open_names_the_path_when_not_a_run(tmp_path):
    with pytest.raises(ConfigError, match=str(tmp_path)) as exc:
        RunStore.open(tmp_path)
    assert "run.json" in str(exc.value) and exc.value.hint
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a run file"):
        RunStore.open(tmp_path)
    (tmp_path / "run.json").write_text('{"format": 9, "run_id": "x"}')
    with pytest.raises(ConfigError, match="format 9"):
        RunStore.open(tmp_path)
    for wrong in ("[1, 2]", '{"run_id": ["x"]}', '{"cells": "s/m/a"}', "null"):
        (tmp_path / "run.json").write_text(wrong)
        with pytest.raises(ConfigError, match="run.json"):
            RunStore.open(tmp_path)


def test_a_wrong_shaped_cell_file_is_named(tmp_path):
    store = RunStore.create(tmp_path, run())
    for i, wrong in enumerate(('[{"id": "s/m/a"}]', '{"id": "s/m/a", "status": "banana"}',
                               '{"id": "s/m/a", "status": "pass", "bench": 3}', "{half")):
        path = store.dir / "cells" / f"s__m__a{i}.json"
        path.write_text(wrong)
        with pytest.raises(ConfigError, match=path.name):
            store.cells()
        path.unlink()


def test_builds_round_trip(tmp_path):
    store = RunStore.create(tmp_path, run())
    built = BuildOutcome(stack="spark-121a", status="built", image_ref="vllm-bw:x",
                         arch_problems=("asked 12.1a, built 12.0f",))
    store.write_build(built)
    assert store.builds() == {("spark-121a", None): built}


def test_atomic_json_keeps_the_old_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "x.json"
    atomic_write_json(path, {"ok": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"bad": object()})
    with pytest.raises(ValueError):
        atomic_write_json(path, {"nan": float("nan")})
    assert json.loads(path.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left behind


def test_atomic_text_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "x.txt"
    atomic_write_text(path, "old")

    def boom(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr("harness.results.store.os.fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(path, "new and half-written")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_store_masks_secrets_itself(tmp_path):
    token = "hf_" + "abcdefghij" * 4
    store = RunStore.create(tmp_path, run(argv=["harness", "run", "--hf-token", token]))
    store.write_cell(
        cell(
            "s/m/a",
            status="fail",
            verdicts=[
                {"check": "y", "status": "fail", "message": f"saw HF_TOKEN={token}"},
                {
                    "check": "x",
                    "status": "fail",
                    "message": "m",
                    "lines": ["--api-key sekrit-value-1"],
                },
            ],
            fingerprint={
                "evidence": {"requested": "non-default args: {'api_key': 'sekrit-value-2'}"}
            },
            serve={
                "command": [
                    "vllm",
                    "serve",
                    "--api-key",
                    "sekrit-value-3",
                    "--max-num-batched-tokens",
                    "8192",
                ],
                "env": {"HF_TOKEN": token, "DB_PASSWORD": "sekrit-value-4", "VLLM_X": "1"},
                "log_tail": ["export MY_SECRET=sekrit-value-5"],
            },
            cross_check={"command": "client --token sekrit-value-7",
                         "output_tail": ["Authorization: Bearer sekrit-value-8"]},
        )
    )
    store.write_partial(PartialCell(id="s/m/b", cross_check=CrossCheck(command="client api_key=sekrit-value-9")))
    store.write_log("s/m/a", f"line with {token}\nexport AWS_SECRET_ACCESS_KEY=sekrit-value-6\n")
    text = "".join(p.read_text() for p in store.dir.rglob("*") if p.is_file())
    assert token not in text and "sekrit-value" not in text
    c = store.read_cell("s/m/a")
    assert c.serve.env["VLLM_X"] == "1"
    assert c.serve.command[-2:] == ("--max-num-batched-tokens", "8192")
    assert c.format == FORMAT and c.status is Status.FAIL
    assert c.reasons[0] == "saw HF_TOKEN=***"


def test_v1_cells_are_read_as_v4(tmp_path):
    """The first round's format: free-text reasons become verdicts, nothing is lost."""
    store = RunStore.open(Path(__file__).parent.parent / "examples" / "h200" / "run")
    assert store.run.format == FORMAT == 4 and store.run.matrix.min_ratio == 1.0
    cells = store.cells()
    # the NVFP4 auto cell fails as rejudged: 0.71x of FP8's aggregate at c=8
    assert [c.status for c in cells] == [Status.PASS, Status.FAIL, Status.PASS]
    assert cells[0].decode_c1 and cells[0].fingerprint.moe_backend == "TRITON"
    old = {"format": 1, "id": "s/m/c", "stack": "s", "model": "m", "config": "c",
           "status": "crashed", "reasons": ["server exited with code 1 before it was ready"],
           "verdicts": [{"check": "moe_backend", "status": "fail", "message": "asked a, got b",
                         "lines": []}], "image": {"ref": None, "id": None, "labels": {}}}
    lifted = CellResult.from_json(old)
    assert lifted.reasons == ("server exited with code 1 before it was ready", "asked a, got b")
    assert lifted.verdicts[0].check == "serve.ready" and lifted.image is None


def test_a_full_or_readonly_disk_is_one_clear_error(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if not os.access(ro, os.W_OK):  # root writes anywhere: only check where it bites
            with pytest.raises(ConfigError, match="cannot write there"):
                check_writable(ro)
    finally:
        ro.chmod(0o700)
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        check_writable(Path("/etc/passwd"))
    with pytest.raises(ConfigError, match="MiB free"):
        check_writable(tmp_path, min_free=1 << 60)
    store = RunStore.create(tmp_path, run())

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("harness.results.store.os.fsync", full)
    with pytest.raises(StorageError, match="No space left") as exc:
        store.write_cell(cell("s/m/a"))
    assert exc.value.exit_code == 3 and "--resume" in exc.value.hint
