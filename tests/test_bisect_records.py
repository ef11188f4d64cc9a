"""The records `harness bug --configure` reads are typed: every committed configure record
(examples/upstream-reports/) reads into its record and keeps every key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.bisect.upstream_report import ConfigureRecord, _record
from harness.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
RECORDS = sorted((ROOT / "examples" / "upstream-reports").glob("*/*/record.json"))


def dump(record) -> dict:
    return record.model_dump(mode="json", by_alias=True, exclude_unset=True)


@pytest.mark.parametrize("path", RECORDS, ids=lambda p: p.parent.name)
def test_every_committed_configure_record_reads_into_its_record_and_keeps_every_key(path):
    assert len(RECORDS) == 6
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
