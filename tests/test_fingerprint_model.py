"""One `Fingerprint` type in memory and on disk: stored shapes read back, written back unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.fingerprint import Fingerprint, fingerprint
from harness.results.model import CellResult, FingerprintRecord

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted(
    [*ROOT.glob("examples/*/run/cells/*.json"), *ROOT.glob("tests/fixtures/runs/*/cells/*.json")]
)
LOGS = sorted((ROOT / "examples/h200/run/logs").glob("*.server.log"))


def test_the_stored_record_is_the_fingerprint_type():
    assert FingerprintRecord is Fingerprint


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_a_stored_cell_writes_its_fingerprint_back_unchanged(path: Path):
    stored = json.loads(path.read_text(encoding="utf-8"))
    if stored.get("fingerprint") is None:
        pytest.skip("this cell has no fingerprint")
    cell = CellResult.from_json(stored)
    assert isinstance(cell.fingerprint, Fingerprint)
    assert cell.to_json()["fingerprint"] == stored["fingerprint"]


def test_the_stored_shapes_are_lifted_on_read():
    fp = Fingerprint.model_validate({
        "autotuner_skipped": [{"op": "trtllm::fused_moe::gemm2", "count": 10}],
        "requested": {"moe_backend": "marlin", "linear_backend": None, "source": "args"},
        "newer_writer_fact": 3,
    })
    assert fp.autotuner_skipped == (("trtllm::fused_moe::gemm2", 10),)
    assert fp.requested == {"moe_backend": "marlin", "linear_backend": None}
    assert fp.requested_source == "args"
    assert fp.to_json() == {
        "autotuner_skipped": [{"op": "trtllm::fused_moe::gemm2", "count": 10}],
        "requested": {"moe_backend": "marlin", "linear_backend": None,
                      "attention_backend": None, "source": "args"},
        "newer_writer_fact": 3,
    }


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_a_fresh_fingerprint_round_trips(log: Path):
    fp = fingerprint(log.read_text(encoding="utf-8"))
    data = fp.to_json()
    assert "requested_source" not in data and "source" in data["requested"]
    back = Fingerprint.model_validate(json.loads(json.dumps(data)))
    assert back == fp
    assert back.to_json() == data
