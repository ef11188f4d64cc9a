"""`harness bug --flashinfer-plan`: the committed report's facts come from its record (the
regeneration itself is tests/test_upstream_reports.py), and a record or a command line it cannot
read is bad input, named (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.bisect.flashinfer_report import flashinfer_plan_report, load_record
from harness.bisect.upstream_report import load_notes

ROOT = Path(__file__).resolve().parent.parent
DIR = ROOT / "examples" / "upstream-reports"
RECORD = DIR / "flashinfer-fp4-quantize-aot-not-loaded" / "plan.json"
NOTES = DIR / "flashinfer-fp4-quantize-aot-not-loaded.toml"


def harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True)


def test_the_record_holds_the_disagreement_the_report_names():
    rec = load_record(RECORD)
    assert [p.arch_list for p in rec.plans] == ["12.1a", "12.0a"]
    assert [p.runtime_not_in_aot for p in rec.plans] == [["12.1: fp4_quantization_120f"], ["12.0: fp4_quantization_120f"]]
    fp4 = {p.arch_list: [(m.name, m.gencode) for m in p.modules if m.family == "fp4_quantize"] for p in rec.plans}
    assert fp4 == {"12.1a": [("fp4_quantization_121", ["compute_121a,sm_121a"])],
                   "12.0a": [("fp4_quantization_120", ["compute_120a,sm_120a"])]}
    text = flashinfer_plan_report(RECORD.relative_to(ROOT) if Path.cwd() == ROOT else RECORD, load_notes(NOTES))
    assert text.count("which the AOT step does not compile") == 2
    assert "| 12.1 | `12.1a` | `flashinfer.fused_moe.core.get_cutlass_fused_moe_module('121')` | fused_moe_120 |" in text


def test_a_record_of_another_kind_is_bad_input(tmp_path):
    bad = tmp_path / "record.json"
    bad.write_text(json.dumps({**json.loads(RECORD.read_text()), "kind": "configure"}))
    res = harness("bug", "--flashinfer-plan", str(bad), "--notes", str(NOTES))
    assert res.returncode == 2 and "not a FlashInfer AOT plan record" in " ".join(res.stderr.split())
    res = harness("bug", "--flashinfer-plan", str(tmp_path / "missing.json"), "--notes", str(NOTES))
    assert res.returncode == 2 and "not a file" in " ".join(res.stderr.split())


def test_one_kind_of_report_at_a_time():
    res = harness("bug", "--flashinfer-plan", str(RECORD), "--bisect", "examples/bisect-sm121a/run-3",
                  "--notes", str(NOTES))
    assert res.returncode == 2 and "make different reports" in " ".join(res.stderr.split())
