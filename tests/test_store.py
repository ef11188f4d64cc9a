"""RunStore and the atomic writers: whole files only, resume by presence, secrets masked."""

from __future__ import annotations

import json
import re

import pytest

from harness.errors import ConfigError
from harness.results.store import RunStore, atomic_write_json, atomic_write_text, new_run_id

META = {
    "tool_version": "0.1.0",
    "argv": ["harness", "run"],
    "matrix": {"name": "m"},
    "host": {},
    "cells": ["s/m/a", "s/m/b", "s/m/c"],
}


def cell(cid: str, **extra) -> dict:
    return {
        "id": cid,
        "status": "pass",
        "serve": {"command": ["vllm", "serve"], "env": {}},
        **extra,
    }


def test_run_id_shape():
    rid = new_run_id("h200-local")
    assert re.fullmatch(r"\d{8}-\d{6}-h200-local-[0-9a-f]{6}", rid), rid
    assert new_run_id("h200-local") != rid
    assert "/" not in new_run_id("a/b c")


def test_create_writes_running_run_json(tmp_path):
    store = RunStore.create(tmp_path, "r1", META)
    run = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert run["status"] == "running" and run["format"] == 1 and run["run_id"] == "r1"
    assert run["finished_at"] is None and run["started_at"].endswith("Z")
    assert store.dir == tmp_path / "r1" and store.run["cells"] == META["cells"]
    for sub in ("cells", "logs", "builds"):
        assert (tmp_path / "r1" / sub).is_dir()
    with pytest.raises(ConfigError, match="already exists"):
        RunStore.create(tmp_path, "r1", META)


def test_paths_follow_the_format(tmp_path):
    store = RunStore.create(tmp_path, "r1", META)
    cid = "vllm-0251/qwen3moe-nvfp4/moe=marlin"
    assert store.cell_key(cid) == "vllm-0251__qwen3moe-nvfp4__moe=marlin"
    assert (
        store.log_path(cid)
        == store.dir / "logs" / "vllm-0251__qwen3moe-nvfp4__moe=marlin.server.log"
    )
    assert store.build_log_path("spark-121a") == store.dir / "logs" / "build-spark-121a.log"


def test_interrupted_run_reopens_with_two_finished(tmp_path):
    store = RunStore.create(tmp_path, "r1", META)
    store.write_cell(cell("s/m/b"))
    store.write_cell(cell("s/m/a"))
    # The third cell was mid-flight: its log exists, its JSON does not, and a temp file is left.
    store.log_path("s/m/c").write_text("half a log")
    (store.dir / "cells" / ".s__m__c.json.123.tmp").write_text('{"id": "s/m/c"')
    del store
    again = RunStore.open(tmp_path / "r1")
    assert again.run["status"] == "running"
    assert again.finished_ids() == {"s/m/a", "s/m/b"}
    assert [c["id"] for c in again.cells()] == ["s/m/a", "s/m/b"]  # plan order
    assert again.read_cell("s/m/c") is None
    again.finish("interrupted")
    run = json.loads((tmp_path / "r1" / "run.json").read_text())
    assert run["status"] == "interrupted" and run["finished_at"]
    with pytest.raises(ValueError):
        again.finish("done")


def test_open_names_the_path_when_not_a_run(tmp_path):
    with pytest.raises(ConfigError, match=str(tmp_path)) as exc:
        RunStore.open(tmp_path)
    assert "run.json" in str(exc.value) and exc.value.hint
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read it as JSON"):
        RunStore.open(tmp_path)
    (tmp_path / "run.json").write_text('{"format": 9, "run_id": "x"}')
    with pytest.raises(ConfigError, match="format 9"):
        RunStore.open(tmp_path)


def test_builds_round_trip(tmp_path):
    store = RunStore.create(tmp_path, "r1", META)
    store.write_build("spark-121a", {"status": "built", "image": {"ref": "vllm-bw:x"}})
    assert store.builds() == {
        "spark-121a": {"stack": "spark-121a", "status": "built", "image": {"ref": "vllm-bw:x"}}
    }


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
    store = RunStore.create(
        tmp_path, "r1", {**META, "argv": ["harness", "run", "--hf-token", token]}
    )
    store.write_cell(
        {
            "id": "s/m/a",
            "status": "fail",
            "reasons": [f"saw HF_TOKEN={token}"],
            "verdicts": [
                {
                    "check": "x",
                    "status": "fail",
                    "message": "m",
                    "lines": ["--api-key sekrit-value-1"],
                }
            ],
            "fingerprint": {
                "evidence": {"requested": "non-default args: {'api_key': 'sekrit-value-2'}"}
            },
            "serve": {
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
        }
    )
    store.write_log("s/m/a", f"line with {token}\nexport AWS_SECRET_ACCESS_KEY=sekrit-value-6\n")
    text = "".join(p.read_text() for p in store.dir.rglob("*") if p.is_file())
    assert token not in text and "sekrit-value" not in text
    c = store.read_cell("s/m/a")
    assert c["serve"]["env"]["VLLM_X"] == "1"
    assert c["serve"]["command"][-2:] == ["--max-num-batched-tokens", "8192"]
    assert c["format"] == 1
