"""The real build path on a real engine, with a tiny busybox template (seconds, no CUDA).

Needs harness-test/busybox:latest (tools/base-images.sh). Checks: context and labels reach the
image, the second build is 'reused' without calling the engine's build, progress lines stream,
a failing step is a result with its log tail, and no intermediate container is left behind.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.image.builder import build_stacks
from harness.image.stackbuild import resolve
from harness.matrix.load import load_matrix

pytestmark = pytest.mark.docker

FIX = Path(__file__).resolve().parent / "fixtures" / "build"
TEMPLATE = FIX / "Dockerfile.tiny.in"
# a source image on a base whose Python is its own: vLLM is not under /opt/venv
SITE_TEMPLATE = FIX / "Dockerfile.site.in"
SITE = "/opt/torch/.venv/lib/python3.12/site-packages"


@pytest.fixture(scope="module")
def engine():
    from harness.engine import connect

    eng = connect(timeout=10)
    if eng.image_id("harness-test/busybox:latest") is None:
        pytest.fail("harness-test/busybox:latest is missing: run tools/base-images.sh")
    return eng


@pytest.fixture(scope="module")
def built(engine, tmp_path_factory):
    run_id = uuid.uuid4().hex[:12]
    matrix = load_matrix(FIX / "tiny.toml")
    logs = tmp_path_factory.mktemp("logs")
    events = []
    builds = resolve(matrix, ["tiny-ok", "tiny-fails"], engine=engine, template=TEMPLATE,
                     template_values={"RUN_ID": run_id})
    outcomes = build_stacks(builds, engine=engine, log_dir=logs, allow_unpinned=True, on_event=events.append)
    yield matrix, outcomes, events, run_id, logs
    for o in outcomes.values():
        engine.remove_image(o.image_ref)
    # the failed build's successful steps stay as untagged layers (a cache for a retry): this
    # run's, found by its label, go too; removing the top one takes its untagged parents with it
    for image in engine.client.api.images(filters={"label": f"harness.test-run={run_id}", "dangling": True}):
        engine.remove_image(image["Id"])


def test_unpinned_base_is_refused(engine, tmp_path):
    with pytest.raises(ConfigError, match="no digest"):
        build_stacks(resolve(load_matrix(FIX / "tiny.toml"), ["tiny-ok"], engine=engine, template=TEMPLATE,
                             template_values={"RUN_ID": "x"}), engine=engine, log_dir=tmp_path)


def test_built_image_carries_the_labels(built, engine):
    _m, outcomes, _e, run_id, _l = built
    ok = outcomes["tiny-ok"]
    assert ok.status == "built", ok.log_tail
    labels = engine.image_labels(ok.image_ref)
    assert labels["harness.stack"] == "tiny-ok"
    assert labels["harness.torch-cuda-arch-list"] == "12.1a"
    assert labels["harness.content-hash"].startswith(ok.image_ref.rsplit("-", 1)[1])
    assert labels["harness.test-run"] == run_id
    assert ok.image_id == engine.image_id(ok.image_ref)


def test_progress_lines_and_log_file(built):
    _m, outcomes, events, _r, _l = built
    ok = outcomes["tiny-ok"]
    steps = [e.text for e in events if e.stack == "tiny-ok" and e.kind == "step"]
    assert steps and steps[0].startswith("Step 1/")
    assert any("step one for 12.1a" in e.text for e in events if e.kind == "line")
    assert "step one for 12.1a" in Path(ok.log_path).read_text()


def test_build_log_arch_check_runs_on_the_image(built):
    _m, outcomes, _e, _r, _l = built
    # the tiny image's log says 12.0f while the stack asked 12.1a: the collapse is reported
    assert any(p.startswith("arch-collapsed: asked 12.1a") for p in outcomes["tiny-ok"].arch_problems)
    summary = outcomes["tiny-ok"].audit
    assert summary.status != "not-audited", summary
    assert summary.cubins == {"sm_121a": 1}  # the cubin the template copies into /opt/venv/lib


def test_failing_step_is_a_result(built):
    _m, outcomes, _e, _r, _l = built
    bad = outcomes["tiny-fails"]
    assert bad.status == "failed" and bad.image_id is None
    assert any("boom: failing on purpose" in line for line in bad.log_tail)
    assert "returned a non-zero code: 3" in bad.reason
    assert Path(bad.log_path).is_file()


def test_second_build_is_reused_without_engine_build(built, engine, tmp_path):
    matrix, outcomes, _e, run_id, _l = built

    class NoBuild:
        def __getattr__(self, name):
            return getattr(engine, name)

        def build(self, *a, **k):
            raise AssertionError("the engine's build was called for an existing image")

    builds = resolve(matrix, ["tiny-ok"], engine=engine, template=TEMPLATE, template_values={"RUN_ID": run_id})
    again = build_stacks(builds, engine=NoBuild(), log_dir=tmp_path, allow_unpinned=True)
    assert again["tiny-ok"].status == "reused"
    assert again["tiny-ok"].image_ref == outcomes["tiny-ok"].image_ref
    # a reused image is audited again: the run records what it serves, built this time or not
    assert again["tiny-ok"].audit == outcomes["tiny-ok"].audit


def test_force_rebuilds(built, engine, tmp_path):
    matrix, _o, _e, run_id, _l = built
    builds = resolve(matrix, ["tiny-ok"], engine=engine, template=TEMPLATE, template_values={"RUN_ID": run_id})
    forced = build_stacks(builds, engine=engine, log_dir=tmp_path, allow_unpinned=True, force=True, audit=False)
    assert forced["tiny-ok"].status == "built"


def test_no_intermediate_containers_left(built, engine):
    assert engine.containers({"harness.test": "build-tiny"}) == []
    assert engine.containers({"harness.role": "audit"}) == []


# Where a source image keeps vLLM: the build records its site-packages, and the audit (at build
# time, and again for a reused image) reads vLLM there. The file comes from the image, so a path
# that climbs or is not a plain absolute path is ignored, never followed.

def _build_site(engine, tmp_path, site: str):
    run_id = uuid.uuid4().hex[:12]
    builds = resolve(load_matrix(FIX / "tiny.toml"), ["tiny-ok"], engine=engine, template=SITE_TEMPLATE,
                     template_values={"RUN_ID": run_id, "SITE": site})
    outcome = build_stacks(builds, engine=engine, log_dir=tmp_path, allow_unpinned=True)["tiny-ok"]
    return outcome, run_id


@pytest.fixture
def cleanup(engine):
    refs: list[str] = []
    yield refs
    for ref in refs:
        engine.remove_image(ref)


@pytest.fixture(scope="module")
def site_images(engine, tmp_path_factory):
    """The site-packages stand-in built once, then asked for again (reused): (built, reused)."""
    logs = tmp_path_factory.mktemp("site-logs")
    first, run_id = _build_site(engine, logs, SITE)
    try:
        builds = resolve(load_matrix(FIX / "tiny.toml"), ["tiny-ok"], engine=engine, template=SITE_TEMPLATE,
                         template_values={"RUN_ID": run_id, "SITE": SITE})
        again = build_stacks(builds, engine=engine, log_dir=logs, allow_unpinned=True)["tiny-ok"]
        yield first, again
    finally:
        engine.remove_image(first.image_ref)


def test_the_audit_reads_vllm_where_the_build_installed_it(site_images):
    built, again = site_images
    assert built.status == "built", built.log_tail
    assert built.audit.status != "not-audited", built.audit
    # vllm/ and flashinfer_cubin/, not torch/
    assert built.audit.cubins == {"sm_121a": 2}
    # reused: audited again from the same place
    assert again.status == "reused" and again.audit == built.audit


@pytest.mark.parametrize("planted", ["/opt/torch/../../etc", "opt/relative", "/opt/a b", "/opt/x\\n/etc"])
def test_a_site_path_that_is_not_plain_is_not_followed(engine, tmp_path, cleanup, planted):
    built, _ = _build_site(engine, tmp_path, planted)
    cleanup.append(built.image_ref)
    assert built.status == "built", built.log_tail
    # ignored: the audit looks where an image that recorded nothing keeps vLLM, and finds nothing
    assert built.audit.status == "not-audited"
    assert "/opt/venv/lib" in built.audit.reason
    from harness.report.data import _build as report_row

    row = report_row(built)  # the report says so, and why, instead of '?'
    assert row.audit_status == "not-audited"
    assert any(line.startswith("not audited: ") and "/opt/venv/lib" in line for line in row.audit_lines)


def test_the_report_and_the_bug_read_the_audit_of_a_reused_image(site_images):
    from harness.report.data import _build as report_row

    assert [o.status for o in site_images] == ["built", "reused"]
    for outcome in site_images:
        assert outcome.audit_status == "pass", outcome.audit
        row = report_row(outcome)
        assert row.audit_status == "pass"
        assert any(line.startswith("sm_121: pass") for line in row.audit_lines), row.audit_lines


def test_the_build_record_says_what_became_of_the_rust_front_end(site_images):
    built, again = site_images
    # what the install step wrote, read from the image for a build and for a reuse; the escape
    # sequence a hostile image put in the file does not reach the record
    assert built.rust_frontend == again.rust_frontend == "not built (optional: no Rust toolchain)[31m"


def test_harness_audit_of_the_image_reads_where_its_build_installed(site_images, capsys):
    import json

    from harness.cli import main

    built, _ = site_images
    # no --image-path: the recorded site-packages, vllm/ and flashinfer_cubin/ (not torch/)
    assert main(["audit", built.image_ref, "--json", "--cc", "12.1", "--no-sass"]) == 0
    report = json.loads(capsys.readouterr().out)
    cubins = sorted(c for f in report["files"] for c in f["cubins"] for _ in range(f["cubins"][c]))
    assert cubins == ["sm_121a", "sm_121a"], report["files"]
    paths = sorted(f["path"] for f in report["files"])
    assert any("flashinfer_cubin" in p for p in paths) and not any("torch" in p for p in paths), paths
