"""Every shipped cell re-fingerprints identically: the server logs under examples/*/run*/ and
tests/fixtures/runs/ read to the same stored JSON, key for key, as the fingerprint gave when the
snapshot (tests/fixtures/fingerprint/shipped_cells.json) was taken. A change to how a log is
read that moves any of these facts must be made on purpose: regenerate the snapshot with

    python tests/test_fingerprint_shipped.py --write

and say in the commit which fact moved and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.fingerprint.parse import fingerprint

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = ROOT / "tests" / "fixtures" / "fingerprint" / "shipped_cells.json"


def shipped_logs() -> list[Path]:
    return sorted(
        {*ROOT.glob("examples/**/logs/*.server.log"), *ROOT.glob("tests/fixtures/runs/*/logs/*.server.log")}
    )


def _read(log: Path) -> dict:
    return fingerprint(log.read_text(encoding="utf-8", errors="replace")).to_json()


def test_the_snapshot_covers_every_shipped_log():
    stored = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert sorted(stored) == sorted(str(p.relative_to(ROOT)) for p in shipped_logs())
    assert len(stored) >= 20


@pytest.mark.parametrize("log", shipped_logs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shipped_log_reads_to_its_stored_fingerprint(log: Path):
    stored = json.loads(SNAPSHOT.read_text(encoding="utf-8"))[str(log.relative_to(ROOT))]
    got = _read(log)
    # byte for byte, key order included: the stored JSON of a cell must not move
    assert json.dumps(got, ensure_ascii=False) == json.dumps(stored, ensure_ascii=False)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    SNAPSHOT.write_text(
        json.dumps({str(p.relative_to(ROOT)): _read(p) for p in shipped_logs()}, indent=1,
                   ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
