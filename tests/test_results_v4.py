"""Results format 4: a run stores the audit once, in the build's record, in one shape; a cell
points to its build instead of copying the audit. Every build record the repository ships (formats
1-3, in four audit shapes) is lifted on read to that one record without losing a status or a
verdict line, and writes back as format 4."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.audit.report import AuditReport, AuditState, AuditSummary, audit_path
from harness.audit.scan import arch_sort_key
from harness.audit.verdict import Target
from harness.results.build import FORMAT, BuildOutcome, lift_audit
from harness.results.model import CellResult
from harness.results.store import RunStore

ROOT = Path(__file__).resolve().parent.parent
BUILDS = sorted([*ROOT.glob("examples/**/builds/*.json"), *ROOT.glob("tests/fixtures/runs/*/builds/*.json")])
CUBINS = ROOT / "tests" / "fixtures" / "cubins"


def _stored_audits(data: dict) -> list[dict]:
    return [a for a in (data.get("audit"), data.get("audit_summary")) if isinstance(a, dict)]


def _stored_lines(audit: dict) -> list[str]:
    """Every verdict line a stored audit holds, in whichever of its forms it kept them, as
    `<target>: <status>: <message>` (the label form is cut at 240 characters)."""
    lines = [f"{k.removeprefix('audit.verdict.')}: {v}" for k, v in audit.items() if k.startswith("audit.verdict.")]
    for v in audit.get("verdicts") or ():
        if isinstance(v, dict):
            lines.append(f"{v['target']}: {v['status']}: {v['message']}")
        elif not v.startswith("Verdict("):
            lines.append(v)
    return lines


def test_the_shipped_build_records_are_found() -> None:
    assert len(BUILDS) >= 10, BUILDS


@pytest.mark.parametrize("path", BUILDS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shipped_build_lifts_to_one_audit_keeping_its_status_and_verdicts(path: Path) -> None:
    data = json.loads(path.read_text())
    build = BuildOutcome.from_json(data, stack=path.stem)
    assert build.format == FORMAT == 4
    stored = _stored_audits(data)
    if not stored:
        assert build.audit is None
        return
    audit = build.audit
    assert audit is not None
    # every status it was stored with (beside the labels, in the labels, in the full report) is the one
    statuses = {a[k] for a in stored for k in ("status", "audit.status") if k in a}
    assert statuses == {audit.status.value}
    lines = [line.lower() for line in audit.lines]
    for line in (line for a in stored for line in _stored_lines(a)):
        assert any(mine.startswith(line.lower()) for mine in lines), (line, lines)
    # the cubins of any form, in arch order
    for a in stored:
        if isinstance(a.get("cubins") or a.get("totals"), dict):
            assert audit.cubins == (a.get("cubins") or a.get("totals"))
    assert list(audit.cubins) == sorted(audit.cubins, key=arch_sort_key)
    # read back as written: format 4 lifts nothing
    again = BuildOutcome.from_json(json.loads(json.dumps(build.model_dump(mode="json"))))
    assert again == build


def test_the_format_2_builder_s_verdict_text_is_read_as_a_verdict() -> None:
    """The builder of 2026-12-02 stored each verdict as the text of its Python object."""
    text = ("Verdict(target=Target(name='SM_90', cc='9.0'), status='warn', message=\"SM_90: it's PTX "
            "from compute_80\", checks=(Check(family='moe', status='pass', message='x'),))")
    (v,) = AuditSummary.model_validate(lift_audit({"status": "warn", "verdicts": [text]})).verdicts
    assert (v.target, v.cc, v.status, v.message) == ("SM_90", "9.0", "warn", "SM_90: it's PTX from compute_80")


def test_an_unreadable_old_audit_is_an_error_not_a_guess() -> None:
    with pytest.raises(ValueError, match="audit"):
        BuildOutcome.from_json({"stack": "s", "status": "built", "audit_summary": {"status": "maybe"}})


def test_the_one_record_carries_what_the_labels_and_the_report_lines_said() -> None:
    report: AuditReport = audit_path(CUBINS / "kernels.fatbin", [Target.from_cc("12.1"), Target.from_cc("9.0")],
                                     sass_check=False)
    audit = AuditSummary.of(report)
    assert audit.status is AuditState(report.status)
    assert audit.labels == report.summary()  # the flat pairs `harness bug` lists, derived
    assert [v.target for v in audit.verdicts] == ["SM_121", "SM_90"]
    assert audit.lines[0].startswith("sm_121: ")
    assert audit.cubins == dict(report.totals()) and list(audit.cubins) == sorted(audit.cubins, key=arch_sort_key)
    dumped = audit.model_dump(mode="json")
    assert "lines" not in dumped and not any(k.startswith("audit.") for k in dumped)  # stored once
    assert AuditSummary.model_validate(dumped) == audit
    assert AuditSummary.not_audited("no /opt/venv/lib").labels == {"audit.status": "not-audited"}


def test_a_cell_of_format_3_leaves_its_audit_copy_to_its_build(tmp_path: Path) -> None:
    src = ROOT / "examples" / "h200-source" / "visit-3-run"
    raw = json.loads(next((src / "cells").glob("*.json")).read_text())
    assert raw["format"] == 3 and raw["audit"]["status"] == "warn"
    cell = CellResult.from_json(raw)
    assert "audit" not in cell.to_json() and cell.build_record is None
    store = RunStore.open(src)
    build = store.build_of(cell)  # found by stack and host, as format 3 left it
    assert build is not None and build.audit is not None and build.audit.status.value == raw["audit"]["status"]


def test_a_cell_points_to_its_build_and_a_pointer_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    from harness.errors import ConfigError

    src = ROOT / "examples" / "h200-source" / "visit-3-run"
    store = RunStore.open(src)
    cell = store.cells()[0].model_copy(update={"build_record": "builds/src-0251.json"})
    assert store.build_of(cell) == store.build_for(cell.stack, cell.host)
    assert store.build_of(cell.model_copy(update={"build_record": "builds/gone.json"})) is None
    with pytest.raises(ConfigError, match="build_record"):
        store.build_of(cell.model_copy(update={"build_record": "../../run.json"}))


def _store(tmp_path: Path) -> RunStore:
    from harness.results.model import RunRecord

    return RunStore.create(tmp_path, RunRecord(run_id="r1"))


def test_a_partial_cell_is_written_part_by_part_and_read_back_typed(tmp_path: Path) -> None:
    from harness.results.model import ServeState
    from harness.results.partial import PartialCell, ServerRecord, StartUp

    store = _store(tmp_path)
    partial = PartialCell(id="s/m/c", started_at="2026-12-07T10:00:00Z", host="spark")
    partial = partial.with_part(server=ServerRecord(kind="local", pgid=4242, started=77))
    store.write_partial(partial)
    path = store.partial_path("s/m/c")
    # the keys a part sets, in the order the cell measures them; the runner's defaults left out
    assert json.loads(path.read_text()) == {"id": "s/m/c", "started_at": "2026-12-07T10:00:00Z",
                                            "server": {"kind": "local", "pgid": 4242, "started": 77},
                                            "host": "spark"}
    assert list(json.loads(path.read_text())) == ["id", "started_at", "server", "host"]
    partial = partial.with_part(readiness=StartUp(state=ServeState.HUNG, startup_s=12.5), image_fingerprint=None)
    store.write_partial(partial)
    back = store.read_partial("s/m/c")
    assert back == partial and back.readiness.state is ServeState.HUNG and back.server.local_group == 4242
    assert list(json.loads(path.read_text())) == ["id", "started_at", "server", "readiness", "image_fingerprint", "host"]
    # a part this version cannot read is left out; the server stays findable
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "bench": {"levels": "not a list"}}))
    back = store.read_partial("s/m/c")
    assert back.bench is None and back.server == partial.server


def test_schedule_json_is_read_back_through_its_record(tmp_path: Path) -> None:
    from harness.errors import ConfigError
    from harness.results.schedule import ScheduleEntry, schedule_json
    from harness.results.store import atomic_write_json

    store = _store(tmp_path)
    assert store.schedule() == ()  # a run on one host writes none
    late = ScheduleEntry(cell="s/m/b", host="rtx", slot=1, gpus=("0", "1"), start=20.5, end=30.0)
    early = ScheduleEntry(cell="s/m/a", host="spark+rtx", slot=0, gpus=None, start=10.0, end=25.125)
    atomic_write_json(store.dir / "schedule.json", schedule_json([late, early]))
    assert json.loads((store.dir / "schedule.json").read_text())[1] == {
        "cell": "s/m/b", "host": "rtx", "slot": 1, "gpus": ["0", "1"], "start": 20.5, "end": 30.0}
    assert store.schedule() == (early, late)
    (store.dir / "schedule.json").write_text('[{"cell": "s/m/a"}]')
    with pytest.raises(ConfigError, match="schedule.json"):
        store.schedule()
