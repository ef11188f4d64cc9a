"""Where a source image keeps vLLM: the build records its site-packages, and the audit (at build
time, and again for a reused image) reads vLLM there, not under /opt/venv. The file comes from
the image, so a path that climbs or is not a plain absolute path is ignored, never followed.

A busybox stand-in (harness-test/busybox, tools/base-images.sh) with one real nvcc-built cubin.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from harness.build.builder import build_stacks
from harness.matrix.load import load_matrix

pytestmark = pytest.mark.docker

FIX = Path(__file__).resolve().parent / "fixtures" / "build"
TEMPLATE = FIX / "Dockerfile.site.in"
SITE = "/opt/torch/.venv/lib/python3.12/site-packages"


@pytest.fixture(scope="module")
def engine():
    from harness.engine import connect

    eng = connect(timeout=10)
    if eng.image_id("harness-test/busybox:latest") is None:
        pytest.fail("harness-test/busybox:latest is missing: run tools/base-images.sh")
    return eng


def _build(engine, tmp_path, site: str):
    run_id = uuid.uuid4().hex[:12]
    outcome = build_stacks(load_matrix(FIX / "tiny.toml"), ["tiny-ok"], engine=engine, log_dir=tmp_path,
                           allow_unpinned=True, template=TEMPLATE,
                           template_values={"RUN_ID": run_id, "SITE": site})["tiny-ok"]
    return outcome, run_id


@pytest.fixture
def cleanup(engine):
    refs: list[str] = []
    yield refs
    for ref in refs:
        engine.remove_image(ref)


def test_the_audit_reads_vllm_where_the_build_installed_it(engine, tmp_path, cleanup):
    built, run_id = _build(engine, tmp_path, SITE)
    cleanup.append(built.image_ref)
    assert built.status == "built", built.log_tail
    assert built.audit_summary["status"] != "not-audited", built.audit_summary
    assert built.audit_summary["cubins"] == {"sm_121a": 1}
    # reused: audited again from the same place
    again = build_stacks(load_matrix(FIX / "tiny.toml"), ["tiny-ok"], engine=engine, log_dir=tmp_path,
                         allow_unpinned=True, template=TEMPLATE,
                         template_values={"RUN_ID": run_id, "SITE": SITE})["tiny-ok"]
    assert again.status == "reused" and again.audit_summary == built.audit_summary


@pytest.mark.parametrize("planted", ["/opt/torch/../../etc", "opt/relative", "/opt/a b", "/opt/x\\n/etc"])
def test_a_site_path_that_is_not_plain_is_not_followed(engine, tmp_path, cleanup, planted):
    built, _ = _build(engine, tmp_path, planted)
    cleanup.append(built.image_ref)
    assert built.status == "built", built.log_tail
    # ignored: the audit looks where an image that recorded nothing keeps vLLM, and finds nothing
    assert built.audit_summary["status"] == "not-audited"
    assert "/opt/venv/lib" in built.audit_summary["reason"]
    from harness.report.data import _build as report_row

    row = report_row(built)  # the report says so, and why, instead of '?'
    assert row.audit_status == "not-audited"
    assert any(line.startswith("not audited: ") and "/opt/venv/lib" in line for line in row.audit_lines)


def test_the_report_and_the_bug_read_the_audit_of_a_reused_image(engine, tmp_path, cleanup):
    from harness.report.data import _build as report_row

    built, _run_id = _build_and_reuse(engine, tmp_path, cleanup)
    for outcome in built:
        assert outcome.audit_status == "pass", outcome.audit_summary
        row = report_row(outcome)
        assert row.audit_status == "pass"
        assert any(line.startswith("sm_121: pass") for line in row.audit_lines), row.audit_lines


def _build_and_reuse(engine, tmp_path, cleanup):
    first, run_id = _build(engine, tmp_path, SITE)
    cleanup.append(first.image_ref)
    again = build_stacks(load_matrix(FIX / "tiny.toml"), ["tiny-ok"], engine=engine, log_dir=tmp_path,
                         allow_unpinned=True, template=TEMPLATE,
                         template_values={"RUN_ID": run_id, "SITE": SITE})["tiny-ok"]
    assert (first.status, again.status) == ("built", "reused")
    return (first, again), run_id
