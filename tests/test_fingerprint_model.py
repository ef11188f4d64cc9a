"""One `Fingerprint` type in memory and on disk: stored shapes read back, written back unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.fingerprint.failure import SignatureContext
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.parse import fingerprint
from harness.fingerprint.readers import Mismatch
from harness.results.model import CellResult, FingerprintRecord

ROOT = Path(__file__).resolve().parent.parent
STORED = sorted(
    [*ROOT.glob("examples/**/cells/*.json"), *ROOT.glob("tests/fixtures/runs/*/cells/*.json")]
)
LOGS = sorted((ROOT / "examples/h200/run/logs").glob("*.server.log"))


def test_the_stored_record_is_the_fingerprint_type():
    assert FingerprintRecord is Fingerprint


@pytest.mark.parametrize("path", STORED, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_stored_cell_writes_its_fingerprint_back_unchanged(path: Path):
    stored = json.loads(path.read_text(encoding="utf-8"))
    if stored.get("fingerprint") is None:
        pytest.skip("this cell has no fingerprint")
    cell = CellResult.from_json(stored)
    assert isinstance(cell.fingerprint, Fingerprint)
    assert cell.to_json()["fingerprint"] == stored["fingerprint"]
    # the typed sub-records: the same keys in the same order as stored
    for key in ("mismatches", "signature_context"):
        if key in stored["fingerprint"]:
            assert json.dumps(cell.to_json()["fingerprint"][key]) == json.dumps(stored["fingerprint"][key])


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


def test_mismatches_and_signature_contexts_are_typed_and_written_back_as_read():
    stored = {
        "mismatches": [{"what": "linear_backend", "asked": "flashinfer_b12x",
                        "got": "MarlinNvFp4LinearKernel", "newer_writer_fact": 1}],
        "signature_context": {
            "traceback-cut": {"line": 12, "phase": None, "process": None,
                              "frames": ["serve.py:59 in cmd"], "op": None},
            "illegal-instruction": {"line": 3, "phase": "autotune", "op": "fused-moe"},
            "newer-signature": {"line": 7, "phase": "load", "asked": "marlin", "newer_writer_fact": "x"},
        },
    }
    fp = Fingerprint.model_validate(stored)
    (m,) = fp.mismatches
    assert isinstance(m, Mismatch)
    assert (m.what, m.asked, m.got) == ("linear_backend", "flashinfer_b12x", "MarlinNvFp4LinearKernel")
    cut = fp.signature_context["traceback-cut"]
    assert isinstance(cut, SignatureContext)
    assert (cut.line, cut.phase, cut.process, cut.frames, cut.asked) == (12, None, None, ("serve.py:59 in cmd",), None)
    assert fp.signature_context["illegal-instruction"].op == "fused-moe"
    assert fp.signature_context["newer-signature"].asked == "marlin"
    # keys the writer did not set stay unwritten, unknown keys are kept, the order is the stored one
    assert json.dumps(fp.to_json()) == json.dumps(stored)


def test_a_fresh_fingerprint_stores_its_sub_records_in_the_stored_shape():
    fp = fingerprint("\n".join([
        "INFO 05-03 18:40:00 [arg_utils.py:1] non-default args: {'linear_backend': 'flashinfer_b12x'}",
        "INFO 05-03 18:41:00 [nvfp4.py:1] Using MarlinNvFp4LinearKernel for NVFP4 GEMM",
        "(EngineCore_0 pid=1) Traceback (most recent call last):",
        '(EngineCore_0 pid=1)   File "/x/vllm/v1/engine/core.py", line 703, in run_engine_core',
    ]))
    data = fp.to_json()
    assert data["mismatches"] == [
        {"what": "linear_backend", "asked": "flashinfer_b12x", "got": "MarlinNvFp4LinearKernel"}]
    assert list(data["signature_context"]["traceback-cut"]) == ["line", "phase", "process", "frames", "op"]
    assert data["signature_context"]["traceback-cut"]["frames"] == ["core.py:703 in run_engine_core"]


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.name)
def test_a_fresh_fingerprint_round_trips(log: Path):
    fp = fingerprint(log.read_text(encoding="utf-8"))
    data = fp.to_json()
    assert "requested_source" not in data and "source" in data["requested"]
    back = Fingerprint.model_validate(json.loads(json.dumps(data)))
    assert back == fp
    assert back.to_json() == data
